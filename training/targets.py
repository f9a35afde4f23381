"""What the swarm optimises: a target declares its editable file, its metric and how one
experiment runs at a tier.

- `bytelm` (default): the built-in byte-level GPT; val_bpb, lower is better, computed by the
  locked evaluator (see runner, evaluator).
- `command`: any project — an editable file, a run command, a metric the command prints (see
  command_target: one stage or two, held-out files; command_io: placeholders, SWARM_*
  variables, how the metric is read). The command runs in a copy of the project with the
  swarm's own interpreter first on PATH (so `python` has the packages swarm was installed
  with), under the same limits as every experiment.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bus.messages import RunResult, RunSpec
from training.command_io import parse_metric
from training.command_target import CommandTarget
from training.corpus import corpus_hash, load_corpus
from training.run_limits import RunLimits
from training.target_info import RECIPE

__all__ = ["RECIPE", "BytelmTarget", "CommandTarget", "Target", "parse_metric"]


class Target(Protocol):
    name: str
    editable: str
    lower_is_better: bool

    @property
    def metric_name(self) -> str: ...

    def initial_source(self) -> str: ...

    def data_hash(self) -> str:
        """The hash of the data its runs train and evaluate on; "" for a target without a
        corpus of ours (its data is the project's business)."""
        ...

    def run(
        self,
        spec: RunSpec,
        source: str,
        limits: RunLimits,
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
    language_key: bytes | None = None  # the secret language's (swarm.config.SECRET_DATA)
    name: str = "bytelm"
    editable: str = "recipe.py"
    metric_name: str = "val_bpb"
    lower_is_better: bool = True

    def initial_source(self) -> str:
        return RECIPE.read_text()

    def data_hash(self) -> str:
        return corpus_hash(self.corpus_dir, self.data, self.language_key)

    def run(
        self,
        spec: RunSpec,
        source: str,
        limits: RunLimits,
        scratch: Path,
        device: str,
        trainer: str,
        log_dir: Path | None,
        cancel: threading.Event | None = None,
    ) -> RunResult:
        from training.runner import run_bytelm  # torch: only where bytelm runs

        corpus = load_corpus(self.corpus_dir, self.data, self.language_key)
        return run_bytelm(spec, source, corpus, limits, scratch, device, trainer, log_dir, cancel)
