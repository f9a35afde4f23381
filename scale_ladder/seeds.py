"""Tier seeds the recipe cannot predict, the same for the whole life of a swarm.

Seed i of tier k is a keyed permutation of the index k·SEED_STRIDE + i into [0, 2³¹): a Feistel
network over 32 bits whose round function is HMAC-SHA256 under the swarm's secret, walked until
the result fits in 31 bits (a permutation restricted that way is still one). So
- a recipe, or whoever wrote it, cannot know the seeds before they run: a per-seed table of
  tuned offsets (a red team's idea, promoted early in a swarm) has nothing to key on, and the
  seeds seen at one tier say nothing of the next tier's;
- the same (tier, i) gives the same seed for as long as the secret is kept: an idea and the
  champion stay paired, and a restarted or replayed ladder asks for the same runs;
- different (tier, i) never share a seed (a permutation), so every tier re-tests on fresh seeds.
Every run's seed is in its RunSpec and result (the ledger), so any run can be made again with
`swarm run --seed N`; the secret itself is never recorded. A swarm keeps its secret in its
workspace (swarm/workspace.py); pure code, tests and simulations use DEFAULT_SEED_SECRET, so
they stay reproducible.
"""

from __future__ import annotations

import functools
import hmac

DEFAULT_SEED_SECRET = b"research-swarm: the fixed seed secret of simulations and tests"
SEED_STRIDE = 1 << 20  # seed indices per tier: (tier, i) -> tier·SEED_STRIDE + i, one-to-one
SEED_BITS = 31  # seeds fit a signed 32-bit int: torch, numpy and any command's --seed take them
_HALF = 16  # the Feistel network permutes 32 bits as two halves of 16
_ROUNDS = 8


@functools.lru_cache(maxsize=4096)
def tier_seed(tier: int, i: int, secret: bytes = DEFAULT_SEED_SECRET) -> int:
    """The seed of the i-th run of a recipe at `tier`, under a swarm's secret."""
    if not 0 <= i < SEED_STRIDE or not 0 <= tier < (1 << SEED_BITS) // SEED_STRIDE:
        raise ValueError(f"no seed for tier {tier}, index {i}")
    if not secret:
        raise ValueError("an empty seed secret")
    x = tier * SEED_STRIDE + i
    while True:  # cycle walking: a few steps at most, as half of all 32-bit values fit
        x = _permute(x, secret)
        if x < 1 << SEED_BITS:
            return x


def _permute(x: int, secret: bytes) -> int:
    left, right = x >> _HALF, x & ((1 << _HALF) - 1)
    for r in range(_ROUNDS):
        digest = hmac.digest(secret, bytes((r,)) + right.to_bytes(2, "big"), "sha256")
        left, right = right, left ^ int.from_bytes(digest[:2], "big")
    return (left << _HALF) | right
