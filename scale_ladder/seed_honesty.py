"""Seed honesty: whether a spread across seeds is a noise estimate at all.

A zero spread is no noise estimate: a σ_d of 0, missing, NaN, or at the level of floating-point
rounding of the metrics (`measured`) never passes the noise gate (rules.py), so a gain on paired
differences that are equal on every seed is inconclusive (RETEST up to `max_seeds`, then
rejected), though one below the minimum is still rejected at once (a change that does nothing,
on a trainer that is deterministic per seed, pairs to exactly 0). And a champion whose metric is
exactly equal on two or more seeds at a tier (`seed_ignored`) ignores its seed: every paired
comparison there is one number repeated, so `decide` answers HELD (`SEED_IGNORED`) instead of a
verdict, whatever the idea's runs say; the ladder holds the tier until a seed gives a different
metric (baselines.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

# A σ_d (or a spread across seeds) this small next to the metrics is rounding or float jitter
# (float32 sums, GPU kernels: ~1e-7 relative), not seed noise, which in training is orders of
# magnitude larger; a change that shifts the reported metric by a constant pairs to the same
# gain on every seed, up to such jitter (found by a red team at 1e-9 and 1e-7).
ROUNDING = 1e-6
SEED_IGNORED = "seed_ignored"  # the rule of a tier held because its baseline ignores the seed
# In the rule of a verdict whose paired gains were equal on every seed (the exit summary finds
# such ideas by it)
EQUAL_GAINS = "the paired gains are equal on every seed"


def measured(sigma: float | None, scale: float = 0.0) -> bool:
    """Whether σ_d is a noise estimate a gate may use: finite and above the rounding of metrics
    of size `scale`. A σ_d of 0 would make the gate 0, passed by any gain at all."""
    return sigma is not None and math.isfinite(sigma) and sigma > ROUNDING * abs(scale)


def seed_ignored(metrics: Mapping[int, float]) -> list[int]:
    """The seeds, sorted, when the metrics on two or more seeds are all equal up to ROUNDING:
    a run that ignores its seed. Otherwise []."""
    values = list(metrics.values())
    if len(values) < 2:
        return []
    spread, scale = max(values) - min(values), max(abs(v) for v in values)
    return sorted(metrics) if spread <= ROUNDING * scale else []


def seed_ignored_reason(seeds: Sequence[int], metric: float, tier: int | None = None) -> str:
    """What a tier held for `seed_ignored` tells the user (the rule of its Decision)."""
    at = "" if tier is None else f" at tier {tier}"
    return (
        f"{SEED_IGNORED}: the champion's metric is identical ({metric!r}) on seeds "
        f"{list(seeds)}{at}: the run ignores its seed; pass SWARM_SEED / {{seed}} to the "
        "training command (and start afresh: the runs so far all used one seed). Ideas at this "
        "tier wait undecided until a seed gives another metric. If the metric does not depend "
        "on the seed by design, declare the tier `deterministic = true` in the ladder file."
    )
