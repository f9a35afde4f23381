"""Screening tiers (`sigmas = 0` below the top): a proxy tier promotes on the minimum improvement
and the rank gate, with no significance asked of it; the top tier's noise gate, which the loader
requires, still decides what is stacked, and asks more than the others (`PromotionRule.stacks`:
a second seed, and the idea's own spread when it is the larger). The real loader, rules and
Ladder (tests/ladder_sim.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bus.messages import RunResult, RunSpec, Verdict
from scale_ladder.rules import Evidence, PromotionRule, decide
from scale_ladder.tiers import LadderConfigError, load_tiers
from tests.ladder_sim import (
    SIM_LADDER,
    Sim,
    champions,
    decisions,
    make_ladder,
    metric,
    ok_result,
)

BASE = {0: 3.00, 1: 3.02, 2: 2.98, 3: 3.01}
SCREEN = PromotionRule(min_improvement=0.002, sigmas=0.0, seeds=2, max_seeds=4, confirm_wins=False)
SIGNIFICANCE = PromotionRule(min_improvement=0.002, sigmas=2.0, seeds=2, max_seeds=4)


def idea(gains: dict[int, float]) -> dict[int, float]:
    return {seed: BASE[seed] - gain for seed, gain in gains.items()}


def test_a_gain_inside_the_noise_climbs_a_screening_tier_but_not_a_gated_one() -> None:
    # A gain of 0.01 on one seed where one paired difference spreads by 0.05.
    evidence = Evidence(idea({0: 0.01}), BASE, pooled_sigma=0.05)
    screened = decide(SCREEN, evidence)
    assert screened.verdict is Verdict.PROMOTE
    assert "screening tier" in screened.rule and "minimum 0.006" in screened.rule
    assert decide(SIGNIFICANCE, evidence).verdict is not Verdict.PROMOTE


def test_a_screening_tier_rejects_below_the_minimum_at_once() -> None:
    below = Evidence(idea({0: 0.005}), BASE, pooled_sigma=0.05)  # the minimum is 0.006
    outcome = decide(SCREEN, below)
    assert outcome.verdict is Verdict.REJECT and "below the minimum" in outcome.rule


def test_the_first_tier_confirms_a_one_seed_win_on_a_second() -> None:
    first = PromotionRule(min_improvement=0.002, sigmas=0.0, seeds=2, max_seeds=4)
    outcome = decide(first, Evidence(idea({0: 0.01}), BASE, pooled_sigma=0.05))
    assert outcome.verdict is Verdict.RETEST and outcome.seeds_wanted == 2
    lost = decide(first, Evidence(idea({0: 0.01, 1: -0.03}), BASE, pooled_sigma=0.05))
    assert lost.verdict is Verdict.REJECT  # the mean of the two is below the minimum


def test_seed_honesty_and_the_rank_gate_still_hold_on_a_screening_tier() -> None:
    # Gains equal on every seed (a constant shift of the metric) are no noise estimate: never
    # promoted, however large, without a pooled σ_d.
    equal = decide(SCREEN, Evidence(idea({0: 0.05, 1: 0.05, 2: 0.05, 3: 0.05}), BASE))
    assert equal.verdict is Verdict.REJECT and "σ_d ≈ 0" in equal.rule
    ranked = PromotionRule(sigmas=0.0, top_fraction=0.5, cold_start=4, confirm_wins=False)
    peers = (0.02, 0.03, 0.04, 0.05)
    outcome = decide(ranked, Evidence(idea({0: 0.01}), BASE, pooled_sigma=0.05, peer_gains=peers))
    assert outcome.verdict is Verdict.REJECT and "below the rank gate" in outcome.rule


def ladder_file(tmp_path: Path, small: str, large: str = "") -> Path:
    text = SIM_LADDER.format(extra=small)
    path = tmp_path / "ladder.toml"
    path.write_text(text + large)
    return path


def test_the_loader_takes_a_screening_tier_below_the_top_only(tmp_path: Path) -> None:
    small, large = load_tiers(ladder_file(tmp_path, "sigmas = 0"))
    assert small.rule.sigmas == 0 and large.rule.sigmas == 2.0
    assert large.rule.stacks and not small.rule.stacks
    # With a noise gate at every tier, the gates below already guard the top: no extra asks.
    assert not load_tiers(ladder_file(tmp_path, ""))[1].rule.stacks
    for top in ("sigmas = 0\n", "sigmas = 1e-300\n", "sigmas = 0.5\n"):
        with pytest.raises(
            LadderConfigError, match=r'tier\[1\] \("\w+"\)\.sigmas must be at least 1'
        ):
            load_tiers(ladder_file(tmp_path, "", top))
    with pytest.raises(
        LadderConfigError, match=r'tier\[0\] \("\w+"\)\.sigmas must be positive \(or 0'
    ):
        load_tiers(ladder_file(tmp_path, "sigmas = -1"))
    # One seed gives no noise estimate: such a tier could pass nothing (found by a red team).
    one_seed = ladder_file(tmp_path, "sigmas = 0")
    one_seed.write_text(
        one_seed.read_text().replace("seeds = 2\nmax_seeds = 4", "seeds = 1\nmax_seeds = 1", 1)
    )
    with pytest.raises(
        LadderConfigError, match=r'tier\[0\] \("\w+"\)\.max_seeds must be at least 2'
    ):
        load_tiers(one_seed)


def small_model_trick(spec: RunSpec, source: str) -> RunResult:
    """DEPTH does nothing to the metric, except at tier 0, where DEPTH = 3 gains 0.01."""
    trick = 0.01 if spec.tier == 0 and "DEPTH = 3" in source else 0.0
    return ok_result(spec, metric(source, spec.seed) - trick)


def test_the_top_tier_rejects_a_change_that_only_passed_the_screen(tmp_path: Path) -> None:
    """A small-model trick climbs the screening tier; the top tier's gate on fresh seeds stops
    it, and a real gain is stacked as before."""
    sim = Sim(make_ladder(tmp_path, extra="sigmas = 0"), small_model_trick)
    sim.step()
    sim.run_all()
    sim.propose("idea-trick", "DEPTH = 2->DEPTH = 3")
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    # Rebased onto the stacked champion, it climbs the screen again and is stopped again.
    trick = [(d.tier, d.verdict) for d in decisions(sim, "idea-trick")]
    assert {v for t, v in trick if t == 0} == {Verdict.PROMOTE}
    assert {v for t, v in trick if t == 1} == {Verdict.REJECT}
    good = decisions(sim, "idea-good")
    assert [(d.tier, d.verdict) for d in good] == [(0, Verdict.PROMOTE), (1, Verdict.PROMOTE)]
    assert "screening tier" in good[0].rule and "noise gate 2σ/√n" in good[1].rule
    assert [c.idea_id for c in champions(sim)][-1] == "idea-good"


TOP = PromotionRule(min_improvement=0.002, sigmas=2.0, seeds=2, max_seeds=6, confirm_wins=False)


def test_the_top_tier_confirms_a_one_seed_win_on_a_second() -> None:
    win = Evidence(idea({0: 0.2}), BASE, pooled_sigma=0.02)
    assert decide(TOP, win).verdict is Verdict.PROMOTE  # a tier that does not stack
    outcome = decide(replace(TOP, stacks=True), win)
    assert outcome.verdict is Verdict.RETEST and outcome.seeds_wanted == 2


def test_the_top_tier_judges_an_idea_noisier_than_the_pool_on_its_own_spread() -> None:
    # Mean gain 0.05 on two seeds that disagree (0.10, 0.00): inside its own noise, though
    # clear of the 2σ/√2 = 0.028 of other ideas' calm pooled σ_d.
    noisy = Evidence(idea({0: 0.10, 1: 0.0}), BASE, pooled_sigma=0.02)
    assert decide(TOP, noisy).verdict is Verdict.PROMOTE
    outcome = decide(replace(TOP, stacks=True), noisy)
    assert outcome.verdict is Verdict.RETEST
    assert (
        outcome.sigma == pytest.approx(0.0707, abs=1e-4) and "own, above the pooled" in outcome.rule
    )
    calm = Evidence(idea({0: 0.05, 1: 0.051}), BASE, pooled_sigma=0.02)
    assert decide(replace(TOP, stacks=True), calm).sigma == 0.02  # the pooled one, when larger
