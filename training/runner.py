"""The sandboxed runner: one RunSpec in, one RunResult out, whatever the experiment does.

It patches the champion recipe in a scratch directory, starts the experiment in its own process
group under rlimits with a scrubbed environment, feeds it training batches until the budget is
spent, evaluates the model it saves in fresh processes, one per batch of windows (fresh_eval,
evaluator), and turns every outcome — success, exception, NaN, hang,
memory exhaustion, a full disk, a refused patch, a non-causal model, a broken protocol — into a
RunResult with a reason. Nothing the experiment sends or leaves behind can block, crash or
deceive the runner: every wait has the deadline, every message a size bound, and the log is
read through the runner's own handle.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from bus.messages import RunResult, RunSpec, RunStatus
from training.control_windows import run_control
from training.corpus import Corpus
from training.experiment_session import (
    ChildGone,
    Progress,
    SandboxRefused,
    Stop,
)
from training.fresh_eval import evaluate_in_fresh_processes
from training.harness_child import NO_SANDBOX
from training.log_pipe import output_pipe, private_log
from training.process_outcome import fd_tail, keep_log, outcome, remove_tree, result_fields
from training.run_limits import PLAIN_NAME, Cancelled, RunLimits
from training.stage_process import Run, stage_process

__all__ = ["PLAIN_NAME", "Cancelled", "RunLimits", "run_bytelm"]

NONE: tuple[float | None, float | None] = (None, None)  # no metric, no control metric


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
    """Run one bytelm experiment of `recipe`, the whole editable file; never raises for
    anything the experiment does (only Cancelled, when `cancel` is set by a trainer shutting
    down)."""
    base = result_fields(
        spec, device, trainer, corpus_hash=corpus.corpus_hash, unconfined=limits.unsafe_no_sandbox
    )
    if not PLAIN_NAME.fullmatch(spec.run_id):  # it names the scratch directory, then removed
        why = f"run id {spec.run_id[:200]!r} is not a plain name"
        return RunResult(**base, status=RunStatus.REFUSED, reason=why)
    source = recipe  # the whole file to run (training/spec_recipe.py): nothing is patched here
    scratch = scratch_root / spec.run_id
    remove_tree(scratch)
    scratch.mkdir(parents=True)
    (scratch / "recipe.py").write_text(source)
    progress = Progress()
    # Outside the scratch directory and unlinked: the experiment writes to a pipe (log_pipe.py)
    # and has neither a handle on the log nor a path to it.
    log = private_log(scratch_root, spec.run_id)
    try:
        status, reason, (metric, control) = _experiment(
            spec, corpus, limits, scratch, log, device, progress, cancel
        )
    finally:
        tail = fd_tail(log)
        if log_dir is not None:
            keep_log(log, log_dir / f"{spec.run_id}.log")
        os.close(log)
        remove_tree(scratch)
    return RunResult(
        **base,
        status=status,
        reason=reason,
        metric=metric,
        control_metric=control,
        steps=progress.steps,
        tokens=progress.tokens,
        train_seconds=round(progress.train_seconds, 3),
        startup_seconds=round(progress.startup_seconds, 3),
        eval_seconds=round(progress.eval_seconds, 3),
        flops=6.0 * progress.parameters * progress.tokens,
        peak_mem_mb=progress.peak_mem_mb,
        log_tail=tail,
    )


def _experiment(
    spec: RunSpec,
    corpus: Corpus,
    limits: RunLimits,
    scratch: Path,
    log: int,
    device: str,
    progress: Progress,
    cancel: threading.Event | None,
) -> tuple[RunStatus, str, tuple[float | None, float | None]]:
    """Status, reason, and the metric with the control windows' (control_windows.py)."""
    deadline = time.monotonic() + limits.time_limit_s
    # Once per run: its training never sends these, its evaluation scores them
    control = run_control(
        spec.seed, int(spec.dials["context"]), limits.eval_tokens, len(corpus.train)
    )
    run = Run(spec, corpus, limits, log, device, progress, cancel, deadline, control)
    try:
        code = _train(run, scratch)
    except SandboxRefused:  # said over the pipe before any of the recipe ran: its log is ours
        last = (fd_tail(log).strip().splitlines() or [""])[-1]
        return RunStatus.REFUSED, last if last.startswith(NO_SANDBOX) else NO_SANDBOX, NONE
    except Stop as stop:
        return stop.status, stop.reason, NONE
    if code is not None:  # it ended without handing over a model; the log holds all it wrote
        if code != 0:
            return (*outcome(code, fd_tail(log), limits.limits), NONE)
        why = "the experiment exited before its evaluation (it never saved its model)"
        return RunStatus.CRASH, why, NONE
    try:  # the training process is dead: nothing of it is left to meet the evaluation's
        return RunStatus.OK, "", evaluate_in_fresh_processes(run, scratch)
    except Stop as stop:
        return stop.status, stop.reason, NONE


def _train(run: Run, scratch: Path) -> int | None:
    """The training stage, to its end: None once it has saved its model (it is killed then:
    a red team kept training in a thread after saying so, and saved again), else its exit
    code."""
    with (
        output_pipe(run.log, run.limits.limits.file_size_bytes) as output,
        stage_process(run, "train", scratch, output) as session,
    ):
        try:
            session.train()
            return None
        except ChildGone:
            code: int = session.wait_exit()
            return code
