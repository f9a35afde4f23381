"""Applying an idea's unified diff to the editable file, strictly.

Every hunk's context and removed lines must match the file exactly (a hunk may sit at another
line than it says, as `patch` allows, but never with fuzz). A patch that names any other file,
creates or deletes files, or does not apply is refused with the reason.
"""

from __future__ import annotations

import difflib
import lzma
import re
from dataclasses import dataclass

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# Bounds on the work one idea can cause: its patch is applied by the ladder at admission, by
# every agents host to learn what it changed, by a trainer for each run, and again at every
# stack that rebases it. A red team's 380 KB idea of thousands of hunks (each looked for through
# the whole file) kept the ladder and an agents host busy for over two minutes each. Real ideas
# are a few KB: an LLM's rewrite of a large training script stays far inside these.
MAX_PATCH_CHARS = 64 * 1024
MAX_HUNKS = 256
MAX_FILE_CHARS = 512 * 1024  # the patched file may not grow past this
# What a patch may carry: its added lines, lzma-compressed. A red team packed weights pretrained
# offline on the public stdlib corpus into a 51 KB patch (40 KB of information): val_bpb 2.44
# against an honest 3.38 at tier 0, and the control windows, being that same kind of text,
# gained with it (docs/reliability.md). Code compresses to about a third: the whole bytelm
# recipe is 2.3 KB so, a 16 KB module 5 KB, so this leaves room for ideas that add a module.
MAX_ADDED_INFORMATION = 8 * 1024


class PatchRefused(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Hunk:
    old_start: int
    old: list[str]
    new: list[str]


def _file_name(header: str) -> str:
    name = header[4:].split("\t")[0].strip()
    if name == "/dev/null":
        return name
    return name[2:] if name.startswith(("a/", "b/")) else name


def parse(patch: str, editable: str) -> list[Hunk]:
    lines = patch.splitlines(keepends=True)
    hunks: list[Hunk] = []
    i = 0
    seen_header = False
    while i < len(lines):
        line = lines[i]
        if line.startswith(("--- ", "+++ ")):
            name = _file_name(line.rstrip("\n"))
            if name == "/dev/null":
                raise PatchRefused("patches may not create or delete files")
            if name != editable:
                raise PatchRefused(f"patch touches {name!r}; only {editable!r} may change")
            seen_header = True
            i += 1
            continue
        match = HUNK.match(line)
        if not match:
            i += 1  # commentary before or between files (e.g. `diff --git` lines)
            continue
        old_count = int(match.group(2) or 1)
        new_count = int(match.group(4) or 1)
        old: list[str] = []
        new: list[str] = []
        last = " "
        i += 1
        while i < len(lines):
            body = lines[i]
            if body.startswith("\\"):  # "\ No newline at end of file": about the line before
                if last in " -":
                    _strip_newline(old)
                if last in " +":
                    _strip_newline(new)
            elif len(old) >= old_count and len(new) >= new_count:
                break
            elif body[:1] == " " or body in ("\n", "\r\n"):
                text = body[1:] if body[:1] == " " else body
                old.append(text)
                new.append(text)
            elif body[:1] == "-":
                old.append(body[1:])
            elif body[:1] == "+":
                new.append(body[1:])
            else:
                raise PatchRefused(f"malformed hunk line {i + 1}: {body[:60]!r}")
            last = body[:1]
            i += 1
        if len(old) != old_count or len(new) != new_count:
            raise PatchRefused(f"hunk at line {match.group(1)} is truncated")
        hunks.append(Hunk(int(match.group(1)), old, new))
    if not seen_header or not hunks:
        raise PatchRefused("not a unified diff: no file header or no hunks")
    return hunks


def _strip_newline(lines: list[str]) -> None:
    if lines and lines[-1].endswith("\n"):
        lines[-1] = lines[-1][:-1]


def added_information(patch: str) -> int:
    """Bytes of the patch's added lines once lzma has compressed them: what it carries however
    it is written (a blob, numbers, identifiers)."""
    added = "".join(
        line[1:] for line in patch.splitlines(True) if line[:1] == "+" and line[:4] != "+++ "
    )
    return len(lzma.compress(added.encode("utf-8", "surrogatepass"))) if added else 0


def apply(text: str, patch: str, editable: str) -> str:
    """The editable file after `patch`; raises PatchRefused if it does not apply cleanly, or
    is larger than the bounds above."""
    if len(patch) > MAX_PATCH_CHARS:
        raise PatchRefused(
            f"the patch is {len(patch)} characters; at most {MAX_PATCH_CHARS} are accepted"
        )
    hunks = parse(patch, editable)
    if len(hunks) > MAX_HUNKS:
        raise PatchRefused(f"the patch has {len(hunks)} hunks; at most {MAX_HUNKS} are accepted")
    carried = added_information(patch)
    if carried > MAX_ADDED_INFORMATION:
        raise PatchRefused(
            f"the patch adds {carried} bytes of information (its added lines, lzma-compressed); "
            f"at most {MAX_ADDED_INFORMATION} are accepted: a recipe may learn only from the "
            "data it is sent, not carry data (weights, text, tables) in its patch"
        )
    lines = text.splitlines(keepends=True)
    offset = 0
    for hunk in hunks:
        want = max(0, hunk.old_start - 1 + offset) if hunk.old else hunk.old_start + offset
        at = _find(lines, hunk.old, want)
        if at is None:
            raise PatchRefused(
                f"hunk at line {hunk.old_start} does not apply: its context does not match "
                "the current champion (rebase the idea on the latest version)"
            )
        lines[at : at + len(hunk.old)] = hunk.new
        offset += len(hunk.new) - len(hunk.old) + (at - want)
    new = "".join(lines)
    if len(new) > max(MAX_FILE_CHARS, len(text)):
        raise PatchRefused(
            f"the patched {editable} would be {len(new)} characters; it may grow to at most "
            f"{MAX_FILE_CHARS}"
        )
    # In bytes too: the recipe is stored as UTF-8 in one bus message (recipes/store.py), and a
    # file of MAX_FILE_CHARS three-byte characters would pass a bus's 1 MiB default only as
    # characters (found by a red team: the ladder retried the store write forever).
    size = len(new.encode())
    if size > max(MAX_FILE_CHARS, len(text.encode())):
        raise PatchRefused(
            f"the patched {editable} would be {size} bytes in UTF-8; it may grow to at most "
            f"{MAX_FILE_CHARS}"
        )
    return new


def _find(lines: list[str], old: list[str], want: int) -> int | None:
    """Where `old` matches, nearest to `want` first."""
    if not old:
        return min(want, len(lines))
    for distance in range(len(lines) + 1):
        for at in (want - distance, want + distance):
            if 0 <= at <= len(lines) - len(old) and lines[at : at + len(old)] == old:
                return at
    return None


def make_patch(old: str, new: str, editable: str) -> str:
    """The unified diff turning `old` into `new`, naming the editable file as `apply` expects."""
    return "".join(
        difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), f"a/{editable}", f"b/{editable}"
        )
    )
