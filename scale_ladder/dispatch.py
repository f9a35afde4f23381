"""Which of a capped tier's waiting runs the trainers get next.

A tier with `max_concurrent` runs few experiments at once (the shipped top tier: one), and a
work queue runs them first come, first served. In a measured half-hour run that cost the swarm
its best idea's verdict: one idea's RETEST plan (two top-tier pairs of +0.057 and -0.006, so four
more seeds and their four baselines, published at once) went ahead of a far better idea's second
seed (2.997 on its first, champion 3.24), which waited six minutes.

So the ladder service keeps a capped tier's RunSpecs back (parked: their events are published,
their jobs are not) and hands the work queue one more than the tier's cap, best first:
- runs made for an older champion go at once and count for nothing: trainers skip them;
- then by the promise of the idea a run serves: its mean paired gain at this tier so far, or,
  before its first pair, the gain it was promoted with from the tier below. A baseline run
  serves the most promising open idea waiting on its seed; one no open idea waits on goes first,
  since whatever runs on that seed next pairs with it;
- runs of an idea already decided go last;
- ties in the order the ladder made them.

Only the order changes, never the rules: each verdict is made from the runs that are in, on the
tier's own seeds, as with any order in which trainers happen to finish them. Nothing is lost at
a stop or a kill: a parked run's RunSpec is in the event stream with no result, and the service
that starts next finds it on no queue and parks it again (service.py, `_requeue_lost`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from bus.messages import RunSpec, RunStatus
from scale_ladder import baselines
from scale_ladder.idea_state import Phase
from scale_ladder.ladder import Ladder
from scale_ladder.rules import Evidence, paired_gains

# Jobs on a capped tier's queue beyond its cap: the next one waits there, so a trainer that
# finishes takes it at once instead of a lower tier's job while the ladder chooses.
LOOKAHEAD = 1
# How long jobs just sent may be missing from the queue's count. The server counts a consumer's
# pending jobs a moment after it acknowledges their publication (nats-server signals its
# consumers from a loop of its own), so an act right after a release could read the queue
# without them and send the tier's next job too: two on a queue capped at one (a flaky test
# under load). Until the count shows them, or this long has passed, the count is taken to be
# what it will be.
VISIBLE_S = 5.0


@dataclass(frozen=True, slots=True)
class Parked:
    spec: RunSpec
    again: bool  # found lost at a start: it may have been on the queue under its own id


@dataclass(frozen=True, slots=True)
class Sent:
    """A capped tier's last release: the jobs its queue will count once they show there."""

    expected: int
    at: float  # monotonic
    run_ids: frozenset[str]


@dataclass
class Dispatch:
    caps: Mapping[int, int]  # tier -> max_concurrent, for the capped tiers only
    waiting: dict[str, Parked] = field(default_factory=dict)  # run id -> parked, in arrival order
    sent: dict[int, Sent] = field(default_factory=dict)  # tier -> its last release (VISIBLE_S)

    def park(self, spec: RunSpec, again: bool = False) -> bool:
        """Keep the run back if its tier is capped; False: send it now."""
        if self.caps.get(spec.tier, 0) <= 0:
            return False
        self.waiting.setdefault(spec.run_id, Parked(spec, again))
        return True

    def __contains__(self, run_id: object) -> bool:
        return run_id in self.waiting

    def tiers(self) -> list[int]:
        return sorted({p.spec.tier for p in self.waiting.values()})

    def release(
        self, ladder: Ladder, tier: int, queued: int, now: float | None = None
    ) -> list[Parked]:
        """The tier's runs to send now, given the jobs its queue holds (waiting or running).
        A run with a result already (sent before a restart, after all) is dropped."""
        now = time.monotonic() if now is None else now
        for run_id in [r for r in self.waiting if r not in ladder.runs.unfinished]:
            del self.waiting[run_id]
        here = [p for p in self.waiting.values() if p.spec.tier == tier]
        here.sort(key=lambda p: send_order(ladder, p.spec))
        stale = sum(p.spec.champion_version < ladder.current for p in here)  # first, and free
        queued = self._on_queue(ladder, tier, queued, now)
        room = self.caps[tier] + LOOKAHEAD - queued
        out = here[: stale + max(room, 0)]
        for parked in out:
            del self.waiting[parked.spec.run_id]
        fresh = frozenset(p.spec.run_id for p in out[stale:])  # stale ones are skipped at once
        if fresh:
            self.sent[tier] = Sent(queued + len(fresh), now, fresh)
        return out

    def _on_queue(self, ladder: Ladder, tier: int, queued: int, now: float) -> int:
        """The jobs on the tier's queue: the server's count, or what it will be while the
        last release may not show in it yet (VISIBLE_S). Those of its jobs with a result are
        off the queue; other jobs that ended meanwhile hold their slot until then."""
        last = self.sent.get(tier)
        if last is None:
            return queued
        expected = last.expected - sum(r not in ladder.runs.unfinished for r in last.run_ids)
        if queued >= expected or now - last.at > VISIBLE_S:
            del self.sent[tier]
            return queued
        return expected


def send_order(ladder: Ladder, spec: RunSpec) -> tuple[bool, int, float]:
    """Smaller goes first: a run for an older champion (trainers skip it, it costs nothing),
    then by priority. The ladder service and the simulator (bench/search) both order by it."""
    return (spec.champion_version >= ladder.current, *priority(ladder, spec))


def priority(ladder: Ladder, spec: RunSpec) -> tuple[int, float]:
    """Smaller first (`sorted` is stable: ties keep arrival order)."""
    version, tier = spec.champion_version, spec.tier
    if not spec.idea_id:
        waiting = [
            i
            for i in ladder.runs.tested_at.get((version, tier), {})
            if _open(ladder, i, version, tier)
            and spec.seed in ladder.runs.requested.get((i, version, tier), ())
        ]
        if not waiting:
            return (0, -math.inf)
        return (0, -max(promise(ladder, i, version, tier) for i in waiting))
    if not _open(ladder, spec.idea_id, version, tier):
        return (1, 0.0)
    return (0, -promise(ladder, spec.idea_id, version, tier))


def promise(ladder: Ladder, idea_id: str, version: int, tier: int) -> float:
    """The idea's mean paired gain at (version, tier) so far (positive: better than the
    champion); before its first pair there, the gain it was promoted with from the tier below;
    0 without either (a direct entry)."""
    runs = ladder.runs.results.get((idea_id, version, tier), {})
    own = {
        s: r.metric for s, r in runs.items() if r.status is RunStatus.OK and r.metric is not None
    }
    baseline = baselines.metrics(ladder, version, tier)
    gains = paired_gains(Evidence(own, baseline, None, [], ladder.lower_is_better))
    if gains:
        return math.fsum(gains) / len(gains)
    below = ladder.promotion.gains.get((version, tier - 1), {}).get(idea_id)
    return below if below is not None else 0.0


def _open(ladder: Ladder, idea_id: str, version: int, tier: int) -> bool:
    """The idea's verdict at (version, tier) is still to come."""
    state = ladder.ideas.get(idea_id)
    return (
        state is not None
        and state.phase is Phase.TESTING
        and (state.version, state.tier) == (version, tier)
    )
