"""What the swarm optimises: a target declares its editable file, its metric and how one
experiment runs at a tier.

- `bytelm` (default): the built-in byte-level GPT; val_bpb, lower is better, computed by the
  locked evaluator (see runner, evaluator).
- `command`: any project — an editable file, a run command, a metric the command prints as
  `name: value`. The command gets its budget in SWARM_* environment variables; the runner still
  enforces the hard wall-clock limit, rlimits, a scrubbed environment, writes confined to the
  scratch copy and no network. Its metric is only as honest as the user's own run command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bus.messages import RunResult, RunSpec, RunStatus
from training import runner
from training.corpus import load_corpus
from training.experiment_session import SCRATCH_DEPTH_MAX, WATCH_INTERVAL_S
from training.patching import PatchRefused, apply
from training.process_outcome import (
    disk_usage,
    fd_tail,
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


class Target(Protocol):
    name: str
    editable: str
    metric_name: str
    lower_is_better: bool

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
    metric_name: str
    lower_is_better: bool = True
    name: str = "command"

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
            shutil.copytree(self.project, work, ignore=shutil.ignore_patterns(*COPY_IGNORED))
            (work / self.editable).write_text(patched)
            # The log is read through this handle, never through its path, which the command
            # may have replaced (a link to a file of the trainer's, a FIFO that blocks).
            log = os.open(work / LOG_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                status, reason, metric, seconds = self._execute(
                    spec, limits, work, log, device, cancel
                )
                tail = fd_tail(log)
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

    def _execute(
        self,
        spec: RunSpec,
        limits: runner.RunLimits,
        work: Path,
        log: int,
        device: str,
        cancel: threading.Event | None,
    ) -> tuple[RunStatus, str, float | None, float]:
        env = scrubbed_env(
            work,
            {
                "SWARM_BUDGET_KIND": spec.budget_kind.value,
                "SWARM_BUDGET": f"{spec.budget:g}",
                "SWARM_SEED": str(spec.seed),
                "SWARM_TIER": str(spec.tier),
                "SWARM_DIALS": json.dumps(spec.dials),
                "SWARM_DEVICE": device,
            },
            cpu=not device.startswith("cuda"),
        )

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
            ["/bin/sh", "-c", self.command],
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
        metric = parse_metric(output, self.metric_name)
        if metric is None:
            reason = f"no `{self.metric_name}: <number>` line in the output"
            return RunStatus.CRASH, reason, None, seconds
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


def parse_metric(output: str, name: str) -> float | None:
    """The last `name: value` line's value, if it is a finite number."""
    pattern = re.compile(rf"^\s*{re.escape(name)}\s*:\s*([-+0-9.eE]+|nan|inf)\s*$", re.MULTILINE)
    matches = pattern.findall(output)
    if not matches:
        return None
    try:
        value = float(matches[-1])
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None
