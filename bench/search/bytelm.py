"""Search efficiency on the real bytelm target: each method gets the same wall-clock budget on
this machine (two experiments at a time, real torch runs at the shipped ladder's tiers).

    python -m bench.search.bytelm --minutes 15 --repeats 2 --out /tmp/bytelm-bench

- swarm-<brain>: `swarm start --agents 4 --brain <brain> --minutes M` (tpe: the default; or
  heuristic), with the real ladder and trainers;
- optuna-tpe-hyperband, ray-asha, random: their real libraries choose the experiments (as in
  bench/search/peers.py), which run through the same sandboxed runner the trainers use, rung k
  = tier k. The harness cannot resume a run, so a trial continued to the next rung trains again
  from scratch at that tier's budget.

The peers search the recipe's numeric constants (bounds below, the recipe's own declarations
where it has them); the swarm's brains search the recipe's whole declared space (flags, tuples
and HEAD_DIM too). The true optimum is unknown, so each method's recommendation (the champion's
recipe; the best trial that reached the top tier) is re-run at the top tier on fresh seeds no
tier uses, and so is the default recipe: lower val_bpb is better. Each repeat gives every method
another seed (its sampler's, or the swarm's `agents.seed`).
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

from bench.search.peers import PEERS
from bench.search.sim import Config, Job, Method, Param
from bench.search.swarm_method import config_of, ladder_tiers
from bus.messages import RunStatus, new_id
from recipes.constants import changes_between, with_values
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
FRESH_SEEDS = (9000, 9001)  # not the ladder's, which a secret keys (scale_ladder/seeds.py)
METHODS = ("swarm-tpe", "optuna-tpe-hyperband", "ray-asha", "random")


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
        return self.evaluate_source(self.source(config), rung, seed)

    def source(self, config: Config) -> str:
        values = {
            p.name: int(config[p.name]) if p.integer else float(config[p.name]) for p in PARAMS
        }
        return with_values(RECIPE.read_text(), values)

    def evaluate_source(self, source: str, rung: int, seed: int) -> float:
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


def run_swarm(
    workspace: Path, brain: str, seed: int, minutes: float, ladder: Path | None = None
) -> tuple[str, dict[str, float]]:
    """The champion's recipe after `minutes` of a real swarm, and its runs per tier."""
    swarm = Path(sys.executable).parent / "swarm"
    # the shipped defaults but the seed, and the corpus the peers' runs use (BytelmProblem's):
    # the stdlib, as in every figure published so far
    config = workspace.parent / f"{workspace.name}.toml"
    text = f'[agents]\nseed = {seed}\n\n[target]\ndata = "stdlib"\n'
    if ladder is not None:  # promotion rules to try on the real target, as a user's would be
        text += f"[ladder]\npath = {str(ladder.resolve())!r}\n"
    config.write_text(text)
    command = [str(swarm), "--config", str(config), "--workspace", str(workspace), "start"]
    command += ["--agents", "4", "--brain", brain, "--minutes", f"{minutes:g}"]
    with open(workspace.parent / f"{workspace.name}.log", "w") as out:
        subprocess.check_call(command, stdout=out, stderr=out)
    con = duckdb.connect(str(workspace / "ledger.duckdb"), read_only=True)
    try:
        source = con.execute(
            "select source from champions order by version desc limit 1"
        ).fetchone()
        tiers = con.execute("select tier, count(*) from runs group by 1 order by 1").fetchall()
    finally:
        con.close()
    assert source is not None
    return source[0], {f"runs at tier {t}": n for t, n in tiers}


def fresh_score(problem: BytelmProblem, source: str) -> float:
    top = len(problem.rung_costs) - 1
    with ThreadPoolExecutor(len(FRESH_SEEDS)) as pool:
        losses = list(pool.map(lambda s: problem.evaluate_source(source, top, s), FRESH_SEEDS))
    return statistics.mean(losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="per method")
    parser.add_argument("--repeats", type=int, default=1, help="each with other seeds")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out", type=Path, required=True, help="a folder for workspaces")
    parser.add_argument("--ladder", type=Path, help="the swarm's ladder.toml (default: shipped)")
    args = parser.parse_args()
    problem = BytelmProblem(args.out / "scratch")
    default_source = RECIPE.read_text()
    default = fresh_score(problem, default_source)
    print(
        f"bytelm, {args.minutes:g} min per method, 2 experiments at a time; val_bpb at the top "
        f"tier on fresh seeds {FRESH_SEEDS} (lower is better); default recipe: {default:.4f}",
        flush=True,
    )
    for repeat in range(args.repeats):
        for name in args.methods.split(","):
            started = time.monotonic()
            if name.startswith("swarm-"):
                workspace = args.out / f"{name}-r{repeat}"
                source, counts = run_swarm(
                    workspace, name.removeprefix("swarm-"), repeat, args.minutes, args.ladder
                )
            else:
                method = PEERS[name](problem, repeat)
                counts = run_peer(problem, method, args.minutes, 2)
                source = problem.source(method.incumbent() or problem.default)
            took = time.monotonic() - started
            score = fresh_score(problem, source)
            changed = [c for c in changes_between(default_source, source)]
            moved = ", ".join(f"{c.name} {c.old}->{c.new}" for c in changed) or "nothing"
            print(
                f"  repeat {repeat} {name:22s} {score:.4f} ({score - default:+.4f}) "
                f"in {took:.0f} s, {counts}; changed: {moved}",
                flush=True,
            )


if __name__ == "__main__":
    main()
