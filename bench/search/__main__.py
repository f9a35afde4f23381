"""Search efficiency at equal compute: the swarm against Optuna, Ray Tune's ASHA and random
search, each run by its real library on the same simulated cluster.

    python -m bench.search --seeds 10                       # synthetic (two correlations), LCDB
    python -m bench.search --problems synthetic:0.3 --seeds 3 --budget 600

Prints, per problem and method, the regret (true loss of the method's recommendation minus the
optimum's) once the budget is spent, as median [quartiles] over seeds, the regret at a quarter
and half of the budget, and the ratio of the swarm's final regret to the best peer's; saves
regret-vs-compute and regret-vs-wall-clock plots.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.search.peers import PEERS
from bench.search.problems import LCDB_DATASETS, fidelity_correlation, lcdb_available, make_problem
from bench.search.sim import Method, Problem, Trajectory, simulate
from bench.search.swarm_method import SwarmMethod

SWARMS: dict[str, Callable[[Problem, int], Method]] = {
    f"swarm-{brain}": functools.partial(SwarmMethod, name=f"swarm-{brain}", brain=brain)
    for brain in ("tpe", "gp", "heuristic", "portfolio")
}
SWARMS["swarm-heuristic-screened"] = functools.partial(
    SwarmMethod, name="swarm-heuristic-screened", brain="heuristic", screen=4
)
METHODS: dict[str, Callable[[Problem, int], Method]] = {**SWARMS, **PEERS}


def run_one(problem: Problem, name: str, seed: int, budget: float, workers: int) -> Trajectory:
    method = METHODS[name](problem, seed)
    try:
        return simulate(problem, method, budget, workers, seed)
    finally:
        close = getattr(method, "close", None)
        if close is not None:
            close()


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def report(problem: Problem, runs: dict[str, list[Trajectory]], budget: float) -> list[str]:
    rows = [
        f"\n{problem.name}: rank correlation rung 0 vs top {fidelity_correlation(problem):.2f}, "
        f"default's regret {next(iter(runs.values()))[0].points[0].regret:.4f}",
        f"  {'method':22s} {'final regret: median [q1, q3]':>34s} {'@25%':>8s} {'@50%':>8s} "
        f"{'jobs':>6s} {'s/run':>6s}",
    ]
    finals = {}
    for name, trajectories in runs.items():
        q1, q2, q3 = quartiles([t.final for t in trajectories])
        finals[name] = q2
        quarter = statistics.median(t.regret_at(budget / 4) for t in trajectories)
        half = statistics.median(t.regret_at(budget / 2) for t in trajectories)
        jobs = statistics.mean(t.jobs for t in trajectories)
        seconds = statistics.mean(t.seconds for t in trajectories)
        rows.append(
            f"  {name:22s} {q2:12.4f} [{q1:.4f}, {q3:.4f}]   {quarter:8.4f} {half:8.4f} "
            f"{jobs:6.0f} {seconds:6.2f}"
        )
    peers = {k: v for k, v in finals.items() if k not in SWARMS}
    if not peers:
        return rows
    best = min(peers, key=lambda k: peers[k])
    for swarm in (k for k in finals if k in SWARMS):
        if peers[best] > 0:
            ratio = finals[swarm] / peers[best]
            rows.append(f"  {swarm} / best peer ({best}): {ratio:.2f}x the final regret")
        else:
            rows.append(
                f"  best peer ({best}) reached the optimum; {swarm}'s median regret: "
                f"{finals[swarm]:.4f}"
            )
    return rows


def plot(problem: Problem, runs: dict[str, list[Trajectory]], budget: float, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    wall_end = max(t.points[-1].wall for ts in runs.values() for t in ts)
    for name, trajectories in runs.items():
        xs = [budget * i / 100 for i in range(1, 101)]
        axes[0].plot(
            xs, [statistics.median(t.regret_at(x) for t in trajectories) for x in xs], label=name
        )
        walls = [wall_end * i / 100 for i in range(1, 101)]
        axes[1].plot(
            walls,
            [statistics.median(t.regret_at_wall(w) for t in trajectories) for w in walls],
            label=name,
        )
    for ax, label in zip(
        axes, ("compute spent (rung-0 runs)", "simulated wall-clock"), strict=True
    ):
        ax.set_xlabel(label)
        ax.set_ylabel("median regret")
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(problem.name)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"search-{_slug(problem.name)}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_problems = ["synthetic:0.9", "synthetic:0.3", "mfh6:good", "mfh6:moderate", "mfh6:bad"]
    if lcdb_available():
        default_problems += [f"lcdb:{d}" for d in LCDB_DATASETS]
    parser.add_argument("--problems", default=",".join(default_problems))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument(
        "--budget",
        type=float,
        default=900.0,
        help="compute per method and seed, in rung-0 runs (100 top-rung runs)",
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--plots", type=Path, default=Path("docs/img"))
    args = parser.parse_args(argv)
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        sys.exit(f"unknown method {unknown[0]}; known: {', '.join(METHODS)}")
    print(
        f"search efficiency: budget {args.budget:g} per run, {args.workers} workers, "
        f"{args.seeds} seeds; regret = true loss of the recommendation - optimum's"
    )
    for spec in args.problems.split(","):
        problem = make_problem(spec)
        budget = args.budget * problem.rung_costs[0]
        runs: dict[str, list[Trajectory]] = {}
        for name in methods:
            runs[name] = []
            for seed in range(args.seeds):
                started = time.perf_counter()
                trajectory = run_one(problem, name, seed, budget, args.workers)
                trajectory.seconds = time.perf_counter() - started
                runs[name].append(trajectory)
        print("\n".join(report(problem, runs, budget)))
        print(f"  plot: {plot(problem, runs, budget, args.plots)}")


if __name__ == "__main__":
    main()
