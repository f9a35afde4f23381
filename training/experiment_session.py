"""The runner's side of one bytelm experiment process while it runs: the pipe protocol and its
watch.

An `ExperimentSession` answers one process: the training stage's requests (`train`: batches
until the budget is spent, until it hands over its model), or one evaluation process's request
for its windows (`answer_windows`, whose logits it scores). Between every read and write it
checks the run's deadline, a trainer shutting down and the scratch directory's disk quota.
Whatever the experiment does wrong ends the session with a `Stop` (a status and a reason); a
process that exits or closes its pipe early raises `ChildGone`. `Progress` records what the run
did for its RunResult.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from bus.messages import BudgetKind, RunSpec, RunStatus
from training import protocol as p
from training.control_windows import training_starts
from training.corpus import Corpus
from training.evaluator import Evaluation, InvalidLogits
from training.process_outcome import disk_usage, peak_rss_mb
from training.run_limits import SCRATCH_DEPTH_MAX, WATCH_INTERVAL_S, Cancelled
from training.zygote import Experiment

if TYPE_CHECKING:
    from training.run_limits import RunLimits

INFO_MAX_BYTES = 64 * 1024  # the experiment's facts for the summary: a few numbers
# Between the last batch and the evaluation a recipe finishes its step and returns its model:
# a few steps' time. More is training the budget did not pay for (a red team replayed the
# batches it had kept: 12 s of training counted in a 46 s run). At least AFTER_BUDGET_S, else
# AFTER_BUDGET_STEPS times its mean step.
AFTER_BUDGET_S = 3.0
AFTER_BUDGET_STEPS = 3
# ... but never more than this share of its training time: a red team made its mean step long
# with two huge batches under a seconds budget, and then trained 14 s past a 10 s budget.
AFTER_BUDGET_SHARE = 0.1


class ChildGone(Exception):
    """The experiment exited or closed its pipe before the protocol was done."""


class SandboxRefused(Exception):
    """The process could not confine itself and ran none of the recipe (its first message)."""


class Stop(Exception):
    """The run ends here, with this status and reason."""

    def __init__(self, status: RunStatus, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass
class Progress:
    """What the run has done so far, for its RunResult."""

    spawned: float = field(default_factory=time.monotonic)
    evaluated: float | None = None
    steps: int = 0
    tokens: int = 0
    started: float | None = None
    ended: float | None = None
    last_batch: float | None = None  # when the last batch was handed over (monotonic)
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


@dataclass
class ExperimentSession:
    """The runner's side of one experiment process's pipe protocol, under the run's deadline."""

    spec: RunSpec
    corpus: Corpus
    limits: RunLimits
    process: Experiment
    scratch: Path
    req: int
    resp: int
    progress: Progress
    cancel: threading.Event | None
    deadline: float  # monotonic: the run's, shared by its training and evaluation processes
    control: torch.Tensor  # starts of the run's control windows: never sent (control_windows.py)
    next_disk_check: float = 0.0
    windows_sent: bool = False

    def __post_init__(self) -> None:
        self.generator = torch.Generator().manual_seed(self.spec.seed)  # same seed, same data
        self.control_span = int(self.spec.dials["context"]) + 1  # a control window's bytes

    def confined(self) -> None:
        """The process's first message: confined ("S"), or refused for want of a sandbox."""
        kind = self.read(1)
        if kind == b"X":
            raise SandboxRefused
        if kind != b"S":
            raise Stop(RunStatus.CRASH, f"protocol violation: {kind!r} before the sandbox's word")

    def train(self) -> None:
        """Answer the training stage's requests until it has saved its model."""
        self.confined()
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
                    raise Stop(RunStatus.CRASH, f"non-finite loss ({loss}) at step {steps}")
            elif kind == b"I":  # sent as train() returns: the budget's end is checked here
                last = self.progress.last_batch
                self._check_after_budget(last, "its last batch to its evaluation")
                # training ends here, not at the budget's end: what a recipe does after its
                # last batch (within the allowance) is counted in train_seconds
                self.progress.ended = time.monotonic()
                self.progress.peak_mem_mb = peak_rss_mb(self.process.pid)  # alive: it waits
                (size,) = p.INFO.unpack(self.read(p.INFO.size))
                if size > INFO_MAX_BYTES:
                    raise Stop(RunStatus.CRASH, f"protocol violation: {size} bytes of info")
                self.progress.parameters = _parameters(self.read(size))
            elif kind == b"D":
                if self.progress.ended is None:
                    raise Stop(RunStatus.CRASH, "protocol violation: a model before its info")
                # Saving takes less than a step: more is training after the budget again.
                self._check_after_budget(
                    self.progress.ended, "its training's end to its saved model"
                )
                peak = peak_rss_mb(self.process.pid)  # 0 if it has exited since
                self.progress.peak_mem_mb = max(self.progress.peak_mem_mb, peak)
                return
            else:
                raise Stop(RunStatus.CRASH, f"protocol violation: unknown request {kind!r}")

    def answer_windows(
        self, evaluation: Evaluation, index: int, before_windows: Callable[[], None]
    ) -> None:
        """Send batch `index`'s windows (inputs only) to this evaluation process and score its
        logits; `before_windows` runs once it has asked, before it is sent anything."""
        self.confined()
        if self.read(1) != b"E":
            raise Stop(RunStatus.CRASH, "protocol violation: expected a request for windows")
        before_windows()
        windows = evaluation.batches[index]
        n, context = len(windows), windows.shape[1] - 1
        # Inputs only: a window's targets stay here, where the loss is computed (a red team's
        # hook on the harness read them and scored 1e-15).
        self.windows_sent = True
        self.write(p.EVAL_ANSWER.pack(n, context) + windows[:, :-1].contiguous().numpy().tobytes())
        if self.read(1) != b"O":
            raise Stop(RunStatus.CRASH, "protocol violation: expected logits")
        raw = self.read(n * context * p.VOCAB * 4)
        logits = torch.frombuffer(bytearray(raw), dtype=torch.float32)
        try:
            evaluation.take(index, logits.view(n, context, p.VOCAB))
        except InvalidLogits as exc:
            raise Stop(RunStatus.CRASH, f"evaluation failed: {exc}") from None

    def _check_after_budget(self, since: float | None, what: str) -> None:
        """Stop a run that kept training after its last batch: more than a few steps' time
        (module constants) from `since` to now."""
        progress = self.progress
        if since is None or progress.last_batch is None or progress.started is None:
            return
        if not progress.steps:
            return
        trained = progress.last_batch - progress.started
        steps = min(AFTER_BUDGET_STEPS * trained / progress.steps, AFTER_BUDGET_SHARE * trained)
        allowed = max(AFTER_BUDGET_S, steps)
        idle = time.monotonic() - since
        if idle > allowed:
            raise Stop(
                RunStatus.CRASH,
                f"went on training after its budget: {idle:.1f}s from {what}, "
                f"where finishing a step takes at most {allowed:.1f}s",
            )

    def batch(self, batch: int, context: int) -> tuple[bytes, float]:
        """The next batch, or b"" once the budget is spent; with the share of budget spent.
        Under a token budget a batch never takes the run past it: one that would is cut to the
        rows the budget has left (and none is granted once a row no longer fits), so a recipe
        with a huge batch trains on its budget's tokens, no more."""
        progress, spec = self.progress, self.spec
        now = time.monotonic()
        if progress.started is None:
            progress.started = now  # start-up (imports, model build) is outside the budget
        if not (1 <= batch <= 4096 and 1 <= context <= 8192):
            raise Stop(RunStatus.CRASH, f"asked for an impossible batch {batch}x{context}")
        if spec.budget_kind == BudgetKind.TOKENS:
            spent = progress.tokens / spec.budget
        else:
            spent = (now - progress.started) / spec.budget
        if spec.budget_kind == BudgetKind.TOKENS:
            batch = min(batch, int((spec.budget - progress.tokens) // context))
        if spent >= 1.0 or batch < 1:
            progress.ended = progress.ended or now
            return b"", 1.0
        train = self.corpus.train
        starts = training_starts(
            len(train), context + 1, batch, self.control, self.control_span, self.generator
        )
        if not len(starts):  # no row of this length misses the control windows
            raise Stop(
                RunStatus.CRASH,
                f"asked for rows of {context + 1} bytes, too long for a training split of "
                f"{len(train)} bytes to give one that misses the evaluation's control text",
            )
        rows = torch.stack([train[s : s + context + 1] for s in starts.tolist()])
        progress.steps += 1
        progress.tokens += len(rows) * context
        progress.last_batch = now
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
                raise ChildGone
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
                raise ChildGone from None

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
            raise Stop(RunStatus.TIMEOUT, _timeout_reason(self.spec, self.limits))
        if now >= self.next_disk_check:
            self.next_disk_check = now + WATCH_INTERVAL_S
            self.check_disk()

    def check_disk(self) -> None:
        quota = self.limits.limits
        try:
            used, files = disk_usage(self.scratch, self.process.pid, SCRATCH_DEPTH_MAX)
        except OSError as exc:
            why = f"the scratch directory cannot be checked: {exc}"
            raise Stop(RunStatus.CRASH, why) from None
        if used > quota.disk_bytes or files > quota.disk_files:
            raise Stop(
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
        raise Stop(RunStatus.CRASH, "protocol violation: unreadable info")
    return count


def _timeout_reason(spec: RunSpec, limits: RunLimits) -> str:
    return (
        f"exceeded the wall-clock limit of {limits.time_limit_s:g}s "
        f"(budget {spec.budget:g} {spec.budget_kind.value})"
    )
