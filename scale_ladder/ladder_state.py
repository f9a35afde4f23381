"""The ladder's state: a fold over the swarm's events (see ladder.py for the actions).

Everything the ladder does is an event it publishes, and this state is driven by those events
(an idea's tier and patch come from its RunSpecs, its phase from its Decisions), so replaying
the event stream in order rebuilds it, whatever happened between two events live.

Evidence carries over, because a run is its recipe, tier and seed (a token budget makes a seed's
run reproducible; time-budget tiers are re-run, since load on the machine leaks into their
metric: LADDER-NOTES, baseline drift):
- when an idea is stacked, its runs at each tier become the new champion's baseline on those
  seeds, and only the missing seeds are run;
- an idea in play whose recipe the new champion leaves as it was (a model brain's proposal sets
  every constant it searches, so it is carried over by value and runs the same recipe) keeps
  its runs: it is judged against the new champion from tier 0 on them, and runs only what is
  missing. Before, such an idea became STALE however far it had climbed.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bus.messages import (
    BudgetKind,
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
    is_spot_check,
)
from recipes.identity import fingerprint
from scale_ladder.admission import NotAdmitted, patched_source, rebase
from scale_ladder.near_duplicates import PatchChange, patch_change
from scale_ladder.noise_pool import NoisePool
from scale_ladder.rules import Evidence, Noise, noise, paired_gains
from scale_ladder.seeds import DEFAULT_SEED_SECRET, tier_seed
from scale_ladder.spot_checks import Checks
from scale_ladder.tiers import NEAR_DUPLICATE_SIMILARITY, Tier

BASELINE_ATTEMPTS = 3  # a baseline seed that fails this often is left out of the pairs


class Phase(enum.StrEnum):
    NEW = "new"  # waiting for admission
    TESTING = "testing"  # running at `tier` on `version`
    PROMOTED = "promoted"  # passed the top tier
    HELD = "held"  # passed the top tier, waits for a person
    APPROVED = "approved"  # a person approved it: stack it
    DONE = "done"  # refused, rejected, stale, or stacked


@dataclass
class IdeaState:
    idea: Idea
    phase: Phase = Phase.NEW
    version: int = 0  # the champion version it is tested on (after rebases)
    patch: str = ""  # its patch against that version
    tier: int = 0


class LadderRefusal(ValueError):
    """A person's request (approve, reject, revert) that the state does not allow."""


@dataclass
class LadderState:
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
    champions: dict[int, ChampionChange] = field(default_factory=dict)
    ideas: dict[str, IdeaState] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    # (idea_id or "" for the baseline, version, tier) -> seeds requested / results per seed
    requested: dict[tuple[str, int, int], set[int]] = field(
        default_factory=lambda: defaultdict(set)
    )
    results: dict[tuple[str, int, int], dict[int, RunResult]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    # (version, tier) -> ideas with RunSpecs there, in order (an index: saves scanning them all)
    tested_at: dict[tuple[int, int], dict[str, None]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    # (version, tier) -> every seed requested there by those ideas: the seeds its baseline needs
    seeds_needed: dict[tuple[int, int], set[int]] = field(default_factory=lambda: defaultdict(set))
    # (version, tier, seed) -> baseline RunSpecs made / their results in
    baseline_tries: dict[tuple[int, int, int], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    baseline_finished: dict[tuple[int, int, int], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    fingerprints: dict[tuple[int, str], str] = field(default_factory=dict)  # -> first idea id
    # (version, the change's values) -> (idea id, normalised change) of each idea's first
    # RunSpec there, in spec order: near-duplicates share their values (near_duplicates.py), so
    # a new idea is compared with those only, not with every idea tried on the champion
    changes: dict[tuple[int, tuple[str, ...]], list[tuple[str, PatchChange]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # (version, tier) -> mean gain of each idea the rules decided there (the rank gate's peers)
    gains: dict[tuple[int, int], dict[str, float]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    ranked: dict[tuple[int, int], list[float]] = field(default_factory=lambda: defaultdict(list))
    # (idea id, version) -> the newer version it was carried to with its recipe unchanged
    moved: dict[tuple[str, int], int] = field(default_factory=dict)
    # (idea id, version, tier) -> seeds whose runs came from an earlier version (not run here)
    carried: dict[tuple[str, int, int], set[int]] = field(default_factory=lambda: defaultdict(set))
    # (champion, tier) -> the noise of the ideas run there, kept up to date by _touch (a cache:
    # noise_pool.py), and tier -> (current champion, noise pooled over every earlier one)
    pools: dict[tuple[int, int], NoisePool] = field(default_factory=dict)
    earlier: dict[int, tuple[int, Noise]] = field(default_factory=dict)
    # (idea looked at again, version, entry tier) -> its second look admitted there
    looked: dict[tuple[str, int, int], str] = field(default_factory=dict)
    # (idea id, version, tier) -> how it got there from the tier below: True by a spot check
    # (spot_checks.py), False promoted by the rules; (lower tier) -> how such ideas fared, each
    # (idea, tier) counted once (a carried-over idea is decided again on the new champion)
    entered: dict[tuple[str, int, int], bool] = field(default_factory=dict)
    checks: dict[int, Checks] = field(default_factory=lambda: defaultdict(Checks))
    counted: set[tuple[str, int]] = field(default_factory=set)
    # (idea id, version, tier) reached by passing every gate below it (a fresh idea's tier 0
    # too): neither by a spot check nor as a second look
    gated: set[tuple[str, int, int]] = field(default_factory=set)
    corpus: str = ""  # the swarm's data, by hash (_record_corpus); "": none recorded yet
    # run id -> RunSpec with no result yet: a job the bus lost is put back from here (service.py)
    unfinished: dict[str, RunSpec] = field(default_factory=dict)
    dirty: dict[str, None] = field(default_factory=dict)  # ideas to look at in act(), in order
    baselines_dirty: bool = True
    _out: list[Message] = field(default_factory=list)

    @property
    def current(self) -> int:
        return max(self.champions, default=0)

    @property
    def top(self) -> int:
        return len(self.tiers) - 1

    def recipe_of(self, version: int, patch: str) -> str:
        """The whole recipe of a champion version with a patch (none: the champion's own). The
        one place the ladder makes a recipe of a patch: admission, RunSpecs and stacking all
        ask here, and the application is cached (admission.patched_source)."""
        source = self.champions[version].source
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
            self._observe_champion(message)

    def _observe_spec(self, spec: RunSpec) -> None:
        # The ladder enqueues a job before it publishes the spec's event, so an instant run's
        # result may precede its spec in the stream: such a spec is done, not lost (a restarted
        # ladder put it back on the queue at every start, and trainers ran it again).
        ran = self.results.get((spec.idea_id, spec.champion_version, spec.tier), {}).get(spec.seed)
        if ran is None or ran.run_id != spec.run_id:
            self.unfinished[spec.run_id] = spec
        elif spec.idea_id:  # its result is in already: a verdict may be due
            self.dirty[spec.idea_id] = None
        self.requested[(spec.idea_id, spec.champion_version, spec.tier)].add(spec.seed)
        if not spec.idea_id:
            self.baseline_tries[(spec.champion_version, spec.tier, spec.seed)] += 1
            return
        self._tested(spec.idea_id, spec.champion_version, spec.tier)
        self.baselines_dirty = True  # the baseline may need this seed too
        state = self.ideas.get(spec.idea_id)
        if state is None or spec.champion_version < state.version:
            return
        if state.phase is Phase.NEW and state.idea.entry_tier and state.idea.parent_ids:
            looked_at = (state.idea.parent_ids[0], spec.champion_version, state.idea.entry_tier)
            self.looked.setdefault(looked_at, spec.idea_id)
        if state.phase is Phase.NEW or spec.champion_version > state.version:
            champion = self.champions.get(spec.champion_version)
            if champion is not None:
                with contextlib.suppress(NotAdmitted):  # only the ladder's own specs count
                    source = patched_source(champion.source, spec.patch, self.editable)
                    self._tried_on(champion, spec.idea_id, source)
        state.phase, state.version, state.patch = Phase.TESTING, spec.champion_version, spec.patch
        state.tier = spec.tier

    def _tried_on(self, champion: ChampionChange, idea_id: str, recipe: str) -> None:
        """Index an idea's recipe on a champion, for the duplicate checks of later ideas."""
        self.fingerprints.setdefault((champion.version, fingerprint(recipe)), idea_id)
        change = patch_change(champion.source, recipe)
        if change:
            self.changes[(champion.version, change.values)].append((idea_id, change))

    def _observe_result(self, result: RunResult) -> None:
        self.unfinished.pop(result.run_id, None)
        self._record_corpus(result)
        self._touch(result.idea_id, result.champion_version, result.tier)
        slot = self.results[(result.idea_id, result.champion_version, result.tier)]
        previous = slot.get(result.seed)
        if previous is None or previous.status is not RunStatus.OK:  # keep a baseline's OK try
            slot[result.seed] = result
        if result.idea_id:
            self.dirty[result.idea_id] = None
            newer = self.moved.get((result.idea_id, result.champion_version))
            if newer is not None:  # a run that finished after its idea was carried over
                self._carry_run(result.idea_id, newer, result.tier, result)
        else:  # a baseline result may complete the pairs of every idea at that tier
            self.baseline_finished[(result.champion_version, result.tier, result.seed)] += 1
            self.baselines_dirty = True
            for idea_id in self.tested_at[(result.champion_version, result.tier)]:
                state = self.ideas.get(idea_id)
                if state is not None and state.phase is Phase.TESTING:
                    self.dirty[idea_id] = None

    def _observe_decision(self, decision: Decision) -> None:
        state = self.ideas.get(decision.idea_id)
        if state is None:
            return
        verdict, by_rules = decision.verdict, decision.decided_by == "ladder"
        if by_rules and verdict in (Verdict.PROMOTE, Verdict.REJECT):
            self._count_check(decision)
        if by_rules and verdict in (Verdict.PROMOTE, Verdict.REJECT) and decision.delta is not None:
            self._gain(decision.idea_id, decision.champion_version, decision.tier, decision.delta)
        if verdict in (Verdict.REJECT, Verdict.REFUSED, Verdict.STALE):
            state.phase = Phase.DONE
        elif verdict is Verdict.HELD:
            state.phase = Phase.HELD
        elif verdict is Verdict.PROMOTE and decision.tier == self.top:
            state.phase = Phase.PROMOTED if by_rules else Phase.APPROVED
        elif verdict is Verdict.PROMOTE and decision.champion_version == state.version:
            # The next tier starts here, not at its first RunSpec: carried runs may need none.
            state.tier = decision.tier + 1
            if self.requested[(decision.idea_id, state.version, state.tier)]:
                self._tested(decision.idea_id, state.version, state.tier)
                self.baselines_dirty = True
        self.dirty[decision.idea_id] = None

    def _count_check(self, decision: Decision) -> None:
        """A verdict of the rules at a tier an idea reached from the one below: count how
        that tier's promotions and spot checks fare here (spot_checks.py). Only measured
        verdicts count: a crash one tier up says nothing of the gate below (and crashes made
        on purpose would switch a gate off)."""
        idea_id, version, tier = decision.idea_id, decision.champion_version, decision.tier
        spot_check = self.entered.get((idea_id, version, tier))
        measured = decision.delta is not None
        if spot_check is not None and tier > 0 and measured and (idea_id, tier) not in self.counted:
            self.counted.add((idea_id, tier))
            passed = decision.verdict is Verdict.PROMOTE and not is_spot_check(decision.rule)
            self.checks[tier - 1] = self.checks[tier - 1].counted(spot_check, passed)
        if decision.verdict is Verdict.PROMOTE and tier < self.top:
            sent_on = is_spot_check(decision.rule)
            self.entered[(idea_id, version, tier + 1)] = sent_on
            if not sent_on and self.passed_below(idea_id, version, tier):
                self.gated.add((idea_id, version, tier + 1))

    def passed_below(self, idea_id: str, version: int, tier: int) -> bool:
        """The idea reached `tier` on `version` through every gate below it: a spot check or a
        second look may skip one gate, never two (spot_checks.py, second_look.py)."""
        return tier == 0 or (idea_id, version, tier) in self.gated

    def _observe_champion(self, change: ChampionChange) -> None:
        self.champions[change.version] = change
        if change.idea_id in self.ideas and change.kind is ChangeKind.STACK:
            self.ideas[change.idea_id].phase = Phase.DONE
            for (index, seed), run in self.carried_runs(change.idea_id, change.parent_version):
                self.results[("", change.version, index)].setdefault(seed, run)
                self._touch("", change.version, index)
        if change.version == self.current and change.parent_version in self.champions:
            self._carry_ideas(change)
        if change.version == self.current:
            self.baselines_dirty = True
            for idea_id, state in self.ideas.items():
                if state.phase is not Phase.DONE:
                    self.dirty[idea_id] = None

    def _carry_ideas(self, change: ChampionChange) -> None:
        """Move every idea in play on the parent whose recipe the new champion leaves as it was
        onto the new champion at tier 0, with its runs (see the module's docstring)."""
        old = self.champions[change.parent_version].source
        for idea_id, state in self.ideas.items():
            if state.phase in (Phase.NEW, Phase.DONE) or state.version != change.parent_version:
                continue
            try:
                recipe = patched_source(old, state.patch, self.editable)
                patch = rebase(state.patch, old, change.source, self.editable)
                if patched_source(change.source, patch, self.editable) != recipe:
                    continue  # a different recipe now: _carry_over tests it from scratch
            except NotAdmitted:
                continue  # _carry_over marks it STALE
            self.moved[(idea_id, change.parent_version)] = change.version
            state.phase, state.version, state.patch, state.tier = (
                Phase.TESTING,
                change.version,
                patch,
                0,
            )
            self._tried_on(change, idea_id, recipe)
            for (tier, _), run in self.carried_runs(idea_id, change.parent_version):
                self._carry_run(idea_id, change.version, tier, run)
            if self.requested[(idea_id, change.version, 0)]:
                self._tested(idea_id, change.version, 0)

    def _carry_run(self, idea_id: str, version: int, tier: int, run: RunResult) -> None:
        """An idea's successful run on an earlier version, as its run on `version`: the same
        recipe on the same seed (token-budget tiers only)."""
        if not self._reusable(tier, run):
            return
        key = (idea_id, version, tier)
        if run.seed not in self.results[key]:
            self.results[key][run.seed] = run
            self._touch(idea_id, version, tier)
            self.carried[key].add(run.seed)
            self.requested[key].add(run.seed)
            if idea_id in self.tested_at.get((version, tier), {}):
                self.seeds_needed[(version, tier)].add(run.seed)
            self.dirty[idea_id] = None
            if tier == 0 or idea_id in self.tested_at[(version, tier)]:
                self.baselines_dirty = True
        newer = self.moved.get((idea_id, version))
        if newer is not None:  # carried on again since
            self._carry_run(idea_id, newer, tier, run)

    def carried_runs(self, idea_id: str, version: int) -> list[tuple[tuple[int, int], RunResult]]:
        """((tier, seed), run) of an idea's successful runs on `version` at token-budget tiers:
        once it is stacked onto `version`, runs of the new champion's recipe."""
        carried = []
        for tier in self.tiers:
            for seed, run in sorted(self.results.get((idea_id, version, tier.index), {}).items()):
                if self._reusable(tier.index, run):
                    carried.append(((tier.index, seed), run))
        return carried

    def _reusable(self, tier: int, run: RunResult) -> bool:
        """A run that stands for its recipe on its seed wherever that recipe is tested: it
        succeeded, on a token budget (a seed's run is reproducible)."""
        ok = run.status is RunStatus.OK and run.metric is not None
        return ok and self.tiers[tier].budget_kind is BudgetKind.TOKENS

    def on_corpus(self, run: RunResult) -> bool:
        """The run used the swarm's recorded data: runs on other data are never paired (a
        worker with another data folder measures another problem)."""
        recorded = self.corpus
        return not recorded or not run.corpus_hash or run.corpus_hash == recorded

    def _record_corpus(self, result: RunResult) -> None:
        """The swarm's data: the corpus hash of the first successful baseline run of one of
        a tier's own seeds, in the fold's order (the same after a replay), fixed from then on
        for every champion and tier (they all train on one data folder). RunSpecs carry it;
        a trainer with other data hands their jobs back and stops."""
        if self.corpus or result.idea_id or result.status is not RunStatus.OK:
            return
        rule = self.tiers[result.tier].rule if 0 <= result.tier < len(self.tiers) else None
        seeds = {self.seed(result.tier, i) for i in range(2 * rule.max_seeds)} if rule else set()
        if result.corpus_hash and result.seed in seeds:
            self.corpus = result.corpus_hash
            self.pools.clear()  # runs on other data leave the pools now
            self.earlier.clear()

    def baseline_metrics(self, version: int, tier: int) -> dict[int, float]:
        """seed -> metric of the champion's successful runs at (version, tier)."""
        baseline = self.results.get(("", version, tier), {})
        return {
            s: r.metric
            for s, r in baseline.items()
            if r.status is RunStatus.OK and r.metric is not None and self.on_corpus(r)
        }

    def _gain(self, idea_id: str, version: int, tier: int, delta: float) -> None:
        """The idea's mean gain as the rules decided it at (version, tier), kept sorted too."""
        key = (version, tier)
        old = self.gains[key].get(idea_id)
        self.gains[key][idea_id] = delta
        ranked = self.ranked[key]
        if old is not None:
            del ranked[bisect.bisect_left(ranked, old)]
        bisect.insort(ranked, delta)

    def peer_gains(self, idea_id: str, version: int, tier: int) -> list[float]:
        """The gains of the other ideas decided at (version, tier), sorted: the rank gate's
        peers. A copy less one value, not a scan of every idea (an O(ideas) loop per verdict
        made a long-lived champion cost O(ideas²))."""
        ranked = self.ranked.get((version, tier), [])
        own = self.gains.get((version, tier), {}).get(idea_id)
        if own is None:
            return list(ranked)
        i = bisect.bisect_left(ranked, own)
        return ranked[:i] + ranked[i + 1 :]

    def _tested(self, idea_id: str, version: int, tier: int) -> None:
        """The idea is run at (version, tier): it counts in that tier's noise from now on."""
        self.tested_at[(version, tier)][idea_id] = None
        self.seeds_needed[(version, tier)] |= self.requested[(idea_id, version, tier)]
        self._touch(idea_id, version, tier)

    def _touch(self, idea_id: str, version: int, tier: int) -> None:
        """A run of `idea_id` (a baseline's: "") at (version, tier) came in or now counts: its
        part of the pooled noise there is out of date (every idea's, for a baseline run)."""
        pool = self.pools.get((version, tier))
        if pool is not None and idea_id:
            pool.stale.add(idea_id)
        elif pool is not None:
            del self.pools[(version, tier)]
        if version < self.current:
            self.earlier.pop(tier, None)

    def noise_at(self, version: int, tier: int, exclude: str = "") -> Noise:
        """The paired-difference noise of the ideas run at (version, tier), but `exclude`."""
        key = (version, tier)
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = NoisePool(stale=set(self.tested_at.get(key, ())))
        if pool.stale:
            base = self.baseline_metrics(version, tier)
            scale = max((abs(v) for v in base.values()), default=0.0)
            tested = self.tested_at.get(key, {})
            for idea_id in pool.stale:
                runs = self.results.get((idea_id, version, tier), {})
                mine = {
                    s: r.metric
                    for s, r in runs.items()
                    if r.metric is not None and self.on_corpus(r)
                }
                gains = paired_gains(Evidence(mine, base, None, (), self.lower_is_better))
                pool.put(idea_id, noise([gains], scale) if idea_id in tested else None)
            pool.stale.clear()
        return pool.without(exclude)

    def sigma_for(self, version: int, tier: int, idea_id: str = "") -> float | None:
        """σ_d at a tier for judging `idea_id`: pooled over the other ideas' pairs on this
        champion when there are enough (its own would pool its luck back in: rules.py), else
        over every earlier champion's (a tier's seed noise outlives its champion); None: no
        estimate, so no racing yet."""
        here = self.noise_at(version, tier, exclude=idea_id).sigma
        return here if here is not None else self.earlier_noise(tier).sigma

    def earlier_noise(self, tier: int) -> Noise:
        """The noise at `tier` pooled over every champion before the current one: the racing
        prior. From every result folded so far, whenever it came (a result of the old champion
        can arrive after the change), so a replay and a snapshot pool the same."""
        cached = self.earlier.get(tier)
        if cached is not None and cached[0] == self.current:
            return cached[1]
        total = Noise()
        for version in sorted(v for v in self.champions if v < self.current):
            total += self.noise_at(version, tier)
        self.earlier[tier] = (self.current, total)
        return total

    def wake(self) -> None:
        """Look at every idea in play and every tier's baseline at the next act, as after a full
        replay (a state restored from a snapshot: an idea a kill left waiting is decided)."""
        self.baselines_dirty = True
        for idea_id, state in self.ideas.items():
            if state.phase is not Phase.DONE:
                self.dirty[idea_id] = None

    def rejected_at(self, idea_id: str) -> tuple[int, int, str, bool] | None:
        """(version, tier, patch, rejected by the rules there) of an idea: where a second look
        at it may enter (second_look.py); None for an idea never seen."""
        state = self.ideas.get(idea_id)
        if state is None:
            return None
        by_rules = idea_id in self.gains.get((state.version, state.tier), {})
        return state.version, state.tier, state.patch, state.phase is Phase.DONE and by_rules

    def _baseline_ok(self, version: int, tier: int, seed: int) -> bool:
        result = self.results[("", version, tier)].get(seed)
        ok = result is not None and result.status is RunStatus.OK and result.metric is not None
        return ok and self.on_corpus(result)  # type: ignore[arg-type]
