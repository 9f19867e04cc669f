"""The statistics release plan, from the job's public parameters and schema alone: the block weights, the
mechanism and its noise, and the ONE event the party charges for every query of the job together.

All blocks of :class:`~.queries.Layout` go out as one integer vector. Block b is scaled by an integer weight
W_b (fixed-point units per record: a count cell gets W_b, a Bernstein basis vector is rounded to integers
summing to exactly W_b), so one record moves block b by at most W_b in L1 and L2 per level, h_b the block's
levels (1, or a quantile tree's levels: one node per level, Hay et al. 2010); the vector's sensitivities are
sum_b h_b W_b (L1) and sqrt(sum_b h_b W_b^2) (L2). Each of the m = sum_b h_b levels gets an equal share of the
budget.

Laplace (pure DP): a count block (histogram, table, count, quantile tree: :attr:`.queries.Layout.counts`) releases whole
counts, W_b = 1; a moments block needs the fine grid W_b = :data:`GRID`. Block b gets its own exact discrete
Laplace (Canonne, Kamath & Steinke 2020) of the scale :func:`dpfed.core.mechanisms.discrete_laplace_scale`
gives integer sensitivity W_b at e = epsilon / m (rounded down to a float): t_b = W_b / e for W_b <= 4096 (here
m / epsilon for counts), (W_b + 1) / e above, so each level is e-DP, W_b / t_b <= e exactly, and the m levels
compose to pure sum_b h_b W_b / t_b <= epsilon. Whole counts at scale m / epsilon have the discrete Laplace's
smaller error (E|X| = 0.85 at scale 1 against the continuous 1.0). Charged as ``DiscreteLaplaceDpEvent(epsilon,
1)``, the randomized-response pair that dominates every epsilon-DP mechanism (Kairouz, Oh & Viswanath 2015);
the party reports the same pair at the vector's exact pure epsilon (:func:`pure_epsilon`).

Gaussian: the exactly sampled rounded Gaussian round(sigma Z) with sigma = z L2 on EQUAL weights W (a
post-processing of the Gaussian mechanism: ``GaussianDpEvent(z)``, z the smallest multiplier the PLD ledger
accepts). Equal weights keep one sigma for the whole vector and each level's noise multiplier sigma / W =
z sqrt(m) equal; per-block weights with per-block sigma_b = z sqrt(m) W_b would give the same multipliers (the
same event) but whole counts would then carry the rounding of round(sigma_b Z) at a scale of a few units, for
no gain in variance: the Gaussian keeps the fine grid for every block. ``auto`` takes the one with the smaller
per-entry variance: 2 (m / epsilon)^2 against m z^2; delta = 0 always means Laplace. Distributed noise under
secure aggregation is :mod:`.secure`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.statistics.queries import Layout, parse_queries
from dpfed.algorithms.contract import JobSpec
from dpfed.core import accounting
from dpfed.core.mechanisms import discrete_laplace_scale
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["TASK_KIND", "MECHANISMS", "GRID", "MIN_GRID", "MAX_SIGMA_UNITS", "StatsPlan",
           "discrete_laplace_var", "job_layout", "local_plan", "sensitivities", "CONFIDENCE", "block_weights",
           "level_epsilon", "laplace_scales", "pure_epsilon"]

TASK_KIND = "statistics"
MECHANISMS = ("auto", "laplace", "gaussian")
GRID = 1 << 16            # fixed-point units per record and block (u resolution 2^-16 of the range)
MIN_GRID = 1 << 10
MAX_SIGMA_UNITS = 1 << 26  # rounded-Gaussian std in grid units (its float filter decides ~all draws)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class StatsPlan:
    """The release plan: mechanism, integer block weights, per-block noise, and the event the party charges."""

    mechanism: str            # "laplace", "gaussian", "ddgauss" or "ddlaplace" (distributed: :mod:`.secure`)
    weights: np.ndarray       # integer units per record, one per block
    l1: int
    l2: float
    noise: np.ndarray         # per block, in its units: Laplace scale t_b (ddlaplace: of the m honest shares'
    #                           sum), Gaussian sigma, or one share's sigma (ddgauss)
    noise_var: np.ndarray     # per block, per entry, its units^2 (ddgauss, ddlaplace: of ONE share)
    event: dp_event.DpEvent
    scales: tuple[Fraction, ...] = ()  # laplace, ddlaplace: each block's exact rational scale (as sampled)

    def entry_variance(self, block: int, shares: int = 1) -> float:
        """Noise variance of one entry of ``block`` in its natural units (records), for ``shares`` noise shares."""
        return float(shares * float(self.noise_var[block]) / float(self.weights[block]) ** 2)


def discrete_laplace_var(t: float) -> float:
    """Variance of P(x) ∝ exp(-|x|/t) on Z: 2 e^(-1/t) / (1 - e^(-1/t))^2."""
    q = math.exp(-1.0 / t)
    return 2.0 * q / (1.0 - q) ** 2


def job_layout(spec: JobSpec) -> Layout:
    """The job's :class:`Layout` from its ``queries`` and ``group_by`` (ValueError with the reason)."""
    queries = spec.params.get("queries")
    if not queries:
        from dpfed.algorithms.statistics.queries import default_queries

        queries = default_queries(spec.schema)
    group_by = spec.params.get("group_by")
    return _layout(spec.schema.to_json(), _freeze(queries), group_by if isinstance(group_by, str) else None)


def _freeze(queries: object) -> tuple:
    """The queries as a hashable cache key (dicts as canonical JSON text; anything else is refused later)."""
    if not isinstance(queries, (list, tuple)):
        raise ValueError("statistics 'queries' must be a list")
    try:
        return tuple(q if isinstance(q, str) else "\x00" + json.dumps(q, sort_keys=True) for q in queries)
    except (TypeError, ValueError):
        raise ValueError("statistics queries must be strings or JSON objects") from None


@shared_cache(maxsize=64)
def _layout(schema_json: str, queries: tuple, group_by: str | None) -> Layout:
    items = [json.loads(q[1:]) if q.startswith("\x00") else q for q in queries]
    return Layout.build(parse_queries(items, group_by), Schema.from_json(schema_json))


def sensitivities(weights: np.ndarray, levels: tuple[int, ...]) -> tuple[int, float]:
    """(L1, L2) of one record: sum_b h_b W_b and sqrt(sum_b h_b W_b^2) (module docstring)."""
    h = np.asarray(levels, dtype=np.float64)
    return int(np.sum(h * weights)), float(np.sqrt(np.sum(h * weights.astype(np.float64) ** 2)))


def block_weights(counts: tuple[bool, ...], grid: int = GRID) -> np.ndarray:
    """Each block's weight under Laplace: 1 for a count block (``counts[b]``), ``grid`` otherwise."""
    return np.array([1 if c else grid for c in counts], np.int64)


def level_epsilon(eps: float, m: int) -> float:
    """epsilon / m rounded down to a float, so that m of them sum to at most epsilon exactly."""
    e = float(Fraction(eps) / m)
    return e if Fraction(e) * m <= Fraction(eps) else float(np.nextafter(e, 0.0))


def laplace_scales(weights: np.ndarray, e: float) -> tuple[Fraction, ...]:
    """Each block's discrete Laplace scale for one level of sensitivity W_b at ``e`` (module docstring)."""
    return tuple(discrete_laplace_scale(int(w), e) for w in weights)


def pure_epsilon(weights: np.ndarray, levels: tuple[int, ...], scales: tuple[Fraction, ...]) -> float:
    """The vector's pure epsilon sum_b h_b W_b / t_b, as the smallest float not below the exact rational."""
    exact = sum((Fraction(int(h) * int(w)) / t for h, w, t in zip(levels, weights, scales, strict=True)), Fraction(0))
    e = float(exact)
    return e if Fraction(e) >= exact else float(np.nextafter(e, np.inf))


@shared_cache(maxsize=64)
def local_plan(levels: tuple[int, ...], counts: tuple[bool, ...], eps: float, delta: float, mech: str) -> StatsPlan:
    """The plan of blocks of ``levels`` each (:attr:`.queries.Layout.levels`; ``counts``: which are count blocks,
    :attr:`.queries.Layout.counts`) at (eps, delta) (module docstring)."""
    if mech == "gaussian" and delta == 0:
        raise ValueError("the Gaussian mechanism needs delta > 0; use mechanism 'laplace' for pure DP")
    m = int(sum(levels))
    z = accounting.gaussian_noise_multiplier(eps, delta, rtol=1e-5) if delta > 0 and mech != "laplace" else math.inf
    grid = min(GRID, int(MAX_SIGMA_UNITS / (z * math.sqrt(m)))) if math.isfinite(z) else GRID
    use_gauss = mech == "gaussian" or (mech == "auto" and math.isfinite(z) and m * z * z < 2.0 * (m / eps) ** 2
                                       and grid >= MIN_GRID)
    if use_gauss and grid < MIN_GRID:
        raise ValueError(f"epsilon {eps:g} is too small for an integer Gaussian release of {m} blocks; "
                         "use mechanism 'laplace'")
    if not use_gauss:
        weights = block_weights(counts)
        l1, l2 = sensitivities(weights, levels)
        scales = laplace_scales(weights, level_epsilon(eps, m))
        t = np.array([float(x) for x in scales])
        return StatsPlan("laplace", weights, l1, l2, t, np.array([discrete_laplace_var(x) for x in t]),
                         dp_event.DiscreteLaplaceDpEvent(float(eps), 1), scales)
    weights = np.full(len(levels), grid, np.int64)
    l1, l2 = sensitivities(weights, levels)
    sigma = z * l2 * (1.0 + 1e-12)  # GaussianDpEvent(sigma / l2) stays >= z after rounding
    return StatsPlan("gaussian", weights, l1, l2, np.full(len(levels), sigma), np.full(len(levels), sigma ** 2 + 1 / 12),
                     dp_event.GaussianDpEvent(float(z)))
