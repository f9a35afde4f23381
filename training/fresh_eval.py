"""Evaluation in fresh processes: one per batch of windows, none with a way to the next.

A model that keeps state between batches can remember the windows it was sent and replay them
when a causality probe's twin arrives (the hole a strict xfail pinned), and a model that prints
the windows it is sent could carry them to a later run in its log tail. So the training process
never sees an evaluation window: it saves its model and ends. Each batch is then answered by a
new process forked from the zygote, which has run none of the recipe's code before; it loads the
model (from a folder of its own holding only `model.pt`), asks for its windows, answers with
logits and is killed before the next one starts. It may write no file anywhere, start no
process and open no socket (Landlock with no writable path, and the training stage's seccomp),
so nothing it learns of its windows outlives it. What it prints before it asks for its windows
reaches the run's log only if it fails there (a load error is worth reading); from then on its
output pipe is closed. How it failed once it had its windows becomes one of a few fixed
reasons, never its text. (Output before the windows was kept on success too, until a red team
passed window bytes from one evaluation process to the next through the machine's process-id
counter: the last process starts threads until their id says a byte, and the next one, forked
right after, reads its own pid while it loads and prints it. Those few bits per process now
reach a log only by failing the run.)
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from bus.messages import RunStatus
from training.aimed_probes import reference_for
from training.evaluator import Evaluation, NonCausalModel
from training.experiment_session import ChildGone, SandboxRefused, Stop
from training.harness_child import (
    EXIT_BAD_MODEL,
    EXIT_MODEL_LOAD,
    LOAD_FAILED,
    MODEL_FILE,
    NO_SANDBOX,
)
from training.log_pipe import OutputPipe, private_log
from training.process_outcome import fd_tail, outcome, remove_tree
from training.stage_process import Run, stage_process

if TYPE_CHECKING:
    from training.run_limits import RunLimits


def evaluate_in_fresh_processes(run: Run, scratch: Path) -> tuple[float, float | None]:
    """val_bpb of the model the training stage left in `scratch`, and the bits per byte of the
    median of the run's control windows (None where the training split has room for none);
    raises Stop otherwise."""
    saved = scratch / MODEL_FILE
    try:
        mode = saved.lstat().st_mode
    except FileNotFoundError:
        raise Stop(RunStatus.CRASH, "the experiment ended without saving its model") from None
    if not stat.S_ISREG(mode):
        raise Stop(RunStatus.CRASH, f"the experiment's {MODEL_FILE} is not a regular file")
    # A folder of its own, outside what the training stage could write: the evaluation
    # processes read the model and nothing else the training stage left.
    folder = scratch.parent / f".{scratch.name}.model"
    remove_tree(folder)
    folder.mkdir(mode=0o700)
    try:
        os.rename(saved, folder / MODEL_FILE)
        context = int(run.spec.dials["context"])
        reference = reference_for(run.corpus)
        train = run.corpus.train
        rows = [train[s : s + context + 1] for s in run.control.tolist()]
        control = torch.stack(rows) if rows else None
        evaluation = Evaluation(
            run.corpus.val, context, run.limits.eval_tokens, None, reference, control=control
        )
        index = 0
        while index < len(evaluation.batches):  # the last batch is aimed once the rest are in
            _answer_batch(run, folder, evaluation, index)
            index += 1
        try:
            metric = evaluation.finish()
        except NonCausalModel as exc:
            raise Stop(RunStatus.REFUSED, f"evaluation refused: {exc}") from None
        run.progress.evaluated = time.monotonic()
        return metric, evaluation.control_bpb()
    finally:
        remove_tree(folder)


def _answer_batch(run: Run, folder: Path, evaluation: Evaluation, index: int) -> None:
    """One evaluation process for batch `index`: started, answered, and dead on return."""
    # One limit on the run's log, not one per process (a red team's 11 processes wrote 11x it)
    room = max(0, run.limits.limits.file_size_bytes - os.fstat(run.log).st_size)
    held = private_log(folder.parent, f"{folder.name}.{index}")  # the run's log, if it fails
    try:
        output = OutputPipe(held, room)
        try:
            with stage_process(run, "evaluate", folder, output) as session:
                try:
                    session.answer_windows(evaluation, index, before_windows=output.cut)
                    return  # its logits are in: how it ends changes nothing, what it said neither
                except ChildGone:
                    code = session.wait_exit()
                except SandboxRefused:
                    raise Stop(RunStatus.REFUSED, NO_SANDBOX) from None
        finally:
            output.close()
        if not session.windows_sent:  # failed before its windows: what it said is worth reading
            # all of it: past `room` the pipe kept a note and the output's end (the error)
            os.write(run.log, os.pread(held, os.fstat(held).st_size, 0))
    finally:
        os.close(held)
    raise Stop(*_failure(code, session.windows_sent, fd_tail(run.log), run.limits))


def _failure(code: int, windows_sent: bool, tail: str, limits: RunLimits) -> tuple[RunStatus, str]:
    """Why an evaluation process ended without answering: from its exit alone once it had its
    windows (its text from then on is not kept), from its log before that."""
    if not windows_sent:
        if code == EXIT_MODEL_LOAD:  # the error is the line before the harness's own
            said = [line for line in tail.splitlines() if line.strip()]
            last = next((line for line in reversed(said) if LOAD_FAILED not in line), "")
            why = "the trained model could not be loaded for evaluation in a fresh process"
            return RunStatus.CRASH, f"{why}: {last[:300]}"
        if code == 0:
            return RunStatus.CRASH, "an evaluation process ended without asking for its windows"
        return outcome(code, tail, limits.limits)
    if code < 0:
        status, reason = outcome(code, "", limits.limits)
        return status, f"{reason} during evaluation"
    if code == EXIT_BAD_MODEL:
        return RunStatus.CRASH, "the model returned logits of the wrong shape during evaluation"
    return RunStatus.CRASH, (
        "the model failed during evaluation (what an evaluation process prints is not kept: "
        "run the model on a batch inside train() to see the error)"
    )
