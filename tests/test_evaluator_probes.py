"""The causality probes' placement (training/evaluator.py): what the twins are and where they go.

Unit tests on the Evaluation itself; a model that looks ahead is refused through the real
trainer in tests/test_training_sandbox.py, and `python -m bench.probe_misses` measures how often
cheaters of each kind pass.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from training.aimed_probes import bigram_reference, most_suspicious
from training.evaluator import Evaluation, NonCausalModel, eval_batch


def test_every_batch_mixes_twins_with_real_windows_and_none_is_a_probe_batch() -> None:
    """A red team told probe batches by a repeated row (covers drawn with replacement), by
    their fixed places and by their being batches of one; a batch made mostly of twins could be
    told by its splices. Every batch now holds distinct rows, real windows and twins in the same
    proportion, at rows that move between evaluations, and never a twin with its own window."""
    val = torch.randint(0, 256, (200_000,), dtype=torch.uint8)
    layouts = set()
    for _ in range(5):
        evaluation = Evaluation(val, 64, 16_384)
        windows = evaluation._windows()
        assert len(evaluation.batches) == 5  # 256 windows and 63 twins: 319 rows
        layouts.add(tuple(tuple(rows) for rows in evaluation._rows))
        for batch, rows in zip(evaluation.batches, evaluation._rows, strict=True):
            assert len({bytes(row.tolist()) for row in batch}) == len(batch)
            assert len(batch) in (eval_batch(64) - 1, eval_batch(64))
            assert sum(kind == "twin" for kind, _ in rows) in (12, 13)
            own = {evaluation._probes[i][0] for kind, i in rows if kind == "twin"}
            real = {i for kind, i in rows if kind == "real"}
            assert not own & real
            for row, (kind, i) in zip(batch, rows, strict=True):
                if kind == "real":
                    assert torch.equal(row, windows[i])
        scored = sorted(i for rows in evaluation._rows for kind, i in rows if kind == "real")
        assert scored == list(range(len(windows)))  # every real window scored once
    assert len(layouts) == 5


def test_every_twin_diverges_right_after_its_split() -> None:
    """A replaying peeker passed one evaluation in 150 (and a CI run) when a twin's first new
    byte happened to equal its window's: the probe then checked a prefix that had not yet
    diverged. On a val split of two bytes that is every other draw without the rule."""
    val = torch.randint(0, 2, (50_000,), dtype=torch.uint8)
    for _ in range(20):
        evaluation = Evaluation(val, 32, 4096)
        windows = evaluation._windows()
        assert len(evaluation._probes) == 31  # one per split
        for batch, rows in zip(evaluation.batches, evaluation._rows, strict=True):
            for twin, (kind, probe) in zip(batch, rows, strict=True):
                if kind == "twin":
                    window, split = evaluation._probes[probe]
                    assert torch.equal(twin[: split + 1], windows[window][: split + 1])
                    assert twin[split + 1] != windows[window][split + 1]


def test_every_evaluation_has_a_twin_at_every_split_a_peek_could_read_from() -> None:
    """A twin catches a one-byte peek only at its split. A red team peeked only at position 0
    while no twin could split there, and passed every evaluation; with eight twins at random
    splits, a peek at any one position still passed 88%. Each evaluation now splits a twin at
    every position, each twin of a distinct window, in no more batches than its rows fill."""
    val = torch.randint(0, 256, (50_000,), dtype=torch.uint8)
    for context, tokens, batches in ((8, 1024, 3), (64, 16_384, 5), (128, 16_384, 4)):
        evaluation = Evaluation(val, context, tokens)
        splits = [split for _, split in evaluation._probes]
        assert sorted(splits) == list(range(context - 1))
        assert len({window for window, _ in evaluation._probes}) == context - 1
        assert len(evaluation.batches) == batches
    few = Evaluation(val, 64, 1024)  # 16 windows: as many twins as distinct windows allow
    assert len(few._probes) == 16 and len({s for _, s in few._probes}) == 16
    assert len(few.batches) == 2  # 32 rows, but a twin never travels with its own window
    some = Evaluation(val, 64, 16_384, twins=8)
    assert len(some._probes) == 8 and len(some.batches) == 5


def test_once_every_window_is_scored_a_last_batch_aims_twins_where_the_model_did_too_well() -> None:
    """A red team peeked only where its honest model was unsure and passed 74% of evaluations:
    twins at random places check one (window, position) each. The last batch's twins (a whole
    batch of them, of distinct windows) are split at positions drawn with odds e^excess over a
    bigram of the train split; a model that is sure of the byte it peeks at, in 200 of 256
    windows, is caught every time. With fewer aimed twins, real windows fill the batch as
    covers, never scored twice."""
    val = torch.randint(0, 256, (200_000,), dtype=torch.uint8)
    reference = bigram_reference(torch.randint(0, 256, (100_000,), dtype=torch.uint8))

    def peeks(x: torch.Tensor) -> torch.Tensor:  # flat, but sure of one byte it read
        out = torch.zeros(*x.shape, 256)
        for i, row in enumerate(x):
            if int(row[0]) < 200:
                out[i, 30, int(row[31])] = 30.0
        return out

    size = eval_batch(64)
    for aimed, covered in [(None, 0), (None, 0), (None, 0), (6, size - 6), (6, size - 6)]:
        evaluation = Evaluation(val, 64, 16_384, reference=reference, aimed=aimed)
        assert len(evaluation.batches) == 5
        for index, batch in enumerate(evaluation.batches):  # grows by one after the fifth
            evaluation.take(index, peeks(batch[:, :-1]))
        assert len(evaluation.batches) == 6 and len(evaluation.batches[5]) == size
        twins = [evaluation._probes[i] for kind, i in evaluation._rows[5] if kind == "twin"]
        assert len(twins) == len({window for window, _ in twins}) == size - covered
        covers = {i for kind, i in evaluation._rows[5] if kind == "cover"}
        assert len(covers) == covered and not covers & {window for window, _ in twins}
        with pytest.raises(NonCausalModel):
            evaluation.finish()
    for aimed in (None, 6):
        honest = Evaluation(val, 64, 16_384, reference=reference, aimed=aimed)
        for index, batch in enumerate(honest.batches):
            honest.take(index, torch.zeros(*batch[:, :-1].shape, 256))
        assert honest.finish() == pytest.approx(8.0)  # covers are not scored twice


def test_aimed_positions_are_drawn_with_odds_that_grow_with_the_excess() -> None:
    """Drawn, not the top ones: a second red team kept each peek just under an honest position
    earlier in its window, and twins aimed at every window's best position never caught it.
    A position 4 nats above the rest is drawn about e^4 = 55 times as often as one of them,
    wherever it sits in its window."""
    seeded = torch.Generator().manual_seed(0)
    windows = torch.randint(0, 256, (50, 65), dtype=torch.uint8, generator=seeded)
    flat = torch.full((256, 256), -math.log(256), dtype=torch.float64)
    logits = {i: torch.zeros(64, 256) for i in range(50)}
    for i in range(5):  # probability e^4 / 256 on the true byte at position 5: 4 nats above
        logits[i][5, int(windows[i][6])] = math.log(math.exp(4) * 255 / (256 - math.exp(4)))
    draws = [most_suspicious(windows, logits, flat, 1, random.Random(k))[0] for k in range(500)]
    bold = sum(1 for window, position in draws if window < 5 and position == 5)
    odds = 5 * math.exp(4) / (5 * math.exp(4) + 50 * 63 - 5)  # 8%; 5 in 3,150 drawn evenly
    assert 0.6 < bold / 500 / odds < 1.5
