"""One process of a command target's run (a stage): how it is confined, watched and read.

Every stage runs with the hard wall-clock limit, rlimits, a scrubbed environment and writes
only into its own folder; what else it may read and whether it has a network is its `Reach`
(command_target decides both). Its output reaches its log through a pipe (log_pipe.py), and
what it leaves running is killed with it (descendants.py).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bus.messages import RunSpec, RunStatus
from training.command_io import METRIC_TAIL_BYTES, CommandError, environment, render
from training.descendants import become_subreaper, kill_adopted, started_at
from training.held_out import readable_except
from training.log_pipe import output_pipe, private_log
from training.process_outcome import (
    LOG_TAIL_CHARS,
    disk_usage,
    fd_tail,
    keep_log,
    kill_group,
    outcome,
    remove_tree,
)
from training.run_limits import SCRATCH_DEPTH_MAX, WATCH_INTERVAL_S, Cancelled, RunLimits
from training.sandbox import (
    COMMAND,
    UNSAFE_FLAG,
    Limits,
    device_paths,
    drop_capabilities,
    restrict_filesystem,
    restrict_syscalls,
    scrubbed_env,
    set_rlimits,
)

# Each stage's TMPDIR: a folder of its own under /tmp, not in its copy of the project. A Unix
# socket's path is at most 107 bytes, and multiprocessing's forkserver (Python 3.14's default)
# listens in TMPDIR: in a copy deep in a workspace its path was too long and every
# multiprocessing.Process failed. Counted in the stage's quota and removed after it; their
# common folder is hidden from every stage (as the scratch folder is), so a stage reaches its
# own temp folder only, never another run's.
TEMP_ROOT = Path(os.path.realpath("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()))
TEMP_ROOT = TEMP_ROOT / f"swarm-{os.getuid()}"
# The interpreter swarm runs on, not resolved: a virtual environment's python is a link.
OWN_BIN = str(Path(sys.executable).parent)
EVAL_SUFFIX = ".eval"  # the evaluation's copy and log: <run_id>.eval


@dataclass(frozen=True, slots=True)
class Stage:
    """How one process of a run ended: OK means it exited 0, nothing more."""

    status: RunStatus
    reason: str
    seconds: float
    output: str = ""  # the end of its log (METRIC_TAIL_BYTES), read when it exited 0


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every stage of one run shares."""

    spec: RunSpec
    limits: RunLimits
    device: str
    cancel: threading.Event | None
    own_python: bool


@dataclass(frozen=True, slots=True)
class Reach:
    """What one stage may read and do: everything but `hidden` (real paths), plus `also` inside
    them; `strict`: refuse to run where Landlock cannot enforce it; `no_network`: no socket but
    Unix ones (Landlock bars TCP only)."""

    hidden: tuple[Path, ...]
    also: tuple[Path, ...]
    strict: bool
    no_network: bool


def run_stage(
    run: RunContext,
    command: str,
    folder: Path,
    reach: Reach,
    given: Mapping[str, str],
    log_dir: Path | None,
    role: str = "",
) -> tuple[Stage, str]:
    """One process of the run in `folder`, with its log kept and the log's tail. `reach`: what
    it may read and do; `given`: its own placeholders; `role`: "" for the only stage, else
    "training" or "evaluation" (the log's name and the tail's heading say which)."""
    # Beside the folder, not in it, and unlinked: the command writes to a pipe (log_pipe.py)
    # and has neither a handle on the log nor a path to it.
    log = private_log(folder.parent, f"{folder.name}.{role or 'run'}")
    try:
        stage = _execute(run, command, folder, log, reach, given)
        if log_dir is not None:
            name = run.spec.run_id + (EVAL_SUFFIX if role == "evaluation" else "")
            keep_log(log, log_dir / f"{name}.log")
        if not role:
            return stage, fd_tail(log)
        return stage, f"--- {role} ---\n{fd_tail(log, LOG_TAIL_CHARS // 2)}"
    finally:
        os.close(log)


def _execute(
    run: RunContext,
    command: str,
    folder: Path,
    log: int,
    reach: Reach,
    given: Mapping[str, str],
) -> Stage:
    extra = environment(run.spec, run.device) | {f"SWARM_{k.upper()}": v for k, v in given.items()}
    env = scrubbed_env(folder, extra, cpu=not run.device.startswith("cuda"))
    if run.own_python:
        env["PATH"] = os.pathsep.join(p for p in (OWN_BIN, env.get("PATH", "")) if p)
    try:
        text = render(command, run.spec, given)
        _check_temp_root()
        readable = [*readable_except((*reach.hidden, TEMP_ROOT)), *reach.also]
    except CommandError as exc:
        return Stage(RunStatus.REFUSED, str(exc), 0.0)
    try:  # the copy of the project is not the run's to fill: the quota is on what it adds
        copied = disk_usage(folder, 0, SCRATCH_DEPTH_MAX)  # pid 0: no process, no held files
    except OSError as exc:
        return Stage(RunStatus.CRASH, f"the project copy cannot be checked: {exc}", 0.0)
    temp = Path(tempfile.mkdtemp(prefix="run-", dir=TEMP_ROOT))
    env["TMPDIR"] = str(temp)
    try:
        return _confined(run, text, folder, log, reach, readable, env, copied, temp)
    finally:
        remove_tree(temp)


def _check_temp_root() -> None:
    """TEMP_ROOT, made if missing: a folder of this user's that no one else may enter. /tmp is
    everyone's, so another user could have made it first, to watch or swap what runs put there."""
    TEMP_ROOT.mkdir(mode=0o700, exist_ok=True)
    found = os.lstat(TEMP_ROOT)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise CommandError(
            f"{TEMP_ROOT} is not a private folder of this user (mode {found.st_mode:o}, owner "
            f"{found.st_uid}): the runs' temp folders go there; remove it"
        )


def _confined(
    run: RunContext,
    text: str,
    folder: Path,
    log: int,
    reach: Reach,
    readable: list[Path],
    env: dict[str, str],
    copied: tuple[int, int],
    temp: Path,
) -> Stage:
    started = time.monotonic()
    become_subreaper()  # a descendant that leaves the process group is adopted, then killed
    with output_pipe(log, run.limits.limits.file_size_bytes) as output:
        try:
            process = subprocess.Popen(
                ["/bin/sh", "-c", text],
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output.write,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_confinement(run, (folder, temp), readable, reach),
            )
        except subprocess.SubprocessError as exc:  # the confinement failed in the child
            return Stage(RunStatus.REFUSED, f"the run could not be confined: {exc}", 0.0)
        finally:
            output.handed_over()
        born = started_at(process.pid)  # the stage's descendants all start after its shell
        ended = _watch(run, process, (folder, temp), copied, started)
        kill_adopted(born)  # before the pipe is drained: an orphan may hold its write end
    if isinstance(ended, Stage):
        return ended
    seconds = time.monotonic() - started  # the pipe is drained: the log holds all it wrote
    if ended != 0:
        status, reason = outcome(ended, fd_tail(log), run.limits.limits)
        return Stage(status, reason, seconds)
    return Stage(RunStatus.OK, "", seconds, fd_tail(log, METRIC_TAIL_BYTES))


def _confinement(
    run: RunContext, folders: tuple[Path, Path], readable: list[Path], reach: Reach
) -> Callable[[], None]:
    """What runs between fork and exec: limits, Landlock and seccomp survive exec. It may write
    `folders` (its copy, its temp folder). Where a GPU is used, its device files must be
    writable (opening them read-write is how CUDA starts)."""
    writable = [*folders, Path("/dev/null"), *device_paths(run.device)[1]]

    # Without the user's explicit UNSAFE_FLAG a stage runs confined or not at all; held-out
    # files are hidden or nothing runs, whatever the flag.
    unsafe = run.limits.unsafe_no_sandbox

    def confine() -> None:
        set_rlimits(run.limits.limits)
        applied = restrict_filesystem(readable, writable, reads_all=False)
        if (reach.strict or not unsafe) and not applied.startswith("landlock abi"):
            why = "held-out files cannot be hidden" if reach.strict else "no Landlock"
            raise OSError(f"{why}: {applied} (pass {UNSAFE_FLAG} to run unconfined)")
        if reach.no_network:
            applied = restrict_syscalls(COMMAND)
            if (reach.strict or not unsafe) and applied != "seccomp":
                raise OSError(f"the network cannot be closed: {applied} (pass {UNSAFE_FLAG})")
        drop_capabilities()  # no_new_privs (set above) keeps exec from granting them back

    return confine


def _watch(
    run: RunContext,
    process: subprocess.Popen[bytes],
    folders: tuple[Path, Path],
    copied: tuple[int, int],
    started: float,
) -> Stage | int:
    """Wait for the process under the wall-clock limit and the disk quota (on what it adds to
    `folders`): its exit code, or the Stage it was stopped with. Its whole process group is
    killed whatever happens."""
    limits = run.limits
    deadline, next_disk_check = started + limits.time_limit_s, started
    try:
        while (code := process.poll()) is None:
            if run.cancel is not None and run.cancel.is_set():
                raise Cancelled
            now = time.monotonic()
            if now > deadline:
                reason = f"exceeded the wall-clock limit of {limits.time_limit_s:g}s"
                return Stage(RunStatus.TIMEOUT, reason, limits.time_limit_s)
            if now >= next_disk_check:
                next_disk_check = now + WATCH_INTERVAL_S
                if over := _over_quota(folders, process.pid, copied, limits.limits):
                    return Stage(RunStatus.CRASH, over, now - started)
            time.sleep(0.1)
    finally:
        kill_group(process)
    return code


def _over_quota(
    folders: tuple[Path, Path], pid: int, copied: tuple[int, int], quota: Limits
) -> str:
    """Why the run must stop for what it added to its copy of the project and its temp
    folder, or ""."""
    try:
        (used, files), (temp_used, temp_files) = (
            disk_usage(folders[0], pid, SCRATCH_DEPTH_MAX),
            disk_usage(folders[1], 0, SCRATCH_DEPTH_MAX),  # held files: counted once, above
        )
    except OSError as exc:
        return f"the scratch directory cannot be checked: {exc}"
    used, files = used + temp_used, files + temp_files
    added, new_files = used - copied[0], files - copied[1]
    if added <= quota.disk_bytes and new_files <= quota.disk_files:
        return ""
    return (
        f"disk quota exceeded: {added / 2**20:.0f} MiB in {new_files} files added to the copy "
        f"of the project (limit {quota.disk_bytes / 2**20:g} MiB, {quota.disk_files} files)"
    )
