"""The locked evaluator: held-out windows out, logits in, val_bpb computed here.

Runs in the trusted runner process. The experiment only ever sees the input bytes of each window
and returns logits; the loss, the number of scored bytes and the metric are computed here.

A model that peeks at later bytes in its window (non-causal attention, or any trick that reads
the future inputs) would score far too well. Causality probes catch it: a few "twin" windows
share a prefix with a real window and then diverge at a random point; a causal model's logits
over the shared prefix are identical for both. Twins travel in separate batches among the real
ones, so the model cannot compare them side by side.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from training.protocol import VOCAB

EVAL_BATCH = 16  # windows per batch sent to the experiment
PROBES = 2  # twin windows per evaluation
PROBE_TOLERANCE = 1e-3  # max |Δ logit| over the shared prefix for a causal model


class NonCausalModel(ValueError):
    pass


class InvalidLogits(ValueError):
    """The model returned logits no loss can be computed from (NaN or infinite)."""


@dataclass
class Evaluation:
    """One evaluation of `n_tokens` held-out bytes at a fixed context; fed batch by batch:
    send `batches[i]`'s windows, pass the logits back to `take(i, logits)`, then `finish()`."""

    val: torch.Tensor
    context: int
    n_tokens: int
    batches: list[torch.Tensor] = field(default_factory=list)
    nats: float = 0.0
    scored: int = 0
    _first_window: dict[int, int] = field(default_factory=dict)  # real batch -> window index
    _probe_batch: dict[int, int] = field(default_factory=dict)  # batch -> probe number
    _probes: list[tuple[int, int]] = field(default_factory=list)  # (window index, split)
    _logits: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        windows = self._windows()
        real = [windows[i : i + EVAL_BATCH] for i in range(0, len(windows), EVAL_BATCH)]
        # Fixed, seed-independent choices: every run of every idea is scored on the same bytes.
        rng = random.Random(len(self.val) * 31 + self.context)
        twins = []
        for _ in range(PROBES):
            index = rng.randrange(len(windows))
            split = rng.randrange(1, self.context - 1)
            donor = rng.randrange(len(self.val) - self.context - 1)
            twin = windows[index].clone()
            twin[split + 1 :] = self.val[donor : donor + self.context - split]
            self._probes.append((index, split))
            twins.append(twin.unsqueeze(0))
        every = max(1, len(real) // PROBES)
        first = 0
        for i, batch in enumerate(real):
            self._first_window[len(self.batches)] = first
            self.batches.append(batch)
            first += len(batch)
            if i % every == 0 and twins:
                self._probe_batch[len(self.batches)] = PROBES - len(twins)
                self.batches.append(twins.pop(0))

    def _windows(self) -> torch.Tensor:
        n = max(1, self.n_tokens // self.context)
        span = self.context + 1
        if len(self.val) < n * span:
            raise ValueError(f"val split has {len(self.val)} bytes; need {n * span} to evaluate")
        stride = (len(self.val) - span) // n
        return torch.stack([self.val[i * stride : i * stride + span] for i in range(n)])

    def take(self, batch: int, logits: torch.Tensor) -> None:
        """Score a real batch, or keep a probe's logits for the causality check."""
        if not bool(torch.isfinite(logits).all()):
            raise InvalidLogits(
                f"the model returned non-finite logits (NaN or inf) in batch {batch}"
            )
        if batch in self._probe_batch:
            self._logits[("twin", self._probe_batch[batch])] = logits[0]
            return
        windows = self.batches[batch]
        targets = windows[:, 1:].long()
        logp = F.log_softmax(logits.reshape(-1, VOCAB).double(), dim=-1)
        self.nats -= float(logp.gather(1, targets.reshape(-1, 1)).sum())
        self.scored += targets.numel()
        first = self._first_window[batch]
        for probe, (index, _) in enumerate(self._probes):
            if first <= index < first + len(windows):
                self._logits[("real", probe)] = logits[index - first]

    def finish(self) -> float:
        """Check every probe against its real window, then return val_bpb."""
        for probe, (_, split) in enumerate(self._probes):
            self._check_twin(self._logits[("real", probe)], self._logits[("twin", probe)], split)
        if self.scored == 0 or not math.isfinite(self.nats):
            raise ValueError("evaluation produced no finite loss")
        return self.nats / math.log(2) / self.scored

    @staticmethod
    def _check_twin(real: torch.Tensor, twin: torch.Tensor, split: int) -> None:
        delta = float((real[: split + 1] - twin[: split + 1]).abs().max())
        scale = float(real[: split + 1].abs().max()) + 1.0
        if not delta <= PROBE_TOLERANCE * scale:
            raise NonCausalModel(
                f"non-causal model: logits at positions 0..{split} changed by {delta:.3g} when "
                f"only bytes after position {split + 1} changed; "
                "predictions must not see the future"
            )
