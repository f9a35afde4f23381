"""What the swarm optimises: a target declares its editable file, its metric and how one
experiment runs at a tier.

- `bytelm` (default): the built-in byte-level GPT; val_bpb, lower is better, computed by the
  locked evaluator (see runner, evaluator).
- `command`: any project — an editable file, a run command, a metric the command prints (see
  command_io: placeholders, SWARM_* variables, how the metric is read). The command runs in a
  copy of the project with the swarm's own interpreter first on PATH (so `python` has the
  packages swarm was installed with); the runner still enforces the hard wall-clock limit,
  rlimits, a scrubbed environment, writes confined to the scratch copy and no network, and
  keeps the command's full log in logs/runs/. Its metric is only as honest as the user's own
  run command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bus.messages import RunResult, RunSpec, RunStatus
from training import runner
from training.command_io import CommandError, MetricReader, environment, parse_metric, render
from training.corpus import load_corpus
from training.experiment_session import SCRATCH_DEPTH_MAX, WATCH_INTERVAL_S
from training.patching import PatchRefused, apply
from training.process_outcome import (
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
    restrict_filesystem,
    scrubbed_env,
    set_rlimits,
)
from training.target_info import RECIPE

__all__ = ["RECIPE", "BytelmTarget", "CommandTarget", "Target", "parse_metric"]

LOG_NAME = ".swarm-run.log"  # the command's output, in its copy of the project
COPY_IGNORED = (".git", ".venv", "venv", "__pycache__", "swarm-workspace", "node_modules", LOG_NAME)
# The interpreter swarm runs on, not resolved: a virtual environment's python is a link.
OWN_BIN = str(Path(sys.executable).parent)


class Target(Protocol):
    name: str
    editable: str
    lower_is_better: bool

    @property
    def metric_name(self) -> str: ...

    def initial_source(self) -> str: ...

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
    ) -> RunResult: ...


@dataclass
class BytelmTarget:
    corpus_dir: Path
    data: Path | None = None
    name: str = "bytelm"
    editable: str = "recipe.py"
    metric_name: str = "val_bpb"
    lower_is_better: bool = True

    def initial_source(self) -> str:
        return RECIPE.read_text()

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
        corpus = load_corpus(self.corpus_dir, self.data)
        return runner.run_bytelm(
            spec, source, corpus, limits, scratch, device, trainer, log_dir, cancel
        )


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
        if not runner.PLAIN_NAME.fullmatch(spec.run_id):  # it names the copy, then removed
            why = f"run id {spec.run_id[:200]!r} is not a plain name"
            return RunResult(**base, status=RunStatus.REFUSED, reason=why)
        try:
            patched = apply(source, spec.patch, self.editable) if spec.patch else source
        except PatchRefused as exc:
            return RunResult(**base, status=RunStatus.REFUSED, reason=f"patch refused: {exc}")
        work = scratch / spec.run_id
        remove_tree(work)
        try:
            # Links stay links (a `data -> /big` link is not copied per run; a loop is no loop)
            shutil.copytree(self.project, work, ignore=self._ignored, symlinks=True)
            (work / self.editable).write_text(patched)
            # The log is read through this handle, never through its path, which the command
            # may have replaced (a link to a file of the trainer's, a FIFO that blocks).
            log = os.open(work / LOG_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                status, reason, metric, seconds = self._execute(
                    spec, limits, work, log, device, cancel
                )
                tail = fd_tail(log)
                if log_dir is not None:
                    keep_log(log, log_dir / f"{spec.run_id}.log")
            finally:
                os.close(log)
        finally:
            remove_tree(work)
        return RunResult(
            **base,
            status=status,
            reason=reason,
            metric=metric,
            train_seconds=round(seconds, 3),
            log_tail=tail,
        )

    def _ignored(self, folder: str, names: list[str]) -> set[str]:
        """What the copy leaves out: caches, environments, the log's name, and the swarm's own
        folders inside the project, whatever their names (a workspace copied into each of its
        own runs would nest until the path is too long)."""
        # realpath, not Path.resolve: a link loop in the project must not stop the copy
        skipped = {n for n in names if Path(os.path.realpath(Path(folder) / n)) in self.skip}
        return skipped | set(shutil.ignore_patterns(*COPY_IGNORED)(folder, names))

    def _execute(
        self,
        spec: RunSpec,
        limits: runner.RunLimits,
        work: Path,
        log: int,
        device: str,
        cancel: threading.Event | None,
    ) -> tuple[RunStatus, str, float | None, float]:
        env = scrubbed_env(work, environment(spec, device), cpu=not device.startswith("cuda"))
        if self.own_python:
            env["PATH"] = os.pathsep.join(p for p in (OWN_BIN, env.get("PATH", "")) if p)
        try:
            command = render(self.command, spec)
        except CommandError as exc:
            return RunStatus.REFUSED, str(exc), None, 0.0

        def confine() -> None:  # between fork and exec: limits and Landlock survive exec
            set_rlimits(limits.limits)
            restrict_filesystem([], [work, Path("/dev/null")], reads_all=True)
            drop_capabilities()  # no_new_privs (set above) keeps exec from granting them back

        try:  # the copy of the project is not the run's to fill: the quota is on what it adds
            copied = disk_usage(work, 0, SCRATCH_DEPTH_MAX)  # pid 0: no process, no held files
        except OSError as exc:
            return RunStatus.CRASH, f"the project copy cannot be checked: {exc}", None, 0.0
        started = time.monotonic()
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=confine,
        )
        deadline, next_disk_check = started + limits.time_limit_s, started
        try:
            while (code := process.poll()) is None:
                if cancel is not None and cancel.is_set():
                    raise runner.Cancelled
                now = time.monotonic()
                if now > deadline:
                    reason = f"exceeded the wall-clock limit of {limits.time_limit_s:g}s"
                    return RunStatus.TIMEOUT, reason, None, limits.time_limit_s
                if now >= next_disk_check:
                    next_disk_check = now + WATCH_INTERVAL_S
                    if over := _over_quota(work, process.pid, copied, limits.limits):
                        return RunStatus.CRASH, over, None, now - started
                time.sleep(0.1)
        finally:
            kill_group(process)
        seconds = time.monotonic() - started
        if code != 0:
            status, reason = outcome(code, fd_tail(log), limits.limits, os.fstat(log).st_size)
            return status, reason, None, seconds
        output = os.pread(log, os.fstat(log).st_size, 0).decode("utf-8", errors="replace")
        metric = self.metric.read(output)
        if metric is None:
            return RunStatus.CRASH, self.metric.expected(), None, seconds
        return RunStatus.OK, "", metric, seconds


def _over_quota(work: Path, pid: int, copied: tuple[int, int], quota: Limits) -> str:
    """Why the run must stop for what it added to its copy of the project, or ""."""
    try:
        used, files = disk_usage(work, pid, SCRATCH_DEPTH_MAX)
    except OSError as exc:
        return f"the scratch directory cannot be checked: {exc}"
    added, new_files = used - copied[0], files - copied[1]
    if added <= quota.disk_bytes and new_files <= quota.disk_files:
        return ""
    return (
        f"disk quota exceeded: {added / 2**20:.0f} MiB in {new_files} files added to the copy "
        f"of the project (limit {quota.disk_bytes / 2**20:g} MiB, {quota.disk_files} files)"
    )
