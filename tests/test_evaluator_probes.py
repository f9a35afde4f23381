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
        assert len(evaluation._probes) == 8
        for index, twins in evaluation._probe_batch.items():
            for probe, row in twins:
                window, split = evaluation._probes[probe]
                twin = evaluation.batches[index][row]
                assert torch.equal(twin[: split + 1], windows[window][: split + 1])
                assert twin[split + 1] != windows[window][split + 1]


def test_a_twin_may_diverge_anywhere_a_peek_could_read() -> None:
    """A red team peeked only at position 0 (reading the window's second byte) while no twin
    could diverge there, and passed every evaluation: every split a peek can be caught at is
    drawn, 0 included."""
    val = torch.randint(0, 256, (50_000,), dtype=torch.uint8)
    splits = set()
    for _ in range(40):
        splits.update(split for _, split in Evaluation(val, 8, 1024)._probes)
    assert splits == set(range(7))
