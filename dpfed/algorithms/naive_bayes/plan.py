"""The naive Bayes release plan, from the job's public parameters and schema alone: the layout of the
released vector, the group weights, the mechanism and its noise, and the event the party charges.

Statistics (per class c; Vaidya et al. 2013 "Differentially private naive Bayes classification"):
class counts n_c; for each categorical feature j the class x value histogram n_{c,j,v}; for each
numeric feature the sums S_c = sum x~ and sums of squares Q_c = sum x~^2 of the value clamped to its
public bounds [lo, hi] and rescaled to x~ = 2 (x - lo) / (hi - lo) - 1 in [-1, 1] (centred, so
Q/n - (S/n)^2 cancels little and every group has per-record sensitivity 1).

One vector, one sensitivity. Under add/remove-one a record changes exactly one cell of the class
counts and of each histogram and one row of S and Q, so all G = 1 + C + 2P groups (C categorical,
P numeric features) are released as ONE vector. Group g is scaled by a weight w_g before the noise;
its sensitivity is then w_g and the whole vector has L1 sensitivity sum_g w_g and L2 sensitivity
sqrt(sum_g w_g^2). Minimising the weighted noise variance sum_g a_g Var_g (importance a_g) at fixed
sensitivity gives, by a Lagrange multiplier, w_g ∝ a_g^(1/3) for L1 (Laplace: eps_g ∝ w_g) and
w_g ∝ a_g^(1/4) for L2 (Gaussian). Importance: 1 for counts, histograms and sums S, 4 for the sums of
squares Q, because a variance error enters the log-likelihood scaled by 1/var^2 (a mean error by
1/var), and rescaled variances are well below 1; the value 4 came from a sweep on adult over
{1, 3, 10, 30} (1 and 10 within one standard error). The mechanism is chosen from the job's
(epsilon, delta) and the weights alone: discrete Laplace variance 2 (sum w / eps)^2 against discrete
Gaussian sigma^2 = (z(eps, delta) ||w||_2)^2, z the smallest noise multiplier the PLD accountant
accepts, comparing sum_g a_g Var_g; delta = 0 always means Laplace (pure DP). The L2 norm grows like
sqrt(G) and the L1 norm like G, so with delta > 0 Gaussian wins unless G or eps is small (nursery at
eps 2 picks Laplace).

Integer release. Counts are integers; x~ and x~^2 go on a fixed-point grid (R = 2^16 units per unit
weight; each record's value is rounded, |round(R w x~)| <= R w, so the integer sensitivity is exact)
and the noise is the exact discrete Laplace of Canonne, Kamath & Steinke 2020 or the exactly sampled
rounded Gaussian round(sigma Z) (:mod:`dpfed.core.mechanisms`), so no floating point touches the release. The charged event: pure eps-DP
as ``DiscreteLaplaceDpEvent(eps, 1)``, whose privacy-loss distribution (+-eps) is the binary
randomized-response pair that dominates every eps-DP mechanism (Kairouz, Oh & Viswanath 2015), so it
is valid for the vector release at any delta; the Gaussian as ``GaussianDpEvent(z)`` with sigma = z D
(D the L2 sensitivity): integer statistics plus round(sigma Z) are a post-processing of the continuous
Gaussian mechanism, so the mechanism's own event ``GaussianDpEvent(sigma / D)`` is exact;
``answer`` checks that it is >= z before anything leaves.

Default delta = 1e-6 (``default_delta``). The job is one release, so the Gaussian's only advantage is
L2 against L1; with adult's G = 21 groups it cuts the noise std ~1.7x and lifts accuracy at eps 0.1
from 0.80 to 0.81 (bench/results/naive_bayes.md); delta = 1e-6 is far below 1/n. Pure DP is one flag
away (``--delta 0``) and also meets the targets; the estimator ``DPNaiveBayes`` defaults to delta = 0.
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

__all__ = ["TASK_KIND", "MECHANISMS", "DEFAULT_ALPHA", "DEFAULT_VAR_FLOOR", "GRID", "MIN_GRID", "MAX_SIGMA_UNITS",
           "Layout", "NBPlan", "IMPORTANCE_S", "IMPORTANCE_Q", "importance", "optimal_weights", "gaussian_multiplier",
           "discrete_laplace_var", "job_options", "local_plan"]

TASK_KIND = "nb-statistics"
MECHANISMS = ("auto", "laplace", "gaussian")
DEFAULT_ALPHA = 1.0
DEFAULT_VAR_FLOOR = 2e-3
GRID = 1 << 16            # fixed-point units per unit weight (numeric resolution 2^-16 of the half range)
MIN_GRID = 1 << 10
MAX_SIGMA_UNITS = 1 << 26  # rounded-Gaussian std in grid units (its float filter decides ~all draws)


@dataclass(frozen=True)
class Layout:
    """Where each statistic sits in the released vector (a pure function of the public schema)."""

    k: int
    cat_cols: np.ndarray      # column indices of categorical features
    sizes: np.ndarray         # their domain sizes m_j
    hist_off: np.ndarray      # offset of histogram j in the vector (block of k * m_j, index c*m_j+v)
    num_cols: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    s_off: int                # S block: k * P entries, index c*P + f
    q_off: int
    length: int
    names: tuple[str, ...] = ()

    @classmethod
    def from_schema(cls, schema: Schema) -> "Layout":
        k = int(schema.n_classes)
        if k < 1:
            raise ValueError("naive Bayes needs a labelled schema (n_classes >= 1)")
        cat_cols = np.flatnonzero(schema.categorical)
        sizes = schema.domain_sizes
        hist_off = k + np.concatenate([[0], np.cumsum(k * sizes)[:-1]]).astype(np.int64) if len(sizes) else \
            np.zeros(0, np.int64)
        end = k + int((k * sizes).sum())
        p = int(schema.numeric.sum())
        return cls(k, cat_cols, sizes, hist_off, np.flatnonzero(schema.numeric), schema.lower, schema.upper,
                   end, end + k * p, end + 2 * k * p, tuple(schema.names))

    @property
    def n_groups(self) -> int:
        return 1 + len(self.cat_cols) + 2 * len(self.num_cols)

    def group_of_entries(self) -> np.ndarray:
        """Group index of every vector entry: 0 counts, 1..C histograms, then S_f, then Q_f."""
        c, p, k = len(self.cat_cols), len(self.num_cols), self.k
        parts = [np.zeros(k, np.int64)] + [np.full(k * int(m), 1 + j, np.int64) for j, m in enumerate(self.sizes)]
        parts.append(np.tile(1 + c + np.arange(p), k))
        parts.append(np.tile(1 + c + p + np.arange(p), k))
        return np.concatenate(parts)


@dataclass(frozen=True)
class NBPlan:
    """The release plan: mechanism, integer weights, noise, and the event the party charges."""

    mechanism: str            # "laplace" or "gaussian"
    weights: np.ndarray       # integer grid units per group (length G)
    l1: int                   # integer L1 sensitivity of the weighted vector
    l2: float                 # its L2 sensitivity
    noise: float              # Laplace scale t (P(x) ∝ exp(-|x|/t)) or Gaussian sigma, in grid units
    noise_var: float          # noise variance per entry, grid units^2
    event: dp_event.DpEvent


#: Importance of the noise variance of S and Q relative to a count group (see the module docstring).
IMPORTANCE_S = 1.0
IMPORTANCE_Q = 4.0


def importance(layout: Layout) -> np.ndarray:
    """Importance a_g of each group's noise variance (counts, histograms, S_f, Q_f)."""
    c, p = len(layout.cat_cols), len(layout.num_cols)
    return np.concatenate([np.ones(1 + c), np.full(p, IMPORTANCE_S), np.full(p, IMPORTANCE_Q)])


def optimal_weights(importance: np.ndarray, norm: str) -> np.ndarray:
    """w_g minimising sum a_g / w_g^2 at fixed L1 (w ∝ a^(1/3)) or L2 (w ∝ a^(1/4)) norm; max 1."""
    w = importance ** (1 / 3 if norm == "l1" else 1 / 4)
    return w / w.max()


def gaussian_multiplier(epsilon: float, delta: float) -> float:
    """Smallest noise multiplier z (to 1e-5 relative) with PLD epsilon(GaussianDpEvent(z), delta) <= epsilon:
    :func:`dpfed.core.accounting.gaussian_noise_multiplier` (the one calibration, cached), against the
    (pessimistic) PLD accountant that the ledger uses, so the charge never exceeds the job's epsilon."""
    return accounting.gaussian_noise_multiplier(epsilon, delta, rtol=1e-5)


def discrete_laplace_var(t: float) -> float:
    """Variance of P(x) ∝ exp(-|x|/t) on Z: 2 e^(-1/t) / (1 - e^(-1/t))^2."""
    q = math.exp(-1.0 / t)
    return 2.0 * q / (1.0 - q) ** 2


def job_options(spec: JobSpec) -> tuple[str, float, float]:
    mech = str(spec.params.get("mechanism", "auto"))
    if mech not in MECHANISMS:
        raise ValueError(f"naive Bayes mechanism must be one of {', '.join(MECHANISMS)}, got {mech!r}")
    alpha = float(spec.params.get("alpha", DEFAULT_ALPHA))
    floor = float(spec.params.get("var_floor", DEFAULT_VAR_FLOOR))
    if not (alpha >= 0 and math.isfinite(alpha)):
        raise ValueError("naive Bayes alpha (smoothing) must be a finite number >= 0")
    if not 0 < floor <= 1:
        raise ValueError("naive Bayes var_floor must lie in (0, 1] (units of the rescaled range)")
    return mech, alpha, floor


@shared_cache(maxsize=64)
def local_plan(schema_json: str, eps: float, delta: float, mech: str) -> NBPlan:
    layout = Layout.from_schema(Schema.from_json(schema_json))
    a = importance(layout)
    if mech == "gaussian" and delta == 0:
        raise ValueError("the Gaussian mechanism needs delta > 0; use mechanism 'laplace' for pure DP")
    candidates = []
    if mech in ("auto", "laplace"):
        w = optimal_weights(a, "l1")
        # relative variance at unit weight 1: 2 (sum w / eps)^2, per group divided by w_g^2
        candidates.append(("laplace", w, float(np.sum(a * 2 * (w.sum() / eps) ** 2 / w ** 2))))
    if mech in ("auto", "gaussian") and delta > 0:
        w = optimal_weights(a, "l2")
        z = gaussian_multiplier(eps, delta)
        grid = min(GRID, int(MAX_SIGMA_UNITS / (z * np.sqrt(np.sum(w ** 2)))))
        if grid >= MIN_GRID:  # sigma in grid units must stay within the exact sampler's range
            candidates.append(("gaussian", w, float(np.sum(a * (z * np.sqrt(np.sum(w ** 2))) ** 2 / w ** 2))))
        elif mech == "gaussian":
            raise ValueError(f"epsilon {eps:g} is too small for an integer Gaussian release of {layout.n_groups} "
                             "statistic groups; use mechanism 'laplace'")
    name, w, _ = min(candidates, key=lambda c: c[2])
    if name == "laplace":
        weights = np.maximum(np.rint(w * GRID), 1).astype(np.int64)
        l1 = int(weights.sum())
        t = (l1 + 1) / eps  # dpfed.core.mechanisms.discrete_laplace's scale for L1 > 4096 (slightly conservative)
        return NBPlan("laplace", weights, l1, float(np.sqrt(np.sum(weights.astype(float) ** 2))), t,
                      discrete_laplace_var(t), dp_event.DiscreteLaplaceDpEvent(float(eps), 1))
    weights = np.maximum(np.rint(w * grid), 1).astype(np.int64)
    l2 = float(np.sqrt(np.sum(weights.astype(float) ** 2)))
    # dpfed.core.mechanisms.rounded_gaussian charges GaussianDpEvent(sigma / l2) exactly: take sigma so that
    # this multiplier is still >= z (the 1e-12 absorbs its ulp-level rounding). Noise variance of
    # round(sigma Z): sigma^2 + 1/12 up to e^{-2 pi^2 sigma^2} (Sheppard's correction).
    sigma = z * l2 * (1.0 + 1e-12)
    return NBPlan("gaussian", weights, int(weights.sum()), l2, sigma, sigma ** 2 + 1.0 / 12.0,
                  dp_event.GaussianDpEvent(float(z)))
