"""One run's processes: what they share (`Run`), and starting one of them with its session.

A bytelm run is a training process and then one evaluation process per batch of windows
(fresh_eval.py). Each is forked from the zygote with its own pipes and config, answered by an
ExperimentSession under the run's deadline, and killed and waited for when it is done with:
nothing of it is left when the next starts.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bus.messages import RunSpec
from training.corpus import Corpus
from training.experiment_session import ExperimentSession, Progress
from training.log_pipe import OutputPipe
from training.sandbox import scrubbed_env
from training.zygote import start_experiment

if TYPE_CHECKING:
    import torch

    from training.run_limits import RunLimits


@dataclass(frozen=True, slots=True)
class Run:
    """What every process of one run shares: its spec, limits, log, device and deadline."""

    spec: RunSpec
    corpus: Corpus
    limits: RunLimits
    log: int
    device: str
    progress: Progress
    cancel: threading.Event | None
    deadline: float  # monotonic
    control: torch.Tensor  # starts of its control windows in the training split


@contextlib.contextmanager
def stage_process(
    run: Run, stage: str, folder: Path, output: OutputPipe
) -> Iterator[ExperimentSession]:
    """A process of `run` at `stage` ("train" or "evaluate") in `folder`, printing into
    `output`, and the session that answers it; killed and waited for on leaving."""
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    os.set_blocking(resp_w, False)  # no write may outlast the deadline (see the session's write)
    config: dict[str, Any] = {
        "stage": stage,
        "seed": run.spec.seed,
        "dials": run.spec.dials,
        "device": run.device,
        "scratch": str(folder),
        "req_fd": req_w,
        "resp_fd": resp_r,
        "unsafe_no_sandbox": run.limits.unsafe_no_sandbox,
    }
    env = scrubbed_env(folder, {}, cpu=not run.device.startswith("cuda"))
    try:
        process = start_experiment(config, env, run.limits.limits, (req_w, resp_r, output.write))
    finally:
        output.handed_over()
        os.close(req_w)
        os.close(resp_r)
    session = ExperimentSession(
        run.spec,
        run.corpus,
        run.limits,
        process,
        folder,
        req_r,
        resp_w,
        run.progress,
        run.cancel,
        run.deadline,
        run.control,
    )
    try:
        yield session
    finally:
        process.kill()
        os.close(req_r)
        os.close(resp_w)
