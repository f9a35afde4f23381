"""Probes aimed after the fact: where a model did far better than it could have honestly.

A twin catches a peek only at its own (window, position), so probes drawn at random make a
cheater's gain trade off against its refusals rather than stop it: a red team that peeked only
where its honest model was unsure passed 74% of evaluations for 0.043 bpb (docs/reliability.md).
A peek pays where the next byte is hard to guess, and that is where it shows: the model puts
far more probability on the true next byte than a model of the training data's own statistics
does. So once every real window is scored, each position's excess, in nats, over a byte
bigram of the train split (what the runner trusts, and cheap) is measured, and one more batch
of twins is split at positions drawn with odds e^excess, of distinct windows.

An honest model earns excess too (it reads more than one byte back), so some draws land on
honest positions; a twin there costs nothing but a row. A peek is drawn with odds that grow
with what it gained, so hiding a peek costs the cheater its gain (docs/reliability.md has what
is left).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from training.protocol import VOCAB

if TYPE_CHECKING:
    from training.corpus import Corpus

MAX_EXCESS = 50.0  # nats; e^50 outweighs every honest position already


_REFERENCES: dict[str, torch.Tensor] = {}  # corpus hash -> its bigram, the latest only


def reference_for(corpus: Corpus) -> torch.Tensor:
    """`bigram_reference` of the corpus's train split, made once per corpus in a trainer (0.15 to
    0.25 s on the stdlib corpus): the trainer loads the corpus afresh for every run, so a cache
    keyed by the tensor never hit and kept every old split alive."""
    if corpus.corpus_hash not in _REFERENCES:
        _REFERENCES.clear()
        _REFERENCES[corpus.corpus_hash] = bigram_reference(corpus.train)
    return _REFERENCES[corpus.corpus_hash]


def bigram_reference(train: torch.Tensor) -> torch.Tensor:
    """log P(next byte | byte) over the train split, add-one smoothed: [VOCAB, VOCAB]."""
    pairs = train[:-1].long() * VOCAB + train[1:].long()
    counts = torch.bincount(pairs, minlength=VOCAB * VOCAB).double().view(VOCAB, VOCAB) + 1
    return (counts / counts.sum(dim=1, keepdim=True)).log()


def most_suspicious(
    windows: torch.Tensor,
    logits: dict[int, torch.Tensor],
    reference: torch.Tensor,
    count: int,
    rng: random.Random,
) -> list[tuple[int, int]]:
    """(window index, position) of `count` positions of distinct windows, drawn with odds
    e^excess, the excess being how much more log-probability (nats) the model put on the true
    next byte than the reference. Only positions a twin can split at (0 to context - 2): the
    last one has no later input byte to peek at.

    Drawn, not the top ones: a second red team kept every peek's excess just under an honest
    position earlier in the same window, and aimed twins at each window's best position never
    caught it. Drawn with these odds, a peek just under the best is nearly as likely to be
    probed as the best itself, and a bold one far likelier than any honest position."""
    indices = list(logits)
    excess = torch.stack([_excess(windows[i], logits[i], reference) for i in indices])
    # Efraimidis-Spirakis: the largest u^(1/w) are a weighted draw without replacement; as
    # logs, log(u) / w with w = e^excess
    uniform = torch.rand(excess.shape, generator=_generator(rng), dtype=torch.float64)
    keys = torch.log1p(-uniform) * torch.exp(-excess.clamp(max=MAX_EXCESS))
    order = torch.argsort(keys.flatten(), descending=True).tolist()
    positions = excess.shape[1]
    chosen: list[tuple[int, int]] = []
    seen: set[int] = set()
    for flat in order:
        index, position = indices[flat // positions], flat % positions
        if index not in seen:
            seen.add(index)
            chosen.append((index, position))
            if len(chosen) == count:
                break
    return chosen


def _excess(window: torch.Tensor, out: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per position a twin can split at: the model's log-probability of the true next byte
    less the reference's."""
    inputs, targets = window[:-2].long(), window[1:-1].long()
    logp = F.log_softmax(out[:-1].double(), dim=-1).gather(1, targets[:, None])[:, 0]
    return logp - reference[inputs, targets]


def _generator(rng: random.Random) -> torch.Generator:
    return torch.Generator().manual_seed(rng.getrandbits(63))
