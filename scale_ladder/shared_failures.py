"""An idea's failed run that says nothing of the idea, because the champion failed there too.

A run command with a typo, a full disk, a trainer gone bad: while the champion's runs fail, an
idea's runs fail as well, and rejecting the idea for it throws away an idea nobody tried (the
same change sent again after the fix was then refused as a duplicate: a newcomer's finding).
The champion's baseline on a seed is already tried again when it fails (BASELINE_ATTEMPTS in
baselines.py), and a seed where it failed for good pairs with nothing; an idea's failed run is
judged by the champion's run on the same seed, at the same version and tier:
- it is still coming, or being tried again: the idea waits;
- it succeeded at the first try: the failure is the idea's own, and rejects it (as always);
- it succeeded after failing: the idea's seed is tried once more too; a second failure is its
  own;
- it failed for good: the seed pairs with nothing, as for any idea, and the idea is asked for
  more seeds (promotion.py). A swarm whose champion cannot run at all stops (champion_health);
  after the fix, the next start runs those seeds, and the ideas are judged on their merits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bus.messages import RunResult
from scale_ladder.baselines import ok, settled

if TYPE_CHECKING:
    from scale_ladder.idea_state import IdeaState
    from scale_ladder.ladder import Ladder

IDEA_RETRIES = 1  # more tries of a seed on which the champion's run failed too, then succeeded


def blame(ladder: Ladder, state: IdeaState, failed: list[RunResult]) -> RunResult | bool:
    """The failed run that rejects the idea; True while it waits (for the champion's run on a
    seed, or a seed's second try, emitted here); False: none of its failures counts against it,
    and those seeds pair with nothing."""
    idea_id, version, tier = state.idea.idea_id, state.version, state.tier
    again: dict[int, int] = {}  # seed -> its next attempt
    for run in failed:
        made = ladder.runs.attempts.get((idea_id, version, tier, run.seed), [])
        if made and made[-1] != run.run_id:
            return True  # its seed's next try is out
        if not settled(ladder, version, tier, run.seed):
            return True  # the champion's run on this seed is coming, or tried again
        if not ok(ladder, version, tier, run.seed):
            continue  # the champion failed for good here too: no pair, no verdict
        # The champion's own runs of this version: a stacked idea's run that is its baseline
        # here was made for another champion, and how it went then says nothing of now.
        first_try = ladder.baselines.finished[(version, tier, run.seed)] <= 1
        if first_try or len(made) > IDEA_RETRIES:
            return run
        again[run.seed] = len(made)
    for seed, attempt in again.items():
        ladder.emit(ladder.spec(idea_id, version, tier, seed, state.patch, attempt=attempt))
    return bool(again)
