"""A second look: an idea the rules rejected at one tier, tested once more one tier up.

A proxy tier can mislead: on a small model (or a small training set) the champion may beat an
idea that wins at the top, and an idea rejected at tier 0 is otherwise never run above it.
When a researcher has nothing new to propose, rather than leave trainers idle it may send
the recipe of a rejected idea again, naming the tier above as its entry tier (Idea.entry_tier).

What keeps this safe: it changes only where the idea enters, and there it meets a gate as
strict as the one it skipped and its own together (direct_entries.entry_rule,
promotion.skipped_from: 3.28σ for two 2σ tiers), with a one-seed win confirmed on a second
seed; from the tier above up it meets every gate as any idea does, on each tier's own seeds.
Each recipe gets one second look per tier and champion, and only after a verdict of the rules
(a crash or a refusal is not a near miss). Its verdicts at its entry tier begin "second look".
A look skipped one gate for free until 2026-11-28: a swarm that looked again at every reject
stacked 7 of 6,000 ideas that do nothing (about 1 in 18,000 with no looks); with the stricter
gate, 3, and the synthetic problem and LCDB gave the same regrets
(`python -m bench.search.false_stacks 2,2,2 --looks`, `--free-first-looks` for the old rule).

A look at an idea that had skipped a gate itself (a look rejected where it entered, or a
spot-checked idea rejected one tier up) would let a null recipe fail every proxy and meet only
the top gate, so its gate covers every noisy gate from the lowest one its recipe skipped up to
its own (4.23σ at the top of three 2σ tiers); its verdicts there begin "look after a look". A
red team first closed the chain by refusing such looks (0e433b5); that also ended the looks
that took LCDB balance-scale's best learner to the top (0.062 regret where TPE + Hyperband
finds the optimum): with the strict gate it is found again.

The ladder admits one when:
- its entry tier is above 0 and at most the top tier;
- its first parent was rejected by the rules at the tier below, on the current champion;
- its recipe on the current champion is its parent's;
- no other second look of that parent has entered at that tier on this champion.
"""

from __future__ import annotations

from bus.messages import Idea
from recipes.identity import fingerprint
from scale_ladder.admission import NotAdmitted, patched_source


def second_look_refusal(
    idea: Idea,
    patch: str,
    *,
    current: int,
    top: int,
    champion: str,
    editable: str,
    parent: tuple[int, int, str, bool] | None,
    earlier: str | None,
) -> str | None:
    """Why the ladder refuses this second look, or None to admit it.

    `champion` is the current champion's recipe (version `current`); `parent` is (version,
    tier, patch, rejected by the rules there) of the idea it looks at again, None if the ladder
    never saw it; `earlier` the second look of that parent already admitted at this entry tier
    on the current champion, if any.
    """
    entry = idea.entry_tier
    if not 0 < entry <= top:
        return f"entry tier {entry}: a second look enters at a tier from 1 to {top}"
    if not idea.parent_ids:
        return "a second look names the idea it looks at again as its first parent"
    looked_at = idea.parent_ids[0]
    if parent is None:
        return f"a second look at {looked_at}: the ladder has no such idea"
    version, tier, parent_patch, rejected = parent
    if version != current or tier != entry - 1 or not rejected:
        return (
            f"a second look at {looked_at} enters at tier {entry}, but {looked_at} was not "
            f"rejected by the rules at tier {entry - 1} on champion v{current}"
        )
    if earlier is not None:
        return f"{looked_at} already had its second look at tier {entry}: {earlier}"
    try:
        same = fingerprint(patched_source(champion, patch, editable)) == fingerprint(
            patched_source(champion, parent_patch, editable)
        )
    except NotAdmitted as exc:  # the parent's own patch was admitted, so this is the idea's
        return f"a second look at {looked_at}: {exc}"
    if not same:
        return f"a second look at {looked_at} must run its recipe, and this patch runs another"
    return None
