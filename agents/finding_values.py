"""What a finding says about a point of the search space, read the same way by every surrogate.

An idea's point is the constants of the champion it was compared with, with its own changes
applied. Its value at a tier is its estimated improvement over the first champion there: the
level of that champion (Desk.levels: the gains of the ideas stacked into it) plus the idea's
mean paired gain over it, negated so that lower is better (as Optuna minimises). Putting every
champion's findings on one scale is what lets a late champion's near-misses rank above an early
champion's wins.
"""

from __future__ import annotations

from agents.brain import Desk, Finding
from agents.recipe_constants import Scalar, constants, parse_value
from agents.search_space import SearchSpace

FINAL = frozenset({"REJECT", "REFUSED", "STALE", "HELD"})  # the idea is out of play


def out_of_play(finding: Finding, top_tier: int) -> bool:
    """Nothing more will be learned about it: decided for good, or stacked."""
    top = finding.verdict == "PROMOTE" and finding.tier >= top_tier
    return finding.stacked or top or finding.verdict in FINAL


def point_of(
    finding: Finding, version: int, desk: Desk, space: SearchSpace
) -> dict[str, Scalar] | None:
    """The idea's values per dimension as tested on champion `version` (None: that champion's
    recipe is unknown here). Dimensions neither has are left out."""
    source = desk.sources.get(version)
    if source is None:
        return None
    values = space.values_of(constants(source))
    for change in finding.changes:
        new = parse_value(change.new)
        if isinstance(new, tuple):
            values.update({f"{change.name}[{i}]": x for i, x in enumerate(new)})
        else:
            values[change.name] = new
    return values


def tier_values(finding: Finding, desk: Desk) -> dict[int, tuple[int, float]]:
    """tier -> (champion version, value) for each tier the rules decided the idea at (PROMOTE
    or REJECT with a gain); the latest champion's where it was decided on several."""
    by_tier: dict[int, tuple[int, float]] = {}
    for gain in sorted(finding.gains, key=lambda g: g.version):
        level = desk.levels.get(gain.version, {}).get(gain.tier, 0.0)
        by_tier[gain.tier] = (gain.version, -(level + gain.delta))
    return by_tier
