"""Search methods on a simulated cluster: W workers, one compute budget, regret as it goes.

Every method is driven the same way (asked for a job whenever a worker is free, told the loss
when the job finishes), so methods compare at equal compute and equal simulated wall-clock.
Compute is charged when a job starts; once the budget is spent no job starts, and the jobs
already running finish (their compute was charged).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

Value = float | int | str
Config = Mapping[str, Value]


@dataclass(frozen=True, slots=True)
class Param:
    """One dimension of a search space: a number in [low, high] (log scale by default), an
    integer, or one of `choices`."""

    name: str
    low: float = 0.0
    high: float = 1.0
    log: bool = True
    integer: bool = False
    choices: tuple[str, ...] = ()


class Problem(Protocol):
    name: str
    params: tuple[Param, ...]
    default: Config  # the starting recipe's values: the swarm's first champion
    rung_costs: tuple[float, ...]  # compute of one evaluation at each fidelity, ascending
    # rungs whose loss does not depend on the seed (no noise there): a user of the swarm would
    # declare those tiers `deterministic = true`, and the swarm's method does
    deterministic_rungs: tuple[int, ...]

    def evaluate(self, config: Config, rung: int, seed: int) -> float:
        """The observed loss (lower is better) of one run; the same inputs give the same value."""
        ...

    def true_loss(self, config: Config) -> float:
        """The noise-free loss at the top fidelity: what a method's recommendation is worth."""
        ...

    def best_loss(self) -> float:
        """The optimum's true loss."""
        ...


@dataclass(frozen=True, slots=True)
class Job:
    config: Config
    rung: int
    seed: int
    cost: float  # compute units it uses (a resumed trial pays only the increment)
    key: object = None  # the method's own handle on the job


class Method(Protocol):
    name: str

    def ask(self) -> Job | None:
        """The next job to start, or None: nothing to start until a running job finishes."""
        ...

    def tell(self, job: Job, loss: float) -> None: ...

    def incumbent(self) -> Config | None:
        """What the method would recommend now; None: nothing yet (the default is kept)."""
        ...


@dataclass(frozen=True, slots=True)
class Point:
    compute: float  # charged so far
    wall: float  # simulated clock
    regret: float  # true loss of the incumbent minus the optimum's


@dataclass
class Trajectory:
    method: str
    problem: str
    seed: int
    points: list[Point] = field(default_factory=list)
    jobs: int = 0
    seconds: float = 0.0  # real time the simulation took

    def regret_at(self, compute: float) -> float:
        """The regret once `compute` was charged (the last point at or before it)."""
        return self._regret_when(lambda point: point.compute > compute)

    def regret_at_wall(self, wall: float) -> float:
        """The regret at simulated time `wall` (the last point at or before it)."""
        return self._regret_when(lambda point: point.wall > wall)

    def _regret_when(self, after: Callable[[Point], bool]) -> float:
        best = self.points[0].regret if self.points else float("nan")
        for point in self.points:  # compute and wall both only grow along the points
            if after(point):
                break
            best = point.regret
        return best

    @property
    def final(self) -> float:
        return self.points[-1].regret if self.points else float("nan")


def regret(problem: Problem, config: Config | None) -> float:
    return problem.true_loss(config if config is not None else problem.default) - (
        problem.best_loss()
    )


def simulate(
    problem: Problem, method: Method, budget: float, workers: int, seed: int = 0
) -> Trajectory:
    """Run `method` on `problem` with `workers` parallel workers until `budget` is charged."""
    trajectory = Trajectory(method.name, problem.name, seed)
    trajectory.points.append(Point(0.0, 0.0, regret(problem, method.incumbent())))
    running: list[tuple[float, int, Job]] = []
    order = itertools.count()  # ties finish in start order
    clock = spent = 0.0
    while True:
        while spent < budget and len(running) < workers:
            job = method.ask()
            if job is None:
                break
            spent += job.cost
            trajectory.jobs += 1
            heapq.heappush(running, (clock + job.cost, next(order), job))
        if not running:
            return trajectory  # budget spent, or the method has nothing left to try
        clock, _, job = heapq.heappop(running)
        method.tell(job, problem.evaluate(job.config, job.rung, job.seed))
        trajectory.points.append(Point(spent, clock, regret(problem, method.incumbent())))
