"""The rules `swarm calibrate` proposes thresholds by (scale_ladder/calibration.py)."""

from __future__ import annotations

import random
import tomllib
from pathlib import Path

from scale_ladder.calibration import (
    MAX_SEEDS,
    TierMeasure,
    edit_ladder_file,
    keep_probability,
    propose,
)
from scale_ladder.tiers import DEFAULT_LADDER, ladder_from, load_ladder


def test_the_keep_probability_matches_a_simulation() -> None:
    """Checked by drawing correlated gains, not by the formula: the share of the next tier's
    top 20% that this tier's top q holds."""
    rng = random.Random(7)
    for rho, share in [(0.3, 0.5), (0.6, 0.3), (0.9, 0.25)]:
        pairs = []
        for _ in range(40_000):
            x = rng.gauss(0, 1)
            pairs.append((x, rho * x + (1 - rho**2) ** 0.5 * rng.gauss(0, 1)))
        xs = sorted(p[0] for p in pairs)
        ys = sorted(p[1] for p in pairs)
        x_cut, y_cut = xs[int((1 - share) * len(xs))], ys[int(0.8 * len(ys))]
        next_top = [p for p in pairs if p[1] > y_cut]
        kept = sum(p[0] > x_cut for p in next_top) / len(next_top)
        assert abs(kept - keep_probability(rho, share)) < 0.02, (rho, share, kept)


def _measured(rho: float | None, ranked: int = 40, sigma_d: float = 0.01) -> list[TierMeasure]:
    return [
        TierMeasure(0, sigma_d, 60, 3.0, rho, ranked),
        TierMeasure(1, sigma_d, 30, 2.9, rho, ranked),
        TierMeasure(2, sigma_d, 12, 2.8),
    ]


def test_a_proxy_that_ranks_well_gets_a_tight_rank_gate_and_a_poor_one_none() -> None:
    tiers = load_ladder().tiers
    now = tiers[0].rule.top_fraction  # a share equal to the file's is not written again
    shares = [
        propose(tiers, _measured(rho))[0].values.get("top_fraction", now) for rho in (0.95, 0.7)
    ]
    assert 0 < shares[0] < shares[1] < 1  # the better the proxy ranks, the fewer pass it
    none = propose(tiers, _measured(0.05))[0]
    assert none.values["top_fraction"] == 0.0 and "too unlike" in " ".join(none.reasons)
    top = propose(tiers, _measured(0.95))[2]
    assert "top_fraction" not in top.values  # no next tier to rank for


def test_too_few_ideas_or_pairs_keep_the_files_values_and_say_why() -> None:
    tiers = load_ladder().tiers
    few = propose(tiers, _measured(0.9, ranked=3))[0]
    assert "top_fraction" not in few.values and "3 ideas" in " ".join(few.reasons)
    none = propose(tiers, [TierMeasure(t.index, None, 2, None) for t in tiers])
    assert all(p.values == {} for p in none)
    assert "2 paired gains, 6 needed" in " ".join(none[0].reasons)


def test_seeds_follow_the_noise_against_the_gain_worth_finding() -> None:
    tiers = load_ladder().tiers  # min_improvement 0.002 at every tier
    quiet = propose(tiers, _measured(None, sigma_d=0.0005))[0].values["max_seeds"]
    loud = propose(tiers, _measured(None, sigma_d=0.5))[0].values["max_seeds"]
    assert quiet == 2 and loud == MAX_SEEDS


def test_the_proposal_edits_the_file_and_keeps_its_comments(tmp_path: Path) -> None:
    text = DEFAULT_LADDER.read_text()
    proposals = propose(load_ladder().tiers, _measured(0.8, sigma_d=0.02))
    edited = edit_ladder_file(text, proposals)
    assert edited.count("# calibrated (swarm calibrate)") == sum(len(p.values) for p in proposals)
    assert all(line in edited for line in text.splitlines() if line.startswith("#"))
    ladder = ladder_from(tomllib.loads(edited), "edited")
    for tier, proposal in zip(ladder.tiers, proposals, strict=True):
        for key, value in proposal.values.items():
            assert getattr(tier.rule, key) == value
