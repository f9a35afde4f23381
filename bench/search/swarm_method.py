"""The swarm's own search in the simulator: researchers with a real brain, and the real ladder.

Nothing here re-implements the swarm. `Researcher` (with one of the offline brains: the
model-based one on Optuna, as `swarm start` builds it, or the heuristic personas) proposes
ideas as patches to a recipe whose constants are the problem's parameters, each declaring the
problem's box or choices (`# search: …`, as a user would declare them); `Ladder` admits them,
asks for paired seeds, decides PROMOTE / RETEST / REJECT per tier and stacks winners into new
champion versions, with the promotion rules of `configs/ladder.toml`. Only the bus is gone:
every message one part makes is shown to the others at once, and a RunSpec becomes a simulated
job whose loss the problem gives. As the real trainers do, a free worker takes the highest tier
first, and a job made for a champion that has since changed is skipped without running.

A run repeats exactly: ids are drawn from the seed (the ladder keys its draws, direct entries and
spot checks, by idea id), and a researcher's rests are counted in results, not wall seconds.

What it recommends is the current champion.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from agents.brain import Brain, Persona
from agents.heuristic_brain import HeuristicBrain, OfflineBrain
from agents.history import History, SharedHistory
from agents.model_brain import ModelBrain, ModelSearch, Sampler
from agents.portfolio_brain import PortfolioBrain
from agents.researcher import Researcher
from agents.screening import Screen
from bench.search.sim import Config, Job, Param, Problem, Value
from bus.messages import Idea, Message, RunResult, RunSpec, RunStatus
from recipes.constants import constants, format_value
from scale_ladder.admission import patched_source
from scale_ladder.dispatch import send_order
from scale_ladder.ladder import Ladder
from scale_ladder.rules import PromotionRule
from scale_ladder.tiers import Tier, load_ladder

LADDER = Path(__file__).resolve().parents[2] / "configs" / "ladder.toml"
EDITABLE = "recipe.py"


def recipe(problem: Problem, config: Config) -> str:
    """The problem's configuration as a recipe file of constants, each declaring its range."""
    lines = []
    for param in problem.params:
        value = config[param.name]
        if param.choices:
            declared = " | ".join(param.choices)
            lines.append(f"{param.name} = {format_value(str(value))}  # search: {declared}")
            continue
        scale = "log" if param.log else "linear"
        if param.integer:
            low, high = int(param.low), int(param.high)
            lines.append(f"{param.name} = {int(value)}  # search: {low}..{high} {scale}")
        else:
            value, low, high = float(value), float(param.low), float(param.high)
            lines.append(f"{param.name} = {value!r}  # search: {low!r}..{high!r} {scale}")
    return "\n".join(lines) + "\n"


def config_of(params: Sequence[Param], source: str) -> dict[str, Value]:
    found = constants(source)
    config: dict[str, Value] = {}
    for param in params:
        value = found[param.name].value
        assert not isinstance(value, tuple | bool), f"{param.name} is not a scalar: {value!r}"
        config[param.name] = value
    return config


def spec_config(ladder: Ladder, params: Sequence[Param], spec: RunSpec) -> dict[str, Value]:
    """The configuration a RunSpec runs: its champion's recipe with its patch applied."""
    base = ladder.champions[spec.champion_version].source
    return config_of(params, patched_source(base, spec.patch, EDITABLE) if spec.patch else base)


def spec_result(spec: RunSpec, status: RunStatus, metric: float | None) -> RunResult:
    """What a trainer would report for `spec`."""
    return RunResult(
        spec.run_id,
        spec.tier,
        spec.seed,
        spec.champion_version,
        status,
        idea_id=spec.idea_id,
        metric=metric,
    )


def seeded_ids(seed: int) -> Callable[[str], str]:
    """Ids shaped as `bus.messages.new_id` makes them, drawn from `seed`."""
    draw = random.Random(seed)
    return lambda prefix: f"{prefix}-{draw.getrandbits(64):016x}"


def ladder_tiers(rule: Mapping[str, float] | None = None) -> list[Tier]:
    """The shipped ladder's tiers, with some promotion-rule fields overridden (for sweeps)."""
    tiers = load_ladder(LADDER).tiers
    if not rule:
        return tiers
    return [replace(t, rule=_with(t.rule, rule)) for t in tiers]


def deterministic(tiers: Sequence[Tier], rungs: Iterable[int], screens: bool = True) -> list[Tier]:
    """The tiers with `rungs` declared `deterministic = true`, as a user would write it in the
    ladder file for a metric that does not depend on the seed (scale_ladder/tiers.py); below a
    deterministic top tier, the others screen (`sigmas = 0`), as the README advises (the top
    decides exactly, so a screen below it costs no validity), unless `screens` is False."""
    out = list(tiers)
    rungs = set(rungs)
    for rung in rungs:
        rule = replace(
            out[rung].rule,
            deterministic=True,
            seeds=1,
            max_seeds=1,
            confirm_wins=False,
            stacks=False,
        )
        out[rung] = replace(out[rung], seeds=1, rule=rule)
    if screens and len(out) - 1 in rungs:
        for rung in range(len(out) - 1):
            if rung not in rungs:
                out[rung] = replace(out[rung], rule=replace(out[rung].rule, sigmas=0.0))
    return out


def _with(rule: PromotionRule, changes: Mapping[str, float]) -> PromotionRule:
    whole = ("cold_start", "seeds", "max_seeds")
    fields = {k: (int(v) if k in whole else v) for k, v in changes.items()}
    return replace(rule, **fields)  # type: ignore[arg-type]


class SwarmMethod:
    def __init__(
        self,
        problem: Problem,
        seed: int,
        agents: int = 4,
        max_in_flight: int = 2,
        tiers: Sequence[Tier] | None = None,
        name: str = "swarm",
        brain: str = "tpe",
        screen: int = 1,  # candidates a heuristic researcher draws per idea (1: no screening)
        screens: bool = True,  # screening tiers below a deterministic top (deterministic())
        # honour each tier's max_concurrent, as the trainers' consumers do (published figures
        # before 2026-11-29 did not), and send a capped tier's runs first come or best first
        caps: bool = False,
        best_first: bool = True,
    ) -> None:
        self.name = name
        self.problem = problem
        tiers = deterministic(list(tiers or ladder_tiers()), problem.deterministic_rungs, screens)
        if len(tiers) != len(problem.rung_costs):
            raise ValueError(
                f"the ladder has {len(tiers)} tiers and {problem.name} {len(problem.rung_costs)} "
                "fidelities"
            )
        source = recipe(problem, problem.default)
        self.ladder = Ladder(tiers, EDITABLE, source)
        personas = itertools.cycle(Persona)
        model = "tpe" if brain == "portfolio" else brain
        shared = ModelSearch(Sampler(model), seed) if brain != "heuristic" else None
        history = History(EDITABLE, "bytelm")  # one per host, as `swarm start` builds it
        screening = Screen(screen, seed) if screen > 1 and shared is None else None

        memory: dict[str, str] = {}  # the portfolio researchers' shared record, as in a host
        ids = seeded_ids(seed)
        self.told = 0  # results told: the researchers' clock, a rest of 1 s lasts one result

        def brain_of(i: int) -> Brain:
            heuristic = OfflineBrain(HeuristicBrain(next(personas), seed * 1000 + i))
            if shared is None:
                return heuristic
            if brain == "portfolio":
                arms = {"tpe": ModelBrain(shared), "heuristic": heuristic}
                return PortfolioBrain(arms, seed * 1000 + i, memory)
            return ModelBrain(shared)

        self.researchers = [
            Researcher(
                f"agent-{i}",
                brain_of(i),
                EDITABLE,
                "bytelm",
                max_in_flight,
                len(tiers) - 1,
                cooldown_s=0.0,
                history=history,
                screen=screening,
                ids=ids,
                clock=lambda: float(self.told),
            )
            for i in range(agents)
        ]
        self.shared = SharedHistory(history, self.researchers)
        self.queue: list[deque[RunSpec]] = [deque() for _ in tiers]
        self.caps = {t.index: t.max_concurrent for t in tiers if caps and t.max_concurrent > 0}
        self.best_first = best_first
        self.running = [0 for _ in tiers]
        self.turn = 0  # researchers are asked in turn
        self.loop = asyncio.new_event_loop()
        self.skipped = 0
        self._share(self.ladder.act())

    # --- the Method protocol ----------------------------------------------------------------

    def ask(self) -> Job | None:
        while True:
            spec = self._next_spec()
            if spec is None:
                return None
            current = max(self.ladder.champions)
            if spec.champion_version < current:  # what a trainer does: skip, costs nothing
                self.skipped += 1
                self._result(spec, RunStatus.SKIPPED, None)
                continue
            config = spec_config(self.ladder, self.problem.params, spec)
            cost = self.problem.rung_costs[spec.tier]
            self.running[spec.tier] += 1
            return Job(config, spec.tier, spec.seed, cost, key=spec)

    def tell(self, job: Job, loss: float) -> None:
        assert isinstance(job.key, RunSpec)
        self.told += 1
        self.running[job.key.tier] -= 1
        self._result(job.key, RunStatus.OK, loss)

    def incumbent(self) -> Config:
        return config_of(
            self.problem.params, self.ladder.champions[max(self.ladder.champions)].source
        )

    def close(self) -> None:
        self.loop.close()

    # --- the swarm, without the bus ---------------------------------------------------------

    def _next_spec(self) -> RunSpec | None:
        for _ in range(len(self.researchers) + 1):
            for tier in reversed(range(len(self.queue))):  # highest first, as trainers take them
                if self.queue[tier] and self.running[tier] < self.caps.get(tier, 1 << 30):
                    return self._pop(tier)
            if not self._propose():
                return None
        return None

    def _pop(self, tier: int) -> RunSpec:
        """The tier's next run: a capped tier's best first, as the ladder service sends them
        (scale_ladder/dispatch.py; runs for an older champion first, they cost nothing)."""
        queue = self.queue[tier]
        if tier not in self.caps or not self.best_first:
            return queue.popleft()
        best = min(queue, key=lambda s: send_order(self.ladder, s))
        queue.remove(best)
        return best

    def _propose(self) -> bool:
        """One idea from the next researcher that has one; False when none does."""
        for _ in range(len(self.researchers)):
            researcher = self.researchers[self.turn % len(self.researchers)]
            self.turn += 1
            step = self.loop.run_until_complete(researcher.propose())
            if step is not None and step.idea is not None:
                self._share([step.idea])
                return True
        return False

    def _result(self, spec: RunSpec, status: RunStatus, metric: float | None) -> None:
        self._share([spec_result(spec, status, metric)])

    def _share(self, messages: Iterable[Message]) -> None:
        """Every part sees every message, and the ladder acts on what it saw, until quiet.
        Ideas and results go to the ladder; what the ladder makes it has observed already."""
        pending = deque(messages)
        while pending:
            message = pending.popleft()
            self.shared.fold(message)
            if isinstance(message, Idea | RunResult):
                self.ladder.observe(message)
                pending.extend(self.ladder.act())
            elif isinstance(message, RunSpec):
                self.queue[message.tier].append(message)
