"""A tier declared `deterministic = true`: a metric that does not depend on the seed by design
(a simulator, a benchmark whose top fidelity has no noise) is judged on one run per recipe and
the minimum improvement, instead of being held as a run that ignores its seed.

The real loader, rules and Ladder, driven by tests/ladder_sim.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.messages import RunResult, RunSpec, Verdict
from scale_ladder.ladder import Ladder
from scale_ladder.rules import Evidence, PromotionRule, decide
from scale_ladder.tiers import LadderConfigError, load_tiers
from tests.ladder_sim import RECIPE, SIM_LADDER, Sim, champions, decisions, metric, ok_result

FIXED_SEED = 7


def ladder_file(tmp_path: Path, large: str) -> Path:
    """The simulator's ladder with the large (top) tier's seed keys replaced by `large`."""
    text = SIM_LADDER.format(extra="")
    cut = text.index('name = "large"')
    top = text[cut:].replace("seeds = 2\nmax_seeds = 4\n", large)
    path = tmp_path / "ladder.toml"
    path.write_text(text[:cut] + top)
    return path


def blind_at_top(spec: RunSpec, source: str) -> RunResult:
    """Seed noise at tier 0, none at the top tier: the MF-Hartmann benchmark's shape."""
    return ok_result(spec, metric(source, FIXED_SEED if spec.tier == 1 else spec.seed))


def test_the_loader_reads_a_deterministic_tier_as_one_seed(tmp_path: Path) -> None:
    small, large = load_tiers(ladder_file(tmp_path, "deterministic = true\n"))
    assert large.seeds == 1 and large.rule.max_seeds == 1 and large.rule.deterministic
    assert not large.rule.confirm_wins
    assert not small.rule.deterministic and small.rule.seeds == 2


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("deterministic = true\nseeds = 2\n", "deterministic tier runs each recipe once: seeds"),
        ("deterministic = true\nmax_seeds = 3\n", "once: max_seeds must be 1"),
        ('deterministic = "yes"\nseeds = 2\n', "deterministic must be true or false"),
    ],
)
def test_contradictory_or_malformed_declarations_are_refused_by_name(
    tmp_path: Path, keys: str, message: str
) -> None:
    with pytest.raises(LadderConfigError, match=message):
        load_tiers(ladder_file(tmp_path, keys))


def test_a_seed_free_top_tier_declared_deterministic_stacks_a_real_gain(tmp_path: Path) -> None:
    tiers = load_tiers(ladder_file(tmp_path, "deterministic = true\n"))
    sim = Sim(Ladder(tiers, "recipe.py", RECIPE), blind_at_top)
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-tiny", "WD = 0.1->WD = 0.1001")  # a real but negligible change
    sim.run_all()
    top = [s for s in sim.log if isinstance(s, RunSpec) and s.tier == 1 and s.champion_version == 1]
    one = sim.ladder.seed(1, 0)  # the tier's first seed, for the champion and the idea alike
    assert sorted((s.idea_id, s.seed) for s in top) == [("", one), ("idea-good", one)]
    (promote,) = [d for d in decisions(sim, "idea-good") if d.tier == 1]
    assert promote.verdict is Verdict.PROMOTE and promote.n == 1
    assert "deterministic tier" in promote.rule
    assert champions(sim)[-1].idea_id == "idea-good"
    assert not [d for d in sim.log if getattr(d, "verdict", None) is Verdict.HELD]


def test_without_the_declaration_the_same_tier_is_held(tmp_path: Path) -> None:
    path = ladder_file(tmp_path, "seeds = 2\nmax_seeds = 4\n")
    sim = Sim(Ladder(load_tiers(path), "recipe.py", RECIPE), blind_at_top)
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    (held,) = [d for d in sim.log if getattr(d, "verdict", None) is Verdict.HELD]
    assert held.tier == 1 and "declare the tier `deterministic = true`" in held.rule
    assert len(champions(sim)) == 1


def test_a_deterministic_gain_below_the_minimum_or_a_loss_is_rejected_at_once() -> None:
    rule = PromotionRule(min_improvement=0.01, seeds=1, max_seeds=1, deterministic=True)
    small = decide(rule, Evidence({5: 1.995}, {5: 2.0}))
    assert small.verdict is Verdict.REJECT and "below the minimum" in small.rule
    worse = decide(rule, Evidence({5: 2.5}, {5: 2.0}))
    assert worse.verdict is Verdict.REJECT and worse.delta == pytest.approx(-0.5)
    better = decide(rule, Evidence({5: 1.9}, {5: 2.0}))
    assert better.verdict is Verdict.PROMOTE and better.n == 1
    # Higher is better: the sign flips, as at any tier.
    up = decide(rule, Evidence({5: 2.1}, {5: 2.0}, lower_is_better=False))
    assert up.verdict is Verdict.PROMOTE
    waiting = decide(rule, Evidence({}, {5: 2.0}))
    assert waiting.verdict is Verdict.RETEST and waiting.seeds_wanted == 1
