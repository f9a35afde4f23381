"""Control windows: training text a run is scored on but never sent.

The bytelm target's held-out text is public (stdlib modules anyone can read elsewhere), so a
recipe can carry it, or the windows scored from it, inside its patch and score far better while
staying causal: a seventh red team scored 0.0527 against an honest 3.3776 that way
(docs/reliability.md). No probe can tell such a model from a good one by the held-out text
alone. So each run is also scored on windows of the training split drawn from its seed, which
the harness never sends it in a batch: a run cannot know them in advance (seeds are secret,
scale_ladder/seeds.py), and the whole training split, from which any seed may draw, is far more
than a patch can carry (2.6 MB of text here, about 580 KB lzma-compressed, against the 8 KiB of
information a patch may add, recipes/patch.py; and the median control window's score is what
counts, which a part recalled would not move: training/evaluator.py). A real improvement
shows on both; a recipe that knows the held-out text gains on it alone, and the ladder rejects
an idea whose gain is not on the control text too (scale_ladder/held_out_gain.py).

The idea and its baseline on one seed get the same control windows, so their control scores
pair as their held-out scores do. Strata keep the windows apart and spread them over the split.
"""

from __future__ import annotations

import hashlib

import torch

CONTROL_SHARE = 0.5  # control windows per held-out window scored
STRATUM_SPANS = 16  # a stratum holds this many windows' bytes at least, or there are fewer
REDRAWS = 100  # tries for a training row that misses every control window, then it is left out


def control_starts(train_bytes: int, span: int, held_out_windows: int, seed: int) -> torch.Tensor:
    """Sorted starts of the run's control windows of `span` bytes: one drawn in each of equal
    strata of the training split, from the run's seed; none if the split is too small."""
    count = min(int(held_out_windows * CONTROL_SHARE), train_bytes // (span * STRATUM_SPANS))
    if count < 1:
        return torch.empty(0, dtype=torch.long)
    stratum = train_bytes // count
    key = int.from_bytes(hashlib.sha256(f"control:{seed}".encode()).digest()[:8], "big")
    generator = torch.Generator().manual_seed(key >> 1)  # apart from the batches' own stream
    within = torch.randint(0, stratum - span + 1, (count,), generator=generator)
    return torch.arange(count) * stratum + within


def run_control(seed: int, context: int, eval_tokens: int, train_bytes: int) -> torch.Tensor:
    """The control windows' starts of a run at a tier of `context`, scoring `eval_tokens`
    held-out bytes (as many windows as training/evaluator.py cuts from them)."""
    return control_starts(train_bytes, context + 1, max(1, eval_tokens // context), seed)


def overlapping(control: torch.Tensor, starts: torch.Tensor, row: int, span: int) -> torch.Tensor:
    """Which rows of `row` bytes at `starts` share a byte with a control window: a row
    [s, s + row) meets the nearest window that starts before its end, [c, c + span), if
    c + span > s."""
    if not len(control):
        return torch.zeros(len(starts), dtype=torch.bool)
    before_end = torch.searchsorted(control, starts + row) - 1
    nearest = control[before_end.clamp(min=0)]
    return (before_end >= 0) & (nearest + span > starts)


def training_starts(
    train_bytes: int,
    row: int,
    count: int,
    control: torch.Tensor,
    span: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """`count` random starts of training rows of `row` bytes that miss every control window
    (fewer where a row cannot miss them after REDRAWS tries: a control window is never sent)."""
    high = train_bytes - row
    starts = torch.randint(0, high, (count,), generator=generator)
    for _ in range(REDRAWS):
        hit = overlapping(control, starts, row, span)
        if not hit.any():
            return starts
        starts[hit] = torch.randint(0, high, (int(hit.sum()),), generator=generator)
    return starts[~overlapping(control, starts, row, span)]
