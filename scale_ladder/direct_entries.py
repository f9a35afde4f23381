"""Direct entries: a share of fresh ideas enters a tier above 0, where the tier below misleads.

A proxy tier can prefer other recipes than the tier above it. Then every idea must win on the
proxy before the tier above sees it, and the champion sticks where the proxy is good and the
target is not: on the synthetic problem whose tier 0 ranks recipes with ρ 0.63 against the top,
the swarm ended at 6x the regret of TPE + Hyperband, whose top bracket starts recipes at the top
rung (docs/benchmarks.md). A fixed share of ideas entering high halved that regret and multiplied
it by 7 where the proxy is good: the share must follow the proxy.

What the ladder measures of a proxy is the precision of its promotions: of the ideas tier k-1
promoted by its rules, the share that pass tier k (spot_checks.Checks, counted there). Measured
at ρ 0.3, tier 1's promotions passed the top 7-27% of the time; at ρ 0.9, 57-100%. So, once
MIN_DECIDED such promotions have a verdict at tier k, a fresh idea enters at tier k with

    share = direct_entries x max(0, 1 - precision / MISLEADS),

`direct_entries` being tier k's setting (the most, 0 = off), precision smoothed by one pass and
one fail. A proxy whose promotions pass the next tier at least half the time sends nothing past
it. The highest tier is drawn first; the draw is keyed by the swarm's seed secret, the idea and
its champion, so no researcher can choose where its idea enters, and a restart draws the same.

What stays guaranteed: an idea skips no gate for free. At its entry tier its noise gate is as
strict as the noisy gates it skipped and its own together: a change that does nothing passes
them all by luck with probability Φ(-z_0)·…·Φ(-z_k), and the entry gate's z is the one with
that probability (2σ at three tiers: 4.2σ at the top). A win on one seed is confirmed on a
second, as at tier 0, where an idea that pins its own seed is caught (rules.PromotionRule). Tiers
above the entry tier judge it as any other idea, on fresh seeds. A direct entry is neither
spot-checked nor given a second look (it skipped gates already), and its verdicts do not count
in the precision of the tier below (it never passed there).
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist
from typing import TYPE_CHECKING

from scale_ladder.rules import PromotionRule
from scale_ladder.spot_checks import Checks, draw

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scale_ladder.ladder import Ladder
    from scale_ladder.tiers import Tier

MIN_DECIDED = 4  # promotions of the tier below with a verdict here before their precision counts
MISLEADS = 0.5  # a tier whose promotions pass the next one less often than this misleads
DIRECT_ENTRY = "direct entry"  # how the rule of a direct entry's verdicts begins


def share(checks: Checks, most: float) -> float:
    """The share of fresh ideas to send straight to a tier, from how the promotions of the tier
    below fared there (`checks`, counted at the tier below)."""
    if most <= 0 or checks.promoted < MIN_DECIDED:
        return 0.0
    precision = (checks.promoted_passed + 1) / (checks.promoted + 2)
    return most * max(0.0, 1.0 - precision / MISLEADS)


def entry_tier(ladder: Ladder, idea_id: str, version: int) -> int:
    """Where a fresh idea on `version` starts: the highest tier whose draw falls below its
    share, else 0; in a replay of a record, where the record has it, if that tier still takes
    direct entries (the share at admission follows verdicts whose timing a replay cannot
    reproduce, which would turn the record's runs into runs nobody made)."""
    recorded = ladder.recorded_entries.get(idea_id)
    if recorded is not None:
        return recorded if ladder.tiers[recorded].rule.direct_entries > 0 else 0
    for tier in range(ladder.top, 0, -1):
        fraction = share(ladder.promotion.checks[tier - 1], ladder.tiers[tier].rule.direct_entries)
        if fraction > 0 and draw(ladder.seed_secret, f"entry/{idea_id}", version, tier) < fraction:
            return tier
    return 0


def entry_rule(tiers: Sequence[Tier], entry: int, since: int = 0) -> PromotionRule:
    """The rule an idea that entered at `entry` meets there: its noise gate as strict as the
    noisy gates of tiers `since`..entry together (the module's docstring); `since` is the
    lowest gate it skipped (0 for a direct entry)."""
    rule = tiers[entry].rule
    if rule.deterministic:
        return rule  # decides exactly: nothing skipped below it matters
    chance = math.prod(
        NormalDist().cdf(-t.rule.sigmas)
        for t in tiers[since : entry + 1]
        if t.rule.sigmas > 0 and not t.rule.deterministic
    )
    sigmas = -NormalDist().inv_cdf(chance) if 0 < chance < 0.5 else rule.sigmas
    return replace(rule, sigmas=max(rule.sigmas, sigmas), confirm_wins=True)


def describe(entry: int, sigmas: float) -> str:
    """What a direct entry's verdicts say first, its entry gate being `sigmas` (a terminal
    cuts a long rule short)."""
    skipped = "0" if entry == 1 else f"0-{entry - 1}"
    return f"{DIRECT_ENTRY} at tier {entry} (skipped tiers {skipped}; gate {sigmas:.2f}σ)"
