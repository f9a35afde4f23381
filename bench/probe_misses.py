"""How often do the causality probes miss a model that reads later bytes of its window?

Each evaluation (training/evaluator.py) is replayed in this process with a cheating model on the
real val split: one fresh model per batch, as `fresh_eval` gives (a new process per batch), and
the count of evaluations that `finish()` scored instead of refusing is printed per cheater, with
their mean val_bpb (what the cheat gained over the honest model, which it builds on).

    python -m bench.probe_misses                      # tier 0's shape: context 64, 16384 bytes
    python -m bench.probe_misses --context 16 --tokens 512 --evaluations 2000
    python -m bench.probe_misses --twins 8 --no-aim   # eight twins at random splits, as before

The cheaters add a large logit on the next byte of their own window (a one-byte peek):
- `peeker`: on every window;
- `replaying peeker`: also copies the outputs of an earlier row of its batch that shares the
  first bytes (tests/test_evaluation_cheats.py's REPLAYING_PEEKER);
- `peeks on q`: only on windows whose first 4 bytes hash into a fraction q, so most of its
  windows gain and each probe catches it only if its window is one of them;
- `peeks at position 0` (and `at position 40`): only the prediction at that position reads the
  next byte; a probe catches it only where its twin diverges right there, which the shipped
  evaluator does on every evaluation (a twin at every split), and eight twins at random splits
  did in about one evaluation in eight;
- `peeks at 0 on 0.25`: at position 0, on a quarter of its windows;
- `peeks once a window`: at one position per window, chosen by its first byte: each twin
  catches it with odds of 1 in context - 1, so it passes about e^-1 of evaluations;
- `unsure > H, +b`: built on a trigram of the train split (a realistic honest model, the
  `trigram (control)`), adds b to the next byte's logit where its own entropy is above H bits
  (a red team's, 2026-11-28): the peek pays most there, and that is where aimed probes look
  (training/aimed_probes.py; `--no-aim` leaves them out, as before);
- `capped, unsure > H`: the same peeks, each kept just under the best honest excess earlier in
  its window (a second red team's), so aiming at each window's best position never finds one.
`--aimed N` sets how many twins are aimed (default: a whole batch); `--only S` runs the
cheaters whose name contains S.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from training.aimed_probes import bigram_reference
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


def peeks_at(base: Model, position: int, share: float = 1.0) -> Model:
    """Reads only the byte after `position`, for the prediction there."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        for i, row in enumerate(x):
            # chosen by the bytes it may read there, so a twin's split changes no choice
            if hashlib.sha256(bytes(row[: position + 1].tolist())).digest()[0] < share * 256:
                out[i, position] += 30 * F.one_hot(row[position + 1].long(), 256)
        return out

    return forward


def trigram(train: torch.Tensor) -> Model:
    """Causal and realistic: log P(byte | two before) of the train split, smoothed toward the
    bigram (the bigram alone at position 0); about 3.19 bpb on the val split."""
    t, bi = train.long(), bigram_reference(train)
    cube = torch.bincount((t[:-2] * 256 + t[1:-1]) * 256 + t[2:], minlength=256**3).double()
    cube = cube.view(256, 256, 256) + 2 * bi.exp()[None]
    tri, bi = (cube / cube.sum(2, keepdim=True)).log().float(), bi.float()

    def forward(x: torch.Tensor) -> torch.Tensor:
        x = x.long()
        out = torch.empty(*x.shape, 256)
        out[:, 0], out[:, 1:] = bi[x[:, 0]], tri[x[:, :-1], x[:, 1:]]
        return out

    return forward


def peeks_where_unsure(base: Model, bits: float, boost: float) -> Model:
    """A red team's: reads the next byte where the honest model's entropy (a function of the
    prefix, which a twin shares) is above `bits`, adding `boost` to its logit: a peek pays most
    where the byte is hard to guess."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        logp = F.log_softmax(out, -1)
        unsure = (-(logp.exp() * logp).sum(-1) / math.log(2))[:, :-1] > bits
        out[:, :-1] += boost * unsure[..., None] * F.one_hot(x[:, 1:].long(), 256)
        return out

    return forward


def peeks_somewhere(base: Model) -> Model:
    """Reads one byte ahead at one position per window, chosen by the window's first byte: a
    twin catches it only if its split is the position its window chose."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        for i, row in enumerate(x):
            at = hashlib.sha256(bytes(row[:1].tolist())).digest()[0] % (len(row) - 1)
            out[i, at] += 30 * F.one_hot(row[at + 1].long(), 256)
        return out

    return forward


def peeks_under_cap(base: Model, bits: float, boost: float, reference: torch.Tensor) -> Model:
    """A second red team's: peeks where unsure (as `peeks_where_unsure`), but raises the true
    byte's log-probability only until its excess over the bigram reference is just under the
    largest honest excess earlier in the same window (which it can compute from bytes it may
    read), so no window's best position is a peek."""
    ref = reference.float()

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        logp = F.log_softmax(out, -1)
        unsure = (-(logp.exp() * logp).sum(-1) / math.log(2))[:, :-1] > bits
        nxt, cur = x[:, 1:].long(), x[:, :-1].long()
        honest = logp[:, :-1].gather(2, nxt[..., None])[..., 0]
        excess = honest - ref[cur, nxt]
        # the largest honest excess at positions before t (needs bytes up to t only)
        cap = torch.cummax(excess, dim=1).values.roll(1, dims=1)
        cap[:, 0] = -math.inf
        target = torch.minimum(honest + boost, ref[cur, nxt] + cap - 1e-3).clamp(max=-1e-4)
        raise_ = unsure & (target > honest)
        # the logit that makes the true byte's log-probability `target`
        p, q = target.exp(), honest.exp()
        delta = torch.log(p * (1 - q)) - torch.log(q * (1 - p))
        delta = torch.where(raise_, delta, torch.zeros_like(delta))
        out[:, :-1] += delta[..., None] * F.one_hot(nxt, 256)
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


def missed(make: Callable[[], Model], val: torch.Tensor, args: argparse.Namespace) -> list[float]:
    """The val_bpb of each evaluation scored instead of refused, of `args.evaluations`."""
    scored = []
    for _ in range(args.evaluations):
        evaluation = Evaluation(
            val, args.context, args.tokens, args.twins, args.reference, args.aimed
        )
        for index, batch in enumerate(evaluation.batches):
            evaluation.take(index, make()(batch[:, :-1]))  # a fresh model per batch
        with contextlib.suppress(NonCausalModel):  # refused: not scored
            scored.append(evaluation.finish())
    return scored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--evaluations", type=int, default=500)
    parser.add_argument("--twins", type=int, help="twins per evaluation (default: every split)")
    parser.add_argument("--no-aim", action="store_true", help="no aimed probes (as before)")
    parser.add_argument("--aimed", type=int, help="aimed twins (default: a whole batch)")
    parser.add_argument("--only", default="", help="cheaters whose name contains this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        corpus = load_corpus(Path(cache))
    val = corpus.val
    reference = bigram_reference(corpus.train)
    args.reference = None if args.no_aim else reference
    table = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    base = trigram(corpus.train)
    cheaters: dict[str, Callable[[], Model]] = {
        "peeker": lambda: peeker(honest(table)),
        "replaying peeker": lambda: replaying(peeker(honest(table))),
        "peeks on 0.5": lambda: peeker(honest(table), 0.5),
        "peeks on 0.25": lambda: peeker(honest(table), 0.25),
        "peeks at position 0": lambda: peeks_at(honest(table), 0),
        "peeks at position 40": lambda: peeks_at(honest(table), min(40, args.context - 2)),
        "peeks at 0 on 0.25": lambda: peeks_at(honest(table), 0, 0.25),
        "peeks once a window": lambda: peeks_somewhere(honest(table)),
        "honest (control)": lambda: honest(table),
        "trigram (control)": lambda: base,
        "unsure > 5.3, +30": lambda: peeks_where_unsure(base, 5.3, 30.0),
        "unsure > 4.9, +30": lambda: peeks_where_unsure(base, 4.9, 30.0),
        "unsure > 4.9, +1": lambda: peeks_where_unsure(base, 4.9, 1.0),
        "unsure > 4.9, +0.5": lambda: peeks_where_unsure(base, 4.9, 0.5),
        "capped, unsure > 4.9": lambda: peeks_under_cap(base, 4.9, 30.0, reference),
        "capped, unsure > 4.5": lambda: peeks_under_cap(base, 4.5, 30.0, reference),
    }
    print(
        f"context {args.context}, {args.tokens} bytes, "
        f"{args.twins or args.context - 1} twins{'' if args.no_aim else ' and aimed ones'}, "
        f"{args.evaluations} evaluations each"
    )
    for name, make in cheaters.items():
        if args.only not in name:
            continue
        start = time.monotonic()
        scored = missed(make, val, args)
        bpb = f"val_bpb {statistics.mean(scored):.4f}" if scored else ""
        print(
            f"{name:22} scored {len(scored):5d} / {args.evaluations}  "
            f"({len(scored) / args.evaluations:6.1%})  {bpb:16} {time.monotonic() - start:.0f} s"
        )


if __name__ == "__main__":
    main()
