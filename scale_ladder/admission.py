"""Admitting an idea's patch: it applies strictly to the champion, touches only the editable
file, compiles, changes something; and carrying a patch over to a new champion (rebase)."""

from __future__ import annotations

import ast
import difflib
import functools

from recipes.constants import Change, changes_between, constants, with_written
from recipes.patch import PatchRefused, apply, make_patch

# An idea's hypothesis is shown in every researcher's prompt, the live view and the reports: a
# few sentences, not a document (bounded as its patch is: recipes/patch.py).
MAX_HYPOTHESIS_CHARS = 16 * 1024


class NotAdmitted(ValueError):
    pass


@functools.lru_cache(maxsize=2048)
def patched_source(source: str, patch: str, editable: str) -> str:
    """The editable file after the patch, or NotAdmitted saying why not. Cached: admitting,
    checking for duplicates and making the RunSpecs of one idea each need it, and compiling
    the patched file was a third of the ladder's time in the capacity benchmark."""
    if not patch.strip():
        raise NotAdmitted("empty patch: the idea changes nothing")
    try:
        new = apply(source, patch, editable)
    except PatchRefused as exc:
        raise NotAdmitted(f"patch refused: {exc}") from None
    if new == source:
        raise NotAdmitted("the patch changes nothing")
    try:
        tree = ast.parse(new, editable)
        compile(tree, editable, "exec")
    except SyntaxError as exc:
        why = f"the patched {editable} does not compile: {exc.msg} (line {exc.lineno})"
        raise NotAdmitted(why) from None
    except (RecursionError, MemoryError):  # an expression nested thousands deep: data, not a bug
        raise NotAdmitted(f"the patched {editable} is nested too deeply to compile") from None
    if _same_code(source, tree):
        # Its runs would pair to exactly zero with the champion's (a seed's run is
        # reproducible), which only drags the pooled noise estimate down.
        raise NotAdmitted("the patch changes only comments or layout, nothing the code does")
    return new


@functools.lru_cache(maxsize=64)
def _dump(source: str) -> str | None:
    try:
        return ast.dump(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _same_code(source: str, tree: ast.Module) -> bool:
    before = _dump(source)
    return before is not None and before == ast.dump(tree)


def rebase(patch: str, old_champion: str, new_champion: str, editable: str) -> str:
    """The same change expressed against a new champion; NotAdmitted if it no longer fits.

    The patch applies strictly where it still can. Otherwise its edits are carried over one by
    one, ignoring context lines: each edit's removed lines (or, for a pure insertion, the line
    before it) must occur exactly once in the new champion. So an idea touching other lines
    than the stacked change survives it. One touching the same lines survives if all it does is
    set constants (a model brain's proposal sets every constant it searches): it sets them to
    its values on the new champion. Otherwise it becomes STALE.
    """
    try:
        return make_patch(new_champion, patched_source(new_champion, patch, editable), editable)
    except NotAdmitted:
        pass
    wanted = patched_source(old_champion, patch, editable)
    if wanted == new_champion:
        raise NotAdmitted("the new champion already contains this change")
    try:
        return _rebase_lines(old_champion, wanted, new_champion, editable)
    except NotAdmitted as conflict:
        changes = _constants_set(old_champion, wanted)
        if changes is None:
            raise conflict from None
        return _rebase_values(changes, new_champion, editable, conflict)


def _rebase_lines(old_champion: str, wanted: str, new_champion: str, editable: str) -> str:
    before, after = old_champion.splitlines(True), wanted.splitlines(True)
    target = new_champion.splitlines(True)
    edits = difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in reversed(edits):  # from the end, so earlier indexes hold
        if tag == "equal":
            continue
        anchor = before[i1:i2] if i2 > i1 else before[max(0, i1 - 1) : i1]
        at = _unique(target, anchor)
        if at is None:
            what = "".join(anchor).strip()[:80] or "the start of the file"
            raise NotAdmitted(f"its edit at `{what}` conflicts with the new champion")
        if i2 > i1:
            target[at : at + len(anchor)] = after[j1:j2]
        else:
            target[at + len(anchor) : at + len(anchor)] = after[j1:j2]
    new = "".join(target)
    if new == new_champion:
        raise NotAdmitted("the new champion already contains this change")
    carried = make_patch(new_champion, new, editable)
    patched_source(new_champion, carried, editable)  # it must still compile
    return carried


def _unique(lines: list[str], block: list[str]) -> int | None:
    if not block:
        return 0
    hits = [i for i in range(len(lines) - len(block) + 1) if lines[i : i + len(block)] == block]
    return hits[0] if len(hits) == 1 else None


def _constants_set(old_champion: str, wanted: str) -> tuple[Change, ...] | None:
    """The constants a change sets, if setting them is all it does; else None."""
    try:
        changes = changes_between(old_champion, wanted)
        if not changes or with_written(old_champion, changes) != wanted:
            return None
    except (SyntaxError, ValueError, KeyError, RecursionError, MemoryError):
        return None
    return changes


def _rebase_values(
    changes: tuple[Change, ...], new_champion: str, editable: str, conflict: NotAdmitted
) -> str:
    missing = [c.name for c in changes if c.name not in constants(new_champion)]
    if missing:
        raise NotAdmitted(f"{conflict}; the new champion has no constant {', '.join(missing)}")
    new = with_written(new_champion, changes)
    if new == new_champion:
        raise NotAdmitted("the new champion already contains this change")
    carried = make_patch(new_champion, new, editable)
    patched_source(new_champion, carried, editable)  # it must still compile
    return carried
