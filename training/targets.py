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
from training.patching import PatchRefused, apply
from training.process_outcome import exit_status, kill_group, log_tail, result_fields
from training.sandbox import restrict_filesystem, scrubbed_env, set_rlimits
from training.target_info import RECIPE

__all__ = ["RECIPE", "BytelmTarget", "CommandTarget", "Target", "parse_metric"]

COPY_IGNORED = (".git", ".venv", "venv", "__pycache__", "swarm-workspace", "node_modules")


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
        try:
            patched = apply(source, spec.patch, self.editable) if spec.patch else source
        except PatchRefused as exc:
            return RunResult(**base, status=RunStatus.REFUSED, reason=f"patch refused: {exc}")
        work = scratch / spec.run_id
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(self.project, work, ignore=shutil.ignore_patterns(*COPY_IGNORED))
        (work / self.editable).write_text(patched)
        try:
            status, reason, metric, seconds, tail = self._execute(
                spec, limits, work, device, cancel
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
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
        device: str,
        cancel: threading.Event | None,
    ) -> tuple[RunStatus, str, float | None, float, str]:
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
        log = work / ".swarm-run.log"

        def confine() -> None:  # between fork and exec: limits and Landlock survive exec
            set_rlimits(limits.limits)
            restrict_filesystem([], [work, Path("/dev/null")], reads_all=True)

        started = time.monotonic()
        with open(log, "wb") as out:
            process = subprocess.Popen(
                ["/bin/sh", "-c", self.command],
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=confine,
            )
        deadline = started + limits.time_limit_s
        try:
            while (code := process.poll()) is None:
                if cancel is not None and cancel.is_set():
                    raise runner.Cancelled
                if time.monotonic() > deadline:
                    reason = f"exceeded the wall-clock limit of {limits.time_limit_s:g}s"
                    return (
                        RunStatus.TIMEOUT,
                        reason,
                        None,
                        limits.time_limit_s,
                        log_tail(log),
                    )
                time.sleep(0.1)
        finally:
            kill_group(process)
        seconds, tail = time.monotonic() - started, log_tail(log)
        if code != 0:
            status, reason = exit_status(code, log)
            return status, reason, None, seconds, tail
        metric = parse_metric(log.read_text(errors="replace"), self.metric_name)
        if metric is None:
            reason = f"no `{self.metric_name}: <number>` line in the output"
            return RunStatus.CRASH, reason, None, seconds, tail
        return RunStatus.OK, "", metric, seconds, tail


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
