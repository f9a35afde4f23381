"""The runs every part of the ladder reads: the seeds asked for and the results in, per idea (or
the champion's baseline), champion version and tier, and the jobs still out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from bus.messages import RunResult, RunSpec, RunStatus

# (idea_id or "" for the baseline, version, tier)
RunKey = tuple[str, int, int]
BASELINE_NAME = "base"  # the champion's name in its runs' ids (Ladder.spec): no idea's


@dataclass
class Runs:
    # seeds requested / results per seed
    requested: dict[RunKey, set[int]] = field(default_factory=lambda: defaultdict(set))
    results: dict[RunKey, dict[int, RunResult]] = field(default_factory=lambda: defaultdict(dict))
    # (version, tier) -> ideas with RunSpecs there, in order (an index: saves scanning them all)
    tested_at: dict[tuple[int, int], dict[str, None]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    # run id -> RunSpec with no result yet: a job the bus lost is put back from here (service.py)
    unfinished: dict[str, RunSpec] = field(default_factory=dict)
    # (idea_id, version, tier, seed) -> the run ids of an idea's RunSpecs there, in order: a
    # seed is tried again where its failure may have been the champion's (shared_failures.py)
    attempts: dict[tuple[str, int, int, int], list[str]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def observe_spec(self, spec: RunSpec) -> bool:
        """Fold a RunSpec in; True when its result is in already."""
        # The ladder enqueues a job before it publishes the spec's event, so an instant run's
        # result may precede its spec in the stream: such a spec is done, not lost (a restarted
        # ladder put it back on the queue at every start, and trainers ran it again).
        ran = self.results.get((spec.idea_id, spec.champion_version, spec.tier), {}).get(spec.seed)
        done = ran is not None and ran.run_id == spec.run_id
        if not done:
            self.unfinished[spec.run_id] = spec
        self.requested[(spec.idea_id, spec.champion_version, spec.tier)].add(spec.seed)
        if spec.idea_id:
            self.attempts[(spec.idea_id, spec.champion_version, spec.tier, spec.seed)].append(
                spec.run_id
            )
        return done

    def observe_result(self, result: RunResult) -> None:
        self.unfinished.pop(result.run_id, None)
        slot = self.results[(result.idea_id, result.champion_version, result.tier)]
        previous = slot.get(result.seed)
        if previous is None or previous.status is not RunStatus.OK:  # keep a baseline's OK try
            slot[result.seed] = result

    def made(self, key: RunKey) -> int:
        """The runs an idea's RunSpecs at `key` asked for, second tries included; runs carried
        over from an earlier champion were made there and cost nothing here."""
        idea_id, version, tier = key
        tries = self.attempts
        return sum(len(tries.get((idea_id, version, tier, s), ())) for s in self.requested[key])

    def tested(self, idea_id: str, version: int, tier: int) -> set[int]:
        """The idea is run at (version, tier): index it there; the seeds requested for it."""
        self.tested_at[(version, tier)][idea_id] = None
        return self.requested[(idea_id, version, tier)]

    def carry(self, key: RunKey, run: RunResult) -> bool:
        """A run of the idea's recipe made on an earlier version, as its run at `key` on that
        seed, unless it has one there; True if taken."""
        if run.seed in self.results[key]:
            return False
        self.results[key][run.seed] = run
        self.requested[key].add(run.seed)
        return True

    def stacked(self, version: int, tier: int, seed: int, run: RunResult) -> None:
        """A stacked idea's run, as the new champion's baseline run on its seed."""
        self.results[("", version, tier)].setdefault(seed, run)
