"""The search space a recipe declares: which constants may move, how far, and on what scale.

Every brain that moves constants reads the space from the recipe itself
(recipes/constants.py finds the constants with `ast`: UPPER_CASE names anywhere at module
level, any other name in the module's opening block, so a nanoGPT-style `learning_rate = 6e-4`
counts). A constant may declare its range or choices at the end of its comment, after `search:`:

    LEARNING_RATE = 3e-3  # peak learning rate; search: 3e-4..3e-2    (log: both ends > 0)
    BETA2 = 0.95          # second moment decay; search: 0.9..0.999 linear
    MLP_RATIO = 4         # hidden width / width; search: 1..8          (an int: whole numbers)
    BATCH_SIZE = 16       # sequences per step; search: 4..64 pow2     (powers of two only)
    ACTIVATION = "gelu"   # search: gelu | relu | silu                 (a categorical)
    HEAD_DIM = 32         # search: 16 | 32 | 64
    SEED_OFFSET = 7       # search: fixed                              (never moved)
    dropout = 0.0         # search: 0..0.5 linear                      (any case, at the top)

A range is `LOW..HIGH`, then optionally `log` or `linear` (default: log when both ends are
positive) and, for integers, `pow2`. Choices are separated by `|`; each is read as a Python
literal where it is one (numbers, True, quoted strings) and as a bare name otherwise. Without a
declaration a brain derives a range around the current value: a decade either side for positive
floats, x/4..x·4 for integers, x/8..x·8 for powers of two, both values for flags; a fraction
(0 < x < 1 in a constant named like FRACTION, DROPOUT, BETA, MOMENTUM in any case, or an
element of a tuple) stays inside (0, 1). Strings, zero and negative numbers move only when
declared. Constants the project holds fixed (recipes/fixed.py: `target.fixed`, the run
command's options) are left out of the space, as `search: fixed` ones are.
"""

from __future__ import annotations

import ast
import enum
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from recipes.constants import Constant, Scalar, Value, constants, scalar_at
from recipes.fixed import FIXED_DECLARATIONS, is_fixed

FRACTION_WORDS = ("FRACTION", "DROPOUT", "BETA", "MOMENTUM")  # matched in the upper-cased name
FRACTION_BOUNDS = (0.001, 0.999)  # how close to 0 or 1 the heuristic's logit steps may go
MAX_DECLARATION = 4096  # characters: a declaration is read on every proposal
MAX_MAGNITUDE = 1e100  # beyond this a range's width or a log overflows: not a range to search
Choice: TypeAlias = int | float | bool | str


class SpaceError(ValueError):
    """A declaration the brain cannot use; names the constant and what is wrong."""


class Kind(enum.StrEnum):
    FLAG = "flag"  # bool: flipped
    CHOICE = "choice"  # one of `choices`
    FRACTION = "fraction"  # in (0, 1): the heuristic steps it on the logit
    POW2 = "pow2"  # a power-of-two int
    INT = "int"  # an int
    SCALE = "scale"  # a float


@dataclass(frozen=True, slots=True)
class Dimension:
    """One scalar a brain may move: a constant, or one element of a tuple constant."""

    constant: str
    index: int | None  # the element of a tuple constant; None for a scalar constant
    kind: Kind
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    choices: tuple[Choice, ...] = ()
    declared: bool = False  # from a `search:` declaration, not derived

    @property
    def name(self) -> str:
        return self.constant if self.index is None else f"{self.constant}[{self.index}]"

    def contains(self, x: Scalar) -> bool:
        if self.kind in (Kind.FLAG, Kind.CHOICE):
            return any(_same(x, c) for c in self.choices)
        if isinstance(x, bool | str):
            return False
        if self.kind is Kind.POW2 and not _is_pow2(x):
            return False
        return self.low <= x <= self.high

    def clip(self, x: float) -> float:
        return min(max(x, self.low), self.high)

    def unit(self, x: Scalar) -> list[float]:
        """`x` as coordinates in [0, 1] for a surrogate model: one per option of a choice of
        more than two (one-hot), one otherwise (log-scaled where the range is)."""
        if self.kind in (Kind.FLAG, Kind.CHOICE):
            hits = [1.0 if _same(x, c) else 0.0 for c in self.choices]
            return hits[1:] if len(hits) == 2 else hits
        if isinstance(x, bool | str):
            raise TypeError(f"{self.name} is numeric, got {x!r}")
        v = self.clip(float(x))
        if self.log:
            return [math.log(v / self.low) / math.log(self.high / self.low)]
        return [(v - self.low) / (self.high - self.low)]


@dataclass(frozen=True, slots=True)
class SearchSpace:
    dimensions: tuple[Dimension, ...]

    def by_name(self) -> dict[str, Dimension]:
        return {d.name: d for d in self.dimensions}

    def values_of(self, source_constants: Mapping[str, Constant]) -> dict[str, Scalar]:
        """Each dimension's current value in a recipe (dimensions it lacks are left out)."""
        found: dict[str, Scalar] = {}
        for d in self.dimensions:
            constant = source_constants.get(d.constant)
            if constant is None:
                continue
            value = constant.value
            if d.index is not None:
                if not isinstance(value, tuple) or d.index >= len(value):
                    continue
            elif isinstance(value, tuple):
                continue
            found[d.name] = scalar_at(value, d.index)
        return found

    def unit(self, values: Mapping[str, Scalar]) -> list[float]:
        """A full point as surrogate coordinates; a dimension without a value sits mid-range."""
        out: list[float] = []
        for d in self.dimensions:
            x = values.get(d.name)
            out += d.unit(x) if x is not None and _fits_type(d, x) else [0.5] * _width(d)
        return out

    def assemble(
        self, source_constants: Mapping[str, Constant], values: Mapping[str, Scalar]
    ) -> dict[str, Value]:
        """Constant name -> new value for `recipe_constants.edit`, tuples reassembled."""
        out: dict[str, Value] = {}
        for d in self.dimensions:
            if d.name not in values:
                continue
            if d.index is None:
                out[d.constant] = values[d.name]
                continue
            base = out.get(d.constant, source_constants[d.constant].value)
            assert isinstance(base, tuple)
            x = values[d.name]
            assert isinstance(x, int | float) and not isinstance(x, bool)
            out[d.constant] = (*base[: d.index], x, *base[d.index + 1 :])
        return out


def space_of(source: str, fixed: Collection[str] = ()) -> SearchSpace:
    """The recipe's search space, from its declarations and its current values, without the
    constants whose names match `fixed` (names or globs, recipes/fixed.py); SpaceError
    names every declaration it cannot use, not just the first."""
    dimensions: list[Dimension] = []
    problems: list[str] = []
    for name, constant in constants(source).items():
        if is_fixed(name, fixed):
            continue  # its declaration is not read either: the project's word overrides it
        try:
            dimensions += _dimensions(name, constant)
        except SpaceError as exc:
            problems.append(str(exc))
    if problems:
        raise SpaceError("; ".join(problems))
    return SearchSpace(tuple(dimensions))


def _dimensions(name: str, constant: Constant) -> list[Dimension]:
    value, declaration = constant.value, constant.declaration
    if isinstance(value, tuple):
        if declaration:
            raise SpaceError(
                f"{name}: a tuple constant cannot declare a search range; its elements move "
                "within ranges derived from their values"
            )
        found = (_derived(name, i, x) for i, x in enumerate(value))
        return [d for d in found if d is not None]
    if declaration:
        declared = _declared(name, value, declaration)
        return [] if declared is None else [declared]
    derived = _derived(name, None, value)
    return [] if derived is None else [derived]


def _declared(name: str, value: Scalar, text: str) -> Dimension | None:
    text = text.strip()
    if len(text) > MAX_DECLARATION:
        raise SpaceError(f"{name}: its `search:` declaration is over {MAX_DECLARATION} characters")
    if text in FIXED_DECLARATIONS:
        return None
    if "|" in text:
        choices = tuple(_choice(name, part.strip()) for part in text.split("|"))
        if any(not c and c != 0 for c in choices if not isinstance(c, bool)):
            raise SpaceError(f"{name}: empty choice in `search: {_short(text)}`")
        if len(set(map(repr, choices))) != len(choices):
            raise SpaceError(f"{name}: a choice is listed twice in `search: {_short(text)}`")
        if not any(_same(value, c) for c in choices):
            raise SpaceError(f"{name}: its value {value!r} is not among `search: {_short(text)}`")
        return Dimension(name, None, Kind.CHOICE, choices=choices, declared=True)
    # `1 .. 2` reads as `1..2` (no pattern: a backtracking one took seconds on long input)
    ends, *words = " ".join(text.split()).replace(" ..", "..").replace(".. ", "..").split()
    parts = ends.split("..")
    if len(parts) != 2:
        raise SpaceError(
            f"{name}: cannot read `search: {_short(text)}`; write LOW..HIGH [log|linear] "
            "[pow2], a | b | c, or fixed"
        )
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        why = f"{name}: `search: {_short(text)}` needs numbers on both sides of .."
        raise SpaceError(why) from None
    flags = set(words)
    unknown = flags - {"log", "linear", "pow2"}
    if unknown:
        raise SpaceError(f"{name}: unknown word {sorted(unknown)[0]!r} in `search: {_short(text)}`")
    if not (abs(low) <= MAX_MAGNITUDE and abs(high) <= MAX_MAGNITUDE and low < high):
        raise SpaceError(
            f"{name}: `search: {_short(text)}` needs LOW < HIGH, both finite and within "
            f"±{MAX_MAGNITUDE:g}"
        )
    if isinstance(value, bool | str):
        raise SpaceError(f"{name} = {value!r} takes choices (a | b), not a range")
    if not low <= value <= high:
        raise SpaceError(f"{name}: its value {value!r} is outside `search: {_short(text)}`")
    log = "log" in flags or ("linear" not in flags and low > 0)
    if log and low <= 0:
        raise SpaceError(f"{name}: a log range needs LOW > 0 in `search: {_short(text)}`")
    if isinstance(value, int):
        if low != int(low) or high != int(high):
            raise SpaceError(f"{name} is an integer: `search: {_short(text)}` needs whole ends")
        if "pow2" in flags:
            if not (_is_pow2(low) and _is_pow2(high) and _is_pow2(value)):
                raise SpaceError(f"{name}: pow2 needs powers of two, got `search: {_short(text)}`")
            return Dimension(name, None, Kind.POW2, low, high, True, declared=True)
        return Dimension(name, None, Kind.INT, low, high, log, declared=True)
    if "pow2" in flags:
        raise SpaceError(f"{name}: pow2 is for integers, {name} = {value!r}")
    kind = Kind.FRACTION if _fraction(name, None, value) and low >= 0 and high <= 1 else Kind.SCALE
    return Dimension(name, None, kind, low, high, log, declared=True)


def _round(x: float) -> float:
    return float(f"{x:.6g}")  # 0.4999999999999996 -> 0.5: ranges are read by people too


def _derived(name: str, index: int | None, x: Scalar) -> Dimension | None:
    if isinstance(x, bool):
        return Dimension(name, index, Kind.FLAG, choices=(False, True))
    if isinstance(x, str) or not 1e-100 <= x <= MAX_MAGNITUDE:
        return None  # no scale through zero, no options to guess, no range past overflow
    if isinstance(x, int):
        if _is_pow2(x):
            return Dimension(name, index, Kind.POW2, max(1, x / 8), x * 8, True)
        return Dimension(name, index, Kind.INT, max(1, x // 4), x * 4, True)
    if _fraction(name, index, x):
        if x <= 0.5:  # a decade either side, short of the middle of what is left to 1
            low, high, log = x / 10, min(x * 10, (1 + x) / 2), True
        else:  # near 1: a decade either side of the distance to 1, on a linear scale
            rest = 1 - x
            low, high, log = max(1 - rest * 10, x / 2), 1 - rest / 10, False
    else:
        low, high, log = x / 10, x * 10, True
    low, high = _round(low), _round(high)
    if not low < x < high:  # rounding to 6 digits swallowed a value this close to 0 or 1
        return None
    kind = Kind.FRACTION if _fraction(name, index, x) else Kind.SCALE
    return Dimension(name, index, kind, low, high, log)


def _fraction(name: str, index: int | None, x: float) -> bool:
    upper = name.upper()  # `dropout`, `beta2` as a nanoGPT train.py writes them
    return 0 < x < 1 and (index is not None or any(word in upper for word in FRACTION_WORDS))


def _choice(name: str, text: str) -> Choice:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text  # a bare name
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        if not abs(value) <= MAX_MAGNITUDE:
            raise SpaceError(f"{name}: the choice {_short(text)} is beyond ±{MAX_MAGNITUDE:g}")
        return value
    return text


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _same(a: object, b: object) -> bool:
    """Equal and of the same type (True is not 1; 1 is not 1.0)."""
    return type(a) is type(b) and a == b


def _is_pow2(x: float) -> bool:
    return x >= 1 and x == int(x) and int(x) & (int(x) - 1) == 0


def _width(d: Dimension) -> int:
    if d.kind in (Kind.FLAG, Kind.CHOICE):
        return 1 if len(d.choices) == 2 else len(d.choices)
    return 1


def _fits_type(d: Dimension, x: Scalar) -> bool:
    if d.kind in (Kind.FLAG, Kind.CHOICE):
        return True
    return isinstance(x, int | float) and not isinstance(x, bool)


# --- moving along a dimension (the heuristic brain's steps) ---------------------------------
# A step is a distance on the dimension's natural scale: log for positive numbers, logit for
# fractions (so they stay in (0, 1)), whole doublings for powers of two, one option for a
# choice. Results are rounded to readable values and kept inside the dimension's range.


def step(d: Dimension, x: Scalar, distance: float) -> Scalar | None:
    """x moved `distance` along the dimension's scale; None if it cannot move that way."""
    up = distance > 0
    if d.kind is Kind.FLAG:
        return not x
    if d.kind is Kind.CHOICE:
        here = next((i for i, c in enumerate(d.choices) if _same(x, c)), None)
        if here is None:
            return None
        there = here + (1 if up else -1) * max(1, round(abs(distance) / math.log(2)))
        return d.choices[there] if 0 <= there < len(d.choices) else None
    if isinstance(x, bool | str):
        return None
    new: float
    if d.kind is Kind.FRACTION and 0 < x < 1:
        p = 1 / (1 + math.exp(-(math.log(x / (1 - x)) + distance)))
        new = _round_fraction(min(max(p, FRACTION_BOUNDS[0]), FRACTION_BOUNDS[1]))
    elif d.kind is Kind.POW2:
        new = 2 ** round(math.log2(x) + distance / math.log(2))
        new = new if new != x else (x * 2 if up else x / 2)
    elif d.kind is Kind.INT:
        new = round(x * math.exp(distance)) if x > 0 else x + (1 if up else -1)
        new = new if new != x else x + (1 if up else -1)
    elif x > 0:
        new = float(f"{x * math.exp(distance):.3g}")
    else:  # a declared linear range through zero: a step is an eighth of it per unit
        new = float(f"{x + distance * (d.high - d.low) / 8:.3g}")
    new = d.clip(new)
    if d.kind in (Kind.POW2, Kind.INT):
        if new != int(new) or (d.kind is Kind.POW2 and not _is_pow2(new)):
            return None
        return None if int(new) == x else int(new)
    return None if new == x else new


def distance(d: Dimension, a: Scalar, b: Scalar) -> float | None:
    """How far a -> b moved on the scale `step` takes; None where undefined (flags)."""
    if d.kind is Kind.FLAG:
        return None
    if d.kind is Kind.CHOICE:
        where = [next((i for i, c in enumerate(d.choices) if _same(v, c)), None) for v in (a, b)]
        if where[0] is None or where[1] is None:
            return None
        return (where[1] - where[0]) * math.log(2)
    if isinstance(a, bool | str) or isinstance(b, bool | str):
        return None
    if d.kind is Kind.FRACTION:
        if not (0 < a < 1 and 0 < b < 1):
            return None
        return math.log(b / (1 - b)) - math.log(a / (1 - a))
    if a <= 0 or b <= 0:
        return None
    return math.log(b / a)


def _round_fraction(p: float) -> float:
    if p <= 0.5:
        return float(f"{p:.2g}")
    rest = float(f"{1 - p:.2g}")  # round on the 1 - p scale: 0.9744 -> 0.974, not 0.97
    return round(1 - rest, 1 - math.floor(math.log10(rest)))
