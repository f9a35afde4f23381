"""Reading and rewriting the hyperparameter constants at the top of a recipe file.

A recipe keeps its dials as module-level `NAME = <literal>  # what it does` lines (see
training/recipes/bytelm.py). Which assignments count as constants:

- an UPPER_CASE name (`LEARNING_RATE = 3e-3`) anywhere at module level;
- any other name (`learning_rate = 6e-4`, as a stock nanoGPT train.py writes its config) only in
  the module's opening block: the statements before the first one that is not an import, a
  docstring or bare string, or an assignment. Below that block (after nanoGPT's
  `exec(open('configurator.py').read())`, say) lowercase names are the program's own state
  (`iter_num = 0`), not dials;
- never a name starting with `_`, and never a value that is not a literal (numbers, bools,
  strings, tuples of numbers): `config_keys = [...]` is skipped, and does not end the block.

Ideas that only move those dials are the cheapest to propose and the easiest to read in a trace,
so the offline brains edit them here, and the ladder carries such an idea over to a new champion
by value (scale_ladder/admission.py): found with `ast` (so a comment or a string that looks like
an assignment is never touched) and rewritten in place, keeping the rest of the file
byte-identical so the diff an idea carries is exactly the line it changed. How far each may move,
and which the project holds fixed, is the search space's business (agents/search_space.py).
"""

from __future__ import annotations

import ast
import functools
import math
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from bus.fast_pickle import by_fields

Value: TypeAlias = int | float | bool | str | tuple[float, ...]

CONSTANT_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")  # a dial anywhere at module level
# Statements that may open a module before its code starts: any other name assigned among them
# is a dial too (a nanoGPT-style config block).
OPENING = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign)
MAX_MAGNITUDE = 1e300  # larger numbers (and inf, nan) are not constants a search can move


@dataclass(frozen=True, slots=True)
class Constant:
    name: str
    value: Value
    line: int  # 1-based line of the assignment
    comment: str  # the trailing `# ...` text, without the hash and the search declaration
    declaration: str = ""  # what follows `search:` in the comment (agents/search_space.py)


@by_fields
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
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):  # inf, or an int past a float, is no value to search
        return value if abs(value) <= MAX_MAGNITUDE else None
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        and all(abs(v) <= MAX_MAGNITUDE for v in value)
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
    opening = True  # still in the module's opening block
    for node in ast.parse(source).body:
        opening = opening and (isinstance(node, OPENING) or _is_bare_string(node))
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value_node = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value_node = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or not _is_dial(target.id, opening):
            continue
        value = _literal(value_node)
        if value is None or value_node.end_lineno is None or value_node.end_col_offset is None:
            continue
        start = (value_node.lineno, value_node.col_offset)
        end = (value_node.end_lineno, value_node.end_col_offset)
        rest = lines[value_node.end_lineno - 1].encode()[value_node.end_col_offset :]
        tail = rest.decode().strip()
        comment = tail[1:].strip() if tail.startswith("#") else ""
        comment, _, declaration = comment.partition("search:")
        comment = comment.strip().rstrip(";,").strip()
        # A constant assigned twice takes its last value at import, so the last site wins.
        found.pop(target.id, None)
        found[target.id] = _Site(
            constant=Constant(target.id, value, node.lineno, comment, declaration.strip()),
            text=_segment(lines, start, end),
            start=start,
            end=end,
        )
    return types.MappingProxyType(found)


def _is_bare_string(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _is_dial(name: str, opening: bool) -> bool:
    return not name.startswith("_") and (opening or bool(CONSTANT_NAME.match(name)))


def constants(source: str) -> dict[str, Constant]:
    """The module's constants (the rule is the module docstring's), in order: numbers, bools,
    strings, tuples of numbers."""
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
    if isinstance(value, str):  # double quotes, as recipes write them, where they need no escape
        return f'"{value}"' if value.isprintable() and not set(value) & {'"', "\\"} else repr(value)
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
    edited = _write(source, {name: format_value(value) for name, value in values.items()})
    changes = tuple(
        Change(name, sites[name].text, format_value(values[name]))
        for name in sorted(values, key=lambda n: sites[n].start)
        if not same_value(sites[name].constant.value, values[name])
    )
    return edited, changes


def with_written(source: str, changes: Sequence[Change]) -> str:
    """The source with each change's constant set to its new value written as it was."""
    return _write(source, {change.name: change.new for change in changes})


def _write(source: str, texts: Mapping[str, str]) -> str:
    sites = _sites(source)
    unknown = [name for name in texts if name not in sites]
    if unknown:
        raise KeyError(f"no constant named {', '.join(unknown)} in the recipe")
    lines = source.split("\n")
    # Edit from the bottom up so earlier offsets stay valid (two constants may share a line).
    for name in sorted(texts, key=lambda n: sites[n].start, reverse=True):
        site = sites[name]
        (first, col), (last, end_col) = site.start, site.end
        head = lines[first - 1].encode()[:col]
        tail = lines[last - 1].encode()[end_col:]
        lines[first - 1 : last] = [(head + texts[name].encode() + tail).decode()]
    return "\n".join(lines)


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


Scalar: TypeAlias = int | float | bool | str


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
    if not isinstance(value, tuple) or isinstance(x, bool | str):
        raise TypeError("only tuple constants have elements, and they are numbers")
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
