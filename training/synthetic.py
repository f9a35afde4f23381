"""The synthetic target: a recipe of constants scored instantly by a known function.

`swarm start --target synthetic` runs the whole swarm (bus, ladder, ledger, agents, trainers)
with experiments that cost nothing: a dry run of a deployment, and the load behind
bench/capacity.py. The loss is a bowl in log space around known best values, one level per tier
(larger tiers reach lower loss), plus seed noise that every run on the same seed and tier
shares (so the ladder's paired comparisons cancel it) and a little noise of its own.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import math
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bus.messages import RunResult, RunSpec, RunStatus
from training.process_outcome import result_fields
from training.run_limits import RunLimits
from training.target_info import SYNTHETIC

# name -> (best value, loss added per squared e-fold away from it)
SHAPE = {
    "LR": (4e-3, 0.05),
    "WEIGHT_DECAY": (0.03, 0.02),
    "WARMUP_FRACTION": (0.12, 0.01),
    "INIT_SCALE": (0.5, 0.01),
    "GRAD_CLIP": (1.0, 0.001),
    "BETA1": (0.9, 0.002),
    "BETA2": (0.98, 0.002),
    "DROPOUT": (0.05, 0.001),
    "EMBED_LR_MULT": (2.0, 0.002),
    "HEAD_LR_MULT": (1.0, 0.001),
    "NORM_EPS": (1e-5, 0.0001),
    "LOGIT_SCALE": (1.0, 0.001),
    **{f"KNOB_{i:02d}": (1.0, 0.0005) for i in range(40)},
}
SEED_NOISE = 0.02  # shared by every run on one seed and tier
OWN_NOISE = 0.005


def loss(values: Mapping[str, float], tier: int, seed: int) -> float:
    bowl = sum(c * math.log(values[name] / best) ** 2 for name, (best, c) in SHAPE.items())
    shared = random.Random(f"seed/{tier}/{seed}").gauss(0.0, SEED_NOISE)
    key = "/".join(f"{values[name]!r}" for name in SHAPE) + f"/{tier}/{seed}"
    own = random.Random(hashlib.sha256(key.encode()).digest()).gauss(0.0, OWN_NOISE)
    return 1.0 + 0.5 / (tier + 1) + bowl + shared + own


def read_values(source: str) -> dict[str, float]:
    """The recipe's constants; ValueError names one that is missing or not a positive number."""
    found: dict[str, object] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    values = {}
    for name in SHAPE:
        value = found.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
        values[name] = float(value)
    return values


@functools.lru_cache(maxsize=1024)
def _values(recipe: str) -> Mapping[str, float]:
    """An idea runs on several seeds and tiers: its recipe is parsed once."""
    return read_values(recipe)


@dataclass
class SyntheticTarget:
    name: str = "synthetic"
    editable: str = "recipe.py"
    metric_name: str = "loss"
    lower_is_better: bool = True

    def initial_source(self) -> str:
        return SYNTHETIC.initial_source()

    def data_hash(self) -> str:
        return ""

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
        """`source` is the whole recipe (training/spec_recipe.py). Limits, scratch, logs and
        cancelling do not apply: nothing runs but arithmetic."""
        started = time.monotonic()
        base = result_fields(spec, device, trainer, metric_name=self.metric_name)
        try:
            values = _values(source)
        except (SyntaxError, ValueError) as exc:
            return RunResult(**base, status=RunStatus.CRASH, reason=f"recipe: {exc}")
        return RunResult(
            **base,
            status=RunStatus.OK,
            metric=loss(values, spec.tier, spec.seed),
            train_seconds=round(time.monotonic() - started, 6),
        )
