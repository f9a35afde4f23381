"""How often do the causality probes miss a model that reads later bytes of its window?

Each evaluation (training/evaluator.py) is replayed in this process with a cheating model on the
real val split: one fresh model per batch, as `fresh_eval` gives (a new process per batch), and
the count of evaluations that `finish()` scored instead of refusing is printed per cheater.

    python -m bench.probe_misses                      # tier 0's shape: context 64, 16384 bytes
    python -m bench.probe_misses --context 16 --tokens 512 --evaluations 2000
    python -m bench.probe_misses --twins 1            # one twin per probe batch, as before

The cheaters add a large logit on the next byte of their own window (a one-byte peek):
- `peeker`: on every window;
- `replaying peeker`: also copies the outputs of an earlier row of its batch that shares the
  first bytes (tests/test_training_sandbox.py's REPLAYING_PEEKER);
- `peeks on q`: only on windows whose first 4 bytes hash into a fraction q, so most of its
  windows gain and each probe catches it only if its window is one of them;
- `peeks at position 0`: only the prediction of the second byte reads it; a probe catches it
  only where its twin diverges right after the first byte (1 in context - 1 twins).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from training import evaluator
from training.corpus import load_corpus
from training.evaluator import Evaluation, NonCausalModel

Model = Callable[[torch.Tensor], torch.Tensor]


def honest(table: torch.Tensor) -> Model:
    """Causal: the logits at position t depend on byte t only."""
    return lambda x: table[x.long()].clone()


def peeker(base: Model, share: float = 1.0) -> Model:
    def forward(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        for i, row in enumerate(x):
            if hashlib.sha256(bytes(row[:4].tolist())).digest()[0] < share * 256:
                out[i, :-1] += 30 * F.one_hot(row[1:].long(), 256)
        return out

    return forward


def peeks_at_first(base: Model) -> Model:
    """Reads only the second byte, for the prediction at position 0."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        out[:, 0] += 30 * F.one_hot(x[:, 1].long(), 256)
        return out

    return forward


def replaying(model: Model) -> Model:
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = model(x)
        for i, row in enumerate(x):
            for old_row, old_out in seen:
                shared = int((row == old_row).long().cumprod(0).sum())
                if shared >= 4:
                    out[i, :shared] = old_out[:shared]
            seen.append((row.clone(), out[i].clone()))
        return out

    return forward


def missed(make: Callable[[], Model], val: torch.Tensor, args: argparse.Namespace) -> int:
    """Evaluations scored instead of refused, of `args.evaluations`."""
    scored = 0
    for _ in range(args.evaluations):
        evaluation = Evaluation(val, args.context, args.tokens)
        for index, batch in enumerate(evaluation.batches):
            evaluation.take(index, make()(batch[:, :-1]))  # a fresh model per batch
        try:
            evaluation.finish()
            scored += 1
        except NonCausalModel:
            pass
    return scored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--evaluations", type=int, default=500)
    parser.add_argument("--twins", type=int, default=evaluator.TWINS_PER_BATCH)
    parser.add_argument("--probe-batches", type=int, default=evaluator.PROBE_BATCHES)
    args = parser.parse_args()
    evaluator.TWINS_PER_BATCH, evaluator.PROBE_BATCHES = args.twins, args.probe_batches
    with tempfile.TemporaryDirectory() as cache:
        val = load_corpus(Path(cache)).val
    table = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    cheaters: dict[str, Callable[[], Model]] = {
        "peeker": lambda: peeker(honest(table)),
        "replaying peeker": lambda: replaying(peeker(honest(table))),
        "peeks on 0.5": lambda: peeker(honest(table), 0.5),
        "peeks on 0.25": lambda: peeker(honest(table), 0.25),
        "peeks at position 0": lambda: peeks_at_first(honest(table)),
        "honest (control)": lambda: honest(table),
    }
    print(
        f"context {args.context}, {args.tokens} bytes, {args.probe_batches} probe batches of "
        f"{args.twins} twins, {args.evaluations} evaluations each"
    )
    for name, make in cheaters.items():
        start = time.monotonic()
        n = missed(make, val, args)
        print(
            f"{name:18} scored {n:5d} / {args.evaluations}  ({n / args.evaluations:.2%})"
            f"  {time.monotonic() - start:.0f} s"
        )


if __name__ == "__main__":
    main()
