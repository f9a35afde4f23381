"""The `command` target: any project, one editable file, a run command, a printed metric.

One stage (the default): the run command trains and prints the metric. The patched file runs
in that process, so it can print any metric it likes: the score is as honest as the recipe.

Two stages (`eval` set): the run command trains in a copy of the project with the patched
file and leaves its checkpoint in that copy; then the evaluation command, from a fresh copy of
the project that no patch touched, runs in its own process, reads the checkpoint (its folder is
`{train_dir}`, also SWARM_TRAIN_DIR) and prints the metric. Only the evaluation's output is
read. Files declared held out (`held_out`) are left out of the training copy and made
unreadable to the training process and everything it starts (Landlock; see held_out). Links
the training left in its folder that lead out of it are removed before the evaluation reads
it (a checkpoint linked to another run's is not this run's). The checkpoint is the
experiment's output and untrusted: the evaluation must load it as data
(`torch.load(..., weights_only=True)`, torch's default since 2.6), never unpickle code.

Every stage runs under the same confinement as every experiment: the hard wall-clock limit
(each stage its own), rlimits, a scrubbed environment, writes only into the stage's own copy,
no read of the workspace (the bus passwords, other runs' logs) or of the scratch folder (other
runs' copies), each stage's full log kept in logs/runs/. Training has no network (Landlock bars
TCP, seccomp every socket but Unix ones). Not confined (see README, "One stage or two"): file
metadata outside the copy (chmod, utime: Landlock does not cover them), processes that leave
the run's process group, and SysV IPC.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bus.messages import RunResult, RunSpec, RunStatus
from training import runner
from training.command_io import (
    METRIC_TAIL_BYTES,
    CommandError,
    MetricReader,
    environment,
    render,
)
from training.experiment_session import SCRATCH_DEPTH_MAX, WATCH_INTERVAL_S
from training.held_out import held_out_files, readable_except
from training.patching import PatchRefused, apply
from training.process_outcome import (
    LOG_TAIL_CHARS,
    disk_usage,
    fd_tail,
    keep_log,
    kill_group,
    outcome,
    remove_tree,
    result_fields,
)
from training.sandbox import (
    Limits,
    drop_capabilities,
    landlock_abi,
    restrict_filesystem,
    restrict_syscalls,
    scrubbed_env,
    set_rlimits,
)

LOG_NAME = ".swarm-run.log"  # a stage's output, in its copy of the project
COPY_IGNORED = (".git", ".venv", "venv", "__pycache__", "swarm-workspace", "node_modules", LOG_NAME)
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
    limits: runner.RunLimits
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


@dataclass
class CommandTarget:
    project: Path
    editable: str
    command: str
    metric: MetricReader
    lower_is_better: bool = True
    name: str = "command"
    own_python: bool = True  # the swarm's interpreter first on the command's PATH
    skip: tuple[Path, ...] = ()  # folders inside the project never copied (the workspace)
    eval_command: str = ""  # two stages: the metric is this command's output, not training's
    held_out: tuple[str, ...] = ()  # globs in the project only the evaluation may read

    @property
    def metric_name(self) -> str:
        return self.metric.name

    def initial_source(self) -> str:
        return (self.project / self.editable).read_text()

    def run(
        self,
        spec: RunSpec,
        source: str,
        limits: runner.RunLimits,
        scratch: Path,
        device: str,
        trainer: str,
        log_dir: Path | None,
        cancel: threading.Event | None = None,
    ) -> RunResult:
        base = result_fields(spec, device, trainer, metric_name=self.metric_name)
        if not runner.PLAIN_NAME.fullmatch(spec.run_id):  # it names the copies, then removed
            why = f"run id {spec.run_id[:200]!r} is not a plain name"
            return RunResult(**base, status=RunStatus.REFUSED, reason=why)
        try:
            patched = apply(source, spec.patch, self.editable) if spec.patch else source
            held_out = self._held_out()
        except PatchRefused as exc:
            return RunResult(**base, status=RunStatus.REFUSED, reason=f"patch refused: {exc}")
        except CommandError as exc:
            return RunResult(**base, status=RunStatus.REFUSED, reason=str(exc))
        run = RunContext(spec, limits, device, cancel, self.own_python)
        work, checked = scratch / spec.run_id, scratch / f"{spec.run_id}{EVAL_SUFFIX}"
        scratch.mkdir(parents=True, exist_ok=True)
        # The workspace (the bus passwords, other runs' logs) and the scratch folder (other
        # runs' copies, the evaluations' held-out files among them) are out of every stage's
        # reach; training's, the held-out files too.
        swarm_own = (*self.skip, Path(os.path.realpath(scratch)))
        strict = bool(held_out)  # no Landlock, no run: the files would not be hidden
        trains = Reach((*swarm_own, *held_out), (), strict, no_network=True)
        two_stage = bool(self.eval_command)
        evaluation: Stage | None = None
        try:
            remove_tree(work)
            remove_tree(checked)
            self._copy(work, trains.hidden)
            (work / self.editable).write_text(patched)
            training, tail = _stage(run, self.command, work, trains, {}, log_dir, two_stage)
            if two_stage and training.status is RunStatus.OK:
                drop_links_out(work)
                self._copy(checked, swarm_own)
                given = {"train_dir": str(work)}
                evaluates = Reach(swarm_own, (work,), strict, no_network=False)
                evaluation, checked_tail = _stage(
                    run, self.eval_command, checked, evaluates, given, log_dir, two_stage
                )
                tail = f"{tail}\n{checked_tail}"
        finally:
            remove_tree(work)
            remove_tree(checked)
        status, reason, metric = self._score(training, evaluation)
        return RunResult(
            **base,
            status=status,
            reason=reason,
            metric=metric,
            train_seconds=round(training.seconds, 3),
            eval_seconds=round(evaluation.seconds, 3) if evaluation else 0.0,
            log_tail=tail,
        )

    def _held_out(self) -> tuple[Path, ...]:
        """The real paths of the held-out files (none for a one-stage target)."""
        if not self.held_out:
            return ()
        if not self.eval_command:
            raise CommandError("target.held_out needs target.eval: only an evaluation reads them")
        if landlock_abi() < 1:
            raise CommandError(
                "target.held_out: this kernel has no Landlock (Linux 5.13 or later, with "
                "landlock among its LSMs), so the held-out files cannot be hidden from training"
            )
        return held_out_files(self.project, self.held_out)

    def _copy(self, to: Path, left_out: tuple[Path, ...]) -> None:
        """The project into `to`, without caches, environments, the swarm's own folders inside
        it (whatever their names: a workspace copied into each of its runs nests until the path
        is too long) and `left_out` (real paths). Links stay links (a `data -> /big` link is not
        copied per run; a loop is no loop)."""

        def ignored(folder: str, names: list[str]) -> set[str]:
            # realpath, not Path.resolve: a link loop in the project must not stop the copy
            out = {n for n in names if Path(os.path.realpath(Path(folder) / n)) in left_out}
            return out | set(shutil.ignore_patterns(*COPY_IGNORED)(folder, names))

        shutil.copytree(self.project, to, ignore=ignored, symlinks=True)

    def _score(
        self, training: Stage, evaluation: Stage | None
    ) -> tuple[RunStatus, str, float | None]:
        if training.status is not RunStatus.OK:
            return training.status, training.reason, None
        scored = training
        if evaluation is not None:
            if evaluation.status is not RunStatus.OK:
                return evaluation.status, f"evaluation: {evaluation.reason}", None
            scored = evaluation
        metric = self.metric.read(scored.output)
        if metric is None:
            where = " in the evaluation's output" if evaluation is not None else ""
            return RunStatus.CRASH, f"{self.metric.expected()}{where}", None
        return RunStatus.OK, "", metric


def drop_links_out(folder: Path) -> None:
    """Remove the links in `folder` that lead out of it, before the evaluation reads it: a
    checkpoint that is a link to another run's, or to a held-out file, is not this run's."""
    inside = os.path.realpath(folder)
    for parent, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            path = os.path.join(parent, name)
            if os.path.islink(path):
                target = os.path.realpath(path)
                if os.path.commonpath([inside, target]) != inside:
                    os.unlink(path)


def _stage(
    run: RunContext,
    command: str,
    folder: Path,
    reach: Reach,
    given: Mapping[str, str],
    log_dir: Path | None,
    two_stage: bool,
) -> tuple[Stage, str]:
    """One process of the run in `folder`, with its log kept and the log's tail. `reach`: what
    it may read and do; `given`: its own placeholders."""
    evaluating = "train_dir" in given
    # The log is read through this handle, never through its path, which the command may have
    # replaced (a link to a file of the trainer's, a FIFO that blocks).
    log = os.open(folder / LOG_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        stage = _execute(run, command, folder, log, reach, given)
        if log_dir is not None:
            name = run.spec.run_id + (EVAL_SUFFIX if evaluating else "")
            keep_log(log, log_dir / f"{name}.log")
        if not two_stage:
            return stage, fd_tail(log)
        heading = "--- evaluation ---" if evaluating else "--- training ---"
        return stage, f"{heading}\n{fd_tail(log, LOG_TAIL_CHARS // 2)}"
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
        readable = [*readable_except(reach.hidden), *reach.also]
    except CommandError as exc:
        return Stage(RunStatus.REFUSED, str(exc), 0.0)
    try:  # the copy of the project is not the run's to fill: the quota is on what it adds
        copied = disk_usage(folder, 0, SCRATCH_DEPTH_MAX)  # pid 0: no process, no held files
    except OSError as exc:
        return Stage(RunStatus.CRASH, f"the project copy cannot be checked: {exc}", 0.0)
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            ["/bin/sh", "-c", text],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_confinement(run, folder, readable, reach),
        )
    except subprocess.SubprocessError as exc:  # the confinement failed in the child: nothing ran
        return Stage(RunStatus.REFUSED, f"the run could not be confined: {exc}", 0.0)
    return _watch(run, process, folder, log, copied, started)


def _confinement(
    run: RunContext, folder: Path, readable: list[Path], reach: Reach
) -> Callable[[], None]:
    """What runs between fork and exec: limits, Landlock and seccomp survive exec. Where a GPU
    is used, its device files must be writable (opening them read-write is how CUDA starts)."""
    writable = [folder, Path("/dev/null")]
    if run.device.startswith("cuda"):
        writable += sorted(Path("/dev").glob("nvidia*"))

    def confine() -> None:
        set_rlimits(run.limits.limits)
        applied = restrict_filesystem(readable, writable, reads_all=False)
        if reach.strict and not applied.startswith("landlock abi"):
            raise OSError(f"held-out files cannot be hidden: {applied}")
        if reach.no_network:
            applied = restrict_syscalls(processes=True)
            if reach.strict and applied != "seccomp":
                raise OSError(f"the network cannot be closed: {applied}")
        drop_capabilities()  # no_new_privs (set above) keeps exec from granting them back

    return confine


def _watch(
    run: RunContext,
    process: subprocess.Popen[bytes],
    folder: Path,
    log: int,
    copied: tuple[int, int],
    started: float,
) -> Stage:
    """Wait for the process under the wall-clock limit and the disk quota, then read how it
    ended; its whole process group is killed whatever happens."""
    limits = run.limits
    deadline, next_disk_check = started + limits.time_limit_s, started
    try:
        while (code := process.poll()) is None:
            if run.cancel is not None and run.cancel.is_set():
                raise runner.Cancelled
            now = time.monotonic()
            if now > deadline:
                reason = f"exceeded the wall-clock limit of {limits.time_limit_s:g}s"
                return Stage(RunStatus.TIMEOUT, reason, limits.time_limit_s)
            if now >= next_disk_check:
                next_disk_check = now + WATCH_INTERVAL_S
                if over := _over_quota(folder, process.pid, copied, limits.limits):
                    return Stage(RunStatus.CRASH, over, now - started)
            time.sleep(0.1)
    finally:
        kill_group(process)
    seconds = time.monotonic() - started
    if code != 0:
        status, reason = outcome(code, fd_tail(log), limits.limits, os.fstat(log).st_size)
        return Stage(status, reason, seconds)
    size = os.fstat(log).st_size
    start = max(0, size - METRIC_TAIL_BYTES)
    output = os.pread(log, size - start, start).decode("utf-8", errors="replace")
    return Stage(RunStatus.OK, "", seconds, output)


def _over_quota(folder: Path, pid: int, copied: tuple[int, int], quota: Limits) -> str:
    """Why the run must stop for what it added to its copy of the project, or ""."""
    try:
        used, files = disk_usage(folder, pid, SCRATCH_DEPTH_MAX)
    except OSError as exc:
        return f"the scratch directory cannot be checked: {exc}"
    added, new_files = used - copied[0], files - copied[1]
    if added <= quota.disk_bytes and new_files <= quota.disk_files:
        return ""
    return (
        f"disk quota exceeded: {added / 2**20:.0f} MiB in {new_files} files added to the copy "
        f"of the project (limit {quota.disk_bytes / 2**20:g} MiB, {quota.disk_files} files)"
    )
