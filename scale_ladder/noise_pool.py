"""A tier's pooled noise on each champion, kept up to date one idea at a time, and over the
champions before the current one (the racing prior: rules.py).

Judging an idea needs σ_d pooled over every *other* idea run at its tier on its champion
(rules.py). Recomputing that pool from every idea's runs at each judgement cost O(ideas) per
verdict, so a champion that lived through n ideas cost O(n²): 17 of 25 seconds of a 30k-event
replay. A pool keeps each idea's part (its Noise: squared deviations, degrees of freedom, pairs)
and their totals; a new run changes one idea's part, a new baseline run changes them all (the
pairs and the rounding scale are the baseline's), and leaving one idea out is a subtraction.

The squares are summed as exact fractions, not floats: a subtraction then gives exactly the sum
of the others, whatever order the parts came in, so a replay, a snapshot and a live ladder pool
bit-identically, and one idea with a huge spread cannot cancel the others' out of a float total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from scale_ladder import baselines
from scale_ladder.rules import Evidence, Noise, noise, paired_gains

if TYPE_CHECKING:
    from scale_ladder.ladder import Ladder


@dataclass(slots=True)
class NoisePool:
    parts: dict[str, Noise] = field(default_factory=dict)
    squares: Fraction = Fraction(0)
    dof: int = 0
    pairs: int = 0
    stale: set[str] = field(default_factory=set)  # ideas whose part must be computed again

    def put(self, idea_id: str, part: Noise | None) -> None:
        """Set an idea's part (None: it has none, it is not run here)."""
        old = self.parts.pop(idea_id, None)
        if old is not None:
            self.squares -= Fraction(old.squares)
            self.dof -= old.dof
            self.pairs -= old.pairs
        if part is not None and part.dof:
            self.parts[idea_id] = part
            self.squares += Fraction(part.squares)
            self.dof += part.dof
            self.pairs += part.pairs

    def without(self, idea_id: str = "") -> Noise:
        """The pooled noise of every idea but `idea_id`."""
        part = self.parts.get(idea_id)
        if part is None:
            return Noise(float(self.squares), self.dof, self.pairs)
        squares = float(self.squares - Fraction(part.squares))
        return Noise(squares, self.dof - part.dof, self.pairs - part.pairs)


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
                if r.metric is not None and ladder.baselines.on_corpus(r)
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
