"""Files of a command project that only its evaluation may read (a two-stage target).

Landlock grants access by allow-list: there is no rule "everything but these files". So the
training stage is given read access to the complement of the held-out paths, built from the
root down: every entry of every folder on the way to a held-out path, but neither that path
nor the folders on the way (those get no rule: they can be passed through, not listed). A file
created later beside a held-out one is not readable either; what the training needs from the
project is in its own copy, which it may read and write.

Not covered: other names for the same bytes (a hard link, a bind mount elsewhere, a copy the
user made). The held-out files must exist only where they are declared.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from training.command_io import CommandError
from training.sandbox import landlock_abi

MAX_RULES = 20_000  # paths granted: a folder on the way with more entries is a mistake to stop


def hidden_from_training(
    project: Path, patterns: Iterable[str], evaluates: bool
) -> tuple[Path, ...]:
    """The real paths of the held-out files, checked as `swarm start` and every run check
    them: they need an evaluation to read them and Landlock to hide them (no silent downgrade)."""
    patterns = tuple(patterns)
    if not patterns:
        return ()
    if not evaluates:
        raise CommandError(
            "target.held_out needs target.eval (--eval): held-out files are for an evaluation "
            "command to read, and nothing else"
        )
    if landlock_abi() < 1:
        raise CommandError(
            "target.held_out: this kernel has no Landlock (Linux 5.13 or later, with landlock "
            "among its LSMs), so held-out files cannot be hidden from the training command"
        )
    return held_out_files(project, patterns)


def held_out_files(project: Path, patterns: Iterable[str]) -> tuple[Path, ...]:
    """The real paths the patterns (globs relative to `project`) name. Each must match something
    inside the project: a pattern that matches nothing protects nothing, silently."""
    found: list[Path] = []
    root = Path(os.path.realpath(project))
    for pattern in patterns:
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise CommandError(f"target.held_out: {pattern!r} must be a path inside the project")
        matches = sorted(glob.glob(pattern, root_dir=project, recursive=True, include_hidden=True))
        if not matches:
            raise CommandError(f"target.held_out: {pattern!r} matches no file in {project}")
        found += [Path(os.path.realpath(project / m)) for m in matches]
    # A held-out file reached through a link may live outside the project (data -> /big/data):
    # it is hidden where it really is. The project itself may not be hidden whole.
    if root in found:
        raise CommandError("target.held_out: the whole project cannot be held out")
    return tuple(dict.fromkeys(found))


def readable_except(hidden: Iterable[Path]) -> list[Path]:
    """Paths whose trees together hold everything under / but the `hidden` real paths."""
    denied = {Path(os.path.realpath(p)) for p in hidden}
    on_the_way = {a for p in denied for a in p.parents}
    granted: list[Path] = []
    pending = [Path("/")]
    while pending:
        folder = pending.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue  # a folder this process cannot list: its entries stay unreadable
        for entry in entries:
            path = folder / entry.name
            if path in denied or entry.is_symlink():
                continue  # a link is checked where it leads: its target has (or lacks) a rule
            if path in on_the_way and entry.is_dir(follow_symlinks=False):
                pending.append(path)
            else:
                granted.append(path)
        if len(granted) > MAX_RULES:
            raise CommandError(
                f"target.held_out: more than {MAX_RULES} paths beside the held-out files' "
                f"folders (at {folder}); keep them in a folder of their own"
            )
    return granted
