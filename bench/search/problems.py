"""Benchmark problems for the search methods of sim.py: a synthetic multi-fidelity recipe with a
known optimum, real learning curves from LCDB (Mohr et al., 2022), and MF-Hartmann (hartmann.py).

All give every evaluation a fixed seed, so a paired comparison on the same seed cancels the
seed's share of the noise, as it does in real training.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import random
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.search.hartmann import PRESETS, HartmannProblem
from bench.search.sim import Config, Param, Problem

# The synthetic recipe: six constants, as the recipe file names them.
SYNTHETIC_PARAMS = (
    Param("LR", 1e-4, 1e-1),
    Param("WEIGHT_DECAY", 1e-3, 1.0),
    Param("WARMUP_FRACTION", 1e-3, 0.5),
    Param("BETA2", 0.9, 0.999, log=False),
    Param("INIT_SCALE", 0.1, 10.0),
    Param("MLP_RATIO", 1.0, 8.0),
)
SYNTHETIC_DEFAULT: dict[str, float] = {
    "LR": 1e-3,
    "WEIGHT_DECAY": 0.1,
    "WARMUP_FRACTION": 0.05,
    "BETA2": 0.95,
    "INIT_SCALE": 1.0,
    "MLP_RATIO": 4.0,
}
_BASE = 2.0  # the optimum's loss, about a small LM's nats per token
_TOP_OPTIMUM = np.array([0.62, 0.35, 0.35, 0.80, 0.45, 0.40])  # inside the box, off the default
_CURVATURE = np.array([3.0, 1.5, 1.0, 0.8, 1.2, 0.6])  # LR matters most, MLP_RATIO least
# Small short runs prefer a higher LR, less warmup, less decay and a lower beta2, and they hardly
# notice regularisation or capacity: their bowl is centred and shaped differently.
_LOW_OPTIMUM = np.array([0.90, 0.10, 0.05, 0.40, 0.60, 0.20])
_LOW_CURVATURE = np.array([6.0, 0.3, 2.0, 0.3, 0.3, 0.1])
_LR_WD = 1.5  # LR and WEIGHT_DECAY act through their product: raising both costs extra
_PENALTY = 1.0  # per normalised unit outside the box; the clamped loss is flat out there


def _normalise(param: Param, value: float) -> float:
    if param.log:
        return math.log(max(value, 1e-300) / param.low) / math.log(param.high / param.low)
    return (value - param.low) / (param.high - param.low)


def _denormalise(param: Param, u: float) -> float:
    if param.log:
        return float(param.low * (param.high / param.low) ** u)
    return param.low + (param.high - param.low) * u


def _bowl(u: np.ndarray, optimum: np.ndarray, curvature: np.ndarray = _CURVATURE) -> np.ndarray:
    """Unscaled quadratic bowl over the last axis of `u`; zero at `optimum`."""
    d = u - optimum
    bowl: np.ndarray = (d**2 * curvature).sum(axis=-1) + _LR_WD * d[..., 0] * d[..., 1]
    return bowl


_DEFAULT_U = np.array([_normalise(p, SYNTHETIC_DEFAULT[p.name]) for p in SYNTHETIC_PARAMS])
_SCALE = 0.3 / float(_bowl(_DEFAULT_U, _TOP_OPTIMUM))  # the default's regret is 0.3


def _gauss(*key: object) -> float:
    """A standard normal fixed by `key` (random.Random hashes a str with SHA-512: stable)."""
    return random.Random("/".join(map(str, key))).gauss(0.0, 1.0)


class SyntheticProblem:
    """f(u) = base + scale * bowl(u - u*) at the top rung; rung k mixes in a bowl g with another
    optimum, f_k = offset_k + (1 - m_k) f + m_k g with m_k = (1 - correlation) (top - k) / top,
    and offset_k > 0 below the top (small runs end higher). Bad configs are bad at every rung, so
    the rank correlation obtained exceeds `correlation` (0.7 gives 0.83 at rung 0, 0.0 gives
    0.55): report fidelity_correlation(), not the knob."""

    params: tuple[Param, ...] = SYNTHETIC_PARAMS
    rung_costs: tuple[float, ...] = (1.0, 3.0, 9.0)
    deterministic_rungs: tuple[int, ...] = ()  # noise at every rung

    def __init__(self, correlation: float = 0.7, noise: float = 1.0) -> None:
        self.correlation = correlation
        self.noise = noise
        self.name = f"synthetic(rho={correlation:g}" + (
            f", noise x{noise:g})" if noise != 1 else ")"
        )
        self.default: Config = dict(SYNTHETIC_DEFAULT)
        top = len(self.rung_costs) - 1
        self._mix = [
            (1.0 - min(max(correlation, 0.0), 1.0)) * (top - k) / top for k in range(top + 1)
        ]
        self._offset = [0.3 * (top - k) for k in range(top + 1)]  # smaller runs end higher

    def _u(self, config: Config) -> tuple[np.ndarray, float]:
        """Clamped normalised coordinates, and the penalty for any distance outside the box."""
        raw = np.array([_normalise(p, float(config[p.name])) for p in self.params])
        u = np.clip(raw, 0.0, 1.0)
        return u, _PENALTY * float(np.abs(raw - u).sum())

    def loss_u(self, u: np.ndarray, rung: int) -> np.ndarray:
        """Noise-free loss at `rung` for normalised points `u` (shape (..., 6))."""
        top, low = _bowl(u, _TOP_OPTIMUM), _bowl(u, _LOW_OPTIMUM, _LOW_CURVATURE)
        mix = self._mix[rung]
        return self._offset[rung] + _BASE + _SCALE * ((1.0 - mix) * top + mix * low)

    def noise_free(self, config: Config, rung: int) -> float:
        u, penalty = self._u(config)
        return float(self.loss_u(u, rung)) + penalty

    def evaluate(self, config: Config, rung: int, seed: int) -> float:
        key = ",".join(f"{p.name}={float(config[p.name])!r}" for p in self.params)
        # Seed noise, shared by every config on that seed, plus a config-specific part.
        noise = 0.02 * _gauss("seed", seed, rung) + 0.01 * _gauss("run", key, seed, rung)
        return self.noise_free(config, rung) + self.noise * noise

    def true_loss(self, config: Config) -> float:
        return self.noise_free(config, len(self.rung_costs) - 1)

    def best_loss(self) -> float:
        return _BASE

    def optimum(self) -> Config:
        return {p.name: _denormalise(p, u) for p, u in zip(self.params, _TOP_OPTIMUM, strict=True)}


# LCDB: 20 sklearn learners on 248 OpenML datasets, many (outer, inner) split replicates.
_NEARLY_ALL = 18  # the top rung is the largest anchor where at least this many learners ran
_RUNG_RATIO = 4.0
# Complete for all 20 learners at the 3 rungs, 25+ replicates, LogisticRegression not the best,
# and rung-0 rankings that differ from the top's by different amounts (Spearman of mean losses):
# 6 letter (anchors 1024/4096/16200, rho 0.94, ExtraTrees best, LogReg regret 0.21),
# 1485 madelon (128/512/2106, rho 0.77, DecisionTree best, regret 0.21),
# 11 balance-scale (32/128/505, rho 0.56, SVC_poly best, regret 0.14).
LCDB_DATASETS = (6, 1485, 11)
_LOGREG = "sklearn.linear_model.LogisticRegression"


def lcdb_available() -> bool:
    return importlib.util.find_spec("lcdb") is not None and _lcdb_csv().exists()


def _lcdb_csv() -> Path:
    spec = importlib.util.find_spec("lcdb")
    assert spec is not None and spec.origin is not None, "lcdb is not installed"
    return Path(spec.origin).parent / "database-accuracy.csv"


@functools.cache
def _lcdb_rows(openmlid: int) -> tuple[tuple[str, int, float, float], ...]:
    """(learner, size_train, score_valid, score_test) of one dataset, replicates in seed order."""
    import duckdb  # the CSV is 150 MB: filter in SQL, never load it whole

    query = (
        "select learner, size_train, score_valid, score_test from read_csv_auto(?) "
        "where openmlid = ? order by learner, size_train, outer_seed, inner_seed"
    )
    with duckdb.connect() as db:
        return tuple(db.execute(query, [str(_lcdb_csv()), openmlid]).fetchall())


class LcdbProblem:
    """Pick one of 20 learners; rung k trains it on the k-th anchor's size_train examples."""

    def __init__(self, openmlid: int, rungs: int = 3) -> None:
        self.name = f"lcdb(openml {openmlid})"
        runs: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
        for learner, size, valid, test in _lcdb_rows(openmlid):
            runs[learner, size].append((1.0 - valid, 1.0 - test))
        if not runs:
            raise ValueError(f"LCDB has no rows for openml {openmlid}")
        learners = tuple(sorted({learner for learner, _ in runs}))
        ran: dict[int, int] = defaultdict(int)  # learners with results, per anchor
        for _, size in runs:
            ran[size] += 1
        anchors = sorted(ran)
        self.anchors = [max(s for s in anchors if ran[s] >= min(_NEARLY_ALL, len(learners)))]
        for k in range(1, rungs):
            below = [s for s in anchors if s < self.anchors[0]]
            if not below:
                raise ValueError(f"openml {openmlid} has too few anchors for {rungs} rungs")
            target = math.log(self.anchors[-1] / _RUNG_RATIO**k)
            self.anchors.insert(0, min(below, key=lambda s: abs(math.log(s) - target)))
        self.params: tuple[Param, ...] = (Param("LEARNER", choices=learners),)
        self.default: Config = {"LEARNER": _LOGREG}
        self.rung_costs = tuple(s / self.anchors[0] for s in self.anchors)
        self.deterministic_rungs: tuple[int, ...] = ()  # a seed picks one of the replicates
        self._runs = {
            (learner, rung): runs.get((learner, size), [])
            for learner in learners
            for rung, size in enumerate(self.anchors)
        }

    def _replicates(self, config: Config, rung: int) -> list[tuple[float, float]]:
        key = (str(config["LEARNER"]), rung)
        if key not in self._runs:
            raise KeyError(f"{self.name} has no learner {key[0]!r}")
        return self._runs[key]

    def evaluate(self, config: Config, rung: int, seed: int) -> float:
        reps = self._replicates(config, rung)
        return reps[seed % len(reps)][0] if reps else 1.0  # no row: the learner failed there

    def noise_free(self, config: Config, rung: int) -> float:
        reps = self._replicates(config, rung)
        return sum(valid for valid, _ in reps) / len(reps) if reps else 1.0

    def true_loss(self, config: Config) -> float:
        reps = self._replicates(config, len(self.anchors) - 1)
        return sum(test for _, test in reps) / len(reps) if reps else 1.0

    def best_loss(self) -> float:
        return min(self.true_loss({"LEARNER": c}) for c in self.params[0].choices)


def _ranks(values: np.ndarray) -> np.ndarray:
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    for value in np.unique(values):  # ties share their mean rank
        ranks[values == value] = ranks[values == value].mean()
    return ranks


def fidelity_correlation(
    problem: SyntheticProblem | HartmannProblem | LcdbProblem,
    rung: int = 0,
    n: int = 500,
    seed: int = 0,
) -> float:
    """Spearman correlation of noise-free losses at `rung` and at the top rung: over n random
    configs (synthetic, MF-Hartmann), or over all learners (LCDB)."""
    top = len(problem.rung_costs) - 1
    if isinstance(problem, SyntheticProblem | HartmannProblem):
        u = np.random.default_rng(seed).random((n, len(problem.params)))
        low, high = problem.loss_u(u, rung), problem.loss_u(u, top)
    else:
        configs = [{"LEARNER": c} for c in problem.params[0].choices]
        low = np.array([problem.noise_free(c, rung) for c in configs])
        high = np.array([problem.noise_free(c, top) for c in configs])
    return float(np.corrcoef(_ranks(low), _ranks(high))[0, 1])


_SPECS = (
    "synthetic[:<correlation>[:<noise>]], "
    f"mfh3:<preset> or mfh6:<preset> (preset: {'|'.join(PRESETS)}), lcdb:<openml id>"
)


def make_problem(spec: str) -> Problem:
    """ "synthetic", "synthetic:<correlation>", "synthetic:<correlation>:<noise>" (a multiple
    of the default seed noise), "mfh3:<preset>", "mfh6:<preset>" or "lcdb:<openmlid>"."""
    kind, _, arg = spec.partition(":")
    try:
        if kind == "synthetic":
            correlation, _, noise = arg.partition(":")
            return SyntheticProblem(float(correlation or 0.7), float(noise or 1.0))
        if kind in ("mfh3", "mfh6") and arg in PRESETS:
            return HartmannProblem(int(kind[3]), arg)
        if kind == "lcdb" and arg.isdigit():
            if not lcdb_available():
                raise ValueError("lcdb is not installed (the bench extra)")
            return LcdbProblem(int(arg))
    except ValueError as error:  # a bad number, or an id LCDB lacks: say which spec
        raise ValueError(f"problem spec {spec!r}: {error}") from error
    raise ValueError(f"unknown problem spec {spec!r}; accepted: {_SPECS}")
