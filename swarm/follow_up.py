"""Follow-up commands printed the way they work as typed, from the folder the user is in.

After `pip install -e .` into a virtual environment, `swarm` is on PATH only while that
environment is active; a hint that says `swarm sql …` would then fail. So the hint names the
program the way it was started (`swarm` when that is what PATH finds, else its path), and the
workspace when it is not the one a plain command in this folder would use.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from swarm.config_files import DEFAULT_WORKSPACE


def _shown(path: Path, cwd: Path) -> str:
    """`path` relative to `cwd` when it is inside it (`.venv/bin/swarm`), else absolute."""
    path = path.absolute()
    try:
        relative = path.relative_to(cwd)
    except ValueError:
        return str(path)
    text = str(relative)
    return text if os.sep in text else f".{os.sep}{text}"


def swarm_program(cwd: Path | None = None) -> str:
    """How to run this swarm again from `cwd`."""
    cwd = cwd or Path.cwd()
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("swarm")
    if started.name in ("__main__.py", "-m") or started.suffix == ".py":
        return f"{shlex.quote(_shown(Path(sys.executable), cwd))} -m swarm"
    found = shutil.which("swarm")
    if found and Path(found).resolve() == started.resolve():
        return "swarm"
    return shlex.quote(_shown(started, cwd))


def swarm_command(workspace: Path, cwd: Path | None = None) -> str:
    """The prefix of a follow-up command on `workspace`: `swarm`, its path, and --workspace
    when a plain command here would look elsewhere."""
    cwd = cwd or Path.cwd()
    program = swarm_program(cwd)
    if workspace.absolute() == (cwd / DEFAULT_WORKSPACE).absolute():
        return program
    return f"{program} --workspace {shlex.quote(_shown(workspace, cwd))}"
