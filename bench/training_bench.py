"""Training benchmark: the champion at every tier of the ladder, several seeds, through the real
sandboxed runner, one experiment per core at a time.

    python bench/training_bench.py                       # 5 seeds per tier (long)
    python bench/training_bench.py --seeds 2 --scale 0.2 # the short form `make bench` runs

Prints per tier: steps/s and tokens/s, the seed-to-seed spread of val_bpb (what the ladder's
noise gates are set from), and the runner's overhead: start-up (process start, imports, sandbox,
model build) before the first batch and evaluation after the last, against a 20-second tier-0
run (target < 5%). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bus.messages import BudgetKind, RunResult  # noqa: E402
from scale_ladder.tiers import Tier, load_tiers  # noqa: E402
from swarm.training_setup import limits_for, run_spec  # noqa: E402
from training.corpus import load_corpus  # noqa: E402
from training.runner import run_bytelm  # noqa: E402
from training.targets import RECIPE  # noqa: E402

CACHE = Path(tempfile.gettempdir()) / "swarm-bench-corpus"


def one_run(tier: Tier, seed: int) -> RunResult:
    with tempfile.TemporaryDirectory() as scratch:
        return run_bytelm(
            run_spec(tier, seed),
            RECIPE.read_text(),
            load_corpus(CACHE),
            limits_for(tier),
            Path(scratch),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ladder", type=Path, default=REPO / "configs" / "ladder.toml")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every budget")
    parser.add_argument("--seconds", type=float, help="use a time budget of this many seconds")
    parser.add_argument("--parallel", type=int, default=2, help="experiments at a time (cores)")
    args = parser.parse_args()

    tiers = []
    for tier in load_tiers(args.ladder):
        if args.seconds:
            tier = dataclasses.replace(tier, budget_kind=BudgetKind.SECONDS, budget=args.seconds)
        tiers.append(dataclasses.replace(tier, budget=tier.budget * args.scale))
    load_corpus(CACHE)  # build once, before the workers race for it
    jobs = [(tier, seed) for tier in tiers for seed in range(args.seeds)]
    started = time.time()
    with ProcessPoolExecutor(args.parallel) as pool:
        results = list(pool.map(one_run, *zip(*jobs, strict=True)))
    print(
        f"training bench: {len(jobs)} runs, {args.parallel} at a time, "
        f"{time.time() - started:.0f} s, {time.strftime('%Y-%m-%d')}"
    )
    header = (
        f"{'tier':<5}{'dials d/w/ctx':>14}{'budget':>16}{'steps/s':>9}{'tokens/s':>10}"
        f"{'val_bpb mean':>13}{'std':>8}{'n':>3}{'start s':>9}{'eval s':>8}"
    )
    print(header)
    for tier in tiers:
        rows = [r for r in results if r.tier == tier.index]
        ok = [r for r in rows if r.metric is not None]
        for r in rows:
            if r.metric is None:
                print(f"  tier {tier.index} seed {r.seed}: {r.status.value} {r.reason}")
        if not ok:
            continue
        steps = statistics.median(r.steps / r.train_seconds for r in ok)
        tokens = statistics.median(r.tokens / r.train_seconds for r in ok)
        metrics = [r.metric for r in ok if r.metric is not None]
        std = statistics.stdev(metrics) if len(metrics) > 1 else float("nan")
        budget = f"{tier.budget:g} {tier.budget_kind.value}"
        dials = f"{tier.depth}/{tier.width}/{tier.context}"
        print(
            f"{tier.index:<5}{dials:>14}{budget:>16}{steps:>9.1f}{tokens:>10.0f}"
            f"{statistics.mean(metrics):>13.4f}{std:>8.4f}{len(ok):>3}"
            f"{statistics.median(r.startup_seconds for r in ok):>9.2f}"
            f"{statistics.median(r.eval_seconds for r in ok):>8.2f}"
        )
    tier0 = [r for r in results if r.tier == 0 and r.metric is not None]
    if tier0:
        overhead = statistics.median(r.startup_seconds + r.eval_seconds for r in tier0)
        print(
            f"runner overhead at tier 0: {overhead:.2f} s = {100 * overhead / 20:.1f}% of a "
            "20-second run (start-up + evaluation; publishing a result adds ~1 ms)"
        )


if __name__ == "__main__":
    main()
