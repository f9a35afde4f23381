"""An idea's gain must show on text it could not have carried, not on the held-out text alone.

Where the held-out text is public (the bytelm target's stdlib modules), a recipe can carry it,
or the windows scored from it, in its patch and score far better while staying causal; no
causality probe sees that. Every bytelm run is therefore also scored on control windows:
training text drawn from its seed and never sent to it (training/control_windows.py), which no
patch can carry (its score there is the median window's, which the part of the training split
a patch can hold does not move). A real improvement lowers both scores, a recipe that knows
the held-out text only the held-out one. Before an idea is promoted, its mean paired gain on
the control windows must be at least the share below of its gain on the held-out text, or
short of it by less than the floor, which covers the noise of two scores on a few seeds
(measured in docs/reliability.md). A recipe could still carry some held-out text and gain up
to that much more than it learned, no more.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scale_ladder.idea_state import IdeaState
    from scale_ladder.ladder import Ladder

# Of the held-out gain, the share that must show on the control windows too. Measured honest
# ideas gained 1.3-2.3x as much there as on the held-out text (docs/reliability.md).
CONTROL_SHARE = 0.75
EXCESS_FLOOR = 0.01  # relative to the baseline's control metric: a shortfall below it is noise


def carried_held_out(
    ladder: Ladder, state: IdeaState, seeds: Iterable[int]
) -> tuple[str, float] | None:
    """Why the idea's gain at its tier is on the held-out text alone, with its gain on the
    control windows; None if that gain shows there too, or its runs have no control scores
    (a target without them, or a ledger from before them)."""
    version, tier = state.version, state.tier
    runs = ladder.runs.results[(state.idea.idea_id, version, tier)]
    baseline = ladder.runs.results[("", version, tier)]
    sign = 1.0 if ladder.lower_is_better else -1.0
    held_out: list[float] = []
    control: list[float] = []
    scale: list[float] = []
    for seed in seeds:
        idea, base = runs.get(seed), baseline.get(seed)
        if idea is None or base is None:
            continue
        if (
            idea.metric is None
            or base.metric is None
            or idea.control_metric is None
            or base.control_metric is None
        ):
            continue
        held_out.append(sign * (base.metric - idea.metric))
        control.append(sign * (base.control_metric - idea.control_metric))
        scale.append(abs(base.control_metric))
    if not held_out:
        return None
    return not_on_control(held_out, control, statistics.fmean(scale))


def not_on_control(
    held_out: list[float], control: list[float], scale: float
) -> tuple[str, float] | None:
    """The rule, on paired gains (positive: better) on the held-out text and on the control
    windows, seed by seed, with the baseline's control metric as `scale`: why the held-out
    gain is not on the control windows and the control gain, else None."""
    gain, on_control = statistics.fmean(held_out), statistics.fmean(control)
    if gain <= 0 or gain - on_control <= EXCESS_FLOOR * scale:
        return None
    if on_control >= CONTROL_SHARE * gain:
        return None
    why = (
        f"its gain on the held-out text ({gain:+.4f}) is not on training text its runs were "
        f"never sent ({on_control:+.4f} on the control windows, {len(held_out)} seed"
        f"{'s' if len(held_out) > 1 else ''}): a recipe that carries the held-out text gains "
        "there alone, a real improvement on both"
    )
    return why, on_control
