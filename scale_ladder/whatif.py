"""What-if: a swarm's recorded history decided again under other promotion settings, with only
the runs that exist.

The real `Ladder`, built with the other settings, folds the recorded ideas in the order the
event stream had them and makes its own decisions, RunSpecs and champion changes. Each run it
asks for is answered with a recorded run of the same recipe (its content address) at the same
tier and seed, as soon as the record has one: a run is an experiment on a recipe, whichever idea
or champion version asked for it, so a champion that stacks another way still finds the runs
made of its recipe. A run nobody made is never answered: the ideas waiting on it stay open, and
the answer says so (`unmeasured`); that part of it is what the record cannot tell. Recorded runs
it never asks for are runs those settings would not have needed.

The replay acts where the live ladder acted: every message a ladder makes names the event it had
folded last (`after_event`), and the replay acts right after taking that event. A ladder that
acted after every event would decide on one result what the live one decided on two that came
together (a pooled σ_d one pair short can flip a verdict at the gate, and everything after it).
Records older than that field are replayed acting after every event. Replaying the settings the
swarm ran with makes the decisions it made; `compare` of that replay with the record says how
closely (`swarm whatif` prints it), so a change it reports is the settings', not the replay's.

Not replayed: a person's approvals (the other settings stack at once) and reverts (listed).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from bus.messages import (
    ChampionChange,
    ChangeKind,
    Decision,
    Idea,
    Message,
    RunResult,
    RunSpec,
    RunStatus,
    Verdict,
    event_key,
)
from recipes.identity import recipe_sha
from scale_ladder.admission import NotAdmitted, patched_source
from scale_ladder.ladder import Ladder
from scale_ladder.tiers import Tier

# A run by what it is: the recipe's content address, the tier, the seed.
RunName = tuple[str, int, int]
OPEN = "open"  # no closing verdict at a tier (still testing, or waiting on an unmade run)


@dataclass
class History:
    """What one ladder did with a history: the recorded one, or one decided again."""

    # the last verdict other than RETEST of each idea at each tier it reached, and the runs the
    # idea had there by then
    verdicts: dict[tuple[str, int], Decision] = field(default_factory=dict)
    stacked: list[str] = field(default_factory=list)  # ideas stacked, in order
    runs: Counter[int] = field(default_factory=Counter)  # runs with a result, per tier
    # (decided again only) runs asked for that the record does not have, per tier
    unmeasured: dict[int, list[RunSpec]] = field(default_factory=lambda: defaultdict(list))
    # (decided again only) recorded runs never asked for, per tier
    not_needed: Counter[int] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def fold(self, decision: Decision) -> None:
        if decision.idea_id and decision.verdict is not Verdict.RETEST:
            self.verdicts[(decision.idea_id, decision.tier)] = decision

    def open_ideas(self, tier: int) -> set[str]:
        """Ideas waiting at `tier` on a run the record does not have."""
        return {spec.idea_id for spec in self.unmeasured.get(tier, []) if spec.idea_id}


def recorded(messages: Sequence[Message]) -> History:
    """The history as the swarm lived it."""
    history = History()
    ran = {m.run_id for m in messages if isinstance(m, RunResult)}
    for message in messages:
        if isinstance(message, Decision):
            history.fold(message)
        elif isinstance(message, RunSpec) and message.run_id in ran:
            history.runs[message.tier] += 1
        elif isinstance(message, ChampionChange) and message.kind is ChangeKind.STACK:
            history.stacked.append(message.idea_id)
    return history


def decide_again(messages: Sequence[Message], ladder: Ladder) -> History:
    """The history decided by `ladder` (fresh, with other tiers' rules) from the recorded ideas,
    answering its runs from the recorded ones. `messages` in stream order (ledger.readback)."""
    ladder.recorded_entries = direct_entries_of(messages, len(ladder.tiers))
    acts = _acted_after(messages)
    replay = _Replay(ladder, _run_names(messages, ladder.editable), acts)
    if acts is None and any(isinstance(m, Decision) for m in messages):
        replay.history.notes.append(
            "the record does not say where the ladder acted (written before schema v1.3): "
            "replayed acting after every event, so results that arrived together may be "
            "decided in another order"
        )
    for message in messages:
        replay.take(message)
    replay.finish()
    return replay.history


def direct_entries_of(messages: Sequence[Message], tiers: int) -> dict[str, int]:
    """idea -> the tier the recorded ladder sent it to fresh (its first RunSpec above tier 0,
    not a second look): where a replay enters it (direct_entries.entry_tier)."""
    second_looks = {m.idea_id for m in messages if isinstance(m, Idea) and m.entry_tier}
    first: dict[str, int] = {}
    for spec in (m for m in messages if isinstance(m, RunSpec) and m.idea_id):
        first.setdefault(spec.idea_id, spec.tier)
    return {i: tier for i, tier in first.items() if 0 < tier < tiers and i not in second_looks}


def _acted_after(messages: Sequence[Message]) -> set[str] | None:
    """The events after which the recorded ladder acted and made something; None: the record
    does not say (written before schema v1.3)."""
    made = (m for m in messages if isinstance(m, RunSpec | Decision | ChampionChange))
    points = {m.after_event for m in made if m.after_event}
    return points or None


def _run_names(messages: Sequence[Message], editable: str) -> dict[str, RunName]:
    """What each recorded run was, by recipe: the address its RunSpec names, or (schema v1.1
    and older) the recipe its champion and patch make."""
    sources = {m.version: m.source for m in messages if isinstance(m, ChampionChange) and m.source}
    names: dict[str, RunName] = {}
    for spec in (m for m in messages if isinstance(m, RunSpec)):
        sha = spec.recipe_sha
        if not sha and spec.champion_version in sources:
            source = sources[spec.champion_version]
            try:
                recipe = patched_source(source, spec.patch, editable) if spec.patch else source
                sha = recipe_sha(recipe)
            except NotAdmitted:
                continue
        if sha:
            names[spec.run_id] = (sha, spec.tier, spec.seed)
    return names


class _Replay:
    """The ladder, fed the record: ideas as they came, runs as they exist."""

    def __init__(self, ladder: Ladder, names: dict[str, RunName], acts: set[str] | None) -> None:
        self.ladder = ladder
        self.names = names
        self.acts = acts  # act after these events only (None: after every one)
        self.history = History()
        self.waiting: dict[RunName, deque[RunSpec]] = defaultdict(deque)  # asked, not yet made
        self.banked: dict[RunName, deque[RunResult]] = defaultdict(deque)  # made, not yet asked
        self.started = False

    def take(self, message: Message) -> None:
        initial = self._fold(message)
        key = event_key(message.KIND, message.event_id)
        if initial or self.acts is None or key in self.acts:
            self._act()

    def _fold(self, message: Message) -> bool:
        """Fold the event in as this ladder would see it; True for the initial champion (the
        ladder starts from it, and acts)."""
        if isinstance(message, ChampionChange):
            if not self.started and message.kind is ChangeKind.INITIAL:
                self.started = True
                self.ladder.observe(message)
                return True
            if message.kind is ChangeKind.REVERT:
                self.history.notes.append(
                    f"a person's revert to v{message.parent_version} (recorded v{message.version})"
                    " is not replayed"
                )
        elif isinstance(message, Idea):
            self.ladder.observe(message)
        elif isinstance(message, RunResult):
            name = self.names.get(message.run_id)
            if name is None or self._skipped_here(message):
                return False
            if self.waiting[name]:
                self._answer(self.waiting[name].popleft(), message)
            else:
                self.banked[name].append(message)
        # recorded RunSpecs and Decisions are the record's, not this ladder's: not folded
        return False

    def _act(self) -> None:
        while out := self.ladder.act():
            for message in out:
                if isinstance(message, RunSpec):
                    self._ask(message)
                elif isinstance(message, Decision):
                    self.history.fold(message)
                elif isinstance(message, ChampionChange) and message.kind is ChangeKind.STACK:
                    self.history.stacked.append(message.idea_id)

    def _ask(self, spec: RunSpec) -> None:
        name = (spec.recipe_sha, spec.tier, spec.seed)
        banked = self.banked[name]
        while banked and self._skipped_here(banked[0]):
            banked.popleft()
        if banked:
            self._answer(spec, banked.popleft())
        else:
            self.waiting[name].append(spec)

    def _skipped_here(self, run: RunResult) -> bool:
        """A run the record skipped because its champion had moved on is no measurement where
        the champion has not (here, nobody made it): it answers nothing then."""
        return run.status is RunStatus.SKIPPED and run.champion_version >= self.ladder.current

    def _answer(self, spec: RunSpec, run: RunResult) -> None:
        """The recorded run, as the run this ladder asked for."""
        self.history.runs[spec.tier] += 1
        self.ladder.observe(
            replace(
                run,
                run_id=spec.run_id,
                idea_id=spec.idea_id,
                champion_version=spec.champion_version,
                tier=spec.tier,
                seed=spec.seed,
            )
        )

    def finish(self) -> None:
        self._act()  # what the last events call for, had the live ladder acted on them
        for specs in self.waiting.values():
            for spec in specs:
                self.history.unmeasured[spec.tier].append(spec)
        for (_, tier, _), runs in self.banked.items():
            self.history.not_needed[tier] += len(runs)


@dataclass(frozen=True)
class Change:
    """One idea at one tier whose outcome differs."""

    idea_id: str
    tier: int
    recorded: str  # a verdict, or OPEN
    whatif: str
    recorded_seeds: int  # paired seeds behind the verdict
    whatif_seeds: int
    why: str  # the what-if's rule (or why it is open)


@dataclass
class TierReport:
    tier: int
    name: str
    decided: int = 0  # ideas with a closing verdict in the record
    same: int = 0  # ... and the same verdict again
    changed: list[Change] = field(default_factory=list)  # another verdict
    earlier: list[Change] = field(default_factory=list)  # the same verdict on fewer seeds
    later: list[Change] = field(default_factory=list)  # the same verdict on more seeds
    # admitted in the record, refused here: written for a champion these settings never made
    # (a researcher would have proposed something else: not a verdict of these settings)
    diverged: list[Change] = field(default_factory=list)
    reached: list[Change] = field(default_factory=list)  # decided here, never here in the record
    open: list[Change] = field(default_factory=list)  # decided in the record, open here
    runs: int = 0  # runs it used
    recorded_runs: int = 0
    not_needed: int = 0
    unmeasured: int = 0  # runs it asked for that were never made


@dataclass
class Comparison:
    tiers: list[TierReport]
    recorded_stacks: list[str]
    whatif_stacks: list[str]
    notes: list[str]

    @property
    def verdict_changes(self) -> int:
        return sum(len(t.changed) + len(t.open) + len(t.reached) for t in self.tiers)


def compare(record: History, again: History, tiers: Sequence[Tier]) -> Comparison:
    """Per tier: which verdicts change, what was decided on fewer or more runs, which runs were
    not needed, and which were needed and never made."""
    reports = [TierReport(t.index, t.name) for t in tiers]
    keys = sorted(set(record.verdicts) | set(again.verdicts), key=lambda k: (k[1], k[0]))
    for idea_id, tier in keys:
        if tier >= len(reports):
            continue
        before, after = record.verdicts.get((idea_id, tier)), again.verdicts.get((idea_id, tier))
        report = reports[tier]
        if before is not None:
            report.decided += 1
        change = Change(
            idea_id,
            tier,
            before.verdict.value if before else OPEN,
            after.verdict.value if after else OPEN,
            before.n if before else 0,
            after.n if after else 0,
            after.rule if after else _why_open(idea_id, tier, again),
        )
        refused = after is not None and after.verdict is Verdict.REFUSED
        if refused and (before is None or before.verdict is not Verdict.REFUSED):
            if before is not None:  # decided in the record: of the decided, neither same nor not
                report.decided -= 1
            report.diverged.append(change)
            continue
        if before is None:
            report.reached.append(change)
        elif after is None:
            report.open.append(change)
        elif before.verdict is not after.verdict:
            report.changed.append(change)
        else:
            report.same += 1
            if after.n < before.n:
                report.earlier.append(change)
            elif after.n > before.n:
                report.later.append(change)
    for report in reports:
        report.runs = again.runs[report.tier]
        report.recorded_runs = record.runs[report.tier]
        report.not_needed = again.not_needed[report.tier]
        report.unmeasured = len(again.unmeasured.get(report.tier, []))
    return Comparison(reports, record.stacked, again.stacked, again.notes)


def _why_open(idea_id: str, tier: int, again: History) -> str:
    if idea_id in again.open_ideas(tier):
        return "waits on a run the record does not have (unmeasured)"
    return "not decided here: it never reached this tier, or its lineage went another way"


def runs_differ(recorded: Sequence[Tier], other: Sequence[Tier]) -> str | None:
    """Why `other`'s runs are not the recorded ones (a what-if changes promotion settings, not
    what a run is), or None: the tiers must match in number, dials, budget, evaluation and
    time limit (a run that timed out under one limit might not under another)."""
    if len(recorded) != len(other):
        return f"the ladder has {len(other)} tiers, the record {len(recorded)}"
    for a, b in zip(recorded, other, strict=True):
        for what in ("dials", "budget_kind", "budget", "eval_tokens", "time_limit_s"):
            if getattr(a, what) != getattr(b, what):
                return (
                    f"tier {a.index} ({a.name}) has another {what} ({getattr(b, what)!r}, "
                    f"recorded {getattr(a, what)!r}): its runs would be other experiments"
                )
    return None


def specs_differ(tiers: Sequence[Tier], messages: Sequence[Message]) -> str | None:
    """Why the recorded RunSpecs are not runs of `tiers` (the ladder file was edited since the
    swarm ran, say), or None."""
    for spec in (m for m in messages if isinstance(m, RunSpec)):
        if spec.tier >= len(tiers):
            return f"the record has runs at tier {spec.tier}; the ladder has {len(tiers)} tiers"
        tier = tiers[spec.tier]
        for what, recorded, now in (
            ("budget", spec.budget, tier.budget),
            ("budget_kind", spec.budget_kind, tier.budget_kind),
            ("dials", dict(spec.dials), dict(tier.dials)),
        ):
            if recorded != now:
                return (
                    f"tier {tier.index} ({tier.name}) has {what} {now!r}; the swarm's runs "
                    f"there had {recorded!r}"
                )
    return None
