"""What became of an experiment process: its status and reason, its log tail, its memory, and
the fields every RunResult for a RunSpec starts from. Shared by every target's runner."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

from bus.messages import RunSpec, RunStatus
from training.sandbox import Limits

LOG_KEEP_BYTES = 4 * 1024**2  # the end of each log kept in the log dir (a run may print GBs)

LOG_TAIL_CHARS = 4000


def result_fields(spec: RunSpec, device: str, trainer: str, **extra: Any) -> dict[str, Any]:
    """The RunResult fields known before the experiment runs."""
    return {
        "run_id": spec.run_id,
        "tier": spec.tier,
        "seed": spec.seed,
        "champion_version": spec.champion_version,
        "idea_id": spec.idea_id,
        "device": device_label(device),
        "trainer": trainer,
        "started_at": time.time(),
        **extra,
    }


@functools.cache
def device_label(device: str) -> str:
    """What a result says it ran on: `cpu`, or `cuda (NVIDIA H100 80GB HBM3)`: runs on
    different GPUs are not comparable, so the name goes with every result."""
    if not device.startswith("cuda"):
        return device
    import torch

    try:  # the runtime's properties, not a context: the trainer allocates nothing on the GPU
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    except (RuntimeError, AssertionError, ValueError) as exc:
        return f"{device} (no name: {str(exc)[:80]})"


# A stock project's DataLoader with workers dies of PermissionError and nothing more: its queues
# take a POSIX semaphore in /dev/shm, which no sandboxed run may write (a file there outlives
# the run, is shared by every run, and fills memory no quota counts). So the reason says why.
SHARED_MEMORY_MARKS = ("SemLock", "/dev/shm", "sem_open", "shm_open")
NO_SHARED_MEMORY = (
    "multiprocessing's queues and locks, and a DataLoader's workers, need /dev/shm, which a "
    "sandboxed run may not write: load the data in the process itself (num_workers=0)"
)


def outcome(code: int, tail: str, limits: Limits) -> tuple[RunStatus, str]:
    """The status and reason of an experiment that exited with `code` (negative: a signal),
    from the end of its log."""
    last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
    if code < 0:
        sig = signal_name(-code)
        if -code == signal.SIGKILL:  # the kernel's OOM killer sends it, and so can the process
            return RunStatus.CRASH, f"killed by {sig} (by the kernel's out-of-memory killer?)"
        if -code == signal.SIGXFSZ:
            return RunStatus.CRASH, f"{_file_size_limit(limits)} (SIGXFSZ)"
        return RunStatus.CRASH, f"killed by {sig}"
    # The status comes from how the process ended, never from what it printed: a red team
    # printed a fake MemoryError and its crash was labelled OOM. What it printed only words
    # the reason, quoted as its own (a MemoryError under the address-space limit reads so).
    oom_marks = ("MemoryError", "can't allocate memory", "out of memory", "Cannot allocate memory")
    if any(mark in tail for mark in oom_marks):
        return RunStatus.CRASH, f"exit code {code}, reporting it ran out of memory: {last[:300]}"
    if "File too large" in tail:  # EFBIG: Python ignores SIGXFSZ, so the write raised
        return RunStatus.CRASH, f"{_file_size_limit(limits)}: {last[:300]}"
    if "Permission denied" in last and any(mark in tail for mark in SHARED_MEMORY_MARKS):
        return RunStatus.CRASH, f"exit code {code}: {last[:300]} ({NO_SHARED_MEMORY})"
    return RunStatus.CRASH, f"exit code {code}: {last[:300]}" if last else f"exit code {code}"


def signal_name(number: int) -> str:
    """SIGSEGV, or `signal 40` for a real-time signal (which `signal.Signals` does not name: a
    red team's self-sent signal 40 crashed the runner)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _file_size_limit(limits: Limits) -> str:
    return f"file size limit exceeded ({limits.file_size_bytes / 2**20:g} MiB a file)"


def disk_usage(root: Path, pid: int, max_depth: int) -> tuple[int, int]:
    """Bytes on disk and entries under `root` (links not followed), plus the files process
    `pid` holds open after deleting them, which no walk sees. Raises OSError where the tree
    cannot be walked: nested past `max_depth`, paths too long, or a directory closed to us
    with chmod (the experiment runs as our user)."""
    used, entries, dirs = 0, 0, [(str(root), 0)]
    while dirs:
        path, depth = dirs.pop()
        if depth > max_depth:
            raise OSError(f"nested deeper than {max_depth} directories")
        try:
            listing = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):  # changed since it was listed
            continue
        for entry in listing:
            entries += 1
            with contextlib.suppress(FileNotFoundError):
                used += entry.stat(follow_symlinks=False).st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    dirs.append((entry.path, depth + 1))
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:
                    used += st.st_blocks * 512
    return used, entries


def remove_tree(path: Path) -> None:
    """Remove a dead experiment's scratch directory however it left it. GNU rm and chmod walk
    any depth without following links (shutil.rmtree recurses: a few thousand nested
    directories make it raise); chmod first opens again what the experiment closed with chmod
    (it ran as our user, so a trainer not run by root would otherwise leave those behind)."""
    if not os.path.lexists(path):
        return
    for command in (["chmod", "-R", "u+rwx", "--", str(path)], ["rm", "-rf", "--", str(path)]):
        subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, check=False)


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


def fd_tail(fd: int, chars: int = LOG_TAIL_CHARS) -> str:
    """The end of the file open as `fd`, read at an offset (the experiment shares the fd's own
    offset): the runner reads the log it created, whatever the experiment put at its path."""
    size = os.fstat(fd).st_size
    return os.pread(fd, min(size, chars), max(0, size - chars)).decode("utf-8", errors="replace")


def keep_log(log: int, path: Path, keep_bytes: int = LOG_KEEP_BYTES) -> None:
    """The last `keep_bytes` of the log open as `log`, written to `path` (read by offset, as
    fd_tail reads it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    size = os.fstat(log).st_size
    start = max(0, size - keep_bytes)
    path.write_bytes(os.pread(log, size - start, start))
