"""What the runs of every target share, without torch: the per-tier limits, the trainer's
cancel signal, the shape of a run id, the scratch watch's bounds and the free space a trainer
needs to take a job.

The bytelm runner needs torch (~1.4 s and ~200 MB per process to import); the trainers of the
synthetic and command targets import only this, so they start in a fraction of that.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from training.sandbox import Limits

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # a run id is a directory name
WATCH_INTERVAL_S = 0.25  # how often the scratch directory's size is checked during a run
SCRATCH_DEPTH_MAX = 32  # directories a run may nest in its scratch directory
# Below this much free space where runs write, a trainer takes no job: a run that failed for
# want of space would be charged to its idea (a red team's full disk rejected every idea that
# ran meanwhile). It detects a full disk; each run's own quota is Limits.disk_bytes.
MIN_FREE_BYTES = 64 * 2**20


class Cancelled(Exception):
    """The trainer is shutting down: the run was stopped and must be retried elsewhere."""


@dataclass(frozen=True, slots=True)
class RunLimits:
    """Per-tier limits the runner enforces on top of the budget."""

    time_limit_s: float  # hard wall clock for the whole experiment process
    eval_tokens: int = 16_384
    limits: Limits = field(default_factory=Limits)
    # The user's explicit `--unsafe-no-sandbox`: run even where Landlock or seccomp cannot be
    # applied (else such a run is REFUSED); every result then says `unconfined`.
    unsafe_no_sandbox: bool = False


def free_bytes(folder: Path) -> int:
    """Free bytes on the file system of `folder`, or of the nearest folder above it that
    exists (a trainer's scratch folder is made by its first run)."""
    for place in (folder, *folder.parents):
        with contextlib.suppress(FileNotFoundError):
            return shutil.disk_usage(place).free
    return 0
