"""The answer an LLM researcher gives: a hypothesis, then SEARCH/REPLACE edits of the editable file.

`parse_answer` reads the text (tolerating what models add: code fences, CRLF, prose around the
blocks, 5 to 9 marker characters, `**HYPOTHESIS**:` in any case, a path line in backticks or with
`./`); `apply_edits` applies the edits in order, each to the result of the previous one. A SEARCH
text is looked for exactly first, then ignoring trailing whitespace on each line, then ignoring a
consistent difference of leading indentation (the replacement is re-indented the same way). It
must match exactly one place. Whatever is wrong raises ProtocolError with a reason a model can act
on; `repair_request` turns that reason into the message that asks for one corrected answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

FORMAT = """\
HYPOTHESIS: <one paragraph: what changes, why it should lower the metric>
path/of/editable.py
<<<<<<< SEARCH
<exact lines of the current file>
=======
<replacement lines>
>>>>>>> REPLACE
(One or more edit blocks. SEARCH is copied exactly from the current file and matches one place.)
"""

_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$", re.IGNORECASE)
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_HYPOTHESIS = re.compile(
    r"^\s*(?:#+\s*)?(?:[-*]\s+)?\**\s*hypothesis\s*\**\s*:\s*\**\s*(?P<rest>.*)$", re.IGNORECASE
)
_PATH = re.compile(r"^[\w.\-/\\]*\w\.[A-Za-z]\w*$")
_PATH_PREFIX = re.compile(r"^(?:#+\s*)?(?:(?:file|path)\s*:\s*)?", re.IGNORECASE)


class ProtocolError(ValueError):
    """An answer that cannot be used; `reason` says which block and what is wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Edit:
    path: str  # as the answer named it, cleaned; "" when the block had no path line
    search: str  # whole lines, each ending in "\n"; "" for an empty SEARCH
    replace: str


@dataclass(frozen=True, slots=True)
class Answer:
    hypothesis: str
    edits: tuple[Edit, ...]


def repair_request(reason: str) -> str:
    """The short message asking a model for one corrected answer."""
    return (
        f"Your answer could not be applied: {reason.rstrip('.')}.\n"
        "Reply with one corrected answer in the same format: the HYPOTHESIS line, then "
        "SEARCH/REPLACE blocks whose SEARCH lines are copied exactly from the current file."
    )


# --- parsing --------------------------------------------------------------------------------


def parse_answer(text: str) -> Answer:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    edits: list[Edit] = []
    taken: set[int] = set()  # lines that belong to a block (its path line and fences included)
    i = 0
    while i < len(lines):
        if _REPLACE.match(lines[i]):
            raise ProtocolError(
                f"line {i + 1}: a `>>>>>>> REPLACE` line with no `<<<<<<< SEARCH` line before it"
            )
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        number = len(edits) + 1
        path, head = _path_before(lines, i)
        search, i = _section(lines, i + 1, _DIVIDER, number, "`=======` line after its SEARCH")
        replace, end = _section(lines, i + 1, _REPLACE, number, "`>>>>>>> REPLACE` line")
        edits.append(Edit(path, _joined(search), _joined(replace)))
        taken.update(range(head, end + 1))
        i = end + 1
    hypothesis = _hypothesis(lines, taken)
    if not hypothesis:
        raise ProtocolError("no hypothesis: start the answer with `HYPOTHESIS: <one paragraph>`")
    if not edits:
        raise ProtocolError(
            "no edit blocks: give at least one `<<<<<<< SEARCH` / `=======` / "
            "`>>>>>>> REPLACE` block"
        )
    return Answer(hypothesis, tuple(edits))


def _section(
    lines: list[str], start: int, end: re.Pattern[str], number: int, wanted: str
) -> tuple[list[str], int]:
    """The lines from `start` up to the one matching `end`, and that line's index."""
    for j in range(start, len(lines)):
        if end.match(lines[j]):
            return lines[start:j], j
        if _SEARCH.match(lines[j]) or (end is _DIVIDER and _REPLACE.match(lines[j])):
            break
    raise ProtocolError(f"block {number} is unterminated: it has no {wanted}")


def _path_before(lines: list[str], marker: int) -> tuple[str, int]:
    """The path line before a SEARCH marker (across blank and fence lines), and where the
    block's head starts; ("", marker) when the nearest text line is not a path."""
    j = marker - 1
    while j >= 0 and (not lines[j].strip() or _FENCE.match(lines[j])):
        j -= 1
    if j >= 0:
        path = _clean_path(lines[j])
        if _PATH.match(path):
            return path, j
    return "", marker


def _clean_path(line: str) -> str:
    path = line.strip().strip("*`'\"")
    path = _PATH_PREFIX.sub("", path).strip().strip("*`'\"").rstrip(":").strip("*`'\"")
    while path.startswith("./"):
        path = path[2:]
    return path


def _joined(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _hypothesis(lines: list[str], taken: set[int]) -> str:
    for i, line in enumerate(lines):
        match = None if i in taken else _HYPOTHESIS.match(line)
        if match is None:
            continue
        words = [match["rest"]]
        for j in range(i + 1, len(lines)):
            line = lines[j]
            if j in taken or _FENCE.match(line) or _SEARCH.match(line):
                break
            if not line.strip():
                if any(w.strip() for w in words):
                    break
                continue  # `**Hypothesis:**` alone on its line: the paragraph follows
            words.append(line)
        return " ".join(" ".join(words).replace("**", " ").split())
    return ""


# --- applying -------------------------------------------------------------------------------


def apply_edits(source: str, answer: Answer, editable: str) -> str:
    """The editable file after every edit of the answer, in order; ProtocolError if one fails."""
    for edit in answer.edits:
        if edit.path and not _same_file(edit.path, editable):
            raise ProtocolError(f"edits outside the editable file are refused: {edit.path}")
    newline = "\r\n" if "\r\n" in source else "\n"
    text = source.replace("\r\n", "\n")
    for number, edit in enumerate(answer.edits, 1):
        text = _apply_one(text, edit, number)
    new = text.replace("\n", newline) if newline != "\n" else text
    if new == source:
        raise ProtocolError("the edits change nothing: every REPLACE leaves the file as it was")
    return new


def _same_file(path: str, editable: str) -> bool:
    a, b = (p.replace("\\", "/").removeprefix("./").strip("/") for p in (path, editable))
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def _apply_one(text: str, edit: Edit, number: int) -> str:
    if not edit.search:
        if text.strip():
            raise ProtocolError(
                f"SEARCH block {number} is empty: quote the lines to replace "
                "(an empty SEARCH only fills an empty file)"
            )
        return edit.replace
    ends_with_newline = text.endswith("\n")
    lines = text.split("\n")
    if ends_with_newline:
        lines.pop()
    search = edit.search.split("\n")[:-1]
    replace = edit.replace.split("\n")[:-1]
    for matcher in (_exact, _trailing, _indented):
        hits: list[tuple[int, Callable[[str], str]]] = []
        for at in range(len(lines) - len(search) + 1):
            fix = matcher(lines[at : at + len(search)], search)
            if fix is not None:
                hits.append((at, fix))
        if len(hits) > 1:
            raise ProtocolError(
                f"SEARCH block {number} matches the file in {len(hits)} places "
                f"(its first line: {_first(search)}); add lines around it to make it unique"
            )
        if hits:
            at, fix = hits[0]
            lines[at : at + len(search)] = [fix(line) for line in replace]
            return "\n".join(lines) + ("\n" if ends_with_newline else "")
    raise ProtocolError(
        f"SEARCH block {number} does not match the file (its first line: {_first(search)}); "
        "copy the lines exactly from the current file"
    )


def _first(search: list[str]) -> str:
    line = next((s for s in search if s.strip()), "")
    return f"`{line.strip()[:80]}`"


def _same(line: str) -> str:
    return line


def _exact(found: list[str], search: list[str]) -> Callable[[str], str] | None:
    return _same if found == search else None


def _trailing(found: list[str], search: list[str]) -> Callable[[str], str] | None:
    same = all(f.rstrip() == s.rstrip() for f, s in zip(found, search, strict=True))
    return _same if same else None


def _indented(found: list[str], search: list[str]) -> Callable[[str], str] | None:
    """A match up to one indentation difference shared by every non-blank line: the file's
    lines have `extra` more leading whitespace than the search's, or `extra` less."""
    pairs = [(f.rstrip(), s.rstrip()) for f, s in zip(found, search, strict=True)]
    if any(bool(f) != bool(s) for f, s in pairs):
        return None
    pairs = [(f, s) for f, s in pairs if s]
    if not pairs:
        return None
    f0, s0 = pairs[0]
    f_ws, s_ws = f0[: len(f0) - len(f0.lstrip())], s0[: len(s0) - len(s0.lstrip())]
    if f_ws.endswith(s_ws):
        extra = f_ws[: len(f_ws) - len(s_ws)]
        if all(f == extra + s for f, s in pairs):
            return lambda line: extra + line if line.strip() else line
    elif s_ws.endswith(f_ws):
        extra = s_ws[: len(s_ws) - len(f_ws)]
        if all(s == extra + f for f, s in pairs):
            return lambda line: line.removeprefix(extra)
    return None
