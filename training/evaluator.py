"""The locked evaluator: held-out windows out, logits in, val_bpb computed here.

Runs in the trusted runner process. The experiment only ever sees the input bytes of each window
and returns logits; the loss, the number of scored bytes and the metric are computed here.

A model that peeks at later bytes in its window (non-causal attention, or any trick that reads
the future inputs) would score far too well. Causality probes catch it: "twin" windows share a
prefix with a real window and then diverge at a random point, with a byte that differs; a causal
model's predictions over the shared prefix are identical for both. Twins travel among the real
windows, every batch the same mix at rows drawn afresh for each evaluation, never with their own
window, so the model cannot compare them side by side nor tell a batch that is checked from one
that is scored (red teams told separate probe batches by their being batches of one, and by a
repeated row). A twin catches a one-byte peek only at its split, so every evaluation carries a
twin at every split a peek could read from (0 to context - 2), each of a distinct window: a
red team that peeked at one position passed 88% of evaluations when eight twins were drawn at
random splits. A model that peeks on only some windows is caught where a twin's window is one of
them; and since a red team peeked only where its honest model was unsure (passing 74%), a last
batch of the same mix aims its twins at positions drawn with odds that grow with how much the
model beat a bigram of the train split there, once every real window is scored
(aimed_probes.py). `python -m bench.probe_misses` measures the misses.
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
import statistics
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from training.aimed_probes import most_suspicious
from training.protocol import VOCAB

# Windows per batch: one fresh evaluation process each (fresh_eval.py). A process costs about
# 0.3 s to start and load the model at tier 0, far more than its forward pass: 64 rows rather
# than 32 took the evaluation with control windows from 4.08 s to 2.15 s (median of 4, the
# champion at t0). Longer windows get fewer rows, so that a batch's logits stay near 8 MiB.
EVAL_ROWS = 64
EVAL_BYTES = 8192  # rows x context per batch, for contexts past 128


def eval_batch(context: int) -> int:
    """Windows per evaluation batch at `context`: 64 up to 128 bytes, then fewer, at least 8."""
    return max(8, min(EVAL_ROWS, EVAL_BYTES // max(1, context)))


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
    # log P(next | byte) of the train split (aimed_probes.bigram_reference): once every real
    # window is scored, one more batch holds twins aimed where the model did suspiciously well
    reference: torch.Tensor | None = None
    aimed: int | None = None  # twins aimed that way; None: a whole batch of them
    # Control windows (control_windows.py): training text the run was never sent, scored apart
    # (control_bpb) and dealt, probed and aimed at like the held-out windows, so a model can
    # neither tell them apart by how they are sent nor peek on them alone unseen.
    control: torch.Tensor | None = None
    batches: list[torch.Tensor] = field(default_factory=list)
    # every scored byte's log-probability, summed exactly at the end: the metric does not
    # depend on which batches the windows were dealt to, which changes every evaluation
    _logp: list[float] = field(default_factory=list)
    _control: list[float] = field(default_factory=list)  # bits per byte of each control window
    # batch -> its rows: ("real", window index) scored, or ("twin", probe) kept for the check
    _rows: list[list[tuple[str, int]]] = field(default_factory=list)
    _probes: list[tuple[int, int]] = field(default_factory=list)  # (window index, split)
    _logits: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    _real: dict[int, torch.Tensor] = field(default_factory=dict)  # window -> logits, to aim
    _taken: int = 0

    def __post_init__(self) -> None:
        # fixed: every run of every idea is scored on the same bytes (kept for the aimed batch)
        held_out = self._windows()
        self._held_out = len(held_out)  # windows from here on are control windows
        if self.control is not None and len(self.control):
            held_out = torch.cat([held_out, self.control])
        self._all = windows = held_out
        # The probes are not scored, so they are drawn afresh for each evaluation: nothing
        # learned of one run's probes says where the next run's are, or what they hold.
        self._rng = random.Random(os.urandom(16))
        self._probes = self._draw_twins(len(windows), self._rng)
        twins = [self._twin(windows[i], split, self._rng) for i, split in self._probes]
        self._rows = self._deal(len(windows), self._rng)
        for rows in self._rows:
            self.batches.append(
                torch.stack([windows[i] if kind == "real" else twins[i] for kind, i in rows])
            )
        self._first_round = len(self.batches)
        self._probed = {window: probe for probe, (window, _) in enumerate(self._probes)}

    def _deal(self, windows: int, rng: random.Random) -> list[list[tuple[str, int]]]:
        """Every batch the same mix of real windows and twins, at random rows, never a twin
        with its own window (which the model could compare it with). A batch made mostly of
        twins could be told from the others by the splices its rows hold, summed over the
        batch (a reading, not an attack tried); red teams told probe batches by a repeated row
        and by batches of one. So no batch is a probe batch: a model that is causal only where
        it is checked must tell a twin from a real window row by row."""
        twins, total = len(self._probes), windows + len(self._probes)
        rows_per_batch = eval_batch(self.context)
        count = max(-(-total // rows_per_batch), 2 if twins else 1)  # as few as hold them
        room = [twins // count + (k < twins % count) for k in range(count)]  # twins of each
        share = [total // count + (k < total % count) - room[k] for k in range(count)]
        start = [sum(share[:k]) for k in range(count + 1)]
        for _ in range(100):  # a twin that finds no batch but its window's: deal again
            real = rng.sample(range(windows), windows)
            rows = [[("real", w) for w in real[start[k] : start[k + 1]]] for k in range(count)]
            batch_of = {w: k for k, batch in enumerate(rows) for _, w in batch}
            left = list(room)
            for probe in rng.sample(range(twins), twins):
                open_ = [
                    k for k in range(count) if left[k] and k != batch_of[self._probes[probe][0]]
                ]
                if not open_:
                    break
                k = rng.choice(open_)
                rows[k].append(("twin", probe))
                left[k] -= 1
            else:
                for batch in rows:
                    rng.shuffle(batch)
                return rows
        raise ValueError("could not place the causality probes apart from their windows")

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
        """Score a batch's real windows; keep the logits the causality check compares."""
        if not bool(torch.isfinite(logits).all()):
            raise InvalidLogits(
                f"the model returned non-finite logits (NaN or inf) in batch {batch}"
            )
        rows = self._rows[batch]
        real = [row for row, (kind, _) in enumerate(rows) if kind == "real"]
        if real:
            targets = self.batches[batch][real, 1:].long()
            logp = F.log_softmax(logits[real].reshape(-1, VOCAB).double(), dim=-1)
            per_row = logp.gather(1, targets.reshape(-1, 1)).view(len(real), -1)
            for row, values in zip(real, per_row, strict=True):
                if rows[row][1] < self._held_out:
                    self._logp += values.tolist()
                else:  # a control window's bits per byte, kept apart (control_bpb)
                    self._control.append(-math.fsum(values.tolist()) / math.log(2) / len(values))
        for row, (kind, i) in enumerate(rows):
            if kind == "twin":
                self._logits[("twin", i)] = logits[row]
            elif kind == "real":
                if i in self._probed:  # the first round's twins (aimed ones take theirs in _aim)
                    self._logits[("real", self._probed[i])] = logits[row]
                if self.reference is not None:
                    self._real[i] = logits[row]
        self._taken += 1
        if self._taken == self._first_round and self.reference is not None:
            self._aim(self.reference)

    def _aim(self, reference: torch.Tensor) -> None:
        """One more batch, of twins split at positions drawn with odds that grow with how much
        the model beat the reference there (aimed_probes.py), of distinct windows; with fewer
        than a batch (`aimed`), real windows sent again fill it (covers, not scored twice).
        A whole batch of twins costs no more than the six of the usual mix did (one process) and
        catches more: peeks kept just under their window's best honest position passed 13.5%
        of 200 evaluations against six aimed twins, 2% against 32 (docs/reliability.md; a batch
        holds 64 at the shipped tiers since). Telling
        this batch from the others does not help a model: each aimed twin is compared with its
        window's answer from the first round, so being honest here is what gets it caught."""
        windows = self._all
        size = len(self.batches[0])
        count = min(size if self.aimed is None else self.aimed, len(windows))
        aimed = most_suspicious(windows, self._real, reference, count, self._rng)
        rows: list[tuple[str, int]] = []
        for window, split in aimed:
            self._logits[("real", len(self._probes))] = self._real[window]
            rows.append(("twin", len(self._probes)))
            self._probes.append((window, split))
        own = {window for window, _ in aimed}
        others = [i for i in range(len(windows)) if i not in own]
        rows += [("cover", i) for i in self._rng.sample(others, min(len(others), size - len(rows)))]
        self._rng.shuffle(rows)
        self._rows.append(rows)
        self.batches.append(
            torch.stack(
                [
                    self._twin(windows[self._probes[i][0]], self._probes[i][1], self._rng)
                    if kind == "twin"
                    else windows[i]
                    for kind, i in rows
                ]
            )
        )
        self._real.clear()

    def finish(self) -> float:
        """Check every probe against its real window, then return val_bpb."""
        if self._taken < len(self.batches):
            raise ValueError(f"{len(self.batches) - self._taken} batches were never answered")
        for probe, (_, split) in enumerate(self._probes):
            self._check_twin(self._logits[("real", probe)], self._logits[("twin", probe)], split)
        return _bits_per_byte(self._logp)

    def control_bpb(self) -> float | None:
        """The median control window's bits per byte, once finish() has checked the probes;
        None without control windows. The median, not the mean: a recipe carrying some of the
        training split scores those windows near 0, which would move the mean by that share of
        the metric and the median hardly at all, while a real improvement moves every window,
        and so both."""
        if not self._control:
            return None
        if not all(math.isfinite(v) for v in self._control):
            raise ValueError("evaluation produced no finite loss on the control windows")
        return statistics.median(self._control)

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


def _bits_per_byte(logp: list[float]) -> float:
    nats = -math.fsum(logp)
    if not logp or not math.isfinite(nats):
        raise ValueError("evaluation produced no finite loss")
    return nats / math.log(2) / len(logp)
