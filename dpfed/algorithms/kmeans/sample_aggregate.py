"""Sample-and-aggregate (Nissim, Raskhodnikova & Smith 2007, "NRS07", Sec. 4) for any estimator
whose answer is a vector, with two aggregators of the m block answers:

* :func:`center_of_attention_release` -- NRS07's *center of attention*: the block answer whose ball
  holding t0 answers is smallest, plus Gaussian noise scaled to a beta-smooth upper bound on its
  local sensitivity (NRS07 Def. 2.1 smooth bound, Lemma 2.6 release, Sec. 4 aggregation).
* :func:`clamped_mean_release` -- GUPT's aggregator (Mohan et al. 2012): the mean of the block
  answers clamped to the public domain, plus Gaussian noise (a plain Gaussian mechanism).

Neighbouring relation. Records are put into blocks *independently* (:func:`assign_blocks`), so
adding or removing one record changes exactly one block, hence at most one block answer; every
sensitivity below is with respect to changing one of the m answers (NRS07 Sec. 4, s = 1).

Generic: nothing here is specific to k-means (any estimator with a vector answer in a public box,
:func:`sample_and_aggregate`). It lives in the k-means package because k-means is its only user;
move it to a shared module under :mod:`dpfed.algorithms` when a second learner uses it.

Privacy of the smooth-sensitivity release. NRS07 Lemma 2.6: if the noise density h is
(alpha, beta)-admissible -- a shift by ||Delta||_2 <= alpha costs (eps1, delta1) ("sliding") and a
dilation by e^lambda, |lambda| <= beta, costs (eps2, delta2) ("dilation") -- then
``f(x) + S(x)/alpha * Z`` with S a beta-smooth upper bound on the local sensitivity is
(eps1 + eps2, delta1 + e^eps1 * delta2)-DP (the chain in the proof of Lemma 2.6; it is *not*
a composition, so the guarantee is charged as one generic (epsilon, delta) pair,
:class:`dpfed.core.accounting.EpsilonDeltaBoundDpEvent`). For Gaussian Z both costs are computed exactly here
(sliding: the analytic Gaussian mechanism, Balle & Wang 2018 Thm 8; dilation: chi-square tails)
instead of NRS07's closed-form Lemma 2.10 constants, which are looser.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import stats

from dp_accounting import dp_event

from dpfed.core import accounting
from dpfed.core.mechanisms import gaussian
from dpfed.core.clipping import clamp, mean_sensitivity
from dpfed.core.rng import SecureRNG
from dpfed.core.memo import shared_cache

__all__ = [
    "assign_blocks", "run_blocks", "attention_t0", "pairwise_distances", "radii",
    "center_of_attention", "smooth_sensitivity_bounds", "smooth_sensitivity",
    "GaussianSmoothParams", "gaussian_sliding_delta", "gaussian_dilation_delta", "gaussian_smooth_params",
    "SmoothRelease", "center_of_attention_release", "clamped_mean_release", "MeanRelease",
    "gaussian_noise_multiplier", "sample_and_aggregate",
]


# --------------------------------------------------------------------------- sampling

def assign_blocks(n: int, m: int, rng: np.random.Generator, *, allow_empty: bool = False) -> list[np.ndarray]:
    """Indices of m disjoint blocks; each record picks its block uniformly and independently.
    (``allow_empty``: fewer records than blocks is no error; some blocks are then empty.)

    Independent assignment (rather than cutting a permutation into equal slices) keeps every
    other record's block fixed when one record is added or removed, so one record touches one
    block under the add/remove relation (NRS07 Sec. 4 uses fixed-size blocks and replacement).
    The assignment draws on ``rng`` (not privacy noise: it is a public random partition).
    """
    if m < 1:
        raise ValueError("need at least one block")
    if n < m and not allow_empty:
        raise ValueError(f"{n} records cannot fill {m} blocks")
    labels = rng.integers(0, m, size=n)
    order = np.argsort(labels, kind="stable")
    cuts = np.searchsorted(labels[order], np.arange(1, m))
    return np.split(order, cuts)


def run_blocks(X: np.ndarray, blocks: list[np.ndarray], estimator: Callable[[np.ndarray, int], np.ndarray],
               ) -> np.ndarray:
    """Apply ``estimator(X_block, block_index) -> 1-d vector`` to every block; stack the m answers.

    The estimator may be any (non-private) function; its answer must have the same length for
    every block. Its randomness must not depend on other blocks (pass a per-block seed).
    """
    answers = [np.asarray(estimator(X[idx], j), dtype=np.float64).ravel() for j, idx in enumerate(blocks)]
    p = answers[0].size
    if any(a.size != p for a in answers):
        raise ValueError("the estimator returned answers of different lengths for different blocks")
    out = np.stack(answers)
    if not np.all(np.isfinite(out)):
        raise ValueError("the estimator returned a non-finite answer on some block")
    return out


# --------------------------------------------------------------------------- center of attention

def attention_t0(m: int) -> int:
    """Smallest t0 with 2 (t0 - 1) > m - 1: two balls of t0 answers each, of two neighbouring
    answer sets, share an unchanged answer (the intersection step of NRS07 Sec. 4)."""
    if m < 3:
        raise ValueError("the center of attention needs at least 3 blocks")
    return (m - 1) // 2 + 2


def pairwise_distances(Z: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of Z, (m, m), computed in blocks of rows."""
    sq = np.einsum("ij,ij->i", Z, Z)
    D = np.empty((len(Z), len(Z)))
    step = max(1, 2_000_000 // max(len(Z), 1))
    for s in range(0, len(Z), step):
        g = sq[s:s + step, None] + sq[None, :] - 2.0 * (Z[s:s + step] @ Z.T)
        np.maximum(g, 0.0, out=g)
        D[s:s + step] = np.sqrt(g)
    np.fill_diagonal(D, 0.0)
    return D


def radii(Z: np.ndarray) -> np.ndarray:
    """R[i, t-1] = r_i(t): distance from answer i to its t-th nearest answer (itself first)."""
    return np.sort(pairwise_distances(Z), axis=1)


def center_of_attention(Z: np.ndarray, t0: int | None = None, R: np.ndarray | None = None) -> int:
    """Index of the answer with the smallest r_i(t0) (NRS07 Sec. 4). Ties go to the
    lexicographically smallest answer, so the choice does not depend on the order of blocks."""
    t0 = attention_t0(len(Z)) if t0 is None else t0
    R = radii(Z) if R is None else R
    r = R[:, t0 - 1]
    best = np.flatnonzero(r == r.min())
    if len(best) == 1:
        return int(best[0])
    order = np.lexsort(Z[best].T[::-1])
    return int(best[order[0]])


def smooth_sensitivity_bounds(R: np.ndarray, t0: int, diameter: float) -> np.ndarray:
    """U_k for k = 0 .. m - t0 (the last entry is the diameter), where

        U_k = min(diameter, rho_k(t0 + k) + rho_{k+1}(t0 + k + 1)),
        rho_j(t) = (j+1)-th smallest of {r_i(t)}_i.

    U_0 bounds the local sensitivity: the two centers of attention of neighbours each hold t0
    answers within r*, and 2(t0-1) > m-1 makes the two balls share an unchanged answer, so
    ||g(z) - g(z')|| <= r*(z) + r*(z') <= rho_0(t0) + rho_1(t0+1) (the second center is an
    unchanged answer whose ball of t0+1 answers keeps t0). For neighbours z, z',
    rho_j(t; z) <= rho_{j+1}(t+1; z'), hence U_k(z) <= U_{k+1}(z'), which is what makes
    max_k e^{-beta k} U_k a beta-smooth upper bound (NRS07 Def. 2.1; the construction of
    their Lemma 3.x / Prop. 3.1 with this U in place of A^(k)).
    """
    m = R.shape[0]
    if not 1 <= t0 <= m:
        raise ValueError("t0 must lie in 1..m")
    C = np.sort(R, axis=0)  # C[j, t-1] = rho_j(t)
    K = m - t0              # the first k with t0 + k + 1 > m
    k = np.arange(K)
    U = np.empty(K + 1)
    U[:K] = np.minimum(diameter, C[k, t0 - 1 + k] + C[k + 1, t0 + k])
    U[K] = diameter
    return U


def smooth_sensitivity(R: np.ndarray, t0: int, beta: float, diameter: float) -> float:
    """S(z) = max_k e^{-beta k} U_k(z) (beyond k = m - t0 every U_k is the diameter, so the
    maximum is reached at or before it). A beta-smooth upper bound on the local sensitivity of
    :func:`center_of_attention` in the Euclidean metric (NRS07 Def. 2.1 and Sec. 4)."""
    if not beta > 0:
        raise ValueError("beta must be > 0")
    U = smooth_sensitivity_bounds(R, t0, diameter)
    return float(np.max(U * np.exp(-beta * np.arange(len(U)))))


# --------------------------------------------------------------------------- admissible Gaussian noise

def gaussian_sliding_delta(alpha: float, eps: float) -> float:
    """delta of N(0, I) against N(Delta, I) for ||Delta||_2 = alpha at eps (Balle & Wang 2018, Thm 8):
    the Gaussian mechanism of noise multiplier 1/alpha (:func:`dpfed.core.accounting.gaussian_delta`)."""
    return accounting.gaussian_delta(1.0 / alpha, eps)


def gaussian_dilation_delta(lam: float, eps: float, dim: int) -> float:
    """Exact hockey-stick divergence (at e^eps) of N(0, I_dim) from e^lam N(0, I_dim).

    Privacy loss L(z) = lam*dim - ||z||^2 (1 - e^{-2 lam}) / 2 with ||z||^2 ~ chi2(dim): for
    lam > 0, L > eps iff ||z||^2 < c; for lam < 0, iff ||z||^2 > c'. delta = P_Z[L > eps] -
    e^eps P_{e^lam Z}[L > eps] (the dilation property of NRS07 Def. 2.5, computed exactly)."""
    if lam == 0:
        return 0.0
    chi = stats.chi2(dim)
    if lam > 0:
        if lam * dim <= eps:
            return 0.0
        c = 2.0 * (lam * dim - eps) / (-math.expm1(-2.0 * lam))
        d = math.exp(chi.logcdf(c)) - math.exp(eps + chi.logcdf(c * math.exp(-2.0 * lam)))
    else:
        mu = -lam
        c = 2.0 * (eps + mu * dim) / math.expm1(2.0 * mu)
        d = math.exp(chi.logsf(c)) - math.exp(eps + chi.logsf(c * math.exp(2.0 * mu)))
    return float(max(d, 0.0))


@dataclass(frozen=True)
class GaussianSmoothParams:
    """(alpha, beta) making N(0, I_dim) admissible for the guarantee (epsilon, delta) (NRS07 Def. 2.5)."""

    alpha: float
    beta: float
    epsilon: float
    delta: float
    dim: int


def _bisect_max(ok: Callable[[float], bool], lo: float, hi: float, iters: int = 80) -> float:
    """Largest x in [lo, hi] with ok(x) (ok monotone: true below a threshold); lo must be ok. Used only for
    the dilation bound beta, which is no DpEvent family (every noise multiplier comes from
    :func:`dpfed.core.accounting.calibrate`)."""
    while ok(hi):
        lo, hi = hi, hi * 2.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


@shared_cache(maxsize=128)
def gaussian_smooth_params(epsilon: float, delta: float, dim: int, *, sliding_share: float = 0.5
                           ) -> GaussianSmoothParams:
    """Calibrate (alpha, beta) so that f(x) + S_beta(x)/alpha * N(0, I_dim) is (epsilon, delta)-DP.

    Splits epsilon into eps1 = sliding_share*epsilon (sliding) and eps2 (dilation), delta into
    delta1 = delta/2 and delta2 = delta/(2 e^eps1), so delta1 + e^eps1 delta2 = delta (NRS07
    Lemma 2.6's chain). alpha is the largest shift and beta the largest log-dilation that meet
    them; the dilation delta is checked on a grid of |lambda| <= beta, both signs."""
    if not (epsilon > 0 and 0 < delta < 1 and dim >= 1 and 0 < sliding_share < 1):
        raise ValueError("need epsilon > 0, 0 < delta < 1, dim >= 1 and 0 < sliding_share < 1")
    eps1, eps2 = sliding_share * epsilon, (1 - sliding_share) * epsilon
    d1, d2 = delta / 2, delta / (2 * math.exp(eps1))
    # sliding: the largest shift alpha is 1 / the smallest Gaussian multiplier meeting (eps1, d1)
    z = accounting.gaussian_noise_multiplier(eps1, d1, accountant="analytic", rtol=1e-12)
    alpha = float(np.nextafter(1.0 / z, 0.0))

    def dil_ok(b: float) -> bool:
        grid = b * np.array([0.25, 0.5, 0.75, 1.0])
        return all(gaussian_dilation_delta(s * g, eps2, dim) <= d2 for g in grid for s in (1.0, -1.0))

    beta = _bisect_max(dil_ok, 1e-12, 1e-3, iters=30)
    return GaussianSmoothParams(alpha=alpha, beta=beta, epsilon=epsilon, delta=delta, dim=dim)


# --------------------------------------------------------------------------- releases

@dataclass(frozen=True)
class SmoothRelease:
    """A center-of-attention release: the noisy answer and what went into it (for reports only:
    ``sensitivity`` and ``index`` are data-dependent and must not leave the party)."""

    value: np.ndarray
    noise_std: float
    sensitivity: float
    index: int
    params: GaussianSmoothParams

    @property
    def event(self) -> dp_event.DpEvent:
        """(epsilon, delta) by NRS07 Lemma 2.6 (not a composition: one generic pair)."""
        return accounting.EpsilonDeltaBoundDpEvent(float(self.params.epsilon), float(self.params.delta))


def center_of_attention_release(Z: np.ndarray, *, epsilon: float, delta: float, diameter: float,
                                rng: SecureRNG, sliding_share: float = 0.5,
                                lower: np.ndarray | None = None, upper: np.ndarray | None = None,
                                ) -> SmoothRelease:
    """Release the center of attention of the m block answers Z (m, p) with Gaussian noise of
    std S_beta(Z)/alpha per coordinate: (epsilon, delta)-DP w.r.t. changing one answer.

    ``diameter`` must bound the distance between any two possible answers (public: e.g. the
    diagonal of the public domain, answers clamped to it by ``lower``/``upper``). The output is
    clamped to [lower, upper] afterwards (post-processing).
    """
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2:
        raise ValueError("answers must be a 2-d array (blocks x answer length)")
    if lower is not None and upper is not None:
        Z = np.clip(Z, lower, upper)
    m, p = Z.shape
    t0 = attention_t0(m)
    params = gaussian_smooth_params(epsilon, delta, p, sliding_share=sliding_share)
    R = radii(Z)
    i = center_of_attention(Z, t0, R)
    S = smooth_sensitivity(R, t0, params.beta, diameter)
    # floating-point-safe: Z[i] rounded to a public grid plus exact rounded-Gaussian noise; the grid
    # adds sqrt(p) 2^-k to the sensitivity, which the std absorbs (std = (S + sqrt(p) 2^-k)/alpha;
    # S + c is still a beta-smooth upper bound on the local sensitivity of the rounded answer)
    rel = gaussian(Z[i], sensitivity=S, noise_multiplier=1.0 / params.alpha, rng=rng)
    value, std = rel.value, float(rel.details["sigma"])
    if lower is not None and upper is not None:
        value = np.clip(value, lower, upper)
    return SmoothRelease(value=value, noise_std=std, sensitivity=S, index=i, params=params)


@dataclass(frozen=True)
class MeanRelease:
    value: np.ndarray
    noise_std: float
    l2_sensitivity: float
    event: dp_event.DpEvent = dp_event.NoOpDpEvent()  # the Gaussian mechanism's, GaussianDpEvent(z)


def clamped_mean_release(Z: np.ndarray, *, lower: np.ndarray, upper: np.ndarray, noise_multiplier: float,
                         rng: SecureRNG) -> MeanRelease:
    """GUPT aggregation (Mohan et al. 2012): mean of the answers clamped to the public box
    [lower, upper], plus N(0, (z * Delta)^2) with Delta = ||upper - lower||_2 / m, the l2 change
    of the mean when one answer changes. Charge ``GaussianDpEvent(noise_multiplier)``."""
    Z = np.asarray(Z, dtype=np.float64)
    m, p = Z.shape
    lo, hi = (np.broadcast_to(np.asarray(b, dtype=np.float64), (p,)) for b in (lower, upper))
    Z = clamp(Z, lo, hi)
    if not noise_multiplier > 0:
        raise ValueError("noise_multiplier must be > 0")
    sens = mean_sensitivity(lo, hi, m, norm=2)
    # floating-point-safe Gaussian on the public grid, event exactly GaussianDpEvent(noise_multiplier)
    rel = gaussian(Z.mean(axis=0), sensitivity=sens, noise_multiplier=noise_multiplier, rng=rng)
    std = float(rel.details["sigma"])
    value = np.clip(rel.value, lower, upper)
    return MeanRelease(value=value, noise_std=std, l2_sensitivity=sens, event=rel.event)


def gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """Smallest z meeting PLD epsilon <= ``epsilon`` at ``delta`` for one Gaussian release
    (the one calibration, :func:`dpfed.core.accounting.gaussian_noise_multiplier`)."""
    return accounting.gaussian_noise_multiplier(epsilon, delta, rtol=1e-4)


def sample_and_aggregate(X: np.ndarray, estimator: Callable[[np.ndarray, int], np.ndarray], *, blocks: int,
                         lower: np.ndarray, upper: np.ndarray, epsilon: float, delta: float, rng: SecureRNG,
                         aggregator: str = "coa") -> tuple[np.ndarray, dp_event.DpEvent]:
    """NRS07 Sec. 4 for any estimator with a vector answer in the public box [lower, upper]:
    split X into ``blocks`` independent blocks, run ``estimator(X_block, j)`` on each, clamp the
    answers to the box, and release their center of attention (smooth-sensitivity Gaussian noise,
    ``aggregator="coa"``) or their clamped mean (``"mean"``, GUPT). Returns (value, event); the
    event, charged before release by the caller, is exactly (epsilon, delta) by the PLD accountant.
    The number of blocks must be public (fixed in advance, not computed from len(X))."""
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    parts = assign_blocks(len(X), blocks, rng.numpy())
    Z = run_blocks(X, parts, estimator)
    if Z.shape[1] != lower.size:
        raise ValueError(f"the estimator's answers have length {Z.shape[1]}, the bounds {lower.size}")
    if aggregator == "coa":
        rel = center_of_attention_release(Z, epsilon=epsilon, delta=delta, rng=rng, lower=lower, upper=upper,
                                          diameter=float(np.linalg.norm(upper - lower)))
        return rel.value, accounting.EpsilonDeltaBoundDpEvent(float(epsilon), float(delta))
    if aggregator == "mean":
        z = gaussian_noise_multiplier(float(epsilon), float(delta))
        return (clamped_mean_release(Z, lower=lower, upper=upper, noise_multiplier=z, rng=rng).value,
                dp_event.GaussianDpEvent(z))
    raise ValueError(f"aggregator must be 'coa' or 'mean', got {aggregator!r}")
