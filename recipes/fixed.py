"""Which of a recipe's constants the project holds fixed, so no brain moves them, and the
ladder refuses an idea that does (an LLM's patch is free text: the prompt asks, admission checks).

Three sources, merged here once and read by every brain (agents/search_space.py drops them from
the space; the LLM prompt lists them) and by the ladder's admission:

- the recipe itself: `# search: fixed` (or `off`) at the end of a constant's comment;
- the project's config: `target.fixed`, names or fnmatch globs, comma-separated
  ("out_dir, wandb_*");
- the run command (`target.run`): every `--name=value` or `--name value` it passes. A
  nanoGPT-style script applies those after its own globals (its configurator), so an edit to the
  file's value could never change a run: such an idea would be noise the ladder pays for.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Collection, Mapping

from recipes.constants import Constant, changes_between, constants

FIXED_DECLARATIONS = ("fixed", "off")  # `# search: fixed` in a constant's comment
HOW_TO_ADD_DIALS = (
    "a dial is a module-level `name = literal` line: an UPPER_CASE name anywhere, any other "
    "name in the opening block (before the first statement that is not an import, a docstring "
    "or an assignment); strings, zero and negative numbers move only with a `# search:` range "
    "or choices; and a name in target.fixed or set by the run command (--name=value) is held "
    "fixed"
)


def fixed_names(patterns: str, command: str) -> frozenset[str]:
    """The names and globs the project holds fixed: `patterns` (comma-separated) and every
    option the run command passes."""
    named = {p.strip() for p in patterns.split(",") if p.strip()}
    return frozenset(named | command_names(command))


def command_names(command: str) -> set[str]:
    """Every `--name` in a shell command line, with or without `=value`, dashes read as
    underscores (argparse's `--batch-size` sets `batch_size`)."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote: the shell would refuse it, but its options still say
        words = command.split()
    found = set()
    for word in words:
        if word.startswith("--") and len(word) > 2:
            name = word[2:].partition("=")[0].replace("-", "_")
            if name.isidentifier():
                found.add(name)
    return found


def is_fixed(name: str, fixed: Collection[str]) -> bool:
    """Whether a constant's name matches a name or glob the project holds fixed."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in fixed)


def declared_fixed(constant: Constant) -> bool:
    return constant.declaration.strip() in FIXED_DECLARATIONS


def held(found: Mapping[str, Constant], fixed: Collection[str]) -> list[str]:
    """The constants no brain may move, by the recipe's declaration or the project's word, in
    the recipe's order."""
    return [n for n, c in found.items() if declared_fixed(c) or is_fixed(n, fixed)]


def moved_fixed(old_source: str, new_source: str, fixed: Collection[str]) -> list[str]:
    """The constants held fixed (by the old source's declarations or the project's `fixed`)
    whose values the new source changes. Only module-level constants are compared: code that
    reassigns one further down is an edit like any other."""
    found = constants(old_source)
    return [c.name for c in changes_between(old_source, new_source) if c.name in held(found, fixed)]


def nothing_to_move(found: Mapping[str, Constant], editable: str, fixed: Collection[str]) -> str:
    """Why a recipe whose search space is empty gives an offline brain nothing to do, and how
    to change that."""
    if not found:
        return f"{editable} has no constants to move; {HOW_TO_ADD_DIALS}"
    by_file = [n for n, c in found.items() if declared_fixed(c)]
    by_project = [n for n in found if n not in by_file and is_fixed(n, fixed)]
    rest = [n for n in found if n not in by_file and n not in by_project]
    parts = []
    if by_file:
        parts.append(f"{_names(by_file)} fixed by `# search: fixed`")
    if by_project:
        parts.append(f"{_names(by_project)} fixed by target.fixed or the run command")
    if rest:
        parts.append(f"{_names(rest)} with no range to derive (declare one with `# search:`)")
    return f"{editable} has no constant a search may move: {'; '.join(parts)}; {HOW_TO_ADD_DIALS}"


def _names(names: list[str], shown: int = 8) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
