"""The ladder as a fold over the swarm's events, and the actions that state calls for.

`observe(message)` folds one event in; `act()` returns the messages the state now calls for
(RunSpecs, Decisions, ChampionChanges), observing each as it makes it. Everything the ladder does
is one of those events, and the state is driven by them (an idea's tier and patch come from its
RunSpecs, its phase from its Decisions), so replaying the event stream (or the ledger's rows)
rebuilds it, whatever happened between two events live; their ids derive from what they are
about (idea, version, tier, seed), so an action repeated after a crash is dropped by JetStream
and by the ledger's keys.

The flow of one idea: NEW → admitted (tier-0 RunSpecs on the current champion, or REFUSED) →
TESTING at tier k until its seeds and the baseline's are in → rules.decide: RETEST (more seeds),
REJECT, or PROMOTE (tier k+1, or at the top: PROMOTED → [HELD → approved] → stacked into a new
champion version). An idea starts each tier on one seed and gets more only while its verdict is
open (racing, rules.py). A new champion rebases every idea still in play onto it (back to tier
0; with its runs, when its recipe is unchanged) or marks it STALE; its baseline at each tier
starts from the stacked idea's runs (lineage.py) and only the seeds still missing are run.

`Ladder` is the one object the rest of the swarm uses. Its state is in parts (its fields from
`runs` to `lineage`), each in its own module with its part of the fold and the actions it takes;
a part's maps are written by its own module only. The ladder keeps what they share: settings,
ideas (idea_state.py), the events seen, what act() must look at, and the making of messages.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from bus.messages import (
    ChampionChange,
    Decision,
    Idea,
    Message,
    RunResult,
    RunSpec,
    Verdict,
    event_key,
)
from recipes.identity import recipe_sha
from scale_ladder import baselines, intake, lineage, promotion
from scale_ladder.admission import patched_source
from scale_ladder.baselines import Baselines
from scale_ladder.idea_state import IdeaState, LadderRefusal, Phase
from scale_ladder.intake import Intake
from scale_ladder.lineage import Lineage
from scale_ladder.noise_pool import NoisePools
from scale_ladder.promotion import Promotion
from scale_ladder.runs import BASELINE_NAME, Runs
from scale_ladder.seeds import DEFAULT_SEED_SECRET, tier_seed
from scale_ladder.tiers import NEAR_DUPLICATE_SIMILARITY, Tier

__all__ = ["Ladder", "LadderRefusal", "Phase"]

log = logging.getLogger(__name__)
MAX_FAILURE_CHARS = 500  # of the exception's text in the refusal's rule


@dataclass
class Ladder:
    tiers: Sequence[Tier]
    editable: str
    initial_source: str
    target: str = "bytelm"
    lower_is_better: bool = True
    require_approval: bool = False
    near_duplicate_similarity: float = NEAR_DUPLICATE_SIMILARITY
    # constants an idea may not move (names or globs; recipes/fixed.py)
    fixed: frozenset[str] = frozenset()
    # keys the tiers' seeds (seeds.py): the swarm's own, from its workspace; never shown
    seed_secret: bytes = field(default=DEFAULT_SEED_SECRET, repr=False)
    # the swarm's data known before any run (the secret language's hash; ladder_process
    # pin_corpus): RunSpecs carry it until a baseline run records the data, and only a run on
    # it can (baselines.record_corpus). "": learnt from the first baseline run
    pinned_corpus: str = ""
    # idea -> the tier a recorded ladder sent it to fresh (direct_entries.py): a replay of the
    # record under other settings (whatif.py) enters it there, not where its own draws say
    recorded_entries: Mapping[str, int] = field(default_factory=dict)
    ideas: dict[str, IdeaState] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    # the seeds asked for and the results in, which every part reads (runs.py)
    runs: Runs = field(default_factory=Runs)
    # admission: the duplicate checks' indexes of recipes tried, second looks (intake.py)
    intake: Intake = field(default_factory=Intake)
    # the champion's runs every idea is paired with, the swarm's data (baselines.py)
    baselines: Baselines = field(default_factory=Baselines)
    # each tier's pooled noise per champion and over the earlier ones (noise_pool.py)
    noise: NoisePools = field(default_factory=NoisePools)
    # verdicts and how each idea reached its tier: the rank gate, spot checks (promotion.py)
    promotion: Promotion = field(default_factory=Promotion)
    # champion versions, and ideas and runs carried over to a new one (lineage.py)
    lineage: Lineage = field(default_factory=Lineage)
    dirty: dict[str, None] = field(default_factory=dict)  # ideas to look at in act(), in order
    baselines_dirty: bool = True
    # the event folded in last (its event_key): every message the ladder makes names it, so a
    # replay (whatif.py) can act where this ladder acted
    last_folded: str = ""
    _out: list[Message] = field(default_factory=list)

    # The lineage's champions and current version, read-only: what the rest of the swarm reads
    @property
    def champions(self) -> Mapping[int, ChampionChange]:
        return self.lineage.champions

    @property
    def current(self) -> int:
        return self.lineage.current

    @property
    def top(self) -> int:
        return len(self.tiers) - 1

    def recipe_of(self, version: int, patch: str) -> str:
        """The whole recipe of a champion version with a patch (none: the champion's own). The
        one place the ladder makes a recipe of a patch: admission, RunSpecs and stacking all
        ask here, and the application is cached (admission.patched_source)."""
        source = self.lineage.champions[version].source
        return patched_source(source, patch, self.editable) if patch else source

    def seed(self, tier: int, i: int) -> int:
        """The seed of the i-th run of any recipe at `tier` (the champion's and every idea's)."""
        return tier_seed(tier, i, self.seed_secret)

    def in_run_order(self, tier: int, seeds: Iterable[int]) -> list[int]:
        """A tier's seeds in the order it runs them, its first seed first (a verdict lists them
        so: agents take the first as the reference every idea shares); others last, by value."""
        order = {self.seed(tier, i): i for i in range(2 * self.tiers[tier].rule.max_seeds)}
        return sorted(seeds, key=lambda s: (order.get(s, len(order)), s))

    # --- folding events in ------------------------------------------------------------------

    def observe(self, message: Message) -> None:
        """Fold in one event from outside (the stream, the ledger, a replay)."""
        self.last_folded = event_key(message.KIND, message.event_id)
        self._fold(message)

    def _fold(self, message: Message) -> None:
        # Keyed by kind too: an idea named like one of the ladder's own decisions (ids are
        # chosen by researchers) must not make the ladder drop that decision.
        key = event_key(message.KIND, message.event_id)
        if key in self.seen:
            return
        self.seen.add(key)
        if isinstance(message, Idea):
            self.ideas.setdefault(message.idea_id, IdeaState(message))
            self.dirty[message.idea_id] = None
        elif isinstance(message, RunSpec):
            self._observe_spec(message)
        elif isinstance(message, RunResult):
            self._observe_result(message)
        elif isinstance(message, Decision):
            self._observe_decision(message)
        elif isinstance(message, ChampionChange):
            lineage.observe_champion(self, message)

    def _observe_spec(self, spec: RunSpec) -> None:
        if self.runs.observe_spec(spec) and spec.idea_id:  # its result is in: a verdict may be due
            self.dirty[spec.idea_id] = None
        if not spec.idea_id:
            self.baselines.tried(spec)
            return
        self.tested(spec.idea_id, spec.champion_version, spec.tier)
        self.baselines_dirty = True  # the baseline may need this seed too
        state = self.ideas.get(spec.idea_id)
        if state is None or spec.champion_version < state.version:
            return
        intake.observe_spec(self, state, spec)
        state.tested(spec)

    def _observe_result(self, result: RunResult) -> None:
        self.runs.observe_result(result)
        baselines.record_corpus(self, result)
        self.noise.touch(result.idea_id, result.champion_version, result.tier, self.current)
        if result.idea_id:
            self.dirty[result.idea_id] = None
            lineage.observe_result(self, result)
        else:
            baselines.observe_result(self, result)

    def _observe_decision(self, decision: Decision) -> None:
        state = self.ideas.get(decision.idea_id)
        if state is None:
            return
        self.promotion.observe_decision(decision, self.top)
        key = (decision.idea_id, state.version, decision.tier + 1)
        if state.decided(decision, self.top) and self.runs.requested[key]:
            self.tested(*key)
            self.baselines_dirty = True
        self.dirty[decision.idea_id] = None

    def tested(self, idea_id: str, version: int, tier: int) -> None:
        """The idea is run at (version, tier): it counts in that tier's noise from now on."""
        self.baselines.need(version, tier, self.runs.tested(idea_id, version, tier))
        self.noise.touch(idea_id, version, tier, self.current)

    def wake(self) -> None:
        """Look at every idea in play and every tier's baseline at the next act, as after a full
        replay (a state restored from a snapshot: an idea a kill left waiting is decided)."""
        self.baselines_dirty = True
        for idea_id, state in self.ideas.items():
            if state.phase is not Phase.DONE:
                self.dirty[idea_id] = None

    # --- acting -----------------------------------------------------------------------------

    def act(self) -> list[Message]:
        """What the state calls for now: each message is observed as it is made."""
        lineage.start(self)
        while self.dirty:
            idea_id = next(iter(self.dirty))
            del self.dirty[idea_id]
            state = self.ideas.get(idea_id)
            if state is not None:  # a result or spec naming an idea never seen is kept, inert
                self._advance_or_refuse(state)
        if self.baselines_dirty:
            self.baselines_dirty = False
            baselines.act(self)
        out, self._out = self._out, []
        return out

    def unsent(self) -> bool:
        """Messages made (and observed) but not yet returned by `act`: one raised midway."""
        return bool(self._out)

    def _advance_or_refuse(self, state: IdeaState) -> None:
        """Advance the idea; if the ladder fails on it, refuse it, naming the failure. An
        exception here used to end the ladder, and again at every replay of the same stream
        (a red team's metric of 1.8e154 did that through the noise pool): a crash loop that
        stopped the swarm. Refused, the idea is done in the record too, so a replay skips it."""
        try:
            self.advance(state)
        except Exception as exc:
            log.exception("the ladder failed on idea %s", state.idea.idea_id)
            if state.phase is not Phase.DONE:
                why = f"the ladder failed on this idea ({type(exc).__name__}: {exc})"
                self.refuse(state, why[:MAX_FAILURE_CHARS])

    def emit(self, message: Message) -> None:
        if isinstance(message, RunSpec | Decision | ChampionChange):
            message = replace(message, after_event=self.last_folded)
        self._fold(message)
        self._out.append(message)

    def advance(self, state: IdeaState) -> None:
        if state.phase is Phase.DONE:
            return
        if state.phase is Phase.NEW:
            intake.admit(self, state)
        elif state.version < self.current:
            lineage.carry_over(self, state)
        elif state.phase is Phase.TESTING:
            promotion.try_decide(self, state)
        elif state.phase is Phase.PROMOTED and self.require_approval:
            self.decide(state, Verdict.HELD, "passed the top tier; waits for `swarm approve`")
        elif state.phase in (Phase.PROMOTED, Phase.APPROVED):
            lineage.stack(self, state)

    # --- what people may ask ----------------------------------------------------------------

    def approve(self, idea_id: str, who: str) -> list[Message]:
        state = self._held(idea_id)
        self.decide(state, Verdict.PROMOTE, f"approved by {who}", by=who)
        return self.act()

    def reject(self, idea_id: str, who: str) -> list[Message]:
        state = self._held(idea_id)
        self.decide(state, Verdict.REJECT, f"rejected by {who}", by=who)
        return self.act()

    def revert(self, version: int, who: str) -> list[Message]:
        lineage.revert(self, version, who)
        return self.act()

    def _held(self, idea_id: str) -> IdeaState:
        state = self.ideas.get(idea_id)
        if state is None:
            raise LadderRefusal(f"no idea {idea_id}")
        if state.phase is not Phase.HELD:
            raise LadderRefusal(
                f"{idea_id} is not waiting for approval (it is {state.phase.value})"
            )
        return state

    # --- making messages (for the parts' actions) -------------------------------------------

    def request(self, idea_id: str, version: int, tier: int, patch: str, seeds: int) -> None:
        have = self.runs.requested[(idea_id, version, tier)]
        for i in range(seeds):
            seed = self.seed(tier, i)
            if seed not in have:
                self.emit(self.spec(idea_id, version, tier, seed, patch))

    def spec(
        self, idea_id: str, version: int, tier: int, seed: int, patch: str, attempt: int = 0
    ) -> RunSpec:
        t = self.tiers[tier]
        who = idea_id or BASELINE_NAME
        suffix = f"-a{attempt}" if attempt else ""
        run_id = f"run-{who}-v{version}-t{tier}-s{seed}{suffix}"
        sha = recipe_sha(self.recipe_of(version, patch))
        corpus = baselines.swarm_corpus(self)
        return t.run_spec(run_id, seed, version, idea_id, patch, self.target, corpus, sha)

    def refuse(self, state: IdeaState, why: str, details: str = "") -> None:
        self.decide(state, Verdict.REFUSED, why, version=self.current, details=details)

    def decide(
        self,
        state: IdeaState,
        verdict: Verdict,
        rule: str,
        version: int | None = None,
        n: int = 0,
        by: str = "ladder",
        **numbers: object,
    ) -> None:
        v = state.version if version is None else version
        tier = 0 if state.phase is Phase.NEW else state.tier
        tag = verdict.value.lower() if by == "ladder" else f"{verdict.value.lower()}-by-person"
        self.emit(
            Decision(
                decision_id=f"dec-{state.idea.idea_id}-v{v}-t{tier}-{tag}-n{n}",
                idea_id=state.idea.idea_id,
                tier=tier,
                verdict=verdict,
                champion_version=v,
                rule=rule,
                n=n,
                decided_by=by,
                **numbers,  # type: ignore[arg-type]
            )
        )
