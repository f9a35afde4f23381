"""Seed honesty (issue 17): a recipe whose results do not depend on the seed promotes nothing.

A champion whose metric is the same on every seed at a tier holds that tier (one Decision says
why, its ideas wait undecided), and a σ_d of 0 (or missing, NaN, or float rounding) never
passes a noise gate. The real rules and the real Ladder, driven by tests/ladder_sim.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bus.messages import Decision, Idea, Message, RunResult, RunSpec, Verdict
from scale_ladder.ladder import Ladder, Phase
from scale_ladder.rules import (
    Evidence,
    Noise,
    PromotionRule,
    decide,
    pooled_sigma,
)
from scale_ladder.seed_honesty import seed_ignored
from tests.ladder_sim import (
    Sim,
    champions,
    decisions,
    make_ladder,
    metric,
    ok_result,
    ok_runner,
)

RULE = PromotionRule(min_improvement=0.002, sigmas=2.0, seeds=2, max_seeds=6)
# Sums of powers of two: a constant shift of 0.25 pairs to a gain of exactly 0.25, σ_d 0.0.
EXACT = {0: 3.0, 1: 3.5, 2: 2.75, 3: 3.25, 4: 2.5, 5: 3.125}
FIXED_SEED = 1337  # what the user's training command called torch.manual_seed with


def shifted(by: float, seeds: range = range(6)) -> dict[int, float]:
    return {s: EXACT[s] - by for s in seeds}


result = ok_result


def seed_blind(spec: RunSpec, source: str) -> RunResult:
    """The user's command: it seeds itself and ignores the seed it is given."""
    return result(spec, metric(source, FIXED_SEED))


def holds(sim: Sim) -> list[Decision]:
    """The Decisions that hold a tier: made by the ladder about the champion (no idea)."""
    return [m for m in sim.log if isinstance(m, Decision) and not m.idea_id]


def seeds(sim: Sim, tier: int, n: int) -> list[int]:
    """The tier's first n seeds, sorted, as the ladder asks for them."""
    return sorted(sim.ladder.seed(tier, i) for i in range(n))


def baseline_seeds(sim: Sim, tier: int) -> list[int]:
    specs = [m for m in sim.log if isinstance(m, RunSpec) and not m.idea_id and m.tier == tier]
    return sorted(s.seed for s in specs)


def held_swarm(tmp_path: Path) -> Sim:
    sim = Sim(make_ladder(tmp_path), seed_blind)
    sim.step()
    sim.run_all()
    for i, change in enumerate(["LR = 1.0->LR = 2.0", "LR = 1.0->LR = 2.5", "WD = 0.1->WD = 0.3"]):
        sim.propose(f"idea-{i}", change)
    sim.run_all()
    return sim


def assert_replays(sim: Sim, tmp_path: Path) -> None:
    """A ladder fed the same events makes the same decisions, and one rebuilt from the whole
    log (the ledger's rows) has nothing left to do and the same state."""
    again = make_ladder(tmp_path)
    made: list[Message] = list(again.act())
    for message in sim.log:
        if isinstance(message, Idea | RunResult) or message not in made:
            again.observe(message)  # what came from outside (or was fed in by a test)
            made += again.act()
    live = [(d.decision_id, d.verdict, d.rule, d.details) for d in _decisions(sim.log)]
    assert [(d.decision_id, d.verdict, d.rule, d.details) for d in _decisions(made)] == live
    rebuilt = make_ladder(tmp_path)
    for message in sim.log:
        rebuilt.observe(message)
    assert rebuilt.act() == []
    assert {i: (s.phase, s.tier) for i, s in rebuilt.ideas.items()} == {
        i: (s.phase, s.tier) for i, s in sim.ladder.ideas.items()
    }


def _decisions(messages: list[Message]) -> list[Decision]:
    return [m for m in messages if isinstance(m, Decision)]


# --- the rules ----------------------------------------------------------------------------


def test_seed_ignored_needs_two_seeds_all_equal_up_to_float_jitter() -> None:
    assert seed_ignored({3: 2.5, 1: 2.5}) == [1, 3]
    assert seed_ignored({0: 2.5}) == [] and seed_ignored({}) == []
    # float32 or GPU jitter in the last digits is still one number (a red team's 1e-9, 1e-7)
    assert seed_ignored({0: 2.5, 1: 2.5 + 1e-9, 2: 2.5 - 2e-7}) == [0, 1, 2]
    assert seed_ignored({0: 2.4336, 1: 2.4337}) == []  # seed noise, printed to 4 decimals


def test_a_baseline_that_ignores_the_seed_holds_any_idea_whatever_its_gain() -> None:
    constant = {0: 2.5, 1: 2.5}
    for idea in ({0: 2.0, 1: 2.01}, {0: 2.0, 1: 2.0}, {0: 2.9}):  # varying, constant, one seed
        for pooled in (None, 0.01):
            outcome = decide(RULE, Evidence(idea, constant, pooled_sigma=pooled))
            assert outcome.verdict is Verdict.HELD and outcome.delta is None
            assert outcome.rule.startswith("seed_ignored: ")
            assert "on seeds [0, 1]" in outcome.rule and "SWARM_SEED / {seed}" in outcome.rule
    # One baseline seed says nothing yet: the idea waits for its seeds as before.
    one = decide(RULE, Evidence({0: 2.0}, {0: 2.5}))
    assert one.verdict is Verdict.RETEST and one.seeds_wanted == 2


def test_paired_gains_equal_on_every_seed_never_pass_the_noise_gate() -> None:
    # Before: σ_d = stdev(0.25, 0.25) = 0, a gate of 0, and a promotion on one repeated number.
    outcome = decide(RULE, Evidence(shifted(0.25, range(2)), EXACT))
    assert outcome.verdict is Verdict.RETEST and outcome.sigma == 0.0
    assert "σ_d ≈ 0" in outcome.rule and outcome.seeds_wanted == 3
    at_max = decide(RULE, Evidence(shifted(0.25), EXACT))
    assert at_max.verdict is Verdict.REJECT and "inconclusive at 6 seeds" in at_max.rule
    # A shift that is not a power of two pairs to the same gain up to float rounding: no noise.
    base = {s: 3.0 + 0.013 * s for s in range(6)}
    rounded = decide(RULE, Evidence({s: v - 0.05 for s, v in base.items()}, base))
    assert rounded.verdict is Verdict.REJECT and "inconclusive" in rounded.rule
    # A change that does nothing pairs to exactly 0: still rejected at once, below the minimum.
    null = decide(RULE, Evidence(shifted(0.0, range(2)), EXACT))
    assert null.verdict is Verdict.REJECT and "below the minimum" in null.rule


def test_a_zero_or_missing_pooled_sigma_is_no_noise_estimate() -> None:
    for pooled in (0.0, math.nan, math.inf, -0.01, None):
        one = decide(RULE, Evidence(shifted(0.5, range(1)), EXACT, pooled_sigma=pooled))
        assert one.verdict is Verdict.RETEST and one.rule == "1 of 2 paired seeds in"
        two = decide(RULE, Evidence(shifted(0.5, range(2)), EXACT, pooled_sigma=pooled))
        assert two.verdict is not Verdict.PROMOTE
    assert Noise(0.0, 5, 6).sigma is None and Noise(math.nan, 5, 6).sigma is None
    assert pooled_sigma([[0.1, 0.1 + 1e-9, 0.1]] * 2) is not None  # tiny but real spread


def test_gains_equal_up_to_rounding_do_not_dilute_the_pooled_sigma() -> None:
    real = [[0.09, 0.11, 0.10], [-0.21, -0.19, -0.20]]  # seed noise of ±0.01
    shifts = [[0.25, 0.25 + 2e-16, 0.25 - 2e-16]] * 4  # metric shifted by a constant, metrics ~3
    assert pooled_sigma(shifts + real, scale=3.0) == pytest.approx(0.01)
    diluted = pooled_sigma(shifts + real)  # as if they were noise: 12 more dof of nothing
    assert diluted is not None and diluted < 0.006


@given(
    st.floats(-1.0, 1.0),
    st.integers(2, 6),
    st.sampled_from([None, 0.0, math.nan]),
    st.sampled_from([0.0, 0.002, 0.05]),
)
def test_a_constant_paired_gain_is_never_promoted(
    gain: float, n: int, pooled: float | None, min_improvement: float
) -> None:
    rule = PromotionRule(min_improvement=min_improvement, sigmas=2.0, seeds=2, max_seeds=6)
    outcome = decide(rule, Evidence(shifted(gain, range(n)), EXACT, pooled_sigma=pooled))
    assert outcome.verdict is not Verdict.PROMOTE


# --- the ladder ---------------------------------------------------------------------------


def test_a_command_that_ignores_its_seed_holds_the_tier_and_promotes_nothing(
    tmp_path: Path,
) -> None:
    sim = held_swarm(tmp_path)
    base = sim.ladder.champions[1].source
    assert metric(base, FIXED_SEED) - metric(base.replace("LR = 1.0", "LR = 2.0"), FIXED_SEED) > 0.1
    (held,) = holds(sim)  # once for the tier, not once per idea
    assert held.verdict is Verdict.HELD and (held.tier, held.champion_version) == (0, 1)
    assert held.decision_id == "dec-seed-ignored-v1-t0" and held.decided_by == "ladder"
    assert held.rule.startswith("seed_ignored: the champion's metric is identical (")
    probes = seeds(sim, 0, 4)
    assert f"on seeds {probes} at tier 0: the run ignores its seed" in held.rule
    assert "pass SWARM_SEED / {seed} to the training command" in held.rule
    details = json.loads(held.details)
    assert details["seeds"] == probes and len(set(details["baseline"])) == 1
    # Found before any idea came: the first champion runs its tier-0 baseline on two seeds at
    # once, so the user hears of it before anything is proposed, and the ideas wait.
    assert details["waiting"] == []
    # The tier's max_seeds baseline seeds were run to be sure (a coarse metric can repeat).
    assert baseline_seeds(sim, 0) == probes and baseline_seeds(sim, 1) == []
    for i in range(3):  # undecided, with their runs, waiting: not even the loser is rejected
        assert all(d.verdict is Verdict.RETEST for d in decisions(sim, f"idea-{i}", True))
        state = sim.ladder.ideas[f"idea-{i}"]
        assert (state.phase, state.tier) == (Phase.TESTING, 0)
        assert sim.ladder.runs.results[(f"idea-{i}", 1, 0)]
    assert len(champions(sim)) == 1 and sim.ladder.act() == []
    assert_replays(sim, tmp_path)


def test_a_seed_blind_command_with_float_jitter_starts_no_tier_above_the_held_one(
    tmp_path: Path,
) -> None:
    """The first champion starts each tier once the one below follows its seed; metrics apart
    only by float jitter (a fixed seed on a nondeterministic device) do not count as following
    it (red team: every tier was probed to max_seeds, six runs at the top)."""

    def jittery(spec: RunSpec, source: str) -> RunResult:
        return result(spec, metric(source, FIXED_SEED) + 1e-9 * (spec.seed % 7))

    sim = Sim(make_ladder(tmp_path), jittery)
    sim.step()
    sim.run_all()
    assert [h.tier for h in holds(sim)] == [0]
    assert baseline_seeds(sim, 0) == seeds(sim, 0, 4) and baseline_seeds(sim, 1) == []


def test_the_same_in_a_higher_tier_is_said_for_that_tier(tmp_path: Path) -> None:
    def blind_at_one(spec: RunSpec, source: str) -> RunResult:
        return result(spec, metric(source, FIXED_SEED if spec.tier == 1 else spec.seed))

    sim = Sim(make_ladder(tmp_path), blind_at_one)
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    assert [(d.tier, d.verdict) for d in decisions(sim, "idea-good")] == [(0, Verdict.PROMOTE)]
    (held,) = holds(sim)
    assert held.tier == 1 and f"on seeds {seeds(sim, 1, 4)} at tier 1" in held.rule
    assert sim.ladder.ideas["idea-good"].tier == 1 and len(champions(sim)) == 1
    assert_replays(sim, tmp_path)


def test_a_varying_baseline_still_promotes_a_real_gain(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path), ok_runner)
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    assert [(d.tier, d.verdict) for d in decisions(sim, "idea-good")] == [
        (0, Verdict.PROMOTE),
        (1, Verdict.PROMOTE),
    ]
    assert champions(sim)[-1].idea_id == "idea-good" and holds(sim) == []
    assert baseline_seeds(sim, 0) == seeds(sim, 0, 2)  # no extra ones where nothing is held


def test_a_constant_shift_of_the_metric_is_never_promoted(tmp_path: Path) -> None:
    """An idea that reports its metric minus a constant pairs to one gain on every seed (up to
    rounding) while the baseline varies: σ_d ≈ 0 used to be a gate of 0."""

    def shifting(spec: RunSpec, source: str) -> RunResult:
        if "WD = 0.2" not in source:
            return ok_runner(spec, source)
        return result(spec, metric(source.replace("WD = 0.2", "WD = 0.1"), spec.seed) - 0.25)

    sim = Sim(make_ladder(tmp_path), shifting)
    sim.step()
    sim.run_all()
    sim.propose("idea-shift", "WD = 0.1->WD = 0.2")
    sim.run_all()
    verdicts = decisions(sim, "idea-shift", retests=True)
    assert all(d.verdict is not Verdict.PROMOTE for d in verdicts)
    last = verdicts[-1]
    assert last.verdict is Verdict.REJECT and "inconclusive at 4 seeds" in last.rule
    assert last.delta is not None and abs(last.delta - 0.25) < 1e-12 and holds(sim) == []


def test_a_hold_lifts_when_another_baseline_seed_gives_another_metric(tmp_path: Path) -> None:
    """Two seeds print the same number (a coarse metric, say): the ideas wait while the tier's
    other baseline seeds run, and are decided as usual once one differs. Nothing is published."""

    ladder = make_ladder(tmp_path)
    first_two = {ladder.seed(0, 0), ladder.seed(0, 1)}

    def coarse(spec: RunSpec, source: str) -> RunResult:
        return result(spec, metric(source, FIXED_SEED if spec.seed in first_two else spec.seed))

    sim = Sim(ladder, coarse)
    probes = {ladder.seed(0, 2), ladder.seed(0, 3)}

    def probe(spec: RunSpec) -> bool:
        return not spec.idea_id and spec.tier == 0 and spec.seed in probes

    sim.step()
    sim.run_all(hold=probe)
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all(hold=probe)
    assert {s.seed for s in sim.queue} == probes  # asked for, not yet run
    assert all(d.verdict is Verdict.RETEST for d in decisions(sim, "idea-good", True))
    assert sim.ladder.ideas["idea-good"].phase is Phase.TESTING and holds(sim) == []
    sim.run_all()
    assert decisions(sim, "idea-good")[0].verdict is Verdict.PROMOTE
    assert champions(sim)[-1].idea_id == "idea-good" and holds(sim) == []
    assert_replays(sim, tmp_path)


def test_a_published_hold_lifts_when_a_later_baseline_seed_differs(tmp_path: Path) -> None:
    sim = held_swarm(tmp_path)
    assert len(holds(sim)) == 1
    ladder: Ladder = sim.ladder
    seed = ladder.seed(0, 4)
    spec = ladder.tiers[0].run_spec(f"run-base-v1-t0-s{seed}", seed, 1)
    sim.feed(spec)
    sim.feed(result(spec, metric(ladder.champions[1].source, seed)))
    sim.run_all()
    # Decided again on all their evidence. Their own runs still ignore the seed, so each pairs
    # to one gain on every seed: inconclusive at the maximum, never promoted.
    for i in range(3):
        last = decisions(sim, f"idea-{i}")[-1]
        assert last.verdict is Verdict.REJECT and ladder.ideas[f"idea-{i}"].phase is Phase.DONE
        assert "σ_d ≈ 0" in last.rule or "below the minimum" in last.rule
    # Tier 0 now follows its seed, so the first champion's baseline starts at tier 1, where
    # the command ignores its seed too: that tier is held in its turn.
    assert [h.tier for h in holds(sim)] == [0, 1] and len(champions(sim)) == 1
    assert_replays(sim, tmp_path)


def test_an_idea_that_pins_its_own_seed_is_not_promoted_on_one_racing_seed() -> None:
    """Racing settles losers on one seed, but a win needs a second: there an idea that ignores
    the seed it is given shows as the same number while the baseline moves (red team: 11 of 40
    such ideas were stacked on one seed per tier)."""
    base = {0: 3.00, 1: 3.04}
    first = decide(RULE, Evidence({0: 2.90}, base, pooled_sigma=0.01))
    assert first.verdict is Verdict.RETEST and first.seeds_wanted == 2
    second = decide(RULE, Evidence({0: 2.90, 1: 2.90}, base, pooled_sigma=0.01))
    assert second.verdict is Verdict.REJECT and "ignores the seed" in second.rule
    honest = decide(RULE, Evidence({0: 2.90, 1: 2.95}, base, pooled_sigma=0.01))
    assert honest.verdict is Verdict.PROMOTE


def test_float_jitter_does_not_pass_for_seed_noise() -> None:
    """A command that ignores its seed on a nondeterministic device differs in the last digits
    only: still a held tier, never a gate of 2e-8 (red team)."""
    jitter = decide(RULE, Evidence({0: 1.9946, 1: 1.99460003}, {0: 2.0, 1: 2.00000001}))
    assert jitter.verdict is Verdict.HELD and jitter.rule.startswith("seed_ignored")
    pooled = decide(RULE, Evidence({0: 1.99, 1: 1.98}, {0: 2.0, 1: 2.01}, pooled_sigma=1e-7))
    assert pooled.sigma is not None and pooled.sigma > 1e-3  # its own σ, not the jitter's
