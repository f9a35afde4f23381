"""Where good ideas die: each tier's verdicts, split by what each idea truly does at the top.

    python -m bench.search.verdicts --problem mfh6:bad --seeds 4 [--no-screens]

Runs the swarm (real brain, real ladder, the shipped `configs/ladder.toml`) on a simulated
problem, as `python -m bench.search` does, and counts the last verdict of every idea at every
tier on every champion it was tested on, split by the idea's noise-free loss at the top fidelity
against that champion's: better or worse by more than `--margin`, else the same. A proxy tier
that rejects most of the truly better ideas is a wall, not a screen; the rules that fired say
why (docs/benchmarks.md, "Screening tiers").
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter

from bench.search.problems import make_problem
from bench.search.sim import Problem, simulate
from bench.search.swarm_method import SwarmMethod, config_of, spec_config
from bus.messages import Decision, Message, RunSpec, Verdict


class Recorded(SwarmMethod):
    """The swarm method, keeping every Decision and each idea's RunSpec per champion."""

    def __init__(self, problem: Problem, seed: int, brain: str, screens: bool = True) -> None:
        self.decisions: list[Decision] = []
        self.specs: dict[tuple[str, int], RunSpec] = {}
        super().__init__(problem, seed, brain=brain, screens=screens)
        act = self.ladder.act

        def recorded() -> list[Message]:
            out = act()
            for m in out:
                if isinstance(m, Decision) and m.idea_id and m.verdict is not Verdict.RETEST:
                    self.decisions.append(m)
                elif isinstance(m, RunSpec) and m.idea_id:
                    self.specs.setdefault((m.idea_id, m.champion_version), m)
            return out

        self.ladder.act = recorded  # type: ignore[method-assign]


def count(method: Recorded, problem: Problem, margin: float) -> tuple[Counter[tuple], Counter]:
    last = {(d.idea_id, d.tier, d.champion_version): d for d in method.decisions}
    verdicts: Counter[tuple] = Counter()
    reasons: Counter[tuple] = Counter()
    versions: dict[str, list[int]] = {}
    for idea_id, version in method.specs:
        versions.setdefault(idea_id, []).append(version)
    for (idea_id, tier, version), decision in last.items():
        # An idea carried over to a new champion with its recipe unchanged keeps its runs and
        # gets no RunSpec there: its recipe is its spec's on the version it came from.
        made = max(v for v in versions[idea_id] if v <= version)
        spec = method.specs[(idea_id, made)]
        idea = problem.true_loss(spec_config(method.ladder, problem.params, spec))
        champion = method.ladder.champions[version].source
        gain = problem.true_loss(config_of(problem.params, champion)) - idea
        truly = "better" if gain > margin else "worse" if gain < -margin else "same"
        verdicts[(tier, truly, decision.verdict.value)] += 1
        if truly == "better" and decision.verdict is Verdict.REJECT:
            reasons[(tier, decision.rule.split(":")[0])] += 1
    return verdicts, reasons


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="mfh6:bad")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--brain", default="tpe")
    parser.add_argument("--budget", type=float, default=900)
    parser.add_argument("--margin", type=float, default=0.005, help="of the top-fidelity loss")
    parser.add_argument(
        "--no-screens",
        action="store_true",
        help="keep the ladder's noise gates below a deterministic top tier (no screening tiers)",
    )
    args = parser.parse_args()
    problem = make_problem(args.problem)
    verdicts: Counter[tuple] = Counter()
    reasons: Counter[tuple] = Counter()
    regrets = []
    for seed in range(args.seeds):
        method = Recorded(problem, seed, args.brain, screens=not args.no_screens)
        try:
            trajectory = simulate(problem, method, args.budget, 4, seed)
        finally:
            method.close()
        regrets.append(trajectory.points[-1].regret)
        v, r = count(method, problem, args.margin)
        verdicts.update(v)
        reasons.update(r)
    print(
        f"{problem.name}, swarm-{args.brain}{', no screens' if args.no_screens else ''}, "
        f"{args.seeds} seeds: final regret median "
        f"{statistics.median(regrets):.4f}; last verdict of each idea per tier and champion, by "
        f"its true effect at the top (margin {args.margin:g})"
    )
    print(f"  {'tier':>4s} {'truly':>6s} {'PROMOTE':>8s} {'REJECT':>7s} {'other':>6s}")
    for tier in sorted({t for t, _, _ in verdicts}):
        for truly in ("better", "same", "worse"):
            row = {v: n for (t, k, v), n in verdicts.items() if t == tier and k == truly}
            other = sum(n for v, n in row.items() if v not in ("PROMOTE", "REJECT"))
            print(
                f"  {tier:>4d} {truly:>6s} {row.get('PROMOTE', 0):>8d} "
                f"{row.get('REJECT', 0):>7d} {other:>6d}"
            )
    print("  why truly better ideas were rejected:")
    for (tier, why), n in sorted(reasons.items()):
        print(f"    tier {tier}: {n:5d}  {why}")


if __name__ == "__main__":
    main()
