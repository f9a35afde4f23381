"""An idea's failed run that says nothing of the idea, because the champion failed there too.

A run command with a typo, a full disk, a trainer gone bad: while the champion's own runs at a
tier fail, an idea's runs there fail as well. Rejecting the idea for that throws away an idea
nobody tried, and the same change sent again after the fix was then refused as a duplicate (a
newcomer's finding). So a failed run of an idea is judged by what the champion's runs at the
same version and tier did around it, in the order the ladder folded them (so a replay judges
it the same): the champion's last result there before the failure, or its first one after
where it had none yet.
- That result was OK: the failure is the idea's own, and rejects it (as it always did).
- It failed too: the idea stays undecided, with its runs, until the champion's latest result
  there is OK (after a fix, a restart); then each such seed is run once more. A failure of
  that second try is the idea's own.
- The champion has no result there yet: the idea waits for the first (it runs beside the
  idea's first seeds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bus.messages import RunResult
from scale_ladder.baselines import metrics

if TYPE_CHECKING:
    from scale_ladder.idea_state import IdeaState
    from scale_ladder.ladder import Ladder

IDEA_RETRIES = 1  # more tries of a seed whose failure may have been the champion's


def blame(ladder: Ladder, state: IdeaState, failed: list[RunResult]) -> RunResult | None:
    """The failed run that rejects the idea; None while its failures may be the champion's
    (it waits, or a seed is tried again: emitted here)."""
    idea_id, version, tier = state.idea.idea_id, state.version, state.tier
    again: dict[int, int] = {}  # seed -> its next attempt
    for run in failed:
        made = ladder.runs.attempts.get((idea_id, version, tier, run.seed), [])
        if made and made[-1] != run.run_id:
            return None  # its seed's next try is out: wait for it
        around = champion_around(ladder, version, tier, run.run_id)
        if around is None:
            return None
        if around or len(made) > IDEA_RETRIES:
            return run
        again[run.seed] = len(made)
    if not ladder.baselines.history[(version, tier)][-1]:
        return None  # the champion still fails there: hold the idea until it does not
    for seed, attempt in again.items():
        ladder.emit(ladder.spec(idea_id, version, tier, seed, state.patch, attempt=attempt))
    return None


def champion_around(ladder: Ladder, version: int, tier: int, run_id: str) -> bool | None:
    """Whether the champion's result at (version, tier) nearest before the failed run `run_id`
    (or first after it) was OK; None when it has none yet. A champion whose runs there came
    only from a stacked idea's (no baseline run folded) counts as OK."""
    history = ladder.baselines.history.get((version, tier), [])
    seen = ladder.runs.champion_seen.get(run_id, 0)
    if seen:
        return history[seen - 1]
    if history:
        return history[0]
    return True if metrics(ladder, version, tier) else None
