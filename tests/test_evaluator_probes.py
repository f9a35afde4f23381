"""The causality probes' placement (training/evaluator.py): what the twins are and where they go.

Unit tests on the Evaluation itself; a model that looks ahead is refused through the real
trainer in tests/test_training_sandbox.py, and `python -m bench.probe_misses` measures how often
cheaters of each kind pass.
"""

from __future__ import annotations

import torch

from training.evaluator import EVAL_BATCH, Evaluation


def test_probe_batches_look_like_real_ones_and_move_between_evaluations() -> None:
    """A red team told probe batches by a repeated row (covers drawn with replacement) and by
    their fixed places (after batches 0 and 5 at tier 0)."""
    val = torch.randint(0, 256, (200_000,), dtype=torch.uint8)
    places = set()
    for _ in range(5):
        evaluation = Evaluation(val, 64, 16_384)
        probes = sorted(evaluation._probe_batch)
        places.add(tuple(probes))
        for index in probes:
            rows = {bytes(row.tolist()) for row in evaluation.batches[index]}
            assert len(rows) == len(evaluation.batches[index]) == EVAL_BATCH
        for index, twins in evaluation._probe_batch.items():
            batch = evaluation.batches[index]
            for probe, _ in twins:  # no twin's own window travels with it
                own = evaluation._windows()[evaluation._probes[probe][0]]
                assert not any(torch.equal(row, own) for row in batch)
    assert len(places) > 1


def test_every_twin_diverges_right_after_its_split() -> None:
    """A replaying peeker passed one evaluation in 150 (and a CI run) when a twin's first new
    byte happened to equal its window's: the probe then checked a prefix that had not yet
    diverged. On a val split of two bytes that is every other draw without the rule."""
    val = torch.randint(0, 2, (50_000,), dtype=torch.uint8)
    for _ in range(20):
        evaluation = Evaluation(val, 32, 4096)
        windows = evaluation._windows()
        assert len(evaluation._probes) == 31  # one per split
        for index, twins in evaluation._probe_batch.items():
            for probe, row in twins:
                window, split = evaluation._probes[probe]
                twin = evaluation.batches[index][row]
                assert torch.equal(twin[: split + 1], windows[window][: split + 1])
                assert twin[split + 1] != windows[window][split + 1]


def test_every_evaluation_has_a_twin_at_every_split_a_peek_could_read_from() -> None:
    """A twin catches a one-byte peek only at its split. A red team peeked only at position 0
    while no twin could split there, and passed every evaluation; with eight twins at random
    splits, a peek at any one position still passed 88%. Each evaluation now splits a twin at
    every position, each twin of a distinct window, in as few probe batches as hold them."""
    val = torch.randint(0, 256, (50_000,), dtype=torch.uint8)
    for context, tokens, batches in ((8, 1024, 1), (64, 16_384, 2), (128, 16_384, 4)):
        evaluation = Evaluation(val, context, tokens)
        splits = [split for _, split in evaluation._probes]
        assert sorted(splits) == list(range(context - 1))
        assert len({window for window, _ in evaluation._probes}) == context - 1
        assert len(evaluation._probe_batch) == batches
    few = Evaluation(val, 64, 1024)  # 16 windows: as many twins as distinct windows allow
    assert len(few._probes) == 16 and len({s for _, s in few._probes}) == 16
    some = Evaluation(val, 64, 16_384, twins=8)
    assert len(some._probes) == 8 and len(some._probe_batch) == 1
