"""Multi-fidelity Hartmann-3 and Hartmann-6 as benchmark problems for the search methods of sim.py.

The definition follows mf-prior-bench 1.10.0 (PyPI `mf-prior-bench`, import name `mfpbench`,
files `src/mfpbench/synthetic/hartmann/generators.py` and `benchmark.py`), the benchmark suite of
PriorBand (Mallik et al., NeurIPS 2023). The Hartmann functions and their constants are Dixon and
Szegő's (1978); the fidelity's cost model is Kandasamy et al.'s (2017, arXiv:1703.06240, p. 18).

At fidelity z in [1, 100], with s = log z / log 100 (0 at the cheapest, 1 at the top):

    f_z(x) = -sum_i (alpha_i - bias (1 - s)) exp(-sum_j A_ij (x_j - P_ij)^2)
    observed = f_z(x) + noise (1 - s) |N(0, 1)|

so low fidelities are flattened (the bias shrinks every well's depth by the same amount) and
pessimistic (the noise is never negative), and both vanish at z = 100, where f is Hartmann
itself. The presets' (bias, noise) are the package's. A run at fidelity z costs
0.05 + 0.95 (z / 100)^2.

What differs from the package, and why:
- The package draws each evaluation's |N(0, 1)| from a generator seeded by (seed, z, hash(x)),
  independent between configs. Training noise is partly shared: a seed's data order helps or
  hurts every config alike. Here a normal draw sqrt(SHARED) g_seed + sqrt(1 - SHARED) g_run, with
  g_seed shared by every config on a seed and fidelity and g_run the config's own, is mapped
  through its quantile to the half-normal's. Each observation keeps the package's distribution,
  and two configs on one seed have noises correlated about 0.79, so a paired comparison cancels
  much of it. (Folding the draw, |draw|, would keep the distribution too but the correlation only
  about 0.6.)
- Three rungs at z = 25, 55, 100, whose costs under the model above (0.109, 0.337, 1.0) are the
  nearest to 1 : 3 : 9 (ratios 1 : 3.08 : 9.14); rung_costs says 1, 3, 9 like the other problems.
- Inputs outside the unit box are clamped and pay a penalty, so no method gains by leaving it.
- The default (the swarm's first champion) is the package's shipped `at25` prior
  (`src/priors/mfh{3,6}_*-at25.yaml`, the same for every preset) rounded to four decimals: a
  config that looked best at fidelity 25, the kind of recipe tuned on short runs.
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist

import numpy as np

from bench.search.sim import Config, Param

# (bias, noise) of the package's presets, mildest first.
PRESETS: dict[str, tuple[float, float]] = {
    "good": (2.5, 2.0),
    "moderate": (3.0, 3.0),
    "bad": (3.5, 4.0),
    "terrible": (4.0, 5.0),
}
Z_MAX = 100  # the package's fidelities are the integers 1..100
FIDELITIES = (25, 55, 100)  # one per rung: see the module docstring
SHARED = 0.8  # the seed's share of the noise variance, as in SyntheticProblem (0.02 vs 0.01 sd)
_PENALTY = 1.0  # per unit outside the box
_NORMAL = NormalDist()

_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])  # the four wells' depths
_A = {
    3: np.array([[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]]),
    6: np.array(
        [
            [10, 3, 17, 3.5, 1.7, 8],
            [0.05, 10, 17, 0.1, 8, 14],
            [3, 3.5, 1.7, 10, 17, 8],
            [17, 8, 0.05, 10, 0.1, 14],
        ]
    ),
}
_P = {  # the wells' centres
    3: 1e-4
    * np.array([[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547], [381, 5743, 8828]]),
    6: 1e-4
    * np.array(
        [
            [1312, 1696, 5569, 124, 8283, 5886],
            [2329, 4135, 8307, 3736, 1004, 9991],
            [2348, 1451, 3522, 2883, 3047, 6650],
            [4047, 8828, 8732, 5743, 1091, 381],
        ]
    ),
}
_OPTIMUM = {  # the package's optima, to six digits
    3: (0.114614, 0.555649, 0.852547),
    6: (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573),
}
# The global minima at full fidelity, refined with Nelder-Mead and BFGS from those optima; the
# package's bounds (-3.86278, -3.32237) are these rounded, a little low.
_MINIMUM = {3: -3.862779787332663, 6: -3.3223680114155147}
_AT25 = {  # the package's `at25` prior, rounded
    3: (0.0415, 0.5609, 0.9745),
    6: (0.3154, 0.6005, 0.4032, 0.2694, 0.3291, 0.5193),
}


def fidelity_cost(z: float) -> float:
    """The package's cost of one evaluation at fidelity z (1.0 at the top)."""
    return 0.05 + 0.95 * (z / Z_MAX) ** 2


def mf_hartmann(x: np.ndarray, z: float, bias: float) -> np.ndarray:
    """Noise-free MF-Hartmann at fidelity z for points x of shape (..., 3) or (..., 6)."""
    x = np.asarray(x, dtype=float)
    dims = x.shape[-1]
    shortfall = 1.0 - math.log(z) / math.log(Z_MAX)  # 1 - s: 1 at z = 1, 0 at the top
    depth = _ALPHA - bias * shortfall
    distance = (_A[dims] * (x[..., np.newaxis, :] - _P[dims]) ** 2).sum(axis=-1)
    value: np.ndarray = -(depth * np.exp(-distance)).sum(axis=-1)
    return value


def _gauss(*key: object) -> float:
    """A standard normal fixed by `key` (random.Random hashes a str with SHA-512: stable). The
    same construction as problems._gauss, repeated so that problems.py can import this module."""
    return random.Random("/".join(map(str, key))).gauss(0.0, 1.0)


def _half_normal(draw: float) -> float:
    """|N(0, 1)|'s quantile at the standard normal `draw`'s quantile: monotone in the draw."""
    return -_NORMAL.inv_cdf(_NORMAL.cdf(-draw) / 2.0)


class HartmannProblem:
    """MF-Hartmann-3 or -6 with one of the package's presets; params X0, X1, ... on [0, 1]."""

    rung_costs: tuple[float, ...] = (1.0, 3.0, 9.0)
    # the top fidelity has no noise (the package's definition): declared as such to the swarm
    deterministic_rungs: tuple[int, ...] = tuple(
        rung for rung, z in enumerate(FIDELITIES) if z == Z_MAX
    )

    def __init__(self, dims: int = 6, preset: str = "good") -> None:
        if dims not in _A:
            raise ValueError(f"MF-Hartmann has 3 or 6 dimensions, not {dims}")
        if preset not in PRESETS:
            raise ValueError(f"unknown MF-Hartmann preset {preset!r}: {', '.join(PRESETS)}")
        self.dims, self.preset = dims, preset
        self.bias, self.noise = PRESETS[preset]
        self.name = f"mfh{dims}({preset})"
        self.params: tuple[Param, ...] = tuple(
            Param(f"X{i}", 0.0, 1.0, log=False) for i in range(dims)
        )
        self.default: Config = {p.name: v for p, v in zip(self.params, _AT25[dims], strict=True)}

    def _x(self, config: Config) -> tuple[np.ndarray, float]:
        """The config clamped to the box, and the penalty for any distance outside it."""
        raw = np.array([float(config[p.name]) for p in self.params])
        x = np.clip(raw, 0.0, 1.0)
        return x, _PENALTY * float(np.abs(raw - x).sum())

    def loss_u(self, u: np.ndarray, rung: int) -> np.ndarray:
        """Noise-free loss at `rung` for points `u` in the box (shape (..., dims))."""
        return mf_hartmann(u, FIDELITIES[rung], self.bias)

    def noise_free(self, config: Config, rung: int) -> float:
        x, penalty = self._x(config)
        return float(self.loss_u(x, rung)) + penalty

    def evaluate(self, config: Config, rung: int, seed: int) -> float:
        key = ",".join(f"{p.name}={float(config[p.name])!r}" for p in self.params)
        draw = math.sqrt(SHARED) * _gauss("seed", seed, rung) + math.sqrt(1.0 - SHARED) * _gauss(
            "run", key, seed, rung
        )
        shortfall = 1.0 - math.log(FIDELITIES[rung]) / math.log(Z_MAX)
        return self.noise_free(config, rung) + self.noise * shortfall * _half_normal(draw)

    def true_loss(self, config: Config) -> float:
        return self.noise_free(config, len(self.rung_costs) - 1)

    def best_loss(self) -> float:
        return _MINIMUM[self.dims]

    def optimum(self) -> Config:
        """The package's optimum (to six digits): within 1e-5 of best_loss()."""
        return {p.name: v for p, v in zip(self.params, _OPTIMUM[self.dims], strict=True)}
