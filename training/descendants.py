"""The processes a command leaves behind.

A command target's process group is killed when its stage ends, but a descendant that starts a
session of its own (`setsid`, a double fork) leaves the group and outlived the run (a red team
kept one alive, burning CPU, holding the log pipe, able to rewrite the checkpoint folder after
the evaluation had been handed it). As a child subreaper (Linux ≥ 3.4), the trainer adopts every
such orphan instead of init; after each stage, the children it adopted since the stage started
are killed and reaped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants; False where the kernel cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def _stat(pid: int | str) -> tuple[int, int]:
    """A process's parent and start time (clock ticks since boot), from /proc/<pid>/stat
    (fields 4 and 22, counted after the command name, which may hold spaces)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[19])


def started_at(pid: int) -> int:
    """When the process started, in clock ticks since boot."""
    return _stat(pid)[1]


def adopted_since(ticks: int) -> list[int]:
    """This process's children that started at or after `ticks`: a stage's orphans."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent, started = _stat(entry.name)
            if parent == me and started >= ticks:
                found.append(int(entry.name))
    return found


def kill_adopted(ticks: int, rounds: int = 20) -> int:
    """Kill and reap the children adopted since `ticks` (and their groups), round after round:
    killing one orphans its own children, which come to us next (and a parent still dying
    hands its orphans over a moment later). How many were killed."""
    killed, quiet = 0, 0
    for _ in range(rounds):
        orphans = adopted_since(ticks)
        if not orphans:
            quiet += 1
            if quiet == 2:
                break
            time.sleep(0.05)
            continue
        quiet = 0
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # a session leader leads its own group
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in orphans:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        killed += len(orphans)
    return killed
