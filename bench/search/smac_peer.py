"""SMAC3's multi-fidelity facade (random-forest BO with a Hyperband intensifier) as a peer search
method behind sim.py's Method protocol, driven through its ask/tell interface.

It follows the rules in peers.py's docstring. Its budgets are the trial resources 1, 3, 9 (eta 3,
SMAC's default), every trial trains on seed `trial_seed` whatever seed SMAC proposes, and the
incumbent is the best config observed at the top rung (not SMAC's own incumbent, which may rest
on a lower budget). SMAC asks for a promoted config again with a larger budget, as a new trial
with the same Configuration; it is not told which trial that continues, but the config is the
same and every run is on the same seed, so the run at the last budget it finished is that
checkpoint: the step pays only the increment over it. A config that starts in a later Hyperband
bracket, at budget 3 or 9, pays its full rung cost.

Needs the `smac` package (the bench extra); it is imported in the constructor.
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.search.peers import _resources, _TopIncumbent
from bench.search.sim import Job, Param, Problem, Value


def _hyperparameter(p: Param) -> Any:
    from ConfigSpace import Categorical, Float, Integer

    if p.choices:
        return Categorical(p.name, p.choices)
    if p.integer:
        return Integer(p.name, (int(p.low), int(p.high)), log=p.log)
    return Float(p.name, (p.low, p.high), log=p.log)


class SmacMultiFidelity(_TopIncumbent):
    name = "smac-mf"

    def __init__(self, problem: Problem, seed: int, trial_seed: int = 0) -> None:
        from ConfigSpace import ConfigurationSpace
        from smac import MultiFidelityFacade, Scenario
        from smac.main.exceptions import ConfigurationSpaceExhaustedException
        from smac.runhistory.dataclasses import TrialValue

        super().__init__()
        self._problem, self._trial_seed = problem, trial_seed
        self._resources = _resources(problem)
        self._value, self._exhaustion = TrialValue, ConfigurationSpaceExhaustedException
        self._exhausted = False
        # SMAC's own notes (its sampling fell back to random configs, ...) would crowd the bench's
        # output; its logger alone is raised to errors, the rest of the process is left alone.
        logging.getLogger("smac").setLevel(logging.ERROR)
        space = ConfigurationSpace(seed=seed)
        space.add([_hyperparameter(p) for p in problem.params])
        # SMAC saves its state when it is built (and on tell, which is asked not to): into a
        # folder that goes once it is built.
        with tempfile.TemporaryDirectory(prefix="smac-peer-") as out:
            scenario = Scenario(
                space,
                name="smac-mf",
                output_directory=Path(out),
                deterministic=True,  # one seed per config: the simulator fixes it anyway
                # The simulator's budget ends the run, not SMAC. The initial design stays SMAC's
                # 10 random configs per param, as for a user whose n_trials is what the bench's
                # default budget affords (its cap, a quarter of n_trials, is then above that).
                n_trials=10**9,
                min_budget=self._resources[0],
                max_budget=self._resources[-1],
                seed=seed,
            )
            with _third_party_warnings():
                self._smac = MultiFidelityFacade(
                    scenario,
                    target_function=None,  # ask/tell only
                    intensifier=MultiFidelityFacade.get_intensifier(scenario, eta=3),
                    logging_level=False,  # any other value configures the root logger
                    overwrite=True,
                )
        self._finished: dict[Any, int] = {}  # Configuration -> highest rung it finished

    def ask(self) -> Job | None:
        if self._exhausted:
            return None
        try:
            with _third_party_warnings():
                info = self._smac.ask()
        except self._exhaustion:  # a small space (LCDB's 20 learners): SMAC never repeats one
            self._exhausted = True
            return None
        rung = self._rung(info.budget)
        done = self._finished.get(info.config)
        costs = self._problem.rung_costs
        cost = costs[rung] - costs[done] if done is not None and done < rung else costs[rung]
        config = {p.name: _value(p, info.config[p.name]) for p in self._problem.params}
        return Job(config, rung, self._trial_seed, cost, key=info)

    def _rung(self, budget: float | None) -> int:
        assert budget is not None, "SMAC's multi-fidelity facade always proposes a budget"
        # SMAC's budgets are max_budget / eta^i: 1, 3, 9 match the resources exactly; other
        # rung ratios (LCDB's 1, 4, 16) go to the nearest resource on a log scale.
        return min(
            range(len(self._resources)),
            key=lambda k: abs(math.log(self._resources[k] / budget)),
        )

    def tell(self, job: Job, loss: float) -> None:
        info: Any = job.key
        with _third_party_warnings():
            self._smac.tell(info, self._value(cost=loss), save=False)
        self._finished[info.config] = max(job.rung, self._finished.get(info.config, job.rung))
        if job.rung == len(self._resources) - 1:
            self.offer(job.config, loss)


def _value(p: Param, raw: Any) -> Value:
    """ConfigSpace hands back numpy scalars: the recipe wants plain numbers and strings."""
    if p.choices:
        return str(raw)
    return int(raw) if p.integer else float(raw)


@contextlib.contextmanager
def _third_party_warnings() -> Iterator[None]:
    """Whatever SMAC and its stack (scikit-learn, ConfigSpace) warn about is not ours."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
