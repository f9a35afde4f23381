"""Token budgets versus time budgets: which separates a real change from seed noise better?

For each tier asked for, both budget kinds at matched size (the time budget is the token budget
divided by the tier's measured tokens/s), K seeds, three recipes through the real runner:
the champion, a null idea (a comment-only edit: any paired difference is pure noise), and a
real change (half the batch size, which the default swarm found and stacked). Two experiments
at a time, as the swarm runs them.

    python bench/budget_noise.py                 # tier 0, 4 seeds (about 4 minutes)
    python bench/budget_noise.py --tiers 0,1 --seeds 6

Prints per tier and budget kind: σ of the null idea's paired differences (the noise floor the
ladder gates on), the real change's mean paired gain, its σ_d, and the separation
gain / (σ_d / √K). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
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
CHAMPION = RECIPE.read_text()
RECIPES = {
    "champion": CHAMPION,
    "null": CHAMPION.replace("# --- hyperparameters", "# --- hyperparameters (unchanged)", 1),
    # A change the swarm found and stacked (README's half-hour run): twice the steps per token.
    "batch /2": CHAMPION.replace("BATCH_SIZE = 16", "BATCH_SIZE = 8", 1),
}


def patch(source: str) -> str:
    old, new = CHAMPION.splitlines(True), source.splitlines(True)
    return "".join(difflib.unified_diff(old, new, "a/recipe.py", "b/recipe.py"))


def one_run(tier: Tier, seed: int, recipe: str) -> tuple[str, RunResult]:
    with tempfile.TemporaryDirectory() as scratch:
        spec = run_spec(tier, seed, patch(RECIPES[recipe]) if recipe != "champion" else "")
        result = run_bytelm(spec, CHAMPION, load_corpus(CACHE), limits_for(tier), Path(scratch))
        return recipe, result


def paired(results: list[tuple[str, RunResult]], recipe: str) -> list[float]:
    base = {r.seed: r.metric for name, r in results if name == "champion" and r.metric}
    mine = {r.seed: r.metric for name, r in results if name == recipe and r.metric}
    return [base[s] - mine[s] for s in sorted(set(base) & set(mine))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ladder", type=Path, default=REPO / "configs" / "ladder.toml")
    parser.add_argument("--tiers", default="0")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--tokens-per-s", type=float, help="tier 0's rate (default: measure)")
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    load_corpus(CACHE)
    ladder = load_tiers(args.ladder)
    started = time.time()
    print(f"budget noise: {args.seeds} seeds, {args.parallel} at a time, {time.strftime('%F')}")
    print(f"{'tier':<5}{'budget':>18}{'null σ_d':>10}{'gain':>9}{'σ_d':>8}{'separation':>12}")
    with ProcessPoolExecutor(args.parallel) as pool:
        for index in (int(t) for t in args.tiers.split(",")):
            tokens = ladder[index]
            # This machine's tokens/s at this tier (in a worker: experiments fork from there).
            _, probe = pool.submit(one_run, tokens, 99, "champion").result()
            rate = probe.tokens / probe.train_seconds
            seconds = dataclasses.replace(
                tokens, budget_kind=BudgetKind.SECONDS, budget=round(tokens.budget / rate, 1)
            )
            for tier in (tokens, seconds):
                jobs = [(tier, s, name) for s in range(args.seeds) for name in RECIPES]
                results = list(pool.map(one_run, *zip(*jobs, strict=True)))
                null, gains = paired(results, "null"), paired(results, "batch /2")
                null_sd = statistics.stdev(null) if len(null) > 1 else float("nan")
                mean = statistics.fmean(gains) if gains else float("nan")
                sd = statistics.stdev(gains) if len(gains) > 1 else float("nan")
                separation = mean / (sd / math.sqrt(len(gains))) if sd > 0 else float("inf")
                budget = f"{tier.budget:g} {tier.budget_kind.value}"
                print(
                    f"{index:<5}{budget:>18}{null_sd:>10.4f}{mean:>9.4f}{sd:>8.4f}"
                    f"{separation:>12.1f}",
                    flush=True,
                )
    print(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
