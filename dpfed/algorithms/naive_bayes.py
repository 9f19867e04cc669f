"""Differentially private naive Bayes: one noisy release of sufficient statistics per party.

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

Distributed noise under secure aggregation (``noise = "distributed"``, ``secure_aggregation``;
:mod:`dpfed.algorithms.secure_noise`, KLS21). Every party sends its integer statistics vector plus
one share N_Z(0, sigma_share^2) of discrete Gaussian noise, mod 2^B, masked by SecAgg; the
coordinator learns only the survivors' sum. Encoding is per party, and this is exact, not an
approximation of per-record encoding: (i) the party's vector is the sum over its records of each
record's integer vector (counts and histogram cells w_g, S entries round(w x~) in [-w, w], Q entries
round(w x~^2) in [0, w]: integers before any sum, so nothing is rounded after summing and no rotation
is applied); (ii) hence adding or removing one record anywhere moves the SecAgg sum by exactly that
record's integer vector v, with ||v||_2 <= ||w||_2 = Delta_2 and ||v||_1 <= sum_g w_g = Delta_1;
(iii) the released sum is (sum of records' vectors) + (sum of >= P_min - c honest shares unknown to
the coordinator and colluders), which is KLS21 Thm. 1 / Prop. 14's distributed discrete Gaussian
on Z^L (L the vector length) with those sensitivities: the event is
``DistributedDiscreteGaussianDpEvent(sigma_share, P_min - c, Delta_2, Delta_1, L)``, accounted by
RDP, sigma_share the smallest meeting (epsilon, delta). Weights are the Gaussian's (w ∝ a^(1/4)).
The modulus: every entry of the sum lies in [-records w_max, records w_max] when ``records`` bounds
the total, so B is the fewest bits >= ``bits`` that also hold the noise of all P shares up to a
union-bounded tail probability of 1e-9 over the L entries (a wrong ``records`` costs accuracy
through wrap-around, never privacy). The plan is :func:`secure_release`.

Default delta = 1e-6 (``default_delta``). The job is one release, so the Gaussian's only advantage is
L2 against L1; with adult's G = 21 groups it cuts the noise std ~1.7x and lifts accuracy at eps 0.1
from 0.80 to 0.81 (bench/results/naive_bayes.md); delta = 1e-6 is far below 1/n. Pure DP is one flag
away (``--delta 0``) and also meets the targets; the estimator ``DPNaiveBayes`` defaults to delta = 0.

Post-processing at the coordinator (no privacy cost; consistency as in Hay et al. 2010): the class
totals are the inverse-variance weighted mean of the direct counts and of every histogram's row sums;
each histogram row is projected (Euclidean) onto {h >= 0, sum_v h_v = n_c} (Duchi et al. 2008, Fig. 1);
Laplace smoothing alpha; Gaussian means clamped to the public range; variances clamped to
[max(var_floor, KAPPA * noise std of Q/n_c), 1] in rescaled units: a variance is not trusted below its
own noise level (a 2.5-point gain at eps 0.1 on adult). ``var_floor`` (default 2e-3, a std of 4.5 % of
the half range) also regularises heavy-tailed features such as adult's capital-loss (non-private
accuracy 0.839 with it, 0.831 without).
"""
from __future__ import annotations

import argparse
import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
from dp_accounting import dp_event

from dpfed.core import accounting
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.estimator import ClassifierScore, EstimatorParams
from dpfed.algorithms.contract import Aggregate, Algorithm, CoordinatorAlgorithm, JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.params import EPSILON, Param, ParamTable, arg_type, delta_param, noise_param
from dpfed.core import distributed_noise as dn
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.clipping import clamp
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import DataValidationError, Feature, Schema
from dpfed.core.memo import shared_cache

__all__ = ["ALGORITHMS", "DPNaiveBayes", "NBPlan", "Layout", "plan_release", "secure_release",
           "sufficient_statistics",
           "postprocess", "simplex_rows", "joint_log_likelihood", "predict", "evaluate",
           "NaiveBayesParty", "NaiveBayesCoordinator", "DataDerivedSchemaWarning"]

TASK_KIND = "nb-statistics"
MECHANISMS = ("auto", "laplace", "gaussian")
DEFAULT_ALPHA = 1.0
DEFAULT_VAR_FLOOR = 2e-3
_GRID = 1 << 16            # fixed-point units per unit weight (numeric resolution 2^-16 of the half range)
_MIN_GRID = 1 << 10
_MAX_SIGMA_UNITS = 1 << 26  # rounded-Gaussian std in grid units (its float filter decides ~all draws)
_EXACT = float(1 << 52)     # float64 sums of integers are exact below this
_CHUNK = 1 << 14            # rows per block (14 float64 columns: 1.8 MB, about an L2 cache)


class DataDerivedSchemaWarning(UserWarning):
    """The estimator derived bounds and classes from the data: the release is then NOT private."""


# --------------------------------------------------------------------------- layout and plan

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
#: A variance is never trusted below KAPPA noise standard deviations of its own estimate.
KAPPA = 1.0


def _importance(layout: Layout) -> np.ndarray:
    """Importance a_g of each group's noise variance (counts, histograms, S_f, Q_f)."""
    c, p = len(layout.cat_cols), len(layout.num_cols)
    return np.concatenate([np.ones(1 + c), np.full(p, IMPORTANCE_S), np.full(p, IMPORTANCE_Q)])


def _optimal_weights(importance: np.ndarray, norm: str) -> np.ndarray:
    """w_g minimising sum a_g / w_g^2 at fixed L1 (w ∝ a^(1/3)) or L2 (w ∝ a^(1/4)) norm; max 1."""
    w = importance ** (1 / 3 if norm == "l1" else 1 / 4)
    return w / w.max()


def gaussian_multiplier(epsilon: float, delta: float) -> float:
    """Smallest noise multiplier z (to 1e-5 relative) with PLD epsilon(GaussianDpEvent(z), delta) <= epsilon:
    :func:`dpfed.core.accounting.gaussian_noise_multiplier` (the one calibration, cached), against the
    (pessimistic) PLD accountant that the ledger uses, so the charge never exceeds the job's epsilon."""
    return accounting.gaussian_noise_multiplier(epsilon, delta, rtol=1e-5)


def _discrete_laplace_var(t: float) -> float:
    """Variance of P(x) ∝ exp(-|x|/t) on Z: 2 e^(-1/t) / (1 - e^(-1/t))^2."""
    q = math.exp(-1.0 / t)
    return 2.0 * q / (1.0 - q) ** 2


def _params(spec: JobSpec) -> tuple[str, float, float]:
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


def plan_release(spec: JobSpec) -> NBPlan:
    """The plan for ``spec``, computed from its public parameters and schema alone (never data)."""
    mech, _, _ = _params(spec)
    if sn.is_secure(spec.params):
        return secure_release(spec)[0]
    return _plan(spec.schema.to_json(), spec.epsilon, spec.delta, mech)


#: Union-bounded probability that the noise of all P shares wraps some entry mod 2^B.
WRAP_PROBABILITY = sn.WRAP_PROBABILITY


def secure_release(spec: JobSpec) -> tuple[NBPlan, sn.SecurePlan]:
    """The distributed-noise plan of a secure job (module docstring): the :class:`NBPlan` (mechanism
    ``ddgauss``, ``noise`` = sigma_share, ``noise_var`` = the variance of ONE share) and the
    :class:`~dpfed.algorithms.secure_noise.SecurePlan` both sides use (integer rows, no rotation)."""
    mech, _, _ = _params(spec)
    if mech == "laplace":
        raise ValueError("under secure aggregation naive Bayes uses distributed discrete Gaussian shares; "
                         "mechanism must be 'auto' or 'gaussian'")
    if spec.delta <= 0:
        raise ValueError("distributed noise needs delta > 0 (discrete Gaussian shares)")
    sp = sn.secure_params(spec.params)
    return _secure(spec.schema.to_json(), spec.epsilon, spec.delta, sp.honest, sp.parties, sp.records, sp.bits,
                   spec.job_id)


@shared_cache(maxsize=64)
def _secure(schema_json: str, eps: float, delta: float, honest: int, parties: int, records: int, floor_bits: int,
            job_id: str) -> tuple[NBPlan, sn.SecurePlan]:
    layout = Layout.from_schema(Schema.from_json(schema_json))
    w = _optimal_weights(_importance(layout), "l2")
    z = gaussian_multiplier(eps, delta)  # the central Gaussian's multiplier: sets the grid only
    grid = min(_GRID, int(_MAX_SIGMA_UNITS * math.sqrt(honest) / (2 * z * np.sqrt(np.sum(w ** 2)))))
    if grid < _MIN_GRID:
        raise ValueError(f"epsilon {eps:g} is too small for a distributed integer release of {layout.n_groups} "
                         "statistic groups")
    weights = np.maximum(np.rint(w * grid), 1).astype(np.int64)
    l2, l1, dim = float(np.sqrt(np.sum(weights.astype(float) ** 2))), float(weights.sum()), int(layout.length)
    sigma = dn.calibrate_sigma_share(eps, delta, honest_parties=honest, l2_sensitivity=l2, l1_sensitivity=l1,
                                     dimension=dim)
    event = DistributedDiscreteGaussianDpEvent(float(sigma), int(honest), l2, l1, dim)
    while accounting.epsilon(event, delta, accountant="rdp") > eps:  # the ledger's own RDP conversion decides
        sigma *= 1.0 + 1e-6
        event = DistributedDiscreteGaussianDpEvent(float(sigma), int(honest), l2, l1, dim)
    bits = sn.integer_bits(floor_bits, records * float(weights.max()), sigma, parties, dim)
    noise = dn.DistributedNoisePlan(dimension=dim, clip=l2, gamma=1.0, bits=bits, sigma_share=float(sigma),
                                    honest_parties=honest, parties=parties, vectors=records)
    plan = NBPlan("ddgauss", weights, int(l1), l2, float(sigma), float(sigma) ** 2, event)
    return plan, sn.SecurePlan(noise, (("stats", (dim,)),), sn.rotation_seed(job_id, 0), integer=True)


@shared_cache(maxsize=64)
def _plan(schema_json: str, eps: float, delta: float, mech: str) -> NBPlan:
    layout = Layout.from_schema(Schema.from_json(schema_json))
    a = _importance(layout)
    if mech == "gaussian" and delta == 0:
        raise ValueError("the Gaussian mechanism needs delta > 0; use mechanism 'laplace' for pure DP")
    candidates = []
    if mech in ("auto", "laplace"):
        w = _optimal_weights(a, "l1")
        # relative variance at unit weight 1: 2 (sum w / eps)^2, per group divided by w_g^2
        candidates.append(("laplace", w, float(np.sum(a * 2 * (w.sum() / eps) ** 2 / w ** 2))))
    if mech in ("auto", "gaussian") and delta > 0:
        w = _optimal_weights(a, "l2")
        z = gaussian_multiplier(eps, delta)
        grid = min(_GRID, int(_MAX_SIGMA_UNITS / (z * np.sqrt(np.sum(w ** 2)))))
        if grid >= _MIN_GRID:  # sigma in grid units must stay within the exact sampler's range
            candidates.append(("gaussian", w, float(np.sum(a * (z * np.sqrt(np.sum(w ** 2))) ** 2 / w ** 2))))
        elif mech == "gaussian":
            raise ValueError(f"epsilon {eps:g} is too small for an integer Gaussian release of {layout.n_groups} "
                             "statistic groups; use mechanism 'laplace'")
    name, w, _ = min(candidates, key=lambda c: c[2])
    if name == "laplace":
        weights = np.maximum(np.rint(w * _GRID), 1).astype(np.int64)
        l1 = int(weights.sum())
        t = (l1 + 1) / eps  # dpfed.core.mechanisms.discrete_laplace's scale for L1 > 4096 (slightly conservative)
        return NBPlan("laplace", weights, l1, float(np.sqrt(np.sum(weights.astype(float) ** 2))), t,
                      _discrete_laplace_var(t), dp_event.DiscreteLaplaceDpEvent(float(eps), 1))
    weights = np.maximum(np.rint(w * grid), 1).astype(np.int64)
    l2 = float(np.sqrt(np.sum(weights.astype(float) ** 2)))
    # dpfed.core.mechanisms.rounded_gaussian charges GaussianDpEvent(sigma / l2) exactly: take sigma so that
    # this multiplier is still >= z (the 1e-12 absorbs its ulp-level rounding). Noise variance of
    # round(sigma Z): sigma^2 + 1/12 up to e^{-2 pi^2 sigma^2} (Sheppard's correction).
    sigma = z * l2 * (1.0 + 1e-12)
    return NBPlan("gaussian", weights, int(weights.sum()), l2, sigma, sigma ** 2 + 1.0 / 12.0,
                  dp_event.GaussianDpEvent(float(z)))


# --------------------------------------------------------------------------- party: statistics

def sufficient_statistics(X: np.ndarray, y: np.ndarray, layout: Layout, weights: np.ndarray) -> np.ndarray:
    """The weighted integer statistics vector of records ``(X, y)`` (before noise).

    ``X`` is float64 already validated against the schema; numeric values are clamped to the
    public bounds here anyway (clip, then noise). Vectorised over blocks of rows that stay in
    cache: per categorical feature one ``bincount`` over (value, class) cells; the numeric rows of
    a block go into a (2P, rows) array whose per-class sums are mask products (exact: every partial
    sum is an integer below 2^52). Raises :class:`DataValidationError` for NaN or a code outside
    its domain (it would land in another cell and break the sensitivity); Inf is clamped.
    """
    y = np.asarray(y, dtype=np.int64)
    if len(y) * float(weights.max()) >= _EXACT:  # keep every float64 partial sum an exact integer
        half = len(y) // 2
        return (sufficient_statistics(X[:half], y[:half], layout, weights)
                + sufficient_statistics(X[half:], y[half:], layout, weights))
    out = np.zeros(layout.length, np.int64)
    out[:layout.k] = np.bincount(y, minlength=layout.k) * weights[0]
    rows = min(len(y), _CHUNK)
    buf, zbuf = np.empty(rows), np.empty((2 * len(layout.num_cols), rows))
    for start in range(0, len(y), _CHUNK):  # row blocks that stay in cache while every column is read
        _block_statistics(X[start:start + _CHUNK], y[start:start + _CHUNK], layout, weights, out, buf, zbuf)
    return out


def _block_statistics(X: np.ndarray, y: np.ndarray, layout: Layout, weights: np.ndarray, out: np.ndarray,
                      buf: np.ndarray, zbuf: np.ndarray) -> None:
    """Add the histogram and numeric-sum statistics of one block of rows to ``out``."""
    n, k = len(y), layout.k
    c, p = len(layout.cat_cols), len(layout.num_cols)
    buf = buf[:n]
    yf = y.astype(np.float64)
    for j, (col, m) in enumerate(zip(layout.cat_cols, layout.sizes)):  # a few passes per feature
        np.multiply(X[:, col], k, out=buf)                     # cell index v * k + c
        buf += yf
        try:  # a negative cell (or NaN, cast to INT_MIN) raises; one too large lengthens the count
            cnt = np.bincount(buf.astype(np.intp), minlength=k * int(m))
        except ValueError:
            cnt = np.zeros(0)
        if len(cnt) != k * int(m):
            raise DataValidationError(f"column {layout.names[col]!r}: NaN or value(s) outside the categorical "
                                      f"domain of {int(m)} codes")
        o = int(layout.hist_off[j])
        out[o:o + k * int(m)] += cnt.reshape(int(m), k).T.ravel() * weights[1 + j]
    if not p:
        return
    Z = zbuf[:, :n]                          # rows 0..P-1: rounded x~ sums S, rows P..2P-1: squares Q
    for f, col in enumerate(layout.num_cols):
        # round(ws * clamp(x~, -1, 1)) with x~ = (x - lo) / half - 1, computed as clamp(ws x~, -ws, ws)
        ws, wq = float(weights[1 + c + f]), float(weights[1 + c + p + f])
        half = (layout.upper[f] - layout.lower[f]) / 2.0
        zs, zq = Z[f], Z[p + f]
        np.multiply(X[:, col], ws / half, out=zs)
        zs -= ws * (layout.lower[f] / half + 1.0)
        clamp(zs, -ws, ws, out=zs, allow_infinite=True)  # Inf is clamped like any out-of-bound value
        np.square(zs, out=zq)
        zq *= wq / (ws * ws)
        np.rint(zq, out=zq)
        np.rint(zs, out=zs)
    sums = np.empty((2 * p, k))
    for cls in range(k - 1):                 # per-class sums by masks: exact (integers below 2^52)
        np.equal(y, cls, out=buf, casting="unsafe")
        sums[:, cls] = Z @ buf
    sums[:, k - 1] = Z.sum(axis=1) - sums[:, :k - 1].sum(axis=1)
    if not np.isfinite(sums).all():          # NaN survives the clamp
        bad = sorted({layout.names[int(layout.num_cols[i % p])] for i in np.flatnonzero(~np.isfinite(sums).all(1))})
        raise DataValidationError(f"column(s) {', '.join(map(repr, bad))}: NaN value(s)")
    out[layout.s_off:layout.q_off] += np.rint(sums[:p].T).astype(np.int64).ravel()
    out[layout.q_off:] += np.rint(sums[p:].T).astype(np.int64).ravel()


def _check_labels(y: np.ndarray | None, n: int, k: int) -> np.ndarray:
    if y is None:
        raise DataValidationError("naive Bayes needs labels at every party")
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataValidationError(f"labels: expected {n} labels, got shape {tuple(y.shape)}")
    if n and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= k):
        bad = int(np.sum((y < 0) | (y >= k))) if np.issubdtype(y.dtype, np.number) else n
        raise DataValidationError(f"labels: {bad} value(s) outside the schema's classes 0..{k - 1}")
    return y.astype(np.int64, copy=False)


class NaiveBayesParty(PartyAlgorithm):
    """The party half: one task, the noisy weighted statistics vector."""

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        try:
            return plan_release(spec).event
        except ValueError as exc:
            raise TaskRejected(f"invalid naive Bayes parameters: {exc}") from None

    def needs_secure_aggregation(self, spec: JobSpec) -> bool:
        """Distributed noise: each answer carries one share of the noise."""
        return spec.params.get("noise", "local") == "distributed"

    def secure_plan(self, spec: JobSpec, task: Task) -> sn.SecurePlan | None:
        if not sn.is_secure(spec.params) or task.kind != TASK_KIND or task.round != 0:
            return None
        return secure_release(spec)[1]

    def secure_rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                    rng: SecureRNG) -> Iterator[np.ndarray]:
        """The party's integer statistics vector as one row: the exact sum of its records' integer
        vectors (per-party encoding is exact here, module docstring)."""
        if self.secure_plan(spec, task) is None:
            raise TaskRejected("not a secure naive Bayes task")
        layout = Layout.from_schema(spec.schema)
        X = np.asarray(X, dtype=np.float64)
        y = _check_labels(y, len(X), layout.k)
        if X.ndim != 2 or X.shape[1] != spec.schema.n_features:
            raise DataValidationError(f"expected a 2-d array with {spec.schema.n_features} columns")
        yield sufficient_statistics(X, y, layout, secure_release(spec)[0].weights)[None, :]

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if task.job_id != spec.job_id:
            raise TaskRejected(f"task is for job {task.job_id!r}, not {spec.job_id!r}")
        if task.kind != TASK_KIND or task.round != 0:
            raise TaskRejected(f"naive Bayes answers one task ({TASK_KIND!r}, round 0); got {task.kind!r} "
                               f"round {task.round}")
        if task.params or task.arrays:
            raise TaskRejected("the naive Bayes task carries no parameters (its plan is the job spec)")

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent:
        return plan_release(spec).event  # the job is this one release

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        from dpfed.core.mechanisms import discrete_laplace, rounded_gaussian

        if sn.is_secure(spec.params):
            raise TaskRejected("a secure-aggregation job answers only through secure aggregation")
        layout = Layout.from_schema(spec.schema)
        plan = plan_release(spec)
        X = np.asarray(X, dtype=np.float64)
        y = _check_labels(y, len(X), layout.k)
        if X.ndim != 2 or X.shape[1] != spec.schema.n_features:
            raise DataValidationError(f"expected a 2-d array with {spec.schema.n_features} columns")
        stats = sufficient_statistics(X, y, layout, plan.weights)
        if plan.mechanism == "laplace":
            rel = discrete_laplace(stats, sensitivity=plan.l1, epsilon=spec.epsilon, rng=rng)
        else:
            rel = rounded_gaussian(stats, sensitivity=plan.l2, sigma=plan.noise, rng=rng)
        # the session checks that rel.event lies within the charged plan before anything leaves
        return Released({"stats": np.asarray(rel.value, dtype=np.int64)}, (rel.event,))


# --------------------------------------------------------------------------- coordinator: model

def simplex_rows(V: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row of ``V`` onto {h >= 0, sum h = total} (Duchi et al. 2008, Fig. 1)."""
    m = V.shape[1]
    U = -np.sort(-V, axis=1)
    css = np.cumsum(U, axis=1) - totals[:, None]
    ks = np.arange(1, m + 1)
    rho = np.sum(U - css / ks > 0, axis=1)  # >= 1 whenever total >= 0
    rho = np.maximum(rho, 1)
    theta = css[np.arange(len(V)), rho - 1] / rho
    return np.maximum(V - theta[:, None], 0.0)


def postprocess(total: np.ndarray, layout: Layout, plan: NBPlan, n_parties: int, alpha: float,
                var_floor: float) -> dict[str, np.ndarray]:
    """Summed noisy integer vector -> model arrays (post-processing only; see module docstring)."""
    k, c, p = layout.k, len(layout.cat_cols), len(layout.num_cols)
    groups = layout.group_of_entries()
    W = plan.weights.astype(np.float64)
    x = total.astype(np.float64) / W[groups]
    var = n_parties * plan.noise_var / W ** 2          # noise variance of each group's entries
    counts = x[:k]
    hists = [x[o:o + k * int(m)].reshape(k, int(m)) for o, m in zip(layout.hist_off, layout.sizes)]
    # consistent class totals: inverse-variance weighted mean of every estimate of n_c
    est = [counts] + [h.sum(axis=1) for h in hists]
    ivar = [1.0 / var[0]] + [1.0 / (int(m) * var[1 + j]) for j, m in enumerate(layout.sizes)]
    n_c = sum(e * iv for e, iv in zip(est, ivar)) / sum(ivar)
    n_c = np.maximum(n_c, 1.0)
    model: dict[str, np.ndarray] = {
        "algorithm": np.array("naive-bayes"),
        "mechanism": np.array(plan.mechanism),
        "class_count": n_c,
        "class_log_prior": np.log(n_c / n_c.sum()),
        "cat_columns": layout.cat_cols.astype(np.int64),
        "num_columns": layout.num_cols.astype(np.int64),
    }
    m_max = int(layout.sizes.max()) if c else 0
    table = np.full((c, k, m_max), -np.inf)
    for j, h in enumerate(hists):
        m = h.shape[1]
        h = simplex_rows(h, n_c) + alpha
        table[j, :, :m] = np.log(h / h.sum(axis=1, keepdims=True))
    model["cat_log_prob"] = table
    if p:
        S = x[layout.s_off:layout.q_off].reshape(k, p)
        Q = x[layout.q_off:].reshape(k, p)
        mu = np.clip(S / n_c[:, None], -1.0, 1.0)
        v_raw = Q / n_c[:, None] - mu ** 2
        sd_q = np.sqrt(var[1 + c + p:])[None, :] / n_c[:, None]     # noise std of Q / n_c
        v = np.clip(np.maximum(v_raw, KAPPA * sd_q), var_floor, 1.0)
        half = (layout.upper - layout.lower) / 2.0
        model["num_mean"] = layout.lower + (mu + 1.0) * half
        model["num_var"] = v * half ** 2
        model["num_lower"], model["num_upper"] = layout.lower.copy(), layout.upper.copy()
    else:
        model["num_mean"] = model["num_var"] = np.zeros((k, 0))
        model["num_lower"] = model["num_upper"] = np.zeros(0)
    return model


class NaiveBayesCoordinator(CoordinatorAlgorithm):
    """The coordinator half: one task, sum of the parties' integer vectors, post-processing."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        _, self.alpha, self.var_floor = _params(spec)
        self.spec, self.parties = spec, list(parties)
        if not self.parties:
            raise ValueError("a naive Bayes job needs at least one party")
        self.layout = Layout.from_schema(spec.schema)
        self.plan = plan_release(spec)
        self.secure = sn.is_secure(spec.params)
        self.min_survivors = sn.secure_params(spec.params).min_survivors if self.secure else len(self.parties)
        self.survivors = len(self.parties)
        self._issued = False
        self._model: dict[str, np.ndarray] | None = None

    def next_task(self) -> Task | None:
        if self._issued:
            return None
        self._issued = True
        return Task(self.spec.job_id, 0, TASK_KIND)

    def absorb(self, task: Task, combined: Aggregate) -> None:
        if task.kind != TASK_KIND or task.round != 0 or self._model is not None:
            raise ValueError("naive Bayes absorbs exactly one answer set, for its round-0 task")
        got = set(combined.parties)
        missing, unknown = set(self.parties) - got, got - set(self.parties)
        if self.secure and not combined.parties:
            raise ValueError(f"the naive Bayes round was aborted: fewer than {self.min_survivors} parties "
                             "contributed (nothing was unmasked)")
        if self.secure and not unknown and len(got) >= self.min_survivors:  # SecAgg: the survivors' sum
            missing = set()
        if missing or unknown:
            raise ValueError(f"expected answers from exactly the {len(self.parties)} job parties; "
                             f"missing {sorted(missing)}, unknown {sorted(unknown)}")
        total = np.asarray(combined.arrays.get("stats", np.zeros(0)))
        if total.shape != (self.layout.length,) or not np.issubdtype(total.dtype, np.integer):
            raise ValueError(f"expected integer 'stats' vectors of length {self.layout.length}, "
                             f"got dtype {total.dtype} shape {tuple(total.shape)}")
        self.survivors = len(got)  # noise_var is per share: the sum holds one per contributor
        self._model = postprocess(total.astype(np.int64), self.layout, self.plan, len(got), self.alpha,
                                  self.var_floor)

    @property
    def progress(self) -> float:
        return 1.0 if self._model is not None else 0.0

    def model(self) -> dict[str, np.ndarray]:
        if self._model is None:
            raise RuntimeError("the naive Bayes job has not finished")
        return dict(self._model)

    def summary(self) -> dict[str, Any]:
        shares = self.survivors if self.secure else 1
        return {"mechanism": self.plan.mechanism, "statistics": int(self.layout.length),
                "noise_std_counts": math.sqrt(shares * self.plan.noise_var) / float(self.plan.weights[0])}


# --------------------------------------------------------------------------- prediction

def joint_log_likelihood(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """log P(c) + sum_j log P(x_j | c) for every row of validated ``X``: shape (n, k)."""
    X = np.asarray(X, dtype=np.float64)
    jll = np.broadcast_to(np.asarray(model["class_log_prior"], dtype=np.float64), (len(X), len(model["class_log_prior"]))).copy()
    table = np.asarray(model["cat_log_prob"])
    for j, col in enumerate(np.asarray(model["cat_columns"], dtype=np.int64)):
        jll += table[j][:, X[:, col].astype(np.int64)].T
    num = np.asarray(model["num_columns"], dtype=np.int64)
    if len(num):
        Z = np.clip(X[:, num], model["num_lower"], model["num_upper"])
        mu, v = np.asarray(model["num_mean"]), np.asarray(model["num_var"])
        jll += -0.5 * np.sum(np.log(2 * np.pi * v), axis=1)[None, :]
        jll -= 0.5 * np.einsum("nkp->nk", (Z[:, None, :] - mu[None]) ** 2 / v[None])
    return jll


def predict(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    return np.argmax(joint_log_likelihood(model, X), axis=1)


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """Test accuracy of ``model`` on ``(X, y)`` (validated against ``schema``; numerics clamped)."""
    if y is None:
        raise ValueError("naive Bayes evaluation needs labels")
    Xv = schema.validate(X, y, clip_numeric=True)
    return {"test_accuracy": float(np.mean(predict(model, Xv) == np.asarray(y)))}


# --------------------------------------------------------------------------- estimator

class DPNaiveBayes(EstimatorParams, ClassifierScore):
    """Scikit-learn-style DP naive Bayes for one array: the party and coordinator halves, one party.

    ``schema`` gives the public domains and bounds; without one, ``fit`` derives all-numeric bounds
    and the class count from the data and warns (:class:`DataDerivedSchemaWarning`): that leaks.
    ``random_state`` (int) makes the noise reproducible (simulation only; it warns), None is secure.
    """

    def __init__(self, epsilon: float = 1.0, delta: float = 0.0, schema: Schema | None = None,
                 random_state: int | None = None, mechanism: str = "auto", alpha: float = DEFAULT_ALPHA,
                 var_floor: float = DEFAULT_VAR_FLOOR) -> None:
        self.epsilon, self.delta, self.schema, self.random_state = epsilon, delta, schema, random_state
        self.mechanism, self.alpha, self.var_floor = mechanism, alpha, var_floor

    def _schema_for(self, X: np.ndarray, y: np.ndarray) -> Schema:
        if self.schema is not None:
            return self.schema
        warnings.warn("DPNaiveBayes without a schema: bounds and classes are taken from the data, which "
                      "is NOT differentially private; pass a public schema", DataDerivedSchemaWarning, stacklevel=3)
        Xf = np.asarray(X, dtype=np.float64)
        if Xf.ndim != 2 or not np.isfinite(Xf).all():
            raise DataValidationError("records must be a finite 2-d array")
        lo, hi = Xf.min(axis=0), Xf.max(axis=0)
        hi = np.where(hi > lo, hi, lo + 1.0)
        return Schema(tuple(Feature(f"x{j}", "numeric", lower=float(lo[j]), upper=float(hi[j]))
                            for j in range(Xf.shape[1])), n_classes=int(np.max(y)) + 1)

    def fit(self, X: np.ndarray, y: np.ndarray) -> "DPNaiveBayes":
        schema = self._schema_for(X, y)
        params = {"epsilon": float(self.epsilon), "delta": float(self.delta), "mechanism": self.mechanism,
                  "alpha": float(self.alpha), "var_floor": float(self.var_floor)}
        spec = JobSpec("estimator", "naive-bayes", params, schema)
        Xv = schema.validate(X, y)
        yv = _check_labels(np.asarray(y), len(Xv), schema.n_classes)
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(int(self.random_state))
        run = run_local(ALGORITHMS["naive-bayes"], spec, Xv, yv, rng)
        coord = run.coordinator
        self.model_, self.schema_ = coord.model(), schema
        self.classes_ = np.arange(schema.n_classes)
        self.n_features_in_ = schema.n_features
        self.privacy_event_ = run.event
        return self

    def _validated(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "model_"):
            raise RuntimeError("this DPNaiveBayes is not fitted yet; call fit first")
        return self.schema_.validate(X, clip_numeric=True)

    def predict_log_proba(self, X: np.ndarray) -> np.ndarray:
        Xv = self._validated(X)
        jll = joint_log_likelihood(self.model_, Xv)
        m = jll.max(axis=1, keepdims=True)
        return jll - (m + np.log(np.sum(np.exp(jll - m), axis=1, keepdims=True)))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.exp(self.predict_log_proba(X))

    def predict(self, X: np.ndarray) -> np.ndarray:
        Xv = self._validated(X)
        return np.argmax(joint_log_likelihood(self.model_, Xv), axis=1)



# --------------------------------------------------------------------------- registry

#: Largest released vector (counts, histograms, sums): k * (1 + sum m_j + 2 P) entries.
MAX_STATISTICS = 1 << 24

PARAMS = ParamTable((
    EPSILON, delta_param(1e-6),
    Param("mechanism", str, "auto", choices=MECHANISMS,
          help="naive Bayes noise: auto (least noisy for the job's epsilon, delta; delta 0 means discrete Laplace), "
               "laplace (pure DP) or gaussian (needs delta > 0)"),
    Param("alpha", float, DEFAULT_ALPHA, lo=0.0, hi=1e6,
          help=f"naive Bayes Laplace smoothing pseudo-count (default {DEFAULT_ALPHA:g})"),
    Param("var_floor", float, DEFAULT_VAR_FLOOR, lo=0.0, lo_open=True, hi=1.0,
          help="naive Bayes variance floor of numeric features, in units of the squared half range "
               f"(default {DEFAULT_VAR_FLOOR:g})"),
    noise_param(),
    *sn.SECURE_PARAMS,
), check=lambda p, schema: _check_params(p, schema))


def _check_params(p: dict[str, Any], schema: Schema | None) -> None:
    if p["noise"] == "distributed":
        if not sn.is_secure(p):
            raise TaskRejected("naive Bayes distributed noise runs only under secure aggregation "
                               "(secure_aggregation = true)")
        if p["mechanism"] == "laplace" or p["delta"] <= 0:
            raise TaskRejected("naive Bayes distributed noise adds discrete Gaussian shares: it needs 'delta' > 0 "
                               "and mechanism auto or gaussian")
    if p["mechanism"] == "gaussian" and p["delta"] <= 0:
        raise TaskRejected("naive Bayes parameter 'mechanism' gaussian needs 'delta' in (0, 1); use laplace for "
                           "delta 0")
    if schema is not None:
        if schema.n_classes < 1:
            raise TaskRejected("naive Bayes needs a schema with label classes (n_classes >= 1)")
        length = Layout.from_schema(schema).length
        if length > MAX_STATISTICS:
            raise TaskRejected(f"naive Bayes would release {length} statistics, more than the cap {MAX_STATISTICS}; "
                               "use fewer classes, features or categories")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nb-mechanism", choices=MECHANISMS, default="auto", help=PARAMS.get("mechanism").help)
    parser.add_argument("--nb-alpha", type=arg_type(PARAMS, "alpha"), default=DEFAULT_ALPHA,
                        help=PARAMS.get("alpha").help)
    parser.add_argument("--nb-var-floor", type=arg_type(PARAMS, "var_floor"), default=DEFAULT_VAR_FLOOR,
                        help=PARAMS.get("var_floor").help)
    parser.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"mechanism": getattr(args, "nb_mechanism", "auto"), "alpha": getattr(args, "nb_alpha", DEFAULT_ALPHA),
            "var_floor": getattr(args, "nb_var_floor", DEFAULT_VAR_FLOOR), "noise": getattr(args, "noise", "local")}


ALGORITHMS = {"naive-bayes": Algorithm(name="naive-bayes", party=NaiveBayesParty, coordinator=NaiveBayesCoordinator,
                                       evaluate=evaluate, add_arguments=add_arguments,
                                       params_from_args=params_from_args, default_delta=1e-6)}
