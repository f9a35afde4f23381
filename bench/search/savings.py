"""Ladder savings: the compute the ladder spends to find the best of a pool of ideas, against
running every idea at the top tier, and how often it keeps the true best (recall).

A pool of ideas (each moves one or two constants of the synthetic problem's default recipe) goes
through the real `Ladder`, with the shipped `configs/ladder.toml` rules and variants of them; with
approval required, what passes the top tier is held rather than stacked, so the champion stays
put and every idea is judged against the same baseline. The exhaustive alternative runs every
idea and the baseline at the top tier on the top tier's seeds and keeps the best mean paired
gain. The truth is the problem's noise-free loss.

    python -m bench.search.savings --pools 10 --ideas 40
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.search.problems import SyntheticProblem
from bench.search.sim import Config, Problem, Value
from bench.search.swarm_method import EDITABLE, ladder_tiers, recipe, spec_config, spec_result
from bus.messages import Decision, Idea, RunSpec, RunStatus, Verdict
from recipes.patch import make_patch
from scale_ladder.ladder import Ladder

WORKERS = 4
SETTINGS: dict[str, Mapping[str, float]] = {
    "shipped (2σ, top half at t0)": {},
    "1σ": {"sigmas": 1.0},
    "3σ": {"sigmas": 3.0},
    "no rank gate": {"top_fraction": 0.0},
    "no minimum gain": {"min_improvement": 0.0},
    "1 seed, up to 2": {"seeds": 1, "max_seeds": 2},
}


@dataclass(frozen=True, slots=True)
class Outcome:
    compute: float
    found_best: bool  # the ladder's pick is the pool's true best
    kept_best: bool  # the true best passed the top tier (among those held)
    held: int
    false_passes: int  # held ideas that are truly worse than the champion


def pool(problem: Problem, size: int, rng: random.Random) -> list[dict[str, Value]]:
    """Ideas near the default: one or two constants moved by up to a factor of 3."""
    ideas = []
    for _ in range(size):
        config = dict(problem.default)
        for param in rng.sample(problem.params, rng.choice((1, 2))):
            value = float(config[param.name]) * math.exp(rng.uniform(-1.1, 1.1))
            config[param.name] = float(f"{min(max(value, param.low), param.high):.3g}")
        ideas.append(config)
    return ideas


def through_ladder(problem: Problem, ideas: Sequence[Config], rule: Mapping[str, float]) -> Outcome:
    tiers = ladder_tiers(rule)
    base = recipe(problem, problem.default)
    ladder = Ladder(tiers, EDITABLE, base, require_approval=True)
    queue: deque[RunSpec] = deque()
    top = len(tiers) - 1
    gains: dict[str, float] = {}
    held: list[str] = []
    by_id: dict[str, Config] = {}

    def feed(messages: list[object]) -> None:
        for message in messages:
            if isinstance(message, RunSpec):
                queue.append(message)
            elif isinstance(message, Decision) and message.tier == top and message.idea_id:
                # (a Decision with no idea holds a whole tier: its baseline ignores the seed)
                if message.verdict is Verdict.HELD:
                    held.append(message.idea_id)
                if message.delta is not None:
                    gains[message.idea_id] = message.delta

    feed(list(ladder.act()))
    waiting = deque(enumerate(ideas))
    compute = 0.0
    while queue or waiting:
        # Ideas arrive as a swarm makes them, while trainers are busy: one more whenever fewer
        # than WORKERS experiments are queued (all at once, none could start on one seed).
        while waiting and len(queue) < WORKERS:
            i, config = waiting.popleft()
            idea_id = f"idea-{i}"
            by_id[idea_id] = config
            patch = make_patch(base, recipe(problem, config), EDITABLE)
            ladder.observe(Idea(idea_id, "bench", f"idea {i}", patch, 1))
            feed(list(ladder.act()))
        spec = queue.popleft()
        loss = problem.evaluate(spec_config(ladder, problem.params, spec), spec.tier, spec.seed)
        compute += problem.rung_costs[spec.tier]
        ladder.observe(spec_result(spec, RunStatus.OK, loss))
        feed(list(ladder.act()))
    return _judge(problem, by_id, compute, held, gains)


def _judge(
    problem: Problem,
    ideas: Mapping[str, Config],
    compute: float,
    held: Sequence[str],
    gains: Mapping[str, float],
) -> Outcome:
    truth = {i: problem.true_loss(c) for i, c in ideas.items()}
    best = min(truth, key=lambda i: truth[i])
    pick = max(held, key=lambda i: gains[i]) if held else None
    baseline = problem.true_loss(problem.default)
    return Outcome(
        compute,
        found_best=pick == best,
        kept_best=best in held,
        held=len(held),
        false_passes=sum(truth[i] >= baseline for i in held),
    )


def at_top_tier(problem: Problem, ideas: Sequence[Config]) -> Outcome:
    """Every idea and the baseline at the top tier, on the top tier's seeds; best paired gain."""
    tiers = ladder_tiers()
    top = len(tiers) - 1
    seeds = range(tiers[top].rule.seeds)
    baseline = [problem.evaluate(problem.default, top, s) for s in seeds]
    gains = {
        f"idea-{i}": statistics.mean(
            b - problem.evaluate(c, top, s) for s, b in zip(seeds, baseline, strict=True)
        )
        for i, c in enumerate(ideas)
    }
    compute = (len(ideas) + 1) * len(seeds) * problem.rung_costs[top]
    by_id = {f"idea-{i}": c for i, c in enumerate(ideas)}
    pick = max(gains, key=lambda i: gains[i])
    truth = {i: problem.true_loss(c) for i, c in by_id.items()}
    return Outcome(compute, pick == min(truth, key=lambda i: truth[i]), True, len(ideas), 0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=10, help="idea pools (repetitions)")
    parser.add_argument("--ideas", type=int, default=40, help="ideas per pool")
    parser.add_argument("--correlation", type=float, default=0.7)
    parser.add_argument("--noise", type=float, default=1.0)
    args = parser.parse_args(argv)
    problem = SyntheticProblem(args.correlation, args.noise)
    pools = [pool(problem, args.ideas, random.Random(p)) for p in range(args.pools)]
    exhaustive = [at_top_tier(problem, ideas) for ideas in pools]
    full = statistics.mean(o.compute for o in exhaustive)
    print(
        f"ladder savings: {args.pools} pools of {args.ideas} ideas on {problem.name}; compute in "
        "rung-0 runs; recall = the pick is the pool's true best"
    )
    print(
        f"  {'setting':30s} {'compute':>8s} {'saving':>7s} {'recall':>7s} {'best kept':>9s} "
        f"{'held':>5s} {'false':>5s}"
    )
    rows = [("every idea at the top tier", exhaustive)]
    rows += [
        (name, [through_ladder(problem, ideas, rule) for ideas in pools])
        for name, rule in SETTINGS.items()
    ]
    for name, outcomes in rows:
        compute = statistics.mean(o.compute for o in outcomes)
        print(
            f"  {name:30s} {compute:8.0f} {full / compute:6.1f}x "
            f"{statistics.mean(o.found_best for o in outcomes):7.0%} "
            f"{statistics.mean(o.kept_best for o in outcomes):9.0%} "
            f"{statistics.mean(o.held for o in outcomes):5.1f} "
            f"{statistics.mean(o.false_passes for o in outcomes):5.1f}"
        )


if __name__ == "__main__":
    main()
