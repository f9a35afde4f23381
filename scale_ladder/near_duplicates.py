"""Near-duplicate ideas: how alike two patches of the same champion are, as normalised tokens.

The exact check (ladder.py) refuses a patched recipe identical to one already tried. This one
refuses an idea whose *change* is an earlier one's in all but form: a comment or spacing added,
a value moved in its third digit, a variable renamed in a large edit. The normalisation keeps
what makes two changes the same experiment and drops the rest:

- Both recipes are cut into lines of tokens. Comments and whitespace are dropped, so a line
  whose only change is its comment or its spacing is no change at all. Strings are compared by
  value (`'x'` and `"x"` are one token). Numbers are rounded to 2 significant digits, half-even
  on the decimal text: `LR = 0.00301` and `LR = 0.003` agree, `0.0035` and `0.003` do not, nor
  `16` and `24`. A number between 0.5 and 1 is rounded by its distance from 1, where its meaning
  lies: a beta2 of 0.976 or of 0.983 averages over 42 or 59 steps, and 0.999 is not 0.9999, yet
  each pair is equal at 2 significant digits (the heuristic brain steps fractions on the logit
  scale and proposes exactly such neighbours).
- Only the change counts: the lines of the champion the patch removes and the lines it adds,
  and within those only the tokens that differ, prefixed `-` and `+` (so "A becomes B" never
  matches "B becomes A"), with the CONTEXT_TOKENS unchanged tokens on either side, prefixed
  `=`, to say where (which constant, which call). Whole changed lines would let the unchanged
  part of a line outvote the change: `F.gelu` made `F.silu` or `F.relu` differ in one token of
  about fifty (ratio 0.98), but in one of six here (0.83).

Similarity is difflib's ratio (2·matches / all tokens) over two such sequences. It forgives a
variable renamed in a large edit (a few tokens of many differ). It cannot weigh the values an
experiment is about: a tuple constant, or several constants moved at once, differ from their
neighbours in one token of many. So a second condition applies: the changes' literal values
(the numbers, as rounded, and True / False / None, signed by side) must be the same multiset.
Two ideas are near-duplicates when their values agree and their ratio reaches the threshold;
a threshold of 1.0 asks for identical normalised changes.

The check is cheap: the values are compared first (a tuple comparison), then difflib's
real_quick_ratio and quick_ratio (upper bounds of the ratio) before the ratio itself, with the
new idea's tokens as the matcher's second sequence, which difflib indexes once; lines are
tokenised once (a cache), so a patched recipe costs only its changed lines. Among the earlier
ideas that qualify the most similar wins, the earliest of equals, so a decision depends only on
the ideas before it in spec order, and a replayed ladder makes it again.
"""

from __future__ import annotations

import ast
import difflib
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from bus.fast_pickle import by_fields

SIGNIFICANT_DIGITS = 2
CONTEXT_TOKENS = 2  # unchanged tokens kept on each side of a change: enough to say where
_GAP = "=…"  # stands for the unchanged tokens left out between two changes
_KEYWORD_VALUES = frozenset({"True", "False", "None"})

_TOKEN = re.compile(
    r"""
    (?P<comment>\#.*)
  | (?P<string>[rRbBuUfF]{0,2}(?:'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*"))
  | (?P<number>0[xXoObB][0-9a-fA-F_]+|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?[jJ]?)
  | (?P<name>\w+)
  | (?P<space>\s+)
  | (?P<op>.)
    """,
    re.VERBOSE,
)
_QUOTE = re.compile(r"^([a-zA-Z]*)('''|\"\"\"|'|\")")


@by_fields
@dataclass(frozen=True, slots=True)
class PatchChange:
    """What a patch changes, normalised: `-`/`+` tokens removed/added, `=` context around."""

    tokens: tuple[str, ...]
    values: tuple[str, ...]  # the signed literal values among the changed tokens, sorted

    def __bool__(self) -> bool:
        return bool(self.tokens)


@dataclass(frozen=True, slots=True)
class NearDuplicate:
    idea_id: str
    similarity: float


def patch_change(champion: str, patched: str) -> PatchChange:
    """The normalised change from the champion's source to the patched one."""
    before, after = _lines(champion), _lines(patched)
    tokens: list[str] = []
    for tag, i1, i2, j1, j2 in _opcodes(before, after):
        if tag != "equal":
            tokens += _hunk(_flat(before[i1:i2]), _flat(after[j1:j2]))
    values = sorted(t for t in tokens if t[0] != "=" and _is_value(t[1:]))
    return PatchChange(tuple(tokens), tuple(values))


def similarity(a: PatchChange, b: PatchChange) -> float:
    return difflib.SequenceMatcher(a=a.tokens, b=b.tokens, autojunk=False).ratio()


def nearest(
    change: PatchChange,
    earlier: Iterable[tuple[str, PatchChange]],
    threshold: float,
    exclude: str = "",
) -> NearDuplicate | None:
    """The earlier idea most like `change` (the first of equals) with the same values and a
    similarity of at least `threshold`; None if there is none."""
    if not change:
        return None
    matcher = difflib.SequenceMatcher(b=change.tokens, autojunk=False)
    best: NearDuplicate | None = None
    for idea_id, other in earlier:
        if other.values != change.values or idea_id == exclude or not other:
            continue
        matcher.set_seq1(other.tokens)
        floor = threshold if best is None else best.similarity
        if matcher.real_quick_ratio() < floor or matcher.quick_ratio() < floor:
            continue
        ratio = matcher.ratio()
        if ratio >= threshold and (best is None or ratio > best.similarity):
            best = NearDuplicate(idea_id, ratio)
            if ratio == 1.0:
                break
    return best


def _opcodes(a: Sequence[object], b: Sequence[object]) -> Sequence[tuple[str, int, int, int, int]]:
    return difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()


def _hunk(old: list[str], new: list[str]) -> list[str]:
    """The differing tokens of one changed run of lines, with a little unchanged context."""
    out: list[str] = []
    ops = _opcodes(old, new)
    for n, (tag, i1, i2, j1, j2) in enumerate(ops):
        if tag != "equal":
            out += ["-" + t for t in old[i1:i2]] + ["+" + t for t in new[j1:j2]]
            continue
        run = ["=" + t for t in old[i1:i2]]
        head = CONTEXT_TOKENS if n > 0 else 0  # after a change
        tail = CONTEXT_TOKENS if n < len(ops) - 1 else 0  # before the next one
        if head + tail >= len(run):
            out += run
        else:
            out += run[:head] + ([_GAP] if head and tail else []) + run[len(run) - tail :]
    return out


def _flat(lines: Sequence[tuple[str, ...]]) -> list[str]:
    return [token for line in lines for token in line]


def _is_value(token: str) -> bool:
    return token[:1].isdigit() or token in _KEYWORD_VALUES


@functools.lru_cache(maxsize=16)  # the champion is read once per version, not once per idea
def _lines(source: str) -> tuple[tuple[str, ...], ...]:
    """The source's lines as tokens, without the lines that hold only comments or whitespace."""
    lines = (_tokens(line) for line in source.split("\n"))  # as Python does: not on \f
    return tuple(line for line in lines if line)


@functools.lru_cache(maxsize=8192)  # a patched recipe shares all but a few lines with others
def _tokens(line: str) -> tuple[str, ...]:
    out: list[str] = []
    for match in _TOKEN.finditer(line):
        kind, text = match.lastgroup, match.group()
        if kind == "string":
            out.append(_string(text))
        elif kind == "number":
            out.append(_number(text))
        elif kind in ("name", "op"):
            out.append(text)
    return tuple(out)


def _string(text: str) -> str:
    try:
        return repr(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass  # an f-string: unify the quotes only
    match = _QUOTE.match(text)
    if match is None:
        return text
    prefix, quote = match.groups()
    return f'{prefix.lower()}"{text[len(prefix) + len(quote) : -len(quote)]}"'


def _number(text: str) -> str:
    clean = text.replace("_", "").lower()
    if clean.endswith("j"):
        return clean
    try:
        value = Decimal(int(clean, 0)) if clean[:2] in ("0x", "0o", "0b") else Decimal(clean)
    except (ValueError, InvalidOperation):
        return clean
    if Decimal("0.5") < value < 1:  # 0.95, 0.99, 0.999: the digits that matter come after the nines
        return f"1-{_rounded(1 - value)}"
    return _rounded(value)


def _rounded(value: Decimal) -> str:
    return f"{value:.{SIGNIFICANT_DIGITS - 1}e}" if value else "0"
