"""What became of an experiment process: its status and reason, its log tail, its memory, and
the fields every RunResult for a RunSpec starts from. Shared by every target's runner."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from bus.messages import RunSpec, RunStatus

LOG_TAIL_CHARS = 4000


def result_fields(spec: RunSpec, device: str, trainer: str, **extra: Any) -> dict[str, Any]:
    """The RunResult fields known before the experiment runs."""
    return {
        "run_id": spec.run_id,
        "tier": spec.tier,
        "seed": spec.seed,
        "champion_version": spec.champion_version,
        "idea_id": spec.idea_id,
        "device": device,
        "trainer": trainer,
        "started_at": time.time(),
        **extra,
    }


def exit_status(code: int, log_path: Path) -> tuple[RunStatus, str]:
    text = log_tail(log_path) if log_path.is_file() else ""
    last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
    if code < 0:
        sig = signal.Signals(-code).name
        if -code == signal.SIGKILL:
            return RunStatus.OOM, f"killed by {sig} (the kernel's out-of-memory killer?)"
        if -code == signal.SIGXFSZ:
            return RunStatus.CRASH, "file size limit exceeded (SIGXFSZ)"
        return RunStatus.CRASH, f"killed by {sig}"
    oom_marks = ("MemoryError", "can't allocate memory", "out of memory", "Cannot allocate memory")
    if any(mark in text for mark in oom_marks):
        return RunStatus.OOM, f"out of memory: {last[:300]}"
    return RunStatus.CRASH, f"exit code {code}: {last[:300]}" if last else f"exit code {code}"


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - LOG_TAIL_CHARS))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
