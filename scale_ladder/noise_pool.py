"""A tier's pooled noise on each champion, kept up to date one idea at a time, and over the
champions before the current one (the racing prior: rules.py).

Judging an idea needs σ_d pooled over every *other* idea run at its tier on its champion
(rules.py). Recomputing that pool from every idea's runs at each judgement cost O(ideas) per
verdict, so a champion that lived through n ideas cost O(n²): 17 of 25 seconds of a 30k-event
replay. A pool keeps each idea's part (its Noise: squared deviations, degrees of freedom,
pairs); a new run changes one idea's part, a new baseline run changes them all (the pairs and
the rounding scale are the baseline's), and leaving one idea out is a subtraction.

An idea's part counts at most CAP times the median idea's variance per pair. The pool assumes
every idea's paired gains spread alike, and on a real target they do not: a recipe that
diverges on one seed (its two paired gains 1.8 bpb apart) spreads a hundred times wider than
the rest (0.002-0.06 bpb on the other ideas there). Pooled as it was, one such idea put σ_d at
0.33-0.73 bpb on bytelm's tier 0, where the baseline's spread said 0.02: gains of 0.2-0.27
bpb, as large as the best recipe Optuna found, were then inside the noise gate (one rejected at
the seed cap, two still asking for seeds), and the swarm stacked nothing in 15 minutes
(docs/benchmarks.md, "The real bytelm target"). A cap of 10 medians clips an honest idea's part
rarely (a one-pair variance passes 4.5 times its σ² about 3% of the time) and by little, while
an outlier counts as ten typical ideas, not as the whole pool. Each verdict is still on the
pooled σ_d of the other ideas, and each tier above re-tests on fresh seeds.

The totals are exact fractions, not floats, and the parts are kept sorted by their spread: a
pool without one idea is the total less its part and less what the few parts above the cap
have beyond it (exact too: a float sum of parts near 1e308 overflowed), the same number
whatever order the parts came in, so a replay, a snapshot and a live ladder pool
bit-identically, and a verdict costs O(log n + outliers), not O(n).

The median can be steered: a researcher sending more near no-op ideas (tiny, steady paired
gains) than the others send ideas becomes the median and clips every honest part towards 0
(a red team, 2026-11-28: docs/reliability.md, open). A reference no idea can shape, the
baseline's own spread, bounds outliers loosely where pairing removes most of the noise.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from scale_ladder import baselines
from scale_ladder.rules import Evidence, Noise, noise, paired_gains

if TYPE_CHECKING:
    from scale_ladder.ladder import Ladder

CAP = 10.0  # an idea's variance per pair counts at most this many times the median idea's


@dataclass(slots=True)
class NoisePool:
    parts: dict[str, Noise] = field(default_factory=dict)
    squares: Fraction = Fraction(0)
    dof: int = 0
    pairs: int = 0
    # (variance per pair, idea) of every part, sorted: the median, and the parts above the cap
    spreads: list[tuple[float, str]] = field(default_factory=list)
    stale: set[str] = field(default_factory=set)  # ideas whose part must be computed again

    def put(self, idea_id: str, part: Noise | None) -> None:
        """Set an idea's part (None: it has none, it is not run here)."""
        old = self.parts.pop(idea_id, None)
        if old is not None:
            self.squares -= Fraction(old.squares)
            self.dof -= old.dof
            self.pairs -= old.pairs
            del self.spreads[bisect.bisect_left(self.spreads, _spread(idea_id, old))]
        if part is not None and part.dof:
            self.parts[idea_id] = part
            self.squares += Fraction(part.squares)
            self.dof += part.dof
            self.pairs += part.pairs
            bisect.insort(self.spreads, _spread(idea_id, part))

    def without(self, idea_id: str = "") -> Noise:
        """The pooled noise of every idea but `idea_id`, each part capped (module docstring):
        the exact total, less what the few parts above the cap have beyond it."""
        part = self.parts.get(idea_id)
        squares, dof, pairs, skip = self.squares, self.dof, self.pairs, -1
        if part is not None:
            squares -= Fraction(part.squares)
            dof, pairs = dof - part.dof, pairs - part.pairs
            skip = bisect.bisect_left(self.spreads, _spread(idea_id, part))
        n = len(self.spreads) - (skip >= 0)
        if n == 0:
            return Noise()

        def index(r: int) -> int:  # the r-th part of those pooled, in self.spreads
            return r if skip < 0 or r < skip else r + 1

        cap = CAP * (self.spreads[index((n - 1) // 2)][0] + self.spreads[index(n // 2)][0]) / 2
        r = n - 1
        while r >= 0 and self.spreads[index(r)][0] > cap:
            # What a part above the cap has beyond it, exactly: a float sum of parts near
            # 1e308 overflows (a red team crashed the ladder so, at every restart).
            over = self.parts[self.spreads[index(r)][1]]
            squares -= Fraction(over.squares) - Fraction(cap) * over.dof
            r -= 1
        try:
            return Noise(float(squares), dof, pairs)
        except OverflowError:  # metrics of 1e200 (a command prints any number): no measure
            return Noise(math.inf, dof, pairs)


def _spread(idea_id: str, part: Noise) -> tuple[float, str]:
    """A part's place in NoisePool.spreads: one computation, so a removal finds what was put."""
    return part.squares / part.dof, idea_id


@dataclass
class NoisePools:
    """Every tier's pool on every champion, and each tier's noise on the champions before."""

    # (champion, tier) -> the noise of the ideas run there, kept up to date by touch (a cache),
    # and tier -> (current champion, noise pooled over every earlier one)
    pools: dict[tuple[int, int], NoisePool] = field(default_factory=dict)
    earlier: dict[int, tuple[int, Noise]] = field(default_factory=dict)

    def touch(self, idea_id: str, version: int, tier: int, current: int) -> None:
        """A run of `idea_id` (a baseline's: "") at (version, tier) came in or now counts: its
        part of the pooled noise there is out of date (every idea's, for a baseline run)."""
        pool = self.pools.get((version, tier))
        if pool is not None and idea_id:
            pool.stale.add(idea_id)
        elif pool is not None:
            del self.pools[(version, tier)]
        if version < current:
            self.earlier.pop(tier, None)

    def clear(self) -> None:
        self.pools.clear()
        self.earlier.clear()


def noise_at(ladder: Ladder, version: int, tier: int, exclude: str = "") -> Noise:
    """The paired-difference noise of the ideas run at (version, tier), but `exclude`."""
    key, pools, runs = (version, tier), ladder.noise.pools, ladder.runs
    pool = pools.get(key)
    if pool is None:
        pool = pools[key] = NoisePool(stale=set(runs.tested_at.get(key, ())))
    if pool.stale:
        base = baselines.metrics(ladder, version, tier)
        scale = max((abs(v) for v in base.values()), default=0.0)
        tested = runs.tested_at.get(key, {})
        for idea_id in pool.stale:
            mine = {
                s: r.metric
                for s, r in runs.results.get((idea_id, version, tier), {}).items()
                if r.metric is not None and baselines.on_corpus(ladder, r)
            }
            gains = paired_gains(Evidence(mine, base, None, (), ladder.lower_is_better))
            pool.put(idea_id, noise([gains], scale) if idea_id in tested else None)
        pool.stale.clear()
    return pool.without(exclude)


def sigma_for(ladder: Ladder, version: int, tier: int, idea_id: str = "") -> float | None:
    """σ_d at a tier for judging `idea_id`: pooled over the other ideas' pairs on this
    champion when there are enough (its own would pool its luck back in: rules.py), else
    over every earlier champion's (a tier's seed noise outlives its champion); None: no
    estimate, so no racing yet."""
    here = noise_at(ladder, version, tier, exclude=idea_id).sigma
    return here if here is not None else earlier_noise(ladder, tier).sigma


def earlier_noise(ladder: Ladder, tier: int) -> Noise:
    """The noise at `tier` pooled over every champion before the current one: the racing
    prior. From every result folded so far, whenever it came (a result of the old champion
    can arrive after the change), so a replay and a snapshot pool the same."""
    current, earlier = ladder.current, ladder.noise.earlier
    cached = earlier.get(tier)
    if cached is not None and cached[0] == current:
        return cached[1]
    total = Noise()
    for version in sorted(v for v in ladder.lineage.champions if v < current):
        total += noise_at(ladder, version, tier)
    earlier[tier] = (current, total)
    return total
