"""The locked evaluator: held-out windows out, logits in, val_bpb computed here.

Runs in the trusted runner process. The experiment only ever sees the input bytes of each window
and returns logits; the loss, the number of scored bytes and the metric are computed here.

A model that peeks at later bytes in its window (non-causal attention, or any trick that reads
the future inputs) would score far too well. Causality probes catch it: "twin" windows share a
prefix with a real window and then diverge at a random point, with a byte that differs; a causal
model's predictions over the shared prefix are identical for both. Twins travel in separate
batches among the real ones, at places drawn afresh for each evaluation, so the model cannot
compare them side by side, and a probe batch looks like any other (the same size, the twins at
random rows among distinct windows of the val split): a red team noted that a model could be
causal only in batches of one, which is what probes used to be, and another told them by a
repeated row. A twin catches a one-byte peek only at its split, so every evaluation carries a
twin at every split a peek could read from (0 to context - 2), each of a distinct window: a
red team that peeked at one position passed 88% of evaluations when eight twins were drawn at
random splits. A model that peeks on only some windows is caught where a twin's window is one of
them (`python -m bench.probe_misses` measures the misses).
Predictions are compared as log-probabilities, with an absolute tolerance: a tolerance relative
to the largest logit was defeated by adding 1e6 to every logit, which changes no prediction.
Each batch is answered by a fresh process (fresh_eval.py), so a model cannot remember a real
window and replay it for its twin; within a batch, a prediction that uses the other windows
(dynamic evaluation across rows) changes with them and is refused by the same probe.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from training.protocol import VOCAB

EVAL_BATCH = 32  # windows per batch: one fresh evaluation process each (fresh_eval.py)
PROBE_TOLERANCE = 1e-3  # max |Δ log-probability| over the shared prefix for a causal model


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
    twins: int | None = None  # None: one per split a peek could read from (context - 1)
    batches: list[torch.Tensor] = field(default_factory=list)
    nats: float = 0.0
    scored: int = 0
    _first_window: dict[int, int] = field(default_factory=dict)  # real batch -> window index
    _probe_batch: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # probe, row
    _probes: list[tuple[int, int]] = field(default_factory=list)  # (window index, split)
    _logits: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        windows = self._windows()  # fixed: every run of every idea is scored on the same bytes
        real = [windows[i : i + EVAL_BATCH] for i in range(0, len(windows), EVAL_BATCH)]
        # The probes are not scored, so they are drawn afresh for each evaluation: nothing
        # learned of one run's probes says where the next run's are, or what they hold.
        rng = random.Random(os.urandom(16))
        order: list[tuple[torch.Tensor, list[tuple[int, int]]]] = [(b, []) for b in real]
        twins = self._draw_twins(len(windows), rng)
        size = len(real[0])
        batches = -(-len(twins) // size)  # as few probe batches (processes) as hold them
        for k in range(batches):
            mine = twins[k::batches]
            # The twins at random rows among other windows of the val split, as many as a real
            # batch holds and all different, as a real batch's are (a red team told probe
            # batches by a repeated row); never a twin's own window, which the model could
            # compare it with.
            own = {index for index, _ in mine}
            others = [i for i in range(len(windows)) if i not in own]
            cover = [windows[i] for i in rng.sample(others, min(len(others), size - len(mine)))]
            rows = sorted(rng.sample(range(len(cover) + len(mine)), len(mine)))
            probes = []
            for row, (index, split) in zip(rows, mine, strict=True):
                cover.insert(row, self._twin(windows[index], split, rng))
                probes.append((len(self._probes), row))
                self._probes.append((index, split))
            order.insert(rng.randrange(len(order) + 1), (torch.stack(cover), probes))
        first = 0
        for windows_of, probes in order:
            if probes:
                self._probe_batch[len(self.batches)] = probes
            else:
                self._first_window[len(self.batches)] = first
                first += len(windows_of)
            self.batches.append(windows_of)

    def _draw_twins(self, windows: int, rng: random.Random) -> list[tuple[int, int]]:
        """(window index, split) of each twin: distinct windows, and the splits a peek could
        be caught at (0 to context - 2) each once before any twice."""
        positions = max(0, self.context - 1)
        count = min(positions if self.twins is None else self.twins, windows)
        splits: list[int] = []
        while positions and len(splits) < count:
            splits += rng.sample(range(positions), positions)
        return list(zip(rng.sample(range(windows), count), splits, strict=False))

    def _twin(self, window: torch.Tensor, split: int, rng: random.Random) -> torch.Tensor:
        """`window` up to `split`, then bytes from elsewhere in the val split. The first byte
        after the split always differs from the window's own: a replaying peeker passed one
        evaluation in about 150 when the donor happened to start with the same byte (and the
        probe then checked a prefix that had not diverged yet)."""
        for _ in range(1000):
            donor = rng.randrange(len(self.val) - self.context - 1)
            if self.val[donor] != window[split + 1]:
                twin = window.clone()
                twin[split + 1 :] = self.val[donor : donor + self.context - split]
                return twin
        raise ValueError("the val split is too uniform to make causality probes from it")

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
            for probe, row in self._probe_batch[batch]:
                self._logits[("twin", probe)] = logits[row]
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
        shared = slice(0, split + 1)
        before = F.log_softmax(real[shared].double(), dim=-1)
        after = F.log_softmax(twin[shared].double(), dim=-1)
        delta = float((before - after).abs().max())
        if not delta <= PROBE_TOLERANCE:
            raise NonCausalModel(
                f"non-causal model: log-probabilities at positions 0..{split} changed by "
                f"{delta:.3g} when only bytes after position {split + 1} changed; a "
                "prediction may depend only on the earlier bytes of its own window (not on later "
                "ones, nor on the other windows of its batch)"
            )
