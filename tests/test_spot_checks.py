"""Spot checks: a share of a tier's rejects runs one tier up anyway, a share set by how such
rejects fare there against the tier's promotions, so a proxy tier that misleads stops
filtering and a good one keeps filtering (scale_ladder/spot_checks.py)."""

from __future__ import annotations

import random
import re
import zlib
from pathlib import Path

import pytest
from optuna.trial import TrialState

from agents.brain import Finding, Gain
from agents.model_brain import ModelSearch, Sampler
from bus.messages import SPOT_CHECK, Decision, RunResult, RunSpec, Verdict
from scale_ladder.ladder import Ladder
from scale_ladder.tiers import LadderConfigError
from tests.ladder_sim import Sim, champions, decisions, make_ladder, ok_result, started
from tests.test_model_brain import BASELINE, RECIPE, desk, propose
from training.recipe_constants import Change


def lr_of(source: str) -> float:
    return float(re.search(r"^LR = ([\d.]+)", source, re.M).group(1))  # type: ignore[union-attr]


def own_noise(spec: RunSpec, source: str) -> float:
    """A run's own noise, fixed by its seed and recipe (crc32: stable across processes)."""
    return random.Random(zlib.crc32(f"{spec.seed}:{source}".encode())).gauss(0, 0.002)


def misleading_runner(spec: RunSpec, source: str) -> RunResult:
    """Tier 0 prefers an LR far from 3, the top tier one near it: the proxy ranks backwards."""
    distance = (lr_of(source) - 3.0) ** 2
    level = -0.1 * distance if spec.tier == 0 else 0.1 * distance
    return ok_result(spec, 3.0 + level + own_noise(spec, source))


def honest_runner(spec: RunSpec, source: str) -> RunResult:
    """Every tier prefers an LR near 3."""
    distance = (lr_of(source) - 3.0) ** 2
    return ok_result(spec, 3.0 + 0.1 * distance + own_noise(spec, source))


def rejected_at_0(sim: Sim) -> tuple[list[Decision], list[Decision]]:
    """The rules' rejects at tier 0, in order: (sent on by a spot check, stopped there)."""
    finals = [
        d
        for d in sim.log
        if isinstance(d, Decision) and d.tier == 0 and d.verdict is not Verdict.RETEST
    ]
    checked = [d for d in finals if d.rule.startswith(SPOT_CHECK)]
    stopped = [d for d in finals if d.verdict is Verdict.REJECT]
    return checked, stopped


def swarm_of_ideas(tmp_path: Path, runner: object, lrs: list[float], least: float) -> Sim:
    tmp_path.mkdir(parents=True, exist_ok=True)
    ladder = make_ladder(tmp_path, require_approval=True, extra=f"spot_checks = {least}")
    sim = Sim(ladder, runner)  # type: ignore[arg-type]
    sim.step()
    sim.run_all()
    for i, lr in enumerate(lrs):
        sim.propose(f"idea-{i:02d}", f"LR = 1.0->LR = {lr:g}")
        sim.run_all()
    return sim


def test_off_by_default_a_reject_stops_at_its_tier(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-bad", "LR = 1.0->LR = 0.5")
    sim.run_all()
    (bad,) = decisions(sim, "idea-bad")
    assert bad.verdict is Verdict.REJECT
    assert not [s for s in sim.log if isinstance(s, RunSpec) and s.idea_id and s.tier == 1]


def test_a_spot_checked_reject_meets_the_next_tiers_gate(tmp_path: Path) -> None:
    """Sent on, a loss at every tier is still rejected one tier up: it skips only the gate it
    failed. The decision says why it went on, with the counts behind the share."""
    sim = started(make_ladder(tmp_path, extra="spot_checks = 1.0"))
    sim.propose("idea-bad", "LR = 1.0->LR = 0.5")
    sim.run_all()
    at_0, at_1 = decisions(sim, "idea-bad")
    assert at_0.verdict is Verdict.PROMOTE and at_0.rule.startswith(SPOT_CHECK)
    assert "rejected at tier 0" in at_0.rule and "100%" in at_0.rule
    assert at_0.delta is not None and at_0.delta < 0  # its measured loss, not hidden
    assert at_1.tier == 1 and at_1.verdict is Verdict.REJECT
    assert len(champions(sim)) == 1  # nothing stacked


def test_a_misleading_proxy_sends_its_rejects_on_and_a_good_one_keeps_filtering(
    tmp_path: Path,
) -> None:
    """With the least share 0.25: when tier 0's rejects win at tier 1, the share climbs and
    nearly every later reject goes on (and wins there); when they lose there, it stays put."""
    better_at_top = [1.1 + 0.1 * i for i in range(36)]  # 1.1 .. 4.6, all nearer 3 than 1.0
    sim = swarm_of_ideas(tmp_path / "misleading", misleading_runner, better_at_top, 0.25)
    checked, stopped = rejected_at_0(sim)
    later = [d.idea_id for d in checked if int(d.idea_id[-2:]) >= 18]
    later_stopped = [d.idea_id for d in stopped if int(d.idea_id[-2:]) >= 18]
    assert len(later) >= 3 * max(1, len(later_stopped))
    held = [d for d in sim.log if isinstance(d, Decision) and d.verdict is Verdict.HELD]
    assert len(held) >= len(checked) // 2  # the spot-checked ideas win at the top

    worse = [0.1 + 0.05 * i for i in range(18)] + [5.1 + 0.1 * i for i in range(18)]
    worse = [lr for pair in zip(worse[:18], worse[18:], strict=True) for lr in pair]
    sim = swarm_of_ideas(tmp_path / "honest", honest_runner, worse, 0.25)
    checked, stopped = rejected_at_0(sim)
    share = len(checked) / (len(checked) + len(stopped))
    assert 0.1 <= share <= 0.45
    assert "25%" in checked[-1].rule


def test_a_replayed_ladder_counts_the_same_and_asks_for_nothing_more(tmp_path: Path) -> None:
    sim = swarm_of_ideas(tmp_path, misleading_runner, [1.1 + 0.1 * i for i in range(12)], 0.5)
    assert sim.ladder.checks[0].checked >= 1
    fresh = Ladder(sim.ladder.tiers, "recipe.py", sim.ladder.initial_source, require_approval=True)
    for message in sim.log:
        fresh.observe(message)
    assert fresh.act() == []
    assert fresh.checks == sim.ladder.checks


@pytest.mark.parametrize("value", ["-0.1", "1.5", '"half"'])
def test_a_share_outside_0_to_1_is_refused_naming_the_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(LadderConfigError, match="spot_checks"):
        make_ladder(tmp_path, extra=f"spot_checks = {value}")


def test_the_model_reads_a_failed_spot_check_as_a_reject_where_it_was_rejected() -> None:
    """Rejected at tier 0, sent on and rejected at tier 1, an idea passed no gate: as a trial
    pruned at step 1 it would rank above every tier-0 reject. It is pruned at step 0. One
    that passed tier 1 after its spot check got there by a gate and keeps its values (decided
    at the top, tier 2 here: a complete trial)."""
    failed = Finding(
        "idea-f", "a", 1, (Change("WD", "0.1", "0.5"),), "h", 1, "REJECT", -0.02,
        gains=(Gain(1, 0, -0.01, BASELINE, spot_check=True), Gain(1, 1, -0.02, BASELINE)),
    )  # fmt: skip
    climbed = Finding(
        "idea-c", "a", 1, (Change("WD", "0.1", "0.7"),), "h", 2, "REJECT", -0.03,
        gains=(
            Gain(1, 0, -0.01, BASELINE, spot_check=True),
            Gain(1, 1, 0.02, BASELINE),
            Gain(1, 2, -0.03, BASELINE),
        ),
    )  # fmt: skip
    search = ModelSearch(Sampler.TPE, seed=0)
    propose(search, desk(RECIPE, (failed, climbed)))
    by_wd = {round(t.params["WD"], 3): t for t in search._study.get_trials(deepcopy=False)}
    assert by_wd[0.5].state is TrialState.PRUNED and list(by_wd[0.5].intermediate_values) == [0]
    assert by_wd[0.7].state is TrialState.COMPLETE
    assert sorted(by_wd[0.7].intermediate_values) == [0, 1]
