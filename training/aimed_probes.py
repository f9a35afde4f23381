"""Probes aimed after the fact: where a model did far better than it could have honestly.

A twin catches a peek only at its own (window, position), so probes drawn at random make a
cheater's gain trade off against its refusals rather than stop it: a red team that peeked only
where its honest model was unsure passed 74% of evaluations for 0.043 bpb (docs/reliability.md).
A peek pays where the next byte is hard to guess, and that is where it shows: the model puts
far more probability on the true next byte than a model of the training data's own statistics
does. So once every real window is scored, the positions are ranked by that excess, in nats,
over a byte bigram of the train split (what the runner trusts, and cheap), and a few more twins
are split at the top ones, one per window, in one more batch of the usual mix.

An honest model earns excess too (it reads more than one byte back), so the top ranks hold
some honest positions; a twin there costs nothing but a row. A cheater that keeps each peek's
excess low enough to hide among them gains at most that much per peek.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from training.protocol import VOCAB


@functools.lru_cache(maxsize=4)
def bigram_reference(train: torch.Tensor) -> torch.Tensor:
    """log P(next byte | byte) over the train split, add-one smoothed: [VOCAB, VOCAB]."""
    pairs = train[:-1].long() * VOCAB + train[1:].long()
    counts = torch.bincount(pairs, minlength=VOCAB * VOCAB).double().view(VOCAB, VOCAB) + 1
    return (counts / counts.sum(dim=1, keepdim=True)).log()


def most_suspicious(
    windows: torch.Tensor, logits: dict[int, torch.Tensor], reference: torch.Tensor, count: int
) -> list[tuple[int, int]]:
    """(window index, position) of the `count` positions, one per window, where the model's
    log-probability of the true next byte most exceeds the reference's. Only positions a twin
    can split at (0 to context - 2): the last one has no later input byte to peek at."""
    best: list[tuple[float, int, int]] = []
    for index, out in logits.items():
        window = windows[index]
        inputs, targets = window[:-2].long(), window[1:-1].long()
        logp = F.log_softmax(out[:-1].double(), dim=-1).gather(1, targets[:, None])[:, 0]
        excess = logp - reference[inputs, targets]
        position = int(excess.argmax())
        best.append((float(excess[position]), index, position))
    best.sort(reverse=True)
    return [(index, position) for _, index, position in best[:count]]
