"""A tier's pooled noise on one champion, kept up to date one idea at a time.

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

from scale_ladder.rules import Noise


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
