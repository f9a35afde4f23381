"""The champion's baseline at each tier: the runs every idea there is paired with, the data they
were all trained on, and a tier held because its baseline ignores the seed.

A tier whose baseline has the same metric on every seed (two or more: seed_honesty.seed_ignored) is
held: its ideas get no verdict and wait, TESTING, with their runs. The baseline there is run on
the tier's `max_seeds` seeds (one equal pair can be a coarsely printed metric), and once they
are in, still equal, one Decision says so: HELD, idea "" (the champion's, as for baseline
RunSpecs), rule `seed_ignored: …` naming the seeds and the fix, id `dec-seed-ignored-v…-t…`,
published once per champion and tier. A seed with another metric lifts the hold for good (a
baseline's metrics only accumulate) and the waiting ideas are decided on all their evidence.
The hold is derived from the runs, never folded from that Decision, so a replay holds the same.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bus.messages import ChangeKind, Decision, RunResult, RunSpec, RunStatus, Verdict, event_key
from scale_ladder.idea_state import Phase
from scale_ladder.seed_honesty import SEED_IGNORED, seed_ignored, seed_ignored_reason

if TYPE_CHECKING:
    from scale_ladder.ladder import Ladder

BASELINE_ATTEMPTS = 3  # a baseline seed that fails this often is left out of the pairs


@dataclass
class Baselines:
    # (version, tier) -> every seed requested there by the ideas tested there: the seeds its
    # baseline needs
    needed: dict[tuple[int, int], set[int]] = field(default_factory=lambda: defaultdict(set))
    # (version, tier, seed) -> baseline RunSpecs made / their results in
    tries: dict[tuple[int, int, int], int] = field(default_factory=lambda: defaultdict(int))
    finished: dict[tuple[int, int, int], int] = field(default_factory=lambda: defaultdict(int))
    corpus: str = ""  # the swarm's data, by hash (record_corpus); "": none recorded yet

    def need(self, version: int, tier: int, seeds: set[int]) -> None:
        self.needed[(version, tier)] |= seeds

    def tried(self, spec: RunSpec) -> None:
        """A baseline RunSpec: one more attempt at its seed."""
        self.tries[(spec.champion_version, spec.tier, spec.seed)] += 1


def swarm_corpus(ladder: Ladder) -> str:
    """The swarm's data by hash: recorded from a baseline run, else pinned before any run
    (Ladder.pinned_corpus); "": not known yet."""
    return ladder.baselines.corpus or ladder.pinned_corpus


def on_corpus(ladder: Ladder, run: RunResult) -> bool:
    """The run used the swarm's data: runs on other data are never paired (a worker with
    another data folder measures another problem)."""
    swarms = swarm_corpus(ladder)
    return not swarms or not run.corpus_hash or run.corpus_hash == swarms


# --- folding events in ----------------------------------------------------------------------


def record_corpus(ladder: Ladder, result: RunResult) -> None:
    """The swarm's data: the corpus hash of the first successful baseline run of one of
    a tier's own seeds, in the fold's order (the same after a replay), fixed from then on
    for every champion and tier (they all train on one data folder). RunSpecs carry it;
    a trainer with other data hands their jobs back and stops."""
    own = ladder.baselines
    if own.corpus or result.idea_id or result.status is not RunStatus.OK:
        return
    tiers = ladder.tiers
    rule = tiers[result.tier].rule if 0 <= result.tier < len(tiers) else None
    seeds = {ladder.seed(result.tier, i) for i in range(2 * rule.max_seeds)} if rule else set()
    pinned = ladder.pinned_corpus  # known before any run: only a run on it records the data
    on_pinned = not pinned or result.corpus_hash == pinned
    if result.corpus_hash and result.seed in seeds and on_pinned:
        own.corpus = result.corpus_hash
        ladder.noise.clear()  # runs on other data leave the pools now


def observe_result(ladder: Ladder, result: RunResult) -> None:
    """A baseline result may complete the pairs of every idea at its tier."""
    ladder.baselines.finished[(result.champion_version, result.tier, result.seed)] += 1
    ladder.baselines_dirty = True
    for idea_id in ladder.runs.tested_at[(result.champion_version, result.tier)]:
        state = ladder.ideas.get(idea_id)
        if state is not None and state.phase is Phase.TESTING:
            ladder.dirty[idea_id] = None


# --- what ideas are paired with ---------------------------------------------------------------


def metrics(ladder: Ladder, version: int, tier: int) -> dict[int, float]:
    """seed -> metric of the champion's successful runs at (version, tier)."""
    baseline = ladder.runs.results.get(("", version, tier), {})
    return {
        s: r.metric
        for s, r in baseline.items()
        if r.status is RunStatus.OK and r.metric is not None and on_corpus(ladder, r)
    }


def pairs(ladder: Ladder, version: int, tier: int, seeds: Iterable[int]) -> dict[int, float] | None:
    """seed -> the baseline's metric of each of `seeds` whose baseline run succeeded (those whose
    baseline failed for good pair with nothing); None while one is still coming (or will be
    tried again)."""
    baseline = ladder.runs.results[("", version, tier)]
    paired: dict[int, float] = {}
    for seed in seeds:
        if ok(ladder, version, tier, seed):
            paired[seed] = baseline[seed].metric  # type: ignore[assignment]
        elif ladder.baselines.finished[(version, tier, seed)] < BASELINE_ATTEMPTS:
            return None
    return paired


def ok(ladder: Ladder, version: int, tier: int, seed: int) -> bool:
    result = ladder.runs.results[("", version, tier)].get(seed)
    good = result is not None and result.status is RunStatus.OK and result.metric is not None
    return good and on_corpus(ladder, result)  # type: ignore[arg-type]


def settled(ladder: Ladder, version: int, tier: int, seed: int) -> bool:
    """The baseline of this seed is in, or failed for good."""
    finished = ladder.baselines.finished[(version, tier, seed)]
    return ok(ladder, version, tier, seed) or finished >= BASELINE_ATTEMPTS


# --- acting ---------------------------------------------------------------------------------


def act(ladder: Ladder) -> None:
    """The champion on every seed any idea needs at each tier. Tier 0 starts as soon as the
    champion changes; a higher tier when the first idea reaches it on this champion (its
    baseline then runs alongside that idea's runs), so a new champion does not hold every
    trainer on top-tier baselines before any idea can use them. The first champion is the
    exception (`starts_everywhere`). A failed baseline run is tried again, up to
    BASELINE_ATTEMPTS times per seed. A held tier's baseline is run on the tier's `max_seeds`
    seeds, then the hold is published (see the module's docstring)."""
    version, own = ladder.current, ladder.baselines
    everywhere = starts_everywhere(ladder, version)
    for tier in ladder.tiers:
        found = metrics(ladder, version, tier.index)
        ignored = seed_ignored(found)
        needed = set(own.needed.get((version, tier.index), ()))
        if everywhere:
            needed |= {ladder.seed(tier.index, i) for i in range(tier.seeds)}
            # the next tier once this one's baseline is seen to follow its seed: a command
            # that ignores its seed holds this tier (also when float jitter tells its metrics
            # apart: seed_ignored), and would only waste probes up there
            everywhere = len(found) > 1 and not ignored
        if tier.index == 0 or needed:
            needed.add(ladder.seed(tier.index, 0))
            if ignored:
                probes = {ladder.seed(tier.index, i) for i in range(tier.rule.max_seeds)}
                if all(settled(ladder, version, tier.index, s) for s in probes):
                    hold(ladder, version, tier.index)
                needed |= probes
        for seed in sorted(needed):
            tries = own.tries[(version, tier.index, seed)]
            if ok(ladder, version, tier.index, seed) or tries >= BASELINE_ATTEMPTS:
                continue
            if tries > own.finished[(version, tier.index, seed)]:
                continue  # an attempt is still running
            ladder.emit(ladder.spec("", version, tier.index, seed, "", attempt=tries))


def starts_everywhere(ladder: Ladder, version: int) -> bool:
    """The swarm's first champion is run at every tier without waiting for an idea to get
    there, on the seeds an idea needs before its first verdict, a tier once the one below it
    has two seeds with different metrics. Every later champion is a stacked idea, whose own runs
    are its baseline at every tier it passed (lineage.py); the first has none, and the first
    idea to reach a tier would wait for the champion's runs as well as its own. At the top of
    the shipped ladder (one run at a time, 120-150 s each on 2 cores) that was four runs in a
    row, ten minutes: in the real bytelm benchmark's 15 minutes no idea was decided there. The
    runs are not wasted: the first idea at a tier needs them, and they are every tier's
    starting level in the report."""
    change = ladder.lineage.champions.get(version)
    return change is not None and change.kind is ChangeKind.INITIAL


def hold(ladder: Ladder, version: int, tier: int) -> None:
    """Say, once per champion and tier, that the tier is held because its baseline ignores
    the seed. Its ideas wait (rules.decide answers HELD for them); no idea is named."""
    decision_id = f"dec-{SEED_IGNORED.replace('_', '-')}-v{version}-t{tier}"
    if event_key(Decision.KIND, decision_id) in ladder.seen:
        return
    found = metrics(ladder, version, tier)
    seeds = seed_ignored(found)
    waiting = [
        i
        for i, state in ladder.ideas.items()
        if state.phase is Phase.TESTING and (state.version, state.tier) == (version, tier)
    ]
    details = {"seeds": seeds, "baseline": [found[s] for s in seeds], "waiting": waiting}
    ladder.emit(
        Decision(
            decision_id=decision_id,
            idea_id="",
            tier=tier,
            verdict=Verdict.HELD,
            champion_version=version,
            rule=seed_ignored_reason(seeds, found[seeds[0]], tier),
            n=len(seeds),
            details=json.dumps(details),
        )
    )
