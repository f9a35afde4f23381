"""What a finding says about a point of the search space, read the same way by every surrogate.

An idea's point is the constants of the champion it was compared with, with its own changes
applied. Its value at a tier is the champion's metric on the tier's first seed (every idea runs
it, so it is one reference for ideas on every champion, like the peers' common seed) minus the
idea's mean paired gain over the champion: the idea's level, estimated from all its paired
seeds, oriented so that lower is better (as Optuna minimises). Putting every champion's findings
on one scale is what lets a late champion's near-misses rank above an early champion's wins.
(Summing the stacked ideas' gains along the lineage instead, an estimate that winners' luck
inflates, did as well or worse in bench.search.)
"""

from __future__ import annotations

from agents.brain import Desk, Finding
from agents.search_space import SearchSpace
from recipes.constants import Scalar, constants, parse_value

FINAL = frozenset({"REJECT", "REFUSED", "STALE", "HELD"})  # the idea is out of play


def out_of_play(finding: Finding, top_tier: int) -> bool:
    """Nothing more will be learned about it: decided for good, or stacked."""
    top = finding.verdict == "PROMOTE" and finding.tier >= top_tier
    return finding.stacked or top or finding.verdict in FINAL


def spot_checked(finding: Finding) -> set[int]:
    """The tiers that rejected the idea and sent it on by a spot check (its latest champion's
    verdict at each tier)."""
    latest = {g.tier: g for g in sorted(finding.gains, key=lambda g: g.version)}
    return {tier for tier, gain in latest.items() if gain.spot_check}


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
        if gain.baseline is None:
            continue  # a verdict without its numbers (an older ledger's): no common reference
        reference = gain.baseline if desk.lower_is_better else -gain.baseline
        by_tier[gain.tier] = (gain.version, reference - gain.delta)
    checked = spot_checked(finding)
    # A spot check sent on an idea its tier rejected: one that then failed above got no further
    # by any gate than that tier. Its values above would rank it with the ideas that passed
    # there (Optuna ranks pruned trials by the step they reached), as one of the best points.
    passed_top = finding.stacked or (finding.verdict == "PROMOTE" and finding.tier >= desk.top_tier)
    while by_tier and not passed_top and max(by_tier) - 1 in checked:
        del by_tier[max(by_tier)]
    return by_tier
