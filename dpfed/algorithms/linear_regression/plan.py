"""The linear-regression release plan, from the job's public parameters and schema alone: the encoding of a
record, the layout of the released integer vector, its weights and sensitivities, the noise and the event
the party charges.

Encoding (a pure function of the public schema, :class:`Layout`). A record becomes
u = (x~_1..x~_P, dummies, 1) / B: each numeric feature clamped to its public bounds and rescaled to
x~ = 2 (x - lo) / (hi - lo) - 1 in [-1, 1]; each categorical feature as m - 1 dummies (code 0 the reference;
at most one is 1); the intercept 1; B^2 = P + C + 1 (C categorical features), so ||u||_2 <= 1. The target
is clamped to its public bounds and rescaled to y~ in [-1, 1].

Statistics (sufficient statistics perturbation; Vu & Slavkovic 2009, Wang AISTATS 2018 Alg. 2 "AdaSSP"):
the upper triangle of X^T X = sum u u^T, X^T y = sum u y~, y^T y = sum y~^2, the count n, and for
``method = "adassp"`` the party's lambda_min(X_p^T X_p). Every group g is put on an integer grid with weight
W_g = round(G w_g) (G = 2^16 units, relative weights :data:`WEIGHTS`): a record adds round(W_g s) to each
entry s of its own statistics, integers before any sum (so the party's vector is exact).

Sensitivity (add/remove one record). The record's exact contribution has ||tri(u u^T)||_2 <= ||u||^2 <= 1,
||u y~||_2 <= 1, y~^2 <= 1 and 1: L2 at most sqrt(sum_g W_g^2); each of the R rounded entries moves by at
most 1/2 more: Delta_2 = sqrt(sum W_g^2) (1 + 1e-9) + sqrt(R) / 2. L1: sum_{i<=j} |u_i u_j| <= (D + 1) / 2,
||u||_1 <= sqrt(D): Delta_1 = W_xx (D + 1) / 2 + W_xy sqrt(D) + W_yy + W_n + R / 2. lambda_min (AdaSSP's
data-adaptive ridge): by Weyl's inequality one record moves lambda_min(X^T X) by at most ||u||^2 <= 1; the
party computes it from its integer triangle / W_xx (each entry within 1/(2 W_xx) of the exact sum, so at most
D / (2 W_xx) more in spectral norm), rounds it once (1/2), and the eigensolver's backward error is far
below a grid unit for n D <= 2^40: Delta_l = W_l (1 + D / (2 W_xx)) + 2. The vector's L2 sensitivity is
sqrt(Delta_2^2 + Delta_l^2), its L1 sensitivity Delta_1 + Delta_l.

Mechanisms and accounting. ``adassp``: one Gaussian on the weighted vector, sigma = z Delta (z the
smallest multiplier meeting (epsilon, delta) under PLD), charged as ``GaussianDpEvent(z)``: the release is a
post-processing of the continuous Gaussian mechanism (integer vector + round(sigma Z)). One Gaussian on a
weighted vector is the budget split: group g gets the share W_g^2 / sum W^2 of the zCDP rho, i.e. with
:data:`WEIGHTS` X^T X 44 %, X^T y 44 %, lambda_min 11 %, y^T y and n 0.4 % each (Wang's Alg. 2 splits
(epsilon, delta) in three equal parts; lambda_min needs less here because it only picks lambda).
``functional`` (Zhang et al., VLDB 2012, the functional mechanism: Laplace noise on the coefficients of the
quadratic objective sum (y~ - u theta)^2, i.e. on the same statistics without lambda_min): discrete Laplace
with the integer L1 sensitivity, pure epsilon-DP, charged as ``DiscreteLaplaceDpEvent(epsilon, 1)`` as naive
Bayes does. Distributed noise (:mod:`.secure`): the same vector as integer rows under secure aggregation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec
from dpfed.core import accounting
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["TASK_KIND", "METHODS", "WEIGHTS", "GRID", "MAX_DIMENSION", "MAX_SIGMA_UNITS", "Layout", "LRPlan",
           "job_method", "local_plan", "sensitivities"]

TASK_KIND = "lr-statistics"
METHODS = ("adassp", "functional")
#: Relative weights of the groups: X^T X, X^T y, y^T y, n, lambda_min (the budget split, module docstring).
WEIGHTS = {"xx": 1.0, "xy": 1.0, "yy": 0.1, "n": 0.1, "lmin": 0.5}
GRID = 1 << 16            # integer units per unit weight
MAX_DIMENSION = 256       # encoded columns D (a resource cap: the triangle has D (D + 1) / 2 entries)
MAX_SIGMA_UNITS = float(1 << 40)  # rounded-Gaussian std in grid units (the sampler's range)


@dataclass(frozen=True)
class Layout:
    """The encoding of records and the layout of the released vector (a pure function of the public schema)."""

    num_cols: np.ndarray      # numeric feature columns
    lower: np.ndarray
    upper: np.ndarray
    cat_cols: np.ndarray      # categorical columns
    sizes: np.ndarray         # their domain sizes m_j (m_j - 1 dummies each)
    y_lower: float
    y_upper: float
    dimension: int            # D = P + sum (m_j - 1) + 1 (intercept last)
    scale: float              # B = sqrt(P + C + 1): ||u||_2 <= 1
    lmin: bool                # the vector carries lambda_min (AdaSSP)

    @classmethod
    def from_schema(cls, schema: Schema, method: str = "adassp") -> "Layout":
        if schema.target is None:
            raise ValueError("linear regression needs a schema with a numeric target (\"target\": {name, lower, "
                             "upper})")
        num, cat = np.flatnonzero(schema.numeric), np.flatnonzero(schema.categorical)
        sizes = schema.domain_sizes
        dim = len(num) + int(np.sum(np.maximum(sizes - 1, 0))) + 1
        if dim > MAX_DIMENSION:
            raise ValueError(f"linear regression would encode {dim} columns, more than the cap {MAX_DIMENSION}")
        return cls(num, schema.lower, schema.upper, cat, sizes, float(schema.target.lower),
                   float(schema.target.upper), dim, math.sqrt(len(num) + len(cat) + 1), method == "adassp")

    @property
    def n_tri(self) -> int:
        return self.dimension * (self.dimension + 1) // 2

    @property
    def length(self) -> int:
        """Entries of the vector: triangle, X^T y, y^T y, n (and lambda_min)."""
        return self.n_tri + self.dimension + 2 + int(self.lmin)

    @property
    def offsets(self) -> dict[str, int]:
        t, d = self.n_tri, self.dimension
        return {"xx": 0, "xy": t, "yy": t + d, "n": t + d + 1, "lmin": t + d + 2}


@dataclass(frozen=True)
class LRPlan:
    """The release plan: method, integer weights, sensitivities, noise, and the event the party charges."""

    method: str               # "adassp" (Gaussian) or "functional" (discrete Laplace); "ddgauss" shares: secure
    weights: dict             # integer grid units per group (xx, xy, yy, n, lmin)
    l2: float                 # L2 sensitivity of the integer vector
    l1: float                 # its L1 sensitivity
    noise: float              # Gaussian sigma (or one share's) or discrete Laplace scale t, grid units
    noise_var: float          # noise variance per entry of ONE release (one share), grid units^2
    event: dp_event.DpEvent


def integer_weights(lmin: bool) -> dict:
    return {k: int(round(GRID * w)) for k, w in WEIGHTS.items() if k != "lmin" or lmin}


def sensitivities(layout: Layout, weights: dict) -> tuple[float, float]:
    """(L2, L1) sensitivity of the integer vector under add/remove one record (module docstring)."""
    d = layout.dimension
    rounded = layout.n_tri + d + 1                       # entries rounded per record (n is exact)
    w2 = math.sqrt(sum(float(weights[k]) ** 2 for k in ("xx", "xy", "yy", "n")))
    l2 = w2 * (1 + 1e-9) + 0.5 * math.sqrt(rounded)
    l1 = (weights["xx"] * (d + 1) / 2 + weights["xy"] * math.sqrt(d) + weights["yy"] + weights["n"]) * (1 + 1e-9) \
        + 0.5 * rounded
    if layout.lmin:
        dl = weights["lmin"] * (1 + d / (2 * weights["xx"])) + 2.0
        l2, l1 = math.sqrt(l2 ** 2 + dl ** 2), l1 + dl
    return l2, l1


def job_method(spec: JobSpec) -> str:
    method = str(spec.params.get("method", "adassp"))
    if method not in METHODS:
        raise ValueError(f"linear regression method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "adassp" and spec.delta <= 0:
        raise ValueError("AdaSSP adds Gaussian noise: it needs delta > 0 (method functional is pure epsilon-DP)")
    return method


@shared_cache(maxsize=64)
def local_plan(schema_json: str, eps: float, delta: float, method: str) -> LRPlan:
    """The plan when every party adds the full noise (module docstring)."""
    layout = Layout.from_schema(Schema.from_json(schema_json), method)
    weights = integer_weights(layout.lmin)
    l2, l1 = sensitivities(layout, weights)
    if method == "functional":
        sens = math.ceil(l1)
        t = (sens + 1) / eps  # dpfed.core.mechanisms.discrete_laplace's scale for L1 > 4096 (slightly conservative)
        q = math.exp(-1.0 / t)
        return LRPlan("functional", weights, l2, float(sens), t, 2.0 * q / (1.0 - q) ** 2,
                      dp_event.DiscreteLaplaceDpEvent(float(eps), 1))
    z = accounting.gaussian_noise_multiplier(eps, delta, rtol=1e-5)
    sigma = z * l2 * (1.0 + 1e-12)  # rounded_gaussian charges GaussianDpEvent(sigma / l2) >= z
    if sigma > MAX_SIGMA_UNITS:
        raise ValueError(f"epsilon {eps:g} is too small for linear regression's integer release")
    return LRPlan("adassp", weights, l2, l1, sigma, sigma ** 2 + 1.0 / 12.0, dp_event.GaussianDpEvent(float(z)))
