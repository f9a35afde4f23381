"""Peer search methods, as their users run them, behind sim.py's Method protocol.

Rules shared by every peer, each chosen in the peers' favour:
- Every trial trains on seed `trial_seed` (0): common random numbers, so two trials differ only
  by their config's share of the noise.
- A trial continued from rung k to k+1 resumes training from its checkpoint, as Ray Tune and
  Optuna users do: it pays rung_costs[k+1] - rung_costs[k]. A trial's first rung pays
  rung_costs[0].
- The incumbent is the config with the best observed loss among trials that reached the top rung
  (None before any did).
- Pruners see a trial's resource, rung_costs[k] / rung_costs[0] rounded (1, 3, 9 for three rungs
  of ratio 3), not its rung index: with a reduction factor of 3 both libraries place their
  decisions at resources 1, 3, 9, ..., so reporting 1, 2, 3 would leave the middle rung unjudged.

The libraries are optional: each peer imports its own in its constructor.
"""

from __future__ import annotations

import importlib.util
import math
import random
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.search.sim import Config, Job, Method, Param, Problem, Value


def sample_config(params: tuple[Param, ...], rng: random.Random) -> dict[str, Value]:
    """Uniform over each param's range (log-uniform where log) or over its choices."""
    config: dict[str, Value] = {}
    for p in params:
        if p.choices:
            config[p.name] = rng.choice(p.choices)
            continue
        if p.log:
            x = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
        else:
            x = rng.uniform(p.low, p.high)
        config[p.name] = min(max(round(x), int(p.low)), int(p.high)) if p.integer else x
    return config


def _resources(problem: Problem) -> list[int]:
    return [max(1, round(c / problem.rung_costs[0])) for c in problem.rung_costs]


def _step_cost(problem: Problem, rung: int) -> float:
    """What running `rung` costs a trial that already finished rung - 1 (it resumes)."""
    costs = problem.rung_costs
    return costs[0] if rung == 0 else costs[rung] - costs[rung - 1]


class _TopIncumbent:
    """Best observed loss among trials that reached the top rung."""

    def __init__(self) -> None:
        self._best: tuple[float, Config] | None = None

    def offer(self, config: Config, loss: float) -> None:
        if self._best is None or loss < self._best[0]:
            self._best = (loss, config)

    def incumbent(self) -> Config | None:
        return self._best[1] if self._best is not None else None


class RandomSearch(_TopIncumbent):
    """Random configs, each trained at the top rung only."""

    name = "random"

    def __init__(self, problem: Problem, seed: int, trial_seed: int = 0) -> None:
        super().__init__()
        self._problem, self._rng, self._trial_seed = problem, random.Random(seed), trial_seed

    def ask(self) -> Job | None:
        top = len(self._problem.rung_costs) - 1
        config = sample_config(self._problem.params, self._rng)
        return Job(config, top, self._trial_seed, self._problem.rung_costs[top])

    def tell(self, job: Job, loss: float) -> None:
        self.offer(job.config, loss)


class OptunaTpe(_TopIncumbent):
    """Optuna's TPE sampler with its Hyperband or successive-halving pruner, driven through
    ask/tell with several trials in flight: a trial that survives a rung continues on the next
    free worker, before any new trial starts."""

    def __init__(
        self, problem: Problem, seed: int, pruner: str = "hyperband", trial_seed: int = 0
    ) -> None:
        import optuna

        super().__init__()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.name = f"optuna-tpe-{pruner}"
        self._problem, self._trial_seed = problem, trial_seed
        self._resources = _resources(problem)
        self._pruned = optuna.trial.TrialState.PRUNED
        if pruner == "hyperband":
            chosen: optuna.pruners.BasePruner = optuna.pruners.HyperbandPruner(
                min_resource=1, max_resource=self._resources[-1], reduction_factor=3
            )
        elif pruner == "sh":
            chosen = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
        else:
            raise ValueError(f"unknown pruner {pruner!r}: hyperband or sh")
        with warnings.catch_warnings():  # ExperimentalWarning, should a default become one
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._study = optuna.create_study(
                # HyperbandPruner picks each trial's bracket from a hash of the study's name: a
                # fixed name makes a run reproducible (docs/benchmarks.md: how far a random one
                # moved the medians).
                study_name=f"{self.name}-{problem.name}-{seed}",
                direction="minimize",
                sampler=optuna.samplers.TPESampler(seed=seed),
                pruner=chosen,
            )
        self._survivors: deque[tuple[Any, Config, int]] = deque()  # (trial, config, next rung)

    def ask(self) -> Job | None:
        if self._survivors:
            trial, config, rung = self._survivors.popleft()
        else:
            trial, rung = self._study.ask(), 0
            config = {p.name: self._suggest(trial, p) for p in self._problem.params}
        return Job(config, rung, self._trial_seed, _step_cost(self._problem, rung), key=trial)

    @staticmethod
    def _suggest(trial: Any, p: Param) -> Value:
        value: Value
        if p.choices:
            value = trial.suggest_categorical(p.name, p.choices)
        elif p.integer:
            value = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)
        else:
            value = trial.suggest_float(p.name, p.low, p.high, log=p.log)
        return value

    def tell(self, job: Job, loss: float) -> None:
        trial: Any = job.key
        if job.rung == len(self._resources) - 1:
            self._study.tell(trial, loss)
            self.offer(job.config, loss)
            return
        trial.report(loss, step=self._resources[job.rung])
        if trial.should_prune():
            self._study.tell(trial, state=self._pruned)
        else:
            self._survivors.append((trial, job.config, job.rung + 1))


@dataclass(frozen=True, slots=True)
class _RayTrial:
    trial_id: str  # all that ASHAScheduler reads from a trial


class RayAsha(_TopIncumbent):
    """Ray Tune's ASHAScheduler, used standalone (no ray.init), with random configs (Ray Tune's
    default search). It sees each result as Tune would report it; stopped trials are completed,
    as Tune's controller does."""

    name = "ray-asha"

    def __init__(self, problem: Problem, seed: int, trial_seed: int = 0) -> None:
        with warnings.catch_warnings():  # whatever ray's import chain warns about is not ours
            warnings.simplefilter("ignore")
            from ray.tune.schedulers import ASHAScheduler, TrialScheduler

        super().__init__()
        self._problem, self._rng, self._trial_seed = problem, random.Random(seed), trial_seed
        self._resources = _resources(problem)
        self._stop = TrialScheduler.STOP
        self._scheduler = ASHAScheduler(
            time_attr="resource",
            metric="loss",
            mode="min",
            max_t=self._resources[-1],
            grace_period=1,
            reduction_factor=3,
        )
        self._survivors: deque[tuple[_RayTrial, Config, int]] = deque()
        self._count = 0

    def ask(self) -> Job | None:
        if self._survivors:
            trial, config, rung = self._survivors.popleft()
        else:
            trial, rung = _RayTrial(f"trial_{self._count:05d}"), 0
            self._count += 1
            config = sample_config(self._problem.params, self._rng)
            self._scheduler.on_trial_add(None, trial)  # type: ignore[arg-type]
        return Job(config, rung, self._trial_seed, _step_cost(self._problem, rung), key=trial)

    def tell(self, job: Job, loss: float) -> None:
        trial: Any = job.key
        result = {"resource": self._resources[job.rung], "loss": loss}
        decision = self._scheduler.on_trial_result(None, trial, result)  # type: ignore[arg-type]
        top = job.rung == len(self._resources) - 1
        if top:
            self.offer(job.config, loss)
        if top or decision == self._stop:
            self._scheduler.on_trial_complete(None, trial, result)  # type: ignore[arg-type]
        else:
            self._survivors.append((trial, job.config, job.rung + 1))


def _smac_multi_fidelity(problem: Problem, seed: int) -> Method:
    from bench.search.smac_peer import SmacMultiFidelity  # it builds on this module

    return SmacMultiFidelity(problem, seed)


PEERS: dict[str, Callable[[Problem, int], Method]] = {
    "random": RandomSearch,
    "optuna-tpe-hyperband": lambda problem, seed: OptunaTpe(problem, seed, "hyperband"),
    "optuna-tpe-sh": lambda problem, seed: OptunaTpe(problem, seed, "sh"),
    "ray-asha": RayAsha,
}
if importlib.util.find_spec("smac") is not None:  # optional: not every install has the bench extra
    PEERS["smac-mf"] = _smac_multi_fidelity
