"""The sandboxed runner: one RunSpec in, one RunResult out, whatever the experiment does.

It patches the champion recipe in a scratch directory, starts the experiment in its own process
group under rlimits with a scrubbed environment, feeds it training batches until the budget is
spent, evaluates it (see evaluator), and turns every outcome — success, exception, NaN, hang,
memory exhaustion, a full disk, a refused patch, a non-causal model, a broken protocol — into a
RunResult with a reason. Nothing the experiment sends or leaves behind can block, crash or
deceive the runner: every wait has the deadline, every message a size bound, and the log is
read through the runner's own handle.
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bus.messages import BudgetKind, RunResult, RunSpec, RunStatus
from training import protocol as p
from training.corpus import Corpus
from training.evaluator import Evaluation, InvalidLogits, NonCausalModel
from training.patching import PatchRefused, apply
from training.process_outcome import (
    disk_usage,
    fd_tail,
    outcome,
    peak_rss_mb,
    remove_tree,
    result_fields,
)
from training.sandbox import Limits, scrubbed_env
from training.zygote import Experiment, start_experiment

WATCH_INTERVAL_S = 0.25  # how often the scratch directory's size is checked during a run
INFO_MAX_BYTES = 64 * 1024  # the experiment's facts for the summary: a few numbers
LOG_KEEP_BYTES = 4 * 1024**2  # the end of each log kept in the log dir (a run may print GBs)
SCRATCH_DEPTH_MAX = 32  # directories a run may nest in its scratch directory
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # a run id is a directory name


@dataclass(frozen=True, slots=True)
class RunLimits:
    """Per-tier limits the runner enforces on top of the budget."""

    time_limit_s: float  # hard wall clock for the whole experiment process
    eval_tokens: int = 16_384
    limits: Limits = field(default_factory=Limits)


class _ChildGone(Exception):
    """The experiment exited or closed its pipe before the protocol was done."""


class _Stop(Exception):
    def __init__(self, status: RunStatus, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass
class _Progress:
    spawned: float = field(default_factory=time.monotonic)
    evaluated: float | None = None
    steps: int = 0
    tokens: int = 0
    started: float | None = None
    ended: float | None = None
    parameters: int = 0
    peak_mem_mb: float = 0.0

    @property
    def startup_seconds(self) -> float:
        return 0.0 if self.started is None else self.started - self.spawned

    @property
    def eval_seconds(self) -> float:
        if self.evaluated is None or self.ended is None:
            return 0.0
        return self.evaluated - self.ended

    @property
    def train_seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended or time.monotonic()) - self.started


def run_bytelm(
    spec: RunSpec,
    recipe: str,
    corpus: Corpus,
    limits: RunLimits,
    scratch_root: Path,
    device: str = "cpu",
    trainer: str = "",
    log_dir: Path | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run one bytelm experiment; never raises for anything the experiment does (only
    Cancelled, when `cancel` is set by a trainer shutting down)."""
    base = result_fields(spec, device, trainer, corpus_hash=corpus.corpus_hash)
    if not PLAIN_NAME.fullmatch(spec.run_id):  # it names the scratch directory, then removed
        why = f"run id {spec.run_id[:200]!r} is not a plain name"
        return RunResult(**base, status=RunStatus.REFUSED, reason=why)
    try:
        source = apply(recipe, spec.patch, "recipe.py") if spec.patch else recipe
    except PatchRefused as exc:
        return RunResult(**base, status=RunStatus.REFUSED, reason=f"patch refused: {exc}")
    scratch = scratch_root / spec.run_id
    remove_tree(scratch)
    scratch.mkdir(parents=True)
    (scratch / "recipe.py").write_text(source)
    progress = _Progress()
    # The log is read through this handle, never through its path, which the experiment may
    # have replaced (a link to a secret of the trainer's, a FIFO that blocks the reader).
    log = os.open(
        scratch / "experiment.log", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644
    )
    try:
        status, reason, metric = _experiment(
            spec, corpus, limits, scratch, log, device, progress, cancel
        )
    finally:
        tail = fd_tail(log)
        if log_dir is not None:
            _keep_log(log, log_dir / f"{spec.run_id}.log")
        os.close(log)
        remove_tree(scratch)
    return RunResult(
        **base,
        status=status,
        reason=reason,
        metric=metric,
        steps=progress.steps,
        tokens=progress.tokens,
        train_seconds=round(progress.train_seconds, 3),
        startup_seconds=round(progress.startup_seconds, 3),
        eval_seconds=round(progress.eval_seconds, 3),
        flops=6.0 * progress.parameters * progress.tokens,
        peak_mem_mb=progress.peak_mem_mb,
        log_tail=tail,
    )


class Cancelled(Exception):
    """The trainer is shutting down: the run was stopped and must be retried elsewhere."""


def _experiment(
    spec: RunSpec,
    corpus: Corpus,
    limits: RunLimits,
    scratch: Path,
    log: int,
    device: str,
    progress: _Progress,
    cancel: threading.Event | None,
) -> tuple[RunStatus, str, float | None]:
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    os.set_blocking(resp_w, False)  # no write may outlast the deadline (see _Session.write)
    config = {
        "seed": spec.seed,
        "dials": spec.dials,
        "device": device,
        "scratch": str(scratch),
        "req_fd": req_w,
        "resp_fd": resp_r,
    }
    env = scrubbed_env(scratch, {}, cpu=not device.startswith("cuda"))
    process = start_experiment(config, env, limits.limits, (req_w, resp_r, log))
    os.close(req_w)
    os.close(resp_r)
    session = _Session(spec, corpus, limits, process, scratch, req_r, resp_w, progress, cancel)
    try:
        try:
            metric: float | None = session.serve()
        except _ChildGone:
            metric = None
        code = session.wait_exit()
    except _Stop as stop:
        return stop.status, stop.reason, None
    finally:
        process.kill()
        os.close(req_r)
        os.close(resp_w)
    if code != 0:
        return (*outcome(code, fd_tail(log), limits.limits, os.fstat(log).st_size), None)
    if metric is None:
        return RunStatus.CRASH, "the experiment exited before its evaluation finished", None
    return RunStatus.OK, "", metric


def _keep_log(log: int, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    size = os.fstat(log).st_size
    start = max(0, size - LOG_KEEP_BYTES)
    path.write_bytes(os.pread(log, size - start, start))


@dataclass
class _Session:
    """The runner's side of one experiment's pipe protocol."""

    spec: RunSpec
    corpus: Corpus
    limits: RunLimits
    process: Experiment
    scratch: Path
    req: int
    resp: int
    progress: _Progress
    cancel: threading.Event | None
    deadline: float = 0.0
    next_disk_check: float = 0.0

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.limits.time_limit_s
        self.generator = torch.Generator().manual_seed(self.spec.seed)  # same seed, same data

    def serve(self) -> float:
        """Answer the experiment's requests until its evaluation is done; return val_bpb."""
        evaluation: Evaluation | None = None
        batch_index = 0
        while True:
            kind = self.read(1)
            if kind == b"B":
                batch, context = p.BATCH_ASK.unpack(self.read(p.BATCH_ASK.size))
                data, spent = self.batch(batch, context)
                self.write(p.BATCH_ANSWER.pack(len(data), spent) + data)
            elif kind == b"L":
                (loss,) = p.LOSS.unpack(self.read(p.LOSS.size))
                if not math.isfinite(loss):
                    steps = self.progress.steps
                    raise _Stop(RunStatus.CRASH, f"non-finite loss ({loss}) at step {steps}")
            elif kind == b"I":
                (size,) = p.INFO.unpack(self.read(p.INFO.size))
                if size > INFO_MAX_BYTES:
                    raise _Stop(RunStatus.CRASH, f"protocol violation: {size} bytes of info")
                self.progress.parameters = _parameters(self.read(size))
            elif kind == b"E":
                if evaluation is None:
                    self.progress.ended = self.progress.ended or time.monotonic()
                    self.progress.peak_mem_mb = peak_rss_mb(self.process.pid)
                    context = self.spec.dials["context"]
                    evaluation = Evaluation(self.corpus.val, context, self.limits.eval_tokens)
                if batch_index == len(evaluation.batches):
                    self.write(p.EVAL_ANSWER.pack(0, 0))
                    try:
                        metric = evaluation.finish()
                        self.progress.evaluated = time.monotonic()
                        return metric
                    except NonCausalModel as exc:
                        raise _Stop(RunStatus.REFUSED, f"evaluation refused: {exc}") from None
                windows = evaluation.batches[batch_index]
                n, context = len(windows), windows.shape[1] - 1
                self.write(p.EVAL_ANSWER.pack(n, context) + windows.numpy().tobytes())
                if self.read(1) != b"O":
                    raise _Stop(RunStatus.CRASH, "protocol violation: expected logits")
                raw = self.read(n * context * p.VOCAB * 4)
                logits = torch.frombuffer(bytearray(raw), dtype=torch.float32)
                try:
                    evaluation.take(batch_index, logits.view(n, context, p.VOCAB))
                except InvalidLogits as exc:
                    raise _Stop(RunStatus.CRASH, f"evaluation failed: {exc}") from None
                batch_index += 1
            else:
                raise _Stop(RunStatus.CRASH, f"protocol violation: unknown request {kind!r}")

    def batch(self, batch: int, context: int) -> tuple[bytes, float]:
        """The next batch, or b"" once the budget is spent; with the share of budget spent."""
        progress, spec = self.progress, self.spec
        now = time.monotonic()
        if progress.started is None:
            progress.started = now  # start-up (imports, model build) is outside the budget
        if not (1 <= batch <= 4096 and 1 <= context <= 8192):
            raise _Stop(RunStatus.CRASH, f"asked for an impossible batch {batch}x{context}")
        if spec.budget_kind == BudgetKind.TOKENS:
            spent = progress.tokens / spec.budget
        else:
            spent = (now - progress.started) / spec.budget
        if spent >= 1.0:
            progress.ended = progress.ended or now
            return b"", 1.0
        train = self.corpus.train
        starts = torch.randint(0, len(train) - context - 1, (batch,), generator=self.generator)
        rows = torch.stack([train[s : s + context + 1] for s in starts.tolist()])
        progress.steps += 1
        progress.tokens += batch * context
        return rows.numpy().tobytes(), spent

    def read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            self.watch()
            ready, _, _ = select.select([self.req], [], [], self.pause())
            if not ready:
                continue
            chunk = os.read(self.req, min(left, 1 << 20))
            if not chunk:
                raise _ChildGone
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def write(self, data: bytes) -> None:
        """Answer without blocking past the deadline: an experiment that asks and never reads
        its answers fills the pipe, and a blocking write would hang the runner for good."""
        view = memoryview(data)
        while view:
            self.watch()
            try:
                view = view[os.write(self.resp, view) :]
            except BlockingIOError:
                select.select([], [self.resp], [], self.pause())
            except BrokenPipeError:  # it closed its end
                raise _ChildGone from None

    def wait_exit(self) -> int:
        """The experiment's exit code, once it has ended by itself; watched as while it ran,
        with a second's grace after the deadline to finish exiting."""
        self.deadline = max(self.deadline, time.monotonic() + 1.0)
        while True:
            self.watch()
            try:
                return self.process.wait(self.pause())
            except subprocess.TimeoutExpired:
                continue

    def pause(self) -> float:
        return max(0.0, min(WATCH_INTERVAL_S, self.deadline - time.monotonic()))

    def watch(self) -> None:
        """Between reads and writes: stop for a trainer shutting down, the deadline, or the
        scratch directory over its quota."""
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled
        now = time.monotonic()
        if now >= self.deadline:
            raise _Stop(RunStatus.TIMEOUT, _timeout_reason(self.spec, self.limits))
        if now >= self.next_disk_check:
            self.next_disk_check = now + WATCH_INTERVAL_S
            self.check_disk()

    def check_disk(self) -> None:
        quota = self.limits.limits
        try:
            used, files = disk_usage(self.scratch, self.process.pid, SCRATCH_DEPTH_MAX)
        except OSError as exc:
            why = f"the scratch directory cannot be checked: {exc}"
            raise _Stop(RunStatus.CRASH, why) from None
        if used > quota.disk_bytes or files > quota.disk_files:
            raise _Stop(
                RunStatus.CRASH,
                f"disk quota exceeded: {used / 2**20:.0f} MiB in {files} files in the scratch "
                f"directory (limit {quota.disk_bytes / 2**20:g} MiB, {quota.disk_files} files)",
            )


def _parameters(info: bytes) -> int:
    """The parameter count from the experiment's info (it feeds only the FLOPs estimate)."""
    try:
        count = json.loads(info)["parameters"]
    except (ValueError, TypeError, KeyError, IndexError, RecursionError):
        count = None
    if not isinstance(count, int) or not 0 <= count < 2**53:
        raise _Stop(RunStatus.CRASH, "protocol violation: unreadable info")
    return count


def _timeout_reason(spec: RunSpec, limits: RunLimits) -> str:
    return (
        f"exceeded the wall-clock limit of {limits.time_limit_s:g}s "
        f"(budget {spec.budget:g} {spec.budget_kind.value})"
    )
