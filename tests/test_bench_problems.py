"""The MF-Hartmann problems against the package they come from, the problem specs of the command
line, and the SMAC peer, through sim.simulate as the benchmark runs them. Small budgets: these
check behaviour, not which method wins."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from bench.search.hartmann import (
    FIDELITIES,
    PRESETS,
    SHARED,
    Z_MAX,
    HartmannProblem,
    fidelity_cost,
    mf_hartmann,
)
from bench.search.peers import PEERS
from bench.search.problems import fidelity_correlation, lcdb_available, make_problem
from bench.search.sim import Config, Job, Method, Param, Problem, Trajectory, regret, simulate

# mf-prior-bench 1.10.0's own values: in a throwaway venv (python 3.11, numpy 1.26.4,
# `pip install 'numpy<2' mf_prior_bench-1.10.0.tar.gz`),
#   mfpbench.get(f"mfh{dims}_{preset}", seed=0, noise=0.0).query(config, at=z).error
# with config {"X_0": x[0], ...}, for z = 1, 25, 55, 100. noise=0.0 keeps the preset's bias and
# turns off the noise, which the package draws from hash(x) and cannot be matched; at z = 100
# the preset's own noise gives the same values (its noise vanishes there).
PACKAGE_VALUES = [
    (
        6,
        "good",
        (0.5,) * 6,
        (0.014815874539431981, -0.34873999929280197, -0.43779230209122577, -0.5053149917022333),
    ),
    (
        6,
        "good",
        (0.2, 0.15, 0.5, 0.3, 0.3, 0.65),
        (0.14633249106834195, -2.2552917319910426, -2.843564905150132, -3.2896149861639454),
    ),
    (
        6,
        "good",
        (0.4, 0.9, 0.1, 0.6, 0.2, 0.8),
        (-0.0150167353116166, -0.06943784151885042, -0.08276818542859601, -0.09287573622672844),
    ),
    (
        6,
        "bad",
        (0.2, 0.15, 0.5, 0.3, 0.3, 0.65),
        (1.5207114819612568, -1.841562430321882, -2.665144872744606, -3.2896149861639454),
    ),
    (
        6,
        "bad",
        (0.25, 0.5, 0.45, 0.3, 0.35, 0.55),
        (0.9277439669521269, -1.0601747240602162, -1.5471115333726928, -1.916324703635177),
    ),
    (
        3,
        "moderate",
        (0.5, 0.5, 0.5),
        (0.29012247533801633, -0.3516329831039818, -0.5088297319979092, -0.6280220150705937),
    ),
    (
        3,
        "moderate",
        (0.1, 0.6, 0.8),
        (1.0844153671962244, -2.16239193986907, -2.9576910623647157, -3.5607157356034933),
    ),
    (
        3,
        "terrible",
        (0.3, 0.2, 0.9),
        (0.8900348937854492, -0.48275142632052914, -0.8190127601479249, -1.073978313634011),
    ),
    (
        3,
        "terrible",
        (0.7, 0.4, 0.25),
        (0.9634467627458412, 0.06122006800004276, -0.15977860262080357, -0.32734781949501146),
    ),
]
# The same venv: the package's noise, (noisy - noise-free) / (noise (1 - log z / log 100)), over
# 4000 uniform configs (numpy default_rng(0)) of mfh6_bad at z = 25: min 0.0001, mean 0.8031,
# sd 0.5916 (|N(0, 1)|: 0.7979, 0.6028).
PACKAGE_NOISE_MEAN, PACKAGE_NOISE_SD = 0.8031, 0.5916
# The package's metric bounds (the optima), its `at25` prior files, and its fid_cost at z = 25.
PACKAGE_BOUNDS = {3: -3.86278, 6: -3.32237}
PACKAGE_AT25 = {
    3: (0.04154300161125146, 0.5609019278138103, 0.97447101011777),
    6: (
        0.3154000799605725,
        0.6004901988484934,
        0.4032154562465201,
        0.2693617148817701,
        0.329070902100713,
        0.5193185906385807,
    ),
}
PACKAGE_COST_AT_25 = 0.109375


@pytest.mark.parametrize(("dims", "preset", "x", "values"), PACKAGE_VALUES)
def test_mf_hartmann_matches_the_package(
    dims: int, preset: str, x: tuple[float, ...], values: tuple[float, ...]
) -> None:
    bias = PRESETS[preset][0]
    for z, value in zip((1, 25, 55, 100), values, strict=True):
        assert float(mf_hartmann(np.array(x), z, bias)) == pytest.approx(
            value, rel=1e-12, abs=1e-12
        )
    problem = HartmannProblem(dims, preset)
    config = {f"X{i}": v for i, v in enumerate(x)}
    assert problem.true_loss(config) == pytest.approx(values[-1], rel=1e-12)
    assert problem.noise_free(config, 0) == pytest.approx(values[1], rel=1e-12)  # z = 25


def test_noise_has_the_package_distribution() -> None:
    problem = HartmannProblem(6, "bad")
    config = {f"X{i}": 0.3 for i in range(6)}
    scale = problem.noise * (1 - math.log(FIDELITIES[0]) / math.log(Z_MAX))
    noise = [
        (problem.evaluate(config, 0, seed) - problem.noise_free(config, 0)) / scale
        for seed in range(3000)
    ]
    assert min(noise) >= 0.0  # pessimistic, as in the package
    assert statistics.mean(noise) == pytest.approx(PACKAGE_NOISE_MEAN, abs=0.04)
    assert statistics.stdev(noise) == pytest.approx(PACKAGE_NOISE_SD, abs=0.04)
    assert problem.evaluate(config, 2, 5) == problem.true_loss(config)  # none at the top


def test_rungs_follow_the_package_cost_model() -> None:
    assert fidelity_cost(25) == pytest.approx(PACKAGE_COST_AT_25)
    assert FIDELITIES[-1] == Z_MAX and fidelity_cost(Z_MAX) == 1.0
    problem = HartmannProblem()
    for z, cost in zip(FIDELITIES, problem.rung_costs, strict=True):
        target = cost / problem.rung_costs[-1]
        nearest = min(range(1, Z_MAX + 1), key=lambda y: abs(math.log(fidelity_cost(y) / target)))
        assert z == nearest
        assert fidelity_cost(z) / target == pytest.approx(1.0, abs=0.05)


def test_evaluate_is_deterministic() -> None:
    problem = HartmannProblem(6, "moderate")
    config = problem.default
    assert problem.evaluate(config, 0, 7) == problem.evaluate(config, 0, 7)
    assert HartmannProblem(6, "moderate").evaluate(config, 1, 3) == problem.evaluate(config, 1, 3)
    assert problem.evaluate(config, 0, 7) != problem.evaluate(config, 0, 8)
    assert problem.evaluate(config, 0, 7) != problem.evaluate(config, 1, 7)


def test_seed_noise_cancels_in_pairs() -> None:
    problem = HartmannProblem(6, "good")
    other = {**problem.default, "X0": 0.25}
    a = [problem.evaluate(problem.default, 0, seed) for seed in range(300)]
    b = [problem.evaluate(other, 0, seed) for seed in range(300)]
    paired = statistics.stdev(x - y for x, y in zip(a, b, strict=True))
    # Two configs' noises correlate about 0.79 (SHARED = 0.8 before the quantile map), so the
    # pairs' spread is about sqrt(2 (1 - 0.79)) = 0.65 of either's.
    assert SHARED == 0.8
    assert paired < 0.8 * statistics.stdev(a) and paired < 0.8 * statistics.stdev(b)


@pytest.mark.parametrize("dims", [3, 6])
def test_best_loss_is_the_optimum(dims: int) -> None:
    problem = HartmannProblem(dims, "bad")
    assert problem.best_loss() == pytest.approx(PACKAGE_BOUNDS[dims], abs=1e-5)
    assert abs(problem.true_loss(problem.optimum()) - problem.best_loss()) < 1e-4
    rng = random.Random(0)
    for _ in range(300):
        config = {p.name: rng.random() for p in problem.params}
        assert problem.true_loss(config) > problem.best_loss()
    # The default is the package's at25 prior, rounded: far from the optimum.
    for p, value in zip(problem.params, PACKAGE_AT25[dims], strict=True):
        assert float(problem.default[p.name]) == pytest.approx(value, abs=5e-5)
    assert regret(problem, None) == regret(problem, problem.default) > 1.0


def test_leaving_the_box_never_pays() -> None:
    problem = HartmannProblem(6, "good")
    edge = {**problem.optimum(), "X5": 1.0}
    assert problem.true_loss({**edge, "X5": 1.5}) > problem.true_loss(edge)
    assert problem.evaluate({**edge, "X5": 1.5}, 0, 0) > problem.evaluate(edge, 0, 0)


def test_fidelity_correlation_of_hartmann() -> None:
    good, bad = HartmannProblem(6, "good"), HartmannProblem(6, "bad")
    assert -1.0 < fidelity_correlation(bad) < fidelity_correlation(good) < 1.0  # more bias
    assert fidelity_correlation(bad, rung=0) < fidelity_correlation(bad, rung=1)


def test_make_problem_parses_the_new_specs() -> None:
    assert make_problem("mfh6:good").name == "mfh6(good)"
    assert make_problem("mfh3:terrible").name == "mfh3(terrible)"
    assert len(make_problem("mfh3:bad").params) == 3
    assert [p.name for p in make_problem("mfh6:moderate").params] == [f"X{i}" for i in range(6)]
    assert make_problem("synthetic:0.3").name == "synthetic(rho=0.3)"


@pytest.mark.parametrize(
    "spec", ["mfh6:awful", "mfh4:good", "mfh6", "hartmann:good", "lcdb:", "lcdb:abc", "synthetic:x"]
)
def test_make_problem_names_a_bad_spec(spec: str) -> None:
    with pytest.raises(ValueError, match=repr(spec).replace("(", r"\(")) as error:
        make_problem(spec)
    if "unknown" in str(error.value):  # the listing names every accepted form
        assert all(form in str(error.value) for form in ("synthetic", "mfh3", "mfh6", "lcdb"))
        assert all(preset in str(error.value) for preset in PRESETS)


@pytest.mark.skipif(not lcdb_available(), reason="lcdb is not installed")
def test_lcdb_spec_takes_any_id_it_has() -> None:
    problem = make_problem("lcdb:3")  # kr-vs-kp: not one of the default datasets
    assert list(problem.rung_costs) == sorted(problem.rung_costs)
    with pytest.raises(ValueError, match="openml 999999"):
        make_problem("lcdb:999999")  # no such dataset in LCDB
    with pytest.raises(ValueError, match="openml 346 has too few anchors"):
        make_problem("lcdb:346")


def _run(problem: Problem, method: Method, budget: float) -> tuple[Trajectory, list[Job]]:
    jobs: list[Job] = []

    class Recorder:
        name = method.name

        def ask(self) -> Job | None:
            job = method.ask()
            if job is not None:
                jobs.append(job)
            return job

        def tell(self, job: Job, loss: float) -> None:
            method.tell(job, loss)

        def incumbent(self) -> Config | None:
            return method.incumbent()

    trajectory = simulate(problem, Recorder(), budget, workers=4)
    assert all(job.seed == 0 for job in jobs)
    assert sum(job.cost for job in jobs) <= budget + 4 * max(problem.rung_costs)
    assert all(point.regret >= 0.0 for point in trajectory.points)
    assert math.isfinite(trajectory.final)
    return trajectory, jobs


def test_hartmann_through_optuna_tpe() -> None:
    pytest.importorskip("optuna")
    problem = make_problem("mfh6:bad")
    _, jobs = _run(problem, PEERS["optuna-tpe-hyperband"](problem, 0), budget=150)
    assert any(job.rung == 2 for job in jobs)


def test_smac_peer_through_the_simulator() -> None:
    pytest.importorskip("smac")
    problem = make_problem("mfh6:good")
    trajectory, jobs = _run(problem, PEERS["smac-mf"](problem, 0), budget=150)
    assert trajectory.jobs == len(jobs) and any(job.rung == 2 for job in jobs)
    # A promoted config resumes (it pays the increment); one that a bracket starts at a higher
    # budget pays the whole rung.
    assert {job.cost for job in jobs if job.rung == 1} == {2.0, 3.0}
    assert {job.cost for job in jobs if job.rung == 0} == {1.0}


class FewChoices:
    """Three configs: SMAC runs out of new ones at once."""

    name = "few"
    params: tuple[Param, ...] = (Param("PICK", choices=("a", "b", "c")),)
    rung_costs: tuple[float, ...] = (1.0, 3.0, 9.0)

    def __init__(self) -> None:
        self.default: Config = {"PICK": "a"}

    def evaluate(self, config: Config, rung: int, seed: int) -> float:
        return self.true_loss(config) + 0.1 * (2 - rung)

    def true_loss(self, config: Config) -> float:
        return {"a": 0.5, "b": 0.2, "c": 0.4}[str(config["PICK"])]

    def best_loss(self) -> float:
        return 0.2


def test_smac_peer_stops_when_the_space_is_exhausted() -> None:
    pytest.importorskip("smac")
    problem = FewChoices()
    trajectory, jobs = _run(problem, PEERS["smac-mf"](problem, 0), budget=100)
    assert trajectory.points[-1].compute < 100  # it stopped asking before the budget ran out
    assert {str(job.config["PICK"]) for job in jobs} <= {"a", "b", "c"}
