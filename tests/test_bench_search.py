"""The search benchmark's problems and peer methods, through sim.simulate as the benchmark runs
them. Small budgets: these check behaviour, not which method wins."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from bench.search.peers import PEERS, RandomSearch
from bench.search.problems import (
    LCDB_DATASETS,
    LcdbProblem,
    SyntheticProblem,
    fidelity_correlation,
    lcdb_available,
    make_problem,
)
from bench.search.sim import Config, Job, Method, Problem, regret, simulate


class Recorder:
    """Passes a method through, keeping every job it started."""

    def __init__(self, method: Method) -> None:
        self.method, self.name, self.jobs = method, method.name, list[Job]()

    def ask(self) -> Job | None:
        job = self.method.ask()
        if job is not None:
            self.jobs.append(job)
        return job

    def tell(self, job: Job, loss: float) -> None:
        self.method.tell(job, loss)

    def incumbent(self) -> Config | None:
        return self.method.incumbent()


def run(problem: Problem, method: Method, budget: float, workers: int = 4) -> Recorder:
    recorder = Recorder(method)
    trajectory = simulate(problem, recorder, budget, workers)
    spent = sum(job.cost for job in recorder.jobs)
    assert spent <= budget + workers * max(problem.rung_costs)  # running jobs may overrun
    assert trajectory.jobs == len(recorder.jobs)
    assert all(point.regret >= -1e-12 for point in trajectory.points)
    return recorder


def test_synthetic_evaluate_is_deterministic() -> None:
    problem = SyntheticProblem()
    assert problem.evaluate(problem.default, 1, 7) == problem.evaluate(problem.default, 1, 7)
    assert problem.evaluate(problem.default, 1, 7) != problem.evaluate(problem.default, 1, 8)
    assert SyntheticProblem().evaluate(problem.default, 0, 3) == problem.evaluate(
        problem.default, 0, 3
    )


def test_synthetic_seed_noise_cancels_in_pairs() -> None:
    problem = SyntheticProblem()
    other = {**problem.default, "LR": 3e-3}
    a = [problem.evaluate(problem.default, 2, seed) for seed in range(60)]
    b = [problem.evaluate(other, 2, seed) for seed in range(60)]
    paired = statistics.stdev(x - y for x, y in zip(a, b, strict=True))
    assert paired < statistics.stdev(a) and paired < statistics.stdev(b)


def test_synthetic_optimum_and_default() -> None:
    problem = SyntheticProblem()
    assert all(isinstance(v, float) for v in problem.default.values())
    optimum = problem.optimum()
    assert all(p.low < float(optimum[p.name]) < p.high for p in problem.params)
    assert float(optimum["LR"]) > float(problem.default["LR"])  # a better LR is there to find
    assert problem.true_loss(optimum) == pytest.approx(problem.best_loss())
    assert regret(problem, problem.default) == pytest.approx(0.3)
    assert regret(problem, None) == regret(problem, problem.default)


def test_synthetic_fidelity_correlation_follows_the_knob() -> None:
    assert fidelity_correlation(SyntheticProblem(1.0)) > 0.99
    assert fidelity_correlation(SyntheticProblem(0.2)) < 0.8
    problem = SyntheticProblem(0.5)
    assert fidelity_correlation(problem, rung=0) < fidelity_correlation(problem, rung=1)


def test_synthetic_penalises_leaving_the_box() -> None:
    problem = SyntheticProblem()
    edge = {**problem.default, "LR": 0.1, "BETA2": 0.9}
    assert problem.true_loss({**edge, "LR": 10.0}) > problem.true_loss(edge)
    assert problem.true_loss({**edge, "BETA2": 0.5}) > problem.true_loss(edge)
    assert problem.evaluate({**edge, "LR": 10.0}, 0, 0) > problem.evaluate(edge, 0, 0)


def test_make_problem() -> None:
    assert make_problem("synthetic").name == "synthetic(rho=0.7)"
    assert make_problem("synthetic:0.3").name == "synthetic(rho=0.3)"
    with pytest.raises(ValueError):
        make_problem("nope")


def test_random_search_improves_on_the_default() -> None:
    problem = SyntheticProblem()
    recorder = run(problem, RandomSearch(problem, seed=1), budget=9 * 60)
    assert all(job.rung == 2 and job.seed == 0 for job in recorder.jobs)
    assert regret(problem, recorder.incumbent()) < regret(problem, problem.default)


def _check_prunes(problem: Problem, peer: str, budget: float) -> None:
    recorder = run(problem, PEERS[peer](problem, 0), budget)
    top = len(problem.rung_costs) - 1
    started = sum(job.rung == 0 for job in recorder.jobs)
    finished = sum(job.rung == top for job in recorder.jobs)
    assert 0 < finished < started  # some trials were stopped below the top rung
    assert {job.cost for job in recorder.jobs if job.rung == 1} == {
        problem.rung_costs[1] - problem.rung_costs[0]  # a continued trial pays the increment
    }
    assert regret(problem, recorder.incumbent()) < regret(problem, problem.default)


@pytest.mark.parametrize("peer", ["optuna-tpe-hyperband", "optuna-tpe-sh"])
def test_optuna_peers_prune_and_improve(peer: str) -> None:
    _check_prunes(SyntheticProblem(), peer, budget=300)


def test_ray_asha_prunes_and_improves() -> None:
    pytest.importorskip("ray.tune")
    _check_prunes(SyntheticProblem(), "ray-asha", budget=300)


@pytest.mark.skipif(not lcdb_available(), reason="lcdb is not installed")
def test_lcdb_problem() -> None:
    problem = LcdbProblem(LCDB_DATASETS[0])
    assert len(problem.params[0].choices) == 20 and problem.rung_costs[0] == 1.0
    assert list(problem.rung_costs) == sorted(problem.rung_costs)
    for learner in problem.params[0].choices:
        config = {"LEARNER": learner}
        assert 0.0 <= problem.evaluate(config, 0, 3) <= 1.0
        assert 0.0 <= problem.true_loss(config) <= 1.0
    assert problem.best_loss() < problem.true_loss(problem.default)
    assert problem.evaluate(problem.default, 1, 5) == problem.evaluate(problem.default, 1, 5)
    assert -1.0 <= fidelity_correlation(problem) < 1.0
    recorder = run(problem, RandomSearch(problem, seed=0), budget=16 * 10)
    assert recorder.incumbent() is not None


@pytest.mark.parametrize(
    ("brain", "screen"), [("tpe", 1), ("heuristic", 1), ("heuristic", 3), ("portfolio", 1)]
)
def test_the_swarm_in_the_simulator_climbs_its_real_ladder(brain: str, screen: int) -> None:
    """Real researchers (each offline brain, and the heuristic screened) and the real ladder:
    it spends within budget, stacks winners into new champions and recommends a recipe better
    than the default."""
    from bench.search.swarm_method import SwarmMethod

    problem = SyntheticProblem(0.9)
    method = SwarmMethod(problem, 0, brain=brain, screen=screen)
    try:
        trajectory = simulate(problem, method, 300.0, 4)
        champions = max(method.ladder.champions)
    finally:
        method.close()
    assert trajectory.jobs > 20
    assert trajectory.points[-1].compute <= 300.0 + 4 * problem.rung_costs[-1]
    assert champions > 1 and trajectory.final < regret(problem, problem.default)


def test_ladder_savings_judges_the_ladder_against_the_truth() -> None:
    import random

    from bench.search.savings import at_top_tier, pool, through_ladder

    problem = SyntheticProblem(0.7)
    # Over a few pools: in one, how many ideas climb every tier turns on its seeds' luck.
    pools = [pool(problem, 12, random.Random(i)) for i in range(4)]
    ladders = [through_ladder(problem, ideas, {}) for ideas in pools]
    everything = [at_top_tier(problem, ideas) for ideas in pools]
    spent = sum(o.compute for o in ladders)
    assert 0 < spent < sum(o.compute for o in everything)  # the ladder stops losers early
    assert sum(o.held for o in ladders) >= 1 and all(o.false_passes == 0 for o in ladders)


def test_the_comparison_runs_the_swarm_and_optuna_and_reports_regret(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The benchmark's own command, short: both finish and report a regret (never a ranking)."""
    from bench.search.__main__ import main

    methods = "swarm-tpe,optuna-tpe-hyperband"
    main(["--seeds", "1", "--budget", "120", "--problems", "synthetic:0.9,mfh6:good",
          "--methods", methods, "--plots", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    for problem in ("synthetic(rho=0.9)", "mfh6(good)"):
        assert problem in out
    for method in methods.split(","):
        rows = [
            line
            for line in out.splitlines()
            if line.strip().startswith(method + " ") and " / best peer" not in line
        ]
        assert len(rows) == 2
        assert all(float(row.split()[1]) >= 0 for row in rows)  # a final regret, each problem
    assert "swarm-tpe / best peer" in out or "swarm-tpe's median regret" in out
    assert len(list(tmp_path.glob("search-*.png"))) == 2


def test_the_verdicts_bench_counts_each_idea_once_per_tier_and_champion() -> None:
    """bench/search/verdicts.py: every last verdict is counted once, and the top tier's
    PROMOTEs are the champions the ladder stacked."""
    from bench.search.sim import simulate
    from bench.search.verdicts import Recorded, count

    problem = make_problem("synthetic:0.9")
    method = Recorded(problem, 0, "tpe")
    try:
        simulate(problem, method, 150, 4, 0)
    finally:
        method.close()
    verdicts, _ = count(method, problem, 0.005)
    last = {(d.idea_id, d.tier, d.champion_version) for d in method.decisions}
    assert sum(verdicts.values()) == len(last) > 0
    top = len(method.ladder.tiers) - 1
    stacked = sum(n for (tier, _, v), n in verdicts.items() if tier == top and v == "PROMOTE")
    assert stacked == len(method.ladder.champions) - 1


def test_the_false_stacks_bench_runs_the_shipped_ladder_with_each_setting() -> None:
    """bench/search/false_stacks.py: the settings load as a user's file would (the top tier
    asks more above a screen), a change that clearly helps is stacked, and the counts add up."""
    from bench.search.false_stacks import nulls, power, tiers_with

    gated, screened = tiers_with((2.0, 2.0, 2.0)), tiers_with((0.0, 0.0, 2.0))
    assert [t.rule.sigmas for t in screened] == [0.0, 0.0, 2.0]
    assert screened[-1].rule.stacks and not gated[-1].rule.stacks
    assert power(gated, 3, 1.0) == 3  # ten σ_d better at every tier: stacked every time
    stacked, hit, top = nulls(screened, 2, 12)
    assert 0 <= hit <= min(stacked, 2) and stacked <= top <= 24
    # Every reject looked at again up to the top: each null reaches it at most once per look.
    stacked, hit, top = nulls(gated, 1, 8, looks=True)
    assert stacked <= top and 8 <= top <= 24
    assert power(gated, 2, 1.0, looks=True) == 2


REPEAT = """
import json
from bench.search.problems import SyntheticProblem
from bench.search.sim import simulate
from bench.search.swarm_method import SwarmMethod

problem = SyntheticProblem(0.3)
method = SwarmMethod(problem, 1, brain="tpe")
jobs = []
ask = method.ask
method.ask = lambda: jobs.append(job := ask()) or job
trajectory = simulate(problem, method, 300.0, 4)
print(json.dumps([[p.compute, p.regret] for p in trajectory.points]))
print(json.dumps([[j.rung, j.seed, dict(j.config)] for j in jobs if j is not None]))
"""


def test_a_simulated_swarm_repeats_exactly_in_another_process() -> None:
    """Same problem, same seed: the same jobs and the same regret, whatever the process's hash
    seed and however fast it runs (ideas' ids key the ladder's draws; rests count results)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(root)}
        ran = subprocess.run(
            [sys.executable, "-c", REPEAT], cwd=root, env=env, capture_output=True, text=True
        )
        assert ran.returncode == 0, ran.stderr
        outputs.append(ran.stdout)
    assert outputs[0].count("\n") == 2 and len(outputs[0]) > 1000
    assert outputs[0] == outputs[1]
