"""The model-based offline brain: Optuna's samplers over the recipe's search space.

Every finding the swarm made becomes evidence for one surrogate model per agents host (shared
by the host's model brains, so the whole swarm's evidence trains it and a researcher that joins
late starts informed). An idea out of play is a finished trial whose params are its constants;
its value at a tier is its level there on a reference common to every champion
(agents/finding_values.py); how the tiers combine is `_add_finished`'s. An idea still in play is a
running trial, so the sampler's constant liar steers parallel proposals apart; a crash counts as
the worst value seen (Optuna's FAIL state would teach the model nothing); a refused or stale idea
teaches nothing. Ideas that edit code beyond constants are left out: their params would not
describe them.

A proposal asks the study for a point in the space (agents/search_space.py) and writes it into
the champion recipe with the `ast` in-place edit, so it may move every constant at once and the
recipe's comments survive. Half the proposals go only half the way from the champion to the
sampled point (`STEPS`): the ladder stacks a change only when it beats the champion, so once the
champion is good, a whole step to a point the model merely rates well is most often a step back,
and a shorter one along the same line is likelier to be a win the ladder can confirm (the idea
of TuRBO's trust region, Eriksson et al. 2019, without its shrinking schedule, which did worse
here). The study is told the point proposed, so the liar sees where the swarm really is.

TPE (multivariate, constant liar: Optuna's default for parallel workers) is the default
sampler; `gp` uses Optuna's GPSampler, which fits the observation noise but has no liar, so
parallel proposals between two results may land close together.
"""

from __future__ import annotations

import enum
import math
import random
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState, create_trial

from agents.brain import Attempt, Desk, Finding, Persona, Proposal
from agents.finding_values import out_of_play, point_of, spot_checked, tier_values
from agents.hypotheses import clip, describe
from agents.search_space import Dimension, Kind, SearchSpace, SpaceError, space_of
from recipes.constants import Change, Scalar, constants, edit
from recipes.fixed import nothing_to_move
from recipes.identity import fingerprint

optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial would flood the logs
ASKS_PER_PROPOSAL = 8  # samples that land on a recipe already tried are asked again, this often
# The share of the way from the champion to the sampled point a proposal goes, drawn per
# proposal. (1.0, 0.5) against (1.0,) in bench.search, median final regret: synthetic ρ 0.3
# 0.066 -> 0.043 and ρ 0.9 0.019 -> 0.018 (30 seeds), MF-Hartmann-6 good / moderate / bad
# 0.16 / 0.18 / 0.24 -> 0.06 / 0.11 / 0.18 (10 seeds); a shrinking trust region (halved after
# every 4 or 8 rejects on a champion) did worse (docs/benchmarks.md, "Half steps").
STEPS = (1.0, 0.5)


class Sampler(enum.StrEnum):
    TPE = "tpe"
    GP = "gp"


@dataclass(slots=True)
class _Tracked:
    """What the study holds of one idea."""

    placeholder: int | None = None  # its running trial while in play (the liar reads it)
    finished: bool = False  # out of play, its finished trial in


def _param(d: Dimension) -> str:
    return f"log2({d.name})" if d.kind is Kind.POW2 else d.name


def _distribution(d: Dimension) -> BaseDistribution:
    if d.kind in (Kind.FLAG, Kind.CHOICE):
        return CategoricalDistribution(d.choices)
    if d.kind is Kind.POW2:
        return IntDistribution(round(math.log2(d.low)), round(math.log2(d.high)))
    if d.kind is Kind.INT:
        return IntDistribution(int(d.low), int(d.high), log=d.log)
    return FloatDistribution(d.low, d.high, log=d.log)


def _to_param(d: Dimension, x: Scalar) -> object | None:
    """A recipe value as the study's param (clipped into range); None if it has no place."""
    if d.kind in (Kind.FLAG, Kind.CHOICE):
        return x if d.contains(x) else None
    if isinstance(x, bool | str):
        return None
    if d.kind is Kind.POW2:
        if x <= 0:
            return None
        low, high = round(math.log2(d.low)), round(math.log2(d.high))
        return min(max(round(math.log2(x)), low), high)
    if d.kind is Kind.INT:
        return int(min(max(round(x), d.low), d.high))
    return d.clip(float(x))


def _to_value(d: Dimension, p: object) -> Scalar:
    """The study's param as the value written into the recipe (readable: 3 significant digits)."""
    if d.kind in (Kind.FLAG, Kind.CHOICE):
        chosen: Scalar = next(c for c in d.choices if c == p and type(c) is type(p))
        return chosen
    assert isinstance(p, int | float) and not isinstance(p, bool)
    if d.kind is Kind.POW2:
        return int(2 ** int(p))
    if d.kind is Kind.INT:
        return int(p)
    return d.clip(float(f"{float(p):.3g}"))


def _as_params(space: SearchSpace, values: Mapping[str, Scalar]) -> dict[str, object] | None:
    """A point of the space as the study's params; None if a value has no place in it (a
    choice the space does not list) or a dimension has no value."""
    params: dict[str, object] = {}
    for d in space.dimensions:
        x = values.get(d.name)
        p = _to_param(d, x) if x is not None else None
        if p is None:
            return None
        params[_param(d)] = p
    return params


def _toward(
    space: SearchSpace,
    here: dict[str, object],
    there: dict[str, object],
    step: float,
    draw: random.Random,
) -> dict[str, object]:
    """The point `step` of the way from `here` to `there` in the study's params: along a log
    scale where the dimension has one, rounded for integers; a choice or flag takes `there`'s
    value with probability `step`, else keeps `here`'s."""
    out: dict[str, object] = {}
    for d in space.dimensions:
        k = _param(d)
        a, b = here[k], there[k]
        if d.kind in (Kind.FLAG, Kind.CHOICE):
            out[k] = b if draw.random() < step else a
            continue
        assert isinstance(a, int | float) and isinstance(b, int | float)
        if d.log and d.kind is not Kind.POW2 and a > 0 and b > 0:  # POW2's params are log2 already
            x = math.exp(math.log(a) + step * (math.log(b) - math.log(a)))
        else:
            x = a + step * (b - a)
        # between the two ends exactly: exp(log(0.1)) is 0.10000000000000002, past a range that
        # ends at 0.1, and the study refuses a trial outside its distribution
        x = min(max(x, min(a, b)), max(a, b))
        out[k] = round(x) if d.kind in (Kind.INT, Kind.POW2) else x
    return out


class ModelSearch:
    """One Optuna study over the recipe's space, fed every finding; shared by a host's model
    brains (each asks its own trials; the liar keeps their pending points apart)."""

    def __init__(self, sampler: Sampler, seed: int) -> None:
        self.sampler = sampler
        self.seed = seed
        self.space: SearchSpace | None = None
        self._distributions: dict[str, BaseDistribution] = {}  # the space's, as Optuna's params
        self._ranges: dict[str, Dimension] = {}  # the range each dimension was first given
        self._study = self._new_study()
        self._seen: dict[str, Finding] = {}
        self._tracked: dict[str, _Tracked] = {}
        self._next = 0  # the number the next trial gets (Optuna numbers them 0, 1, 2 … per study)
        self._low: float | None = None  # best and worst values told so far
        self._high: float | None = None
        self._steps = random.Random(seed)  # the step of each proposal (STEPS): repeatable

    def _new_study(self) -> optuna.Study:
        chosen: optuna.samplers.BaseSampler
        with warnings.catch_warnings():  # ExperimentalWarning, should a default become one
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if self.sampler is Sampler.GP:
                chosen = optuna.samplers.GPSampler(seed=self.seed)
            else:
                chosen = optuna.samplers.TPESampler(
                    seed=self.seed, multivariate=True, constant_liar=True
                )
            return optuna.create_study(direction="minimize", sampler=chosen)

    @property
    def trials(self) -> int:
        return self._next

    def propose(self, desk: Desk, idea_id: str) -> Attempt:
        space = self._space_for(desk)
        if not space.dimensions:
            why = nothing_to_move(constants(desk.source), desk.editable, desk.fixed)
            return Attempt(None, why_not=why, nothing_to_move=True)
        self._sync(desk, space)
        champion = constants(desk.source)
        here = _as_params(space, space.values_of(champion))
        for _ in range(ASKS_PER_PROPOSAL):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                trial = self._study.ask(self._distributions)
            self._next = trial.number + 1
            step = self._steps.choice(STEPS)
            try:
                params = trial.params  # a copy per read: read once, not once per dimension
                if step < 1.0 and here is not None:
                    params = _toward(space, here, params, step, self._steps)
                values = {d.name: _to_value(d, params[_param(d)]) for d in space.dimensions}
                source, changes = edit(desk.source, space.assemble(champion, values))
            except BaseException:
                self._study.tell(trial, state=TrialState.FAIL)  # no zombie for the liar
                raise
            if not changes or fingerprint(source) in desk.tried:
                self._study.tell(trial, state=TrialState.FAIL)
                continue
            halfway = params != trial.params
            if halfway:  # the liar holds the point proposed, not the one asked
                self._study.tell(trial, state=TrialState.FAIL)
                placeholder = self._add(params, TrialState.RUNNING)
            else:
                placeholder = trial.number
            self._tracked[idea_id] = _Tracked(placeholder=placeholder)
            self._seen.pop(idea_id, None)
            return Attempt(self._proposal(desk, source, changes, halfway))
        return Attempt(None, why_not=f"{ASKS_PER_PROPOSAL} samples in a row were tried already")

    def _proposal(
        self, desk: Desk, source: str, changes: tuple[Change, ...], halfway: bool
    ) -> Proposal:
        comments = constants(desk.source)
        said = [describe(c, comments[c.name].comment) for c in changes[:3]]
        more = f"; and {len(changes) - 3} more" if len(changes) > 3 else ""
        decided = sum(1 for t in self._tracked.values() if t.finished)
        best = "none yet" if self._low is None else f"{self._low:.4g}"
        why = (
            f"{self.sampler.value.upper()} over {len(self.space.dimensions) if self.space else 0} "
            f"dimensions, fitted to {decided} decided idea{'' if decided == 1 else 's'} of "
            f"{len(desk.findings)} finding{'' if len(desk.findings) == 1 else 's'} "
            f"({self.trials} trials); best value so far {best}"
            + ("; a half step from the champion towards the point sampled" if halfway else "")
        )
        lead = "; ".join(said) + more
        return Proposal(
            hypothesis=clip(f"{lead}. The {self.sampler.value} model rates this region best."),
            source=source,
            changes=changes,
            persona=None,
            why=why,
        )

    # --- the study from the findings ----------------------------------------------------------

    def _space_for(self, desk: Desk) -> SearchSpace:
        """The champion's space: its declared ranges as they are now, and each derived range as
        it was first given (a range derived around a value would drift with every champion)
        until the champion's value leaves it. A new space means a new study: Optuna's samplers
        need one space per study."""
        current = space_of(desk.source, desk.fixed)
        values = current.values_of(constants(desk.source))
        dims: list[Dimension] = []
        for d in current.dimensions:
            first = self._ranges.setdefault(d.name, d)
            kept = first if first.kind is d.kind and first.choices == d.choices else d
            x = values.get(d.name)
            if d.declared or (kept is not d and x is not None and not kept.contains(x)):
                kept = d  # a declaration is the recipe's word; a champion past a derived range
                # gets the range around its value
            self._ranges[d.name] = kept
            dims.append(kept)
        space = SearchSpace(tuple(dims))
        if space != self.space:
            self.space = space
            self._distributions = {_param(d): _distribution(d) for d in space.dimensions}
            self._study = self._new_study()
            self._seen.clear()
            self._tracked.clear()
            self._next, self._low, self._high = 0, None, None
        return space

    def _sync(self, desk: Desk, space: SearchSpace) -> None:
        for finding in desk.findings:
            if self._seen.get(finding.idea_id) is not finding:
                self._seen[finding.idea_id] = finding
                if not finding.code_changed:
                    self._fold(finding, desk, space)

    def _fold(self, finding: Finding, desk: Desk, space: SearchSpace) -> None:
        tracked = self._tracked.setdefault(finding.idea_id, _Tracked())
        if tracked.finished:
            return
        if not out_of_play(finding, desk.top_tier):
            if tracked.placeholder is None:  # in play: a running trial, the liar's
                params = self._params(finding, finding.champion_version, desk, space)
                if params is not None:
                    tracked.placeholder = self._add(params, TrialState.RUNNING)
            return
        if tracked.placeholder is not None:  # out of play: its finished trial replaces it
            self._study.tell(tracked.placeholder, state=TrialState.FAIL)
            tracked.placeholder = None
        tracked.finished = True
        self._add_finished(finding, desk, space)

    def _add_finished(self, finding: Finding, desk: Desk, space: SearchSpace) -> None:
        """The trial of an idea out of play. TPE: complete with its top-tier value if it was
        decided there, else pruned at the highest tier it was decided at, its value at each
        tier as intermediate values: Optuna's own multi-fidelity reading (a trial that got
        further ranks better), the one its Hyperband pruner gives TPE. (A trial per tier as
        soon as each verdict came, or complete trials at every tier, did worse in bench.search
        on the low-correlation problems.) GP reads complete trials only: complete, with the
        value at the highest tier decided.

        A second look (agents/second_look.py) enters above tier 0, so it has no value below its
        entry tier. Rejected there, it passed no gate at all, yet as a trial pruned at its
        entry tier it would rank above every tier-0 reject (Optuna ranks pruned trials by the
        step they reached first), and TPE would read a failure as one of its best points. It
        is pruned with no values instead: the worst rank."""
        by_tier = tier_values(finding, desk)
        # A crash where a spot check sent it (spot_checks.py) is no value there: it stays the
        # reject it was one tier down, not a trial that got further than the tier-0 rejects.
        crashed_here = finding.failed and finding.tier - 1 not in spot_checked(finding)
        if crashed_here and finding.tier not in by_tier and self._high is not None:
            by_tier[finding.tier] = (finding.champion_version, self._high)  # a crash: the worst
        if not by_tier:
            return  # refused or stale before any verdict: nothing was measured
        highest = max(by_tier)
        version, value = by_tier[highest]
        params = self._params(finding, version, desk, space)
        if params is None:
            return
        for _, v in by_tier.values():
            self._low = v if self._low is None else min(self._low, v)
            self._high = v if self._high is None else max(self._high, v)
        steps = {t: v for t, (_, v) in by_tier.items()}
        if self.sampler is Sampler.GP:
            self._add(params, TrialState.COMPLETE, value)
        elif highest >= desk.top_tier:
            del steps[highest]
            self._add(params, TrialState.COMPLETE, value, steps)
        elif min(by_tier) > 0 and len(by_tier) == 1:
            self._add(params, TrialState.PRUNED)  # a second look that failed where it entered
        else:
            self._add(params, TrialState.PRUNED, None, steps)

    def _add(
        self,
        params: dict[str, object],
        state: TrialState,
        value: float | None = None,
        steps: dict[int, float] | None = None,
    ) -> int:
        trial = create_trial(
            state=state,
            params=params,
            distributions=self._distributions,
            value=value,
            intermediate_values=steps,
        )
        self._study.add_trial(trial)
        self._next += 1
        return self._next - 1

    def _params(
        self, finding: Finding, version: int, desk: Desk, space: SearchSpace
    ) -> dict[str, object] | None:
        """The idea's point as the study's params; None if a value has no place in the space
        (a choice it does not list) or its champion is unknown."""
        values = point_of(finding, version, desk, space)
        return None if values is None else _as_params(space, values)


class ModelBrain:
    """A researcher's brain that asks the host's shared ModelSearch."""

    def __init__(self, search: ModelSearch) -> None:
        self.search = search
        self.label = search.sampler.value

    @property
    def persona(self) -> Persona | None:
        return None

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt:
        try:
            return self.search.propose(desk, idea_id)
        except SpaceError as exc:  # the recipe's own declaration: say so, and look again later
            return Attempt(None, why_not=f"the recipe's search space: {exc}", failed=True)
        except (ValueError, OverflowError, MemoryError, RecursionError) as exc:
            # What the recipe holds is data an agent wrote: a value this search cannot hold
            # is a refused attempt with the reason, never a crash of the host.
            why = f"the recipe's values: {type(exc).__name__}: {str(exc)[:200]}"
            return Attempt(None, why_not=why, failed=True)
