"""Surrogate screening: draw several candidates from a brain, send the one a model rates best.

The pattern behind the strongest published result on autoresearch-style loops: a proposer (an
LLM, or the heuristic personas) is cheap next to an experiment, so it suggests several recipes
and a surrogate fitted to every finding picks which one runs. The surrogate is a Gaussian
process (scikit-learn) over the recipe's search space (agents/search_space.py), trained on the
ideas out of play with the value each reached at its highest tier (agents/finding_values.py);
candidates are ranked by expected improvement over the best value seen. The diversity rule:
a candidate closer than `min_distance` (in the space's unit cube, per dimension) to an idea
still in play is passed over while another candidate is not, so parallel researchers do not
spend trainers on the same corner.

The surrogate sees constants only: an edit to the code is invisible to it, so a candidate that
changes only code is rated as the champion's constants are. Model brains (tpe, gp) are not
screened: their proposals already come from a surrogate.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from agents.brain import Desk, Proposal
from agents.finding_values import out_of_play, point_of, tier_values
from agents.search_space import SearchSpace, space_of
from recipes.constants import constants

MIN_POINTS = 5  # below this many measured ideas the model rates nothing: the brain's order holds
MAX_POINTS = 300  # the most recent measured ideas it is fitted to (a GP fit is cubic in them)
REFIT_EVERY = 10  # measured ideas between two fits


@dataclass(frozen=True, slots=True)
class Choice:
    index: int  # of the candidate to send
    note: str  # why, for the trace
    ratings: tuple[float | None, ...]  # each candidate's expected improvement (None: no model)


class Screen:
    """One per agents host; refits only when the measured ideas change."""

    def __init__(self, candidates: int, seed: int = 0, min_distance: float = 0.05) -> None:
        if candidates < 1:
            raise ValueError(f"screening draws at least one candidate, got {candidates}")
        self.candidates = candidates
        self.seed = seed
        self.min_distance = min_distance
        self._fitted: tuple[object, GaussianProcessRegressor, float] | None = None

    def pick(self, desk: Desk, proposals: Sequence[Proposal]) -> Choice:
        space = space_of(desk.source, desk.fixed)
        model = self._model(desk, space)
        if model is None or not space.dimensions:
            return Choice(0, "too few measured ideas to rate candidates", (None,) * len(proposals))
        gp, best = model
        points = np.array([space.unit(space.values_of(constants(p.source))) for p in proposals])
        mean, std = gp.predict(points, return_std=True)
        ei = _expected_improvement(mean, std, best)
        busy = self._in_play(desk, space)
        width = math.sqrt(points.shape[1])
        crowded = [
            bool(busy.size)
            and float(np.min(np.linalg.norm(busy - x, axis=1))) / width < self.min_distance
            for x in points
        ]
        order = sorted(range(len(proposals)), key=lambda i: (crowded[i], -ei[i]))
        index = order[0]
        note = (
            f"screened {len(proposals)} candidates by expected improvement "
            f"({', '.join(f'{e:.3g}' for e in ei)}); sent #{index + 1}"
        )
        if crowded[index]:
            note += " (every candidate is close to an idea in play)"
        elif any(crowded):
            note += f"; {sum(crowded)} passed over, close to ideas in play"
        return Choice(index, note, tuple(float(e) for e in ei))

    def _model(
        self, desk: Desk, space: SearchSpace
    ) -> tuple[GaussianProcessRegressor, float] | None:
        xs, ys = [], []
        for finding in desk.findings:
            if finding.code_changed or not out_of_play(finding, desk.top_tier):
                continue
            values = tier_values(finding, desk)
            if not values:
                continue
            version, y = values[max(values)]
            point = point_of(finding, version, desk, space)
            if point is not None:
                xs.append(space.unit(point))
                ys.append(y)
        measured = len(ys)
        xs, ys = xs[-MAX_POINTS:], ys[-MAX_POINTS:]
        if len(ys) < MIN_POINTS:
            return None
        # A fit takes seconds at a few hundred points (one length scale per dimension), so it
        # is redone only after REFIT_EVERY new measurements or a new champion, not per proposal.
        # Counted before the cut to MAX_POINTS: past it, the fitted count no longer grows.
        key = (desk.version, measured // REFIT_EVERY, space)
        if self._fitted is not None and self._fitted[0] == key:
            return self._fitted[1], self._fitted[2]
        kernel = ConstantKernel(1.0) * Matern(
            length_scale=np.full(len(xs[0]), 0.3), length_scale_bounds=(1e-2, 1e2), nu=2.5
        ) + WhiteKernel(1e-3, (1e-8, 1.0))
        gp = GaussianProcessRegressor(kernel, normalize_y=True, random_state=self.seed)
        with warnings.catch_warnings():  # a bound reached while fitting is not our error
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(np.array(xs), np.array(ys))
        self._fitted = (key, gp, min(ys))
        return gp, min(ys)

    def _in_play(self, desk: Desk, space: SearchSpace) -> np.ndarray:
        points = []
        for finding in desk.findings:
            if finding.code_changed or out_of_play(finding, desk.top_tier):
                continue
            point = point_of(finding, finding.champion_version, desk, space)
            if point is not None:
                points.append(space.unit(point))
        return np.array(points)


def _expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    """Of values below `best` (lower is better)."""
    std = np.maximum(std, 1e-12)
    z = (best - mean) / std
    ei: np.ndarray = (best - mean) * norm.cdf(z) + std * norm.pdf(z)
    return ei
