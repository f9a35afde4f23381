"""A ladder driven without a bus: RunSpecs are "run" by a synthetic, seed-paired metric.

The recipe is `LR = <x>` plus other constants; the metric is lower-is-better, best at LR = 3,
with noise shared by every run on the same seed (so pairing removes it) and a little of its own.
"""

from __future__ import annotations

import difflib
import random
import re
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bus.messages import (
    ChampionChange,
    Decision,
    Idea,
    Message,
    RunResult,
    RunSpec,
    RunStatus,
    Verdict,
)
from recipes.identity import recipe_sha
from scale_ladder.admission import patched_source
from scale_ladder.ladder import Ladder
from scale_ladder.seeds import DEFAULT_SEED_SECRET
from scale_ladder.tiers import load_tiers

RECIPE = "LR = 1.0  # learning rate\nWD = 0.1  # weight decay\nDEPTH = 2\n"

SIM_LADDER = """
[[tier]]
name = "small"
depth = 1
width = 32
context = 16
budget_kind = "tokens"
budget = 1000
time_limit_s = 10
eval_tokens = 64
seeds = 2
max_seeds = 4
min_improvement = 0.001
{extra}

[[tier]]
name = "large"
depth = 2
width = 64
context = 16
budget_kind = "tokens"
budget = 2000
time_limit_s = 10
eval_tokens = 64
seeds = 2
max_seeds = 4
min_improvement = 0.001
"""


def make_ladder(
    tmp_path: Path,
    require_approval: bool = False,
    extra: str = "",
    seed_secret: bytes = DEFAULT_SEED_SECRET,
) -> Ladder:
    path = tmp_path / "ladder.toml"
    path.write_text(SIM_LADDER.format(extra=extra))
    tiers = load_tiers(path)
    return Ladder(
        tiers, "recipe.py", RECIPE, require_approval=require_approval, seed_secret=seed_secret
    )


def patch(old: str, new: str, base: str = RECIPE) -> str:
    assert old in base
    return "".join(
        difflib.unified_diff(
            base.splitlines(True),
            base.replace(old, new, 1).splitlines(True),
            "a/recipe.py",
            "b/recipe.py",
        )
    )


def metric(source: str, seed: int) -> float:
    lr = float(re.search(r"^LR = ([\d.]+)", source, re.M).group(1))  # type: ignore[union-attr]
    wd = float(re.search(r"^WD = ([\d.]+)", source, re.M).group(1))  # type: ignore[union-attr]
    shared = random.Random(seed).gauss(0, 0.05)  # seed noise, the same for idea and baseline
    # crc32, not hash(): str hashes change with every process, and so would the tests' outcomes
    own = random.Random(zlib.crc32(f"{seed}:{source}".encode()) & 0xFFFF).gauss(0, 0.001)
    return 2.0 + 0.1 * (lr - 3.0) ** 2 + 0.5 * abs(wd - 0.1) + shared + own


Runner = Callable[[RunSpec, str], RunResult]


def ok_result(spec: RunSpec, value: float) -> RunResult:
    """The OK result of `spec` with `value` as its metric."""
    return RunResult(
        spec.run_id,
        spec.tier,
        spec.seed,
        spec.champion_version,
        RunStatus.OK,
        idea_id=spec.idea_id,
        metric=value,
    )


def failed_result(spec: RunSpec, reason: str, status: RunStatus = RunStatus.CRASH) -> RunResult:
    """A result of `spec` that failed for `reason`."""
    return replace(ok_result(spec, 0.0), status=status, metric=None, reason=reason)


def ok_runner(spec: RunSpec, source: str) -> RunResult:
    return ok_result(spec, metric(source, spec.seed))


def first_tries_fail(seed: int, then: Runner = ok_runner) -> Runner:
    """A runner whose first run of each idea, and of the champion, on `seed` fails (a trainer's
    disk filled, then freed); `then` runs the rest."""
    tried: set[str] = set()

    def run(spec: RunSpec, source: str) -> RunResult:
        who = spec.idea_id or "champion"
        if spec.seed == seed and who not in tried:
            tried.add(who)
            return failed_result(spec, "No space left on device")
        return then(spec, source)

    return run


class Sim:
    """Feeds the ladder its own outputs' results until nothing is left to run."""

    def __init__(self, ladder: Ladder, runner: Runner = ok_runner) -> None:
        self.ladder = ladder
        self.runner = runner
        self.log: list[Message] = []  # every event in the order a stream would hold them
        self.queue: list[RunSpec] = []

    def feed(self, message: Message) -> None:
        self.log.append(message)
        self.ladder.observe(message)
        self.step()

    def step(self) -> None:
        for out in self.ladder.act():
            self.log.append(out)
            if isinstance(out, RunSpec):
                self.queue.append(out)

    def propose(self, idea_id: str, change: str, version: int = 1, **kw: str) -> Idea:
        old, new = change.split("->")
        base = self.ladder.champions[version].source
        idea = Idea(idea_id, "tester", f"try {change[:200]}", patch(old, new, base), version, **kw)
        self.feed(idea)
        return idea

    def run(self, spec: RunSpec) -> RunResult:
        base = self.ladder.champions[spec.champion_version].source
        source = patched_source(base, spec.patch, "recipe.py") if spec.patch else base
        # What a trainer fetches by the spec's address is the recipe its champion and patch make.
        assert spec.recipe_sha == recipe_sha(source), spec.run_id
        result = self.runner(spec, source)
        self.feed(result)
        return result

    def run_all(self, limit: int = 1000, hold: Callable[[RunSpec], bool] | None = None) -> None:
        """Run the queue until it is empty; specs `hold` picks are left in it, not run."""
        held: list[RunSpec] = []
        for _ in range(limit):
            if not self.queue:
                self.queue = held
                return
            spec = self.queue.pop(0)
            if hold is not None and hold(spec):
                held.append(spec)
            else:
                self.run(spec)
        raise AssertionError("the ladder kept asking for runs")


def started(ladder: Ladder) -> Sim:
    """A Sim whose ladder has made champion v1 and run its first baselines."""
    sim = Sim(ladder)
    sim.step()
    sim.run_all()
    return sim


def decisions(sim: Sim, idea_id: str, retests: bool = False) -> list[Decision]:
    """The idea's decisions; RETESTs (asking for another seed) only when asked for."""
    return [
        m
        for m in sim.log
        if isinstance(m, Decision)
        and m.idea_id == idea_id
        and (retests or m.verdict is not Verdict.RETEST)
    ]


def champions(sim: Sim) -> list[ChampionChange]:
    return [m for m in sim.log if isinstance(m, ChampionChange)]
