"""Reading, rewriting and stepping the hyperparameter constants at the top of a recipe file.

A recipe keeps its dials as top-level `UPPER_CASE = <literal>  # what it does` lines (see
training/recipes/bytelm.py). Ideas that only move those dials are the cheapest to propose and the
easiest to read in a trace, so the offline brain edits them here: found with `ast` (so a comment
or a string that looks like an assignment is never touched) and rewritten in place, keeping the
rest of the file byte-identical so the diff an idea carries is exactly the line it changed.
"""

from __future__ import annotations

import ast
import enum
import functools
import math
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

Value: TypeAlias = int | float | bool | tuple[float, ...]

CONSTANT_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Constant:
    name: str
    value: Value
    line: int  # 1-based line of the assignment
    comment: str  # the trailing `# ...` text, without the hash; "" when there is none


@dataclass(frozen=True, slots=True)
class Change:
    name: str
    old: str  # the value as written in the old source
    new: str  # the value as written in the new source


@dataclass(frozen=True, slots=True)
class _Site:
    """Where a constant's value sits: (line, byte column) of its start and end, 1-based lines."""

    constant: Constant
    text: str
    start: tuple[int, int]
    end: tuple[int, int]


def _literal(node: ast.expr) -> Value | None:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, bool | int | float):
        return value
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        return value
    return None


def _segment(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    # Columns from `ast` count UTF-8 bytes, not characters.
    (first, col), (last, end_col) = start, end
    if first == last:
        return lines[first - 1].encode()[col:end_col].decode()
    middle = [line.encode() for line in lines[first : last - 1]]
    parts = [lines[first - 1].encode()[col:], *middle, lines[last - 1].encode()[:end_col]]
    return b"\n".join(parts).decode()


@functools.lru_cache(maxsize=64)  # the brain edits one champion many times per proposal
def _sites(source: str) -> Mapping[str, _Site]:
    lines = source.split("\n")
    found: dict[str, _Site] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value_node = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value_node = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or not CONSTANT_NAME.match(target.id):
            continue
        value = _literal(value_node)
        if value is None or value_node.end_lineno is None or value_node.end_col_offset is None:
            continue
        start = (value_node.lineno, value_node.col_offset)
        end = (value_node.end_lineno, value_node.end_col_offset)
        rest = lines[value_node.end_lineno - 1].encode()[value_node.end_col_offset :]
        tail = rest.decode().strip()
        comment = tail[1:].strip() if tail.startswith("#") else ""
        # A constant assigned twice takes its last value at import, so the last site wins.
        found.pop(target.id, None)
        found[target.id] = _Site(
            constant=Constant(target.id, value, node.lineno, comment),
            text=_segment(lines, start, end),
            start=start,
            end=end,
        )
    return types.MappingProxyType(found)


def constants(source: str) -> dict[str, Constant]:
    """Top-level `UPPER_CASE = literal` constants (numbers, bools, tuples of numbers), in order."""
    return {name: site.constant for name, site in _sites(source).items()}


def _format_float(x: float) -> str:
    if not math.isfinite(x):
        raise ValueError(f"cannot write a non-finite value {x!r} into a recipe")
    text = repr(x)
    exponent = math.floor(math.log10(abs(x))) if x else 0
    if abs(exponent) >= 4:  # 1e-05 -> 1e-5: shorter, and how people write learning rates
        for digits in range(17):
            sci = f"{x:.{digits}e}"
            if float(sci) == x:
                mantissa, exp = sci.split("e")
                short = f"{mantissa}e{int(exp)}"
                return short if len(short) < len(text) else text
    return text


def format_value(value: Value) -> str:
    """Python source for a value: compact, and `ast.literal_eval` gives the same value back."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_float(value)
    if isinstance(value, tuple):
        items = [format_value(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    raise TypeError(f"unsupported constant value {value!r}")


@functools.lru_cache(maxsize=16384)
def parse_value(text: str) -> Value:
    """The value a `Change.old` / `Change.new` text stands for. Cached: every proposal re-reads
    the changes of every finding, and values are immutable."""
    value = _literal(ast.parse(text, mode="eval").body)
    if value is None:
        raise ValueError(f"not a constant value: {text!r}")
    return value


def with_values(source: str, values: Mapping[str, Value]) -> str:
    """The source with the named constants set to new values; every other byte unchanged."""
    return edit(source, values)[0]


def edit(source: str, values: Mapping[str, Value]) -> tuple[str, tuple[Change, ...]]:
    """`with_values`, and the same changes `changes_between` would find, without a re-parse."""
    sites = _sites(source)
    unknown = [name for name in values if name not in sites]
    if unknown:
        raise KeyError(f"no constant named {', '.join(unknown)} in the recipe")
    lines = source.split("\n")
    # Edit from the bottom up so earlier offsets stay valid (two constants may share a line).
    for name in sorted(values, key=lambda n: sites[n].start, reverse=True):
        site = sites[name]
        (first, col), (last, end_col) = site.start, site.end
        head = lines[first - 1].encode()[:col]
        tail = lines[last - 1].encode()[end_col:]
        edited = (head + format_value(values[name]).encode() + tail).decode()
        lines[first - 1 : last] = [edited]
    changes = tuple(
        Change(name, sites[name].text, format_value(values[name]))
        for name in sorted(values, key=lambda n: sites[n].start)
        if not same_value(sites[name].constant.value, values[name])
    )
    return "\n".join(lines), changes


def changes_between(old_source: str, new_source: str) -> tuple[Change, ...]:
    """Constants present in both sources whose values differ, in the old source's order."""
    old, new = _sites(old_source), _sites(new_source)
    return tuple(
        Change(name, site.text, new[name].text)
        for name, site in old.items()
        if name in new and not same_value(site.constant.value, new[name].constant.value)
    )


def same_value(a: Value, b: Value) -> bool:
    """Equal as written canonically, so True and 1 (or 1 and 1.0) count as different."""
    return format_value(a) == format_value(b)


# --- the scale each constant moves on -------------------------------------------------------
# A search step is a distance on the constant's natural scale: log for positive numbers, logit
# for fractions (so they stay in (0, 1)), whole doublings for powers of two, one option for a
# categorical. Rules for particular names keep proposals inside what the recipe can run.

Scalar: TypeAlias = int | float | bool
CHOICES: Mapping[str, tuple[int, ...]] = {"HEAD_DIM": (16, 32, 64)}  # widths are multiples of 64
LIMITS: Mapping[str, tuple[float, float]] = {"BATCH_SIZE": (4, 64)}
FRACTION_WORDS = ("FRACTION", "DROPOUT", "BETA", "MOMENTUM")
FRACTION_RANGE = (0.001, 0.999)


class Kind(enum.StrEnum):
    FLAG = "flag"  # bool: flipped
    CHOICE = "choice"  # one of CHOICES[name]: the neighbouring option
    FRACTION = "fraction"  # in (0, 1): steps on the logit
    POW2 = "pow2"  # power-of-two int: x2 or /2
    INT = "int"  # positive int: log steps, rounded, at least 1
    SCALE = "scale"  # nonzero float: log steps


def kind_of(name: str, x: Scalar, in_tuple: bool = False) -> Kind | None:
    """How a constant (or one element of a tuple constant) moves; None: leave it alone."""
    if isinstance(x, bool):
        return Kind.FLAG
    if name in CHOICES and not in_tuple:
        return Kind.CHOICE
    if x == 0 or (isinstance(x, int) and x < 0):
        return None  # no log scale through zero
    if isinstance(x, int):
        return Kind.POW2 if x & (x - 1) == 0 else Kind.INT
    if 0 < x < 1 and (in_tuple or any(word in name for word in FRACTION_WORDS)):
        return Kind.FRACTION
    return Kind.SCALE


def _round_fraction(p: float) -> float:
    if p <= 0.5:
        return float(f"{p:.2g}")
    rest = float(f"{1 - p:.2g}")  # round on the 1 - p scale: 0.9744 -> 0.974, not 0.97
    return round(1 - rest, 1 - math.floor(math.log10(rest)))


def step(name: str, kind: Kind, x: Scalar, distance: float) -> Scalar | None:
    """x moved `distance` along its kind's scale, rounded to a readable value; None if it can't."""
    up = distance > 0
    new: float
    if kind is Kind.FLAG:
        return not x
    if kind is Kind.CHOICE:
        options = CHOICES[name]
        here = min(range(len(options)), key=lambda i: abs(options[i] - x))
        there = here + (1 if up else -1)
        return options[there] if 0 <= there < len(options) else None
    if kind is Kind.FRACTION:
        p = 1 / (1 + math.exp(-(math.log(x / (1 - x)) + distance)))
        new = _round_fraction(min(max(p, FRACTION_RANGE[0]), FRACTION_RANGE[1]))
    elif kind is Kind.POW2:
        new = 2 ** round(math.log2(x) + distance / math.log(2))
        new = new if new != x else (x * 2 if up else x / 2)
    elif kind is Kind.INT:
        new = round(x * math.exp(distance))
        new = new if new != x else x + (1 if up else -1)
    else:
        new = float(f"{x * math.exp(distance):.3g}")
    low, high = LIMITS.get(name, (-math.inf, math.inf))
    new = min(max(new, low), high)
    if kind in (Kind.POW2, Kind.INT):
        if new < 1 or new != int(new):
            return None
        new = int(new)
    return None if new == x else new


def scalar_at(value: Value, index: int | None) -> Scalar:
    if index is None:
        if isinstance(value, tuple):
            raise TypeError("a tuple constant needs an element index")
        return value
    if not isinstance(value, tuple):
        raise TypeError("only tuple constants have elements")
    return value[index]


def with_element(value: Value, index: int | None, x: Scalar) -> Value:
    if index is None:
        return x
    if not isinstance(value, tuple):
        raise TypeError("only tuple constants have elements")
    return (*value[:index], x, *value[index + 1 :])


def moved_indices(old: Value, new: Value, like: Value) -> list[int | None]:
    """The scalars a change moved that `like` also has: [None] for scalars, else tuple indices."""
    if not isinstance(old, tuple) and not isinstance(new, tuple):
        return [] if isinstance(like, tuple) else [None]
    if not (isinstance(old, tuple) and isinstance(new, tuple) and isinstance(like, tuple)):
        return []
    if not len(old) == len(new) == len(like):
        return []
    return [i for i in range(len(old)) if old[i] != new[i]]


def distance(kind: Kind, a: Scalar, b: Scalar) -> float | None:
    """How far a -> b moved on the scale `step` takes (log or logit); None where undefined."""
    if kind is Kind.FRACTION:
        if not (0 < a < 1 and 0 < b < 1):
            return None
        return math.log(b / (1 - b)) - math.log(a / (1 - a))
    if a == 0 or b == 0 or (a > 0) != (b > 0):
        return None
    return math.log(b / a)
