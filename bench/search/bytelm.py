"""Search efficiency on the real bytelm target: each method gets the same wall-clock budget on
this machine (two experiments at a time, real torch runs at the shipped ladder's tiers).

    python -m bench.search.bytelm --minutes 15 --out /tmp/bytelm-bench

- swarm: `swarm start --agents 4 --minutes M` (heuristic researchers, the real ladder, trainers);
- optuna-tpe-hyperband, ray-asha, random: their real libraries choose the experiments (as in
  bench/search/peers.py), which run through the same sandboxed runner the trainers use, rung k
  = tier k. The harness cannot resume a run, so a trial continued to the next rung trains again
  from scratch at that tier's budget.

The search space is the recipe's numeric constants (bounds below); the swarm's heuristic moves
those and also the flags, tuples and HEAD_DIM. The true optimum is unknown, so each method's
recommendation (the champion; the best trial that reached the top tier) is re-run at the top
tier on fresh seeds, and so is the default recipe: lower val_bpb is better.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import duckdb

from agents.recipe_constants import with_values
from bench.search.peers import PEERS
from bench.search.sim import Config, Job, Method, Param
from bench.search.swarm_method import config_of, ladder_tiers
from bus.messages import RunStatus, new_id
from training.runner import RunLimits
from training.target_info import RECIPE
from training.targets import BytelmTarget

PARAMS = (
    Param("BATCH_SIZE", 4, 64, integer=True),
    Param("LEARNING_RATE", 3e-4, 3e-2),
    Param("MIN_LR_FRACTION", 0.01, 0.5),
    Param("WARMUP_FRACTION", 0.01, 0.3),
    Param("WEIGHT_DECAY", 0.01, 0.5),
    Param("GRAD_CLIP", 0.25, 4.0),
    Param("MLP_RATIO", 1, 8, integer=True),
    Param("INIT_STD", 0.005, 0.08),
)
FAILED = 10.0  # the loss a crashed or timed-out run reports to a peer (val_bpb is ~3)
FRESH_SEEDS = (1000, 1001)
PEER_NAMES = ("optuna-tpe-hyperband", "ray-asha", "random")


class BytelmProblem:
    """The Problem protocol over real experiments; rung costs are the tiers' typical seconds."""

    name = "bytelm"
    params = PARAMS
    rung_costs = (15.0, 45.0, 120.0)

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.target = BytelmTarget(scratch / "corpus")
        self.tiers = ladder_tiers()
        self.default: Config = config_of(PARAMS, RECIPE.read_text())

    def evaluate(self, config: Config, rung: int, seed: int) -> float:
        values = {
            p.name: int(config[p.name]) if p.integer else float(config[p.name]) for p in PARAMS
        }
        source = with_values(RECIPE.read_text(), values)
        tier = self.tiers[rung]
        spec = tier.run_spec(new_id("run"), seed)
        limits = RunLimits(time_limit_s=tier.time_limit_s, eval_tokens=tier.eval_tokens)
        result = self.target.run(spec, source, limits, self.scratch / "runs", "cpu", "bench", None)
        ok = result.status is RunStatus.OK and result.metric is not None
        return float(result.metric) if ok else FAILED  # type: ignore[arg-type]

    def true_loss(self, config: Config) -> float:
        raise NotImplementedError("bytelm's optimum is unknown: re-run on fresh seeds instead")

    def best_loss(self) -> float:
        raise NotImplementedError("bytelm's optimum is unknown")


def run_peer(
    problem: BytelmProblem, method: Method, minutes: float, workers: int
) -> dict[str, float]:
    """The method's experiments, `workers` at a time, none started after the deadline."""
    deadline = time.monotonic() + minutes * 60
    per_rung = [0] * len(problem.rung_costs)
    running: dict[Future[float], Job] = {}
    with ThreadPoolExecutor(workers) as pool:
        while True:
            while time.monotonic() < deadline and len(running) < workers:
                job = method.ask()
                if job is None:
                    break
                running[pool.submit(problem.evaluate, job.config, job.rung, job.seed)] = job
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                method.tell(job, future.result())
                per_rung[job.rung] += 1
    return {f"runs at tier {k}": n for k, n in enumerate(per_rung)}


def run_swarm(workspace: Path, minutes: float) -> tuple[Config, dict[str, float]]:
    swarm = Path(sys.executable).parent / "swarm"
    command = [str(swarm), "--workspace", str(workspace), "start", "--agents", "4"]
    with open(workspace.parent / "swarm.log", "w") as out:
        subprocess.check_call([*command, "--minutes", f"{minutes:g}"], stdout=out, stderr=out)
    con = duckdb.connect(str(workspace / "ledger.duckdb"), read_only=True)
    try:
        source = con.execute(
            "select source from champions order by version desc limit 1"
        ).fetchone()
        tiers = con.execute("select tier, count(*) from runs group by 1 order by 1").fetchall()
    finally:
        con.close()
    assert source is not None
    return config_of(PARAMS, source[0]), {f"runs at tier {t}": n for t, n in tiers}


def fresh_score(problem: BytelmProblem, config: Config) -> float:
    top = len(problem.rung_costs) - 1
    with ThreadPoolExecutor(len(FRESH_SEEDS)) as pool:
        losses = list(pool.map(lambda s: problem.evaluate(config, top, s), FRESH_SEEDS))
    return statistics.mean(losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="per method")
    parser.add_argument("--methods", default=",".join(("swarm", *PEER_NAMES)))
    parser.add_argument("--out", type=Path, required=True, help="a folder for workspaces")
    args = parser.parse_args()
    problem = BytelmProblem(args.out / "scratch")
    picks: dict[str, tuple[Config, dict[str, float]]] = {}
    for name in args.methods.split(","):
        started = time.monotonic()
        if name == "swarm":
            picks[name] = run_swarm(args.out / "swarm-ws", args.minutes)
        else:
            method = PEERS[name](problem, 0)
            counts = run_peer(problem, method, args.minutes, 2)
            picks[name] = (method.incumbent() or problem.default, counts)
        print(f"{name}: {time.monotonic() - started:.0f} s, {picks[name][1]}", flush=True)
    default = fresh_score(problem, problem.default)
    print(
        f"\nbytelm, {args.minutes:g} min per method, 2 experiments at a time; val_bpb at the top "
        f"tier on fresh seeds {FRESH_SEEDS} (lower is better); default recipe: {default:.4f}"
    )
    for name, (config, counts) in picks.items():
        score = fresh_score(problem, config)
        changed = {k: v for k, v in config.items() if v != problem.default[k]}
        print(f"  {name:22s} {score:.4f} ({score - default:+.4f}) {counts} changed: {changed}")


if __name__ == "__main__":
    main()
