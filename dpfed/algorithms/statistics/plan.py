"""The statistics release plan, from the job's public parameters and schema alone: the block weights, the
mechanism and its noise, and the ONE event the party charges for every query of the job together.

All blocks of :class:`~.queries.Layout` go out as one integer vector. Block b is scaled by an integer weight
W_b (fixed-point units per record: a count cell gets W_b, a Bernstein basis vector is rounded to integers
summing to exactly W_b), so one record moves the vector by at most sum_b h_b W_b in L1 and
sqrt(sum_b h_b W_b^2) in L2, h_b the block's levels (1, or a quantile tree's levels: one node per level,
Hay et al. 2010). Every block has the same weight, so each level is one of m = sum_b h_b equal shares of the
budget: epsilon / m under Laplace, or a noise multiplier sqrt(m) z under the Gaussian.

Mechanism, as in naive Bayes (:mod:`dpfed.algorithms.naive_bayes.plan`): the exact discrete Laplace
(Canonne, Kamath & Steinke 2020; scale (L1 + 1) / epsilon, charged as ``DiscreteLaplaceDpEvent(epsilon, 1)``,
the randomized-response pair that dominates every epsilon-DP mechanism, Kairouz, Oh & Viswanath 2015) or the
exactly sampled rounded Gaussian round(sigma Z) with sigma = z L2 (a post-processing of the Gaussian
mechanism: ``GaussianDpEvent(z)``, z the smallest multiplier the PLD ledger accepts). ``auto`` takes the one
with the smaller per-entry variance: 2 (m / epsilon)^2 against m z^2; delta = 0 always means Laplace.
Distributed noise under secure aggregation is :mod:`.secure`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.statistics.queries import Layout, parse_queries
from dpfed.algorithms.contract import JobSpec
from dpfed.core import accounting
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["TASK_KIND", "MECHANISMS", "GRID", "MIN_GRID", "MAX_SIGMA_UNITS", "StatsPlan", "discrete_laplace_var",
           "job_layout", "local_plan", "sensitivities", "CONFIDENCE"]

TASK_KIND = "statistics"
MECHANISMS = ("auto", "laplace", "gaussian")
GRID = 1 << 16            # fixed-point units per record and block (u resolution 2^-16 of the range)
MIN_GRID = 1 << 10
MAX_SIGMA_UNITS = 1 << 26  # rounded-Gaussian std in grid units (its float filter decides ~all draws)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class StatsPlan:
    """The release plan: mechanism, integer block weights, noise, and the event the party charges."""

    mechanism: str            # "laplace", "gaussian", "ddgauss" or "ddlaplace" (distributed: :mod:`.secure`)
    weights: np.ndarray       # integer units per record, one per block
    l1: int
    l2: float
    noise: float              # Laplace scale t (ddlaplace: of the m honest shares' sum), Gaussian sigma, or
    #                           one share's sigma (ddgauss)
    noise_var: float          # per entry, grid units^2 (ddgauss, ddlaplace: of ONE share)
    event: dp_event.DpEvent

    def entry_variance(self, block: int, shares: int = 1) -> float:
        """Noise variance of one entry of ``block`` in its natural units (records), for ``shares`` noise shares."""
        return float(shares * self.noise_var / float(self.weights[block]) ** 2)


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


@shared_cache(maxsize=64)
def local_plan(levels: tuple[int, ...], eps: float, delta: float, mech: str) -> StatsPlan:
    """The plan of equal-weight blocks of ``levels`` each (:attr:`.queries.Layout.levels`) at (eps, delta)."""
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
        weights = np.full(len(levels), GRID, np.int64)
        l1, l2 = sensitivities(weights, levels)
        t = (l1 + 1) / eps  # dpfed.core.mechanisms.discrete_laplace's scale for L1 > 4096
        return StatsPlan("laplace", weights, l1, l2, t, discrete_laplace_var(t),
                         dp_event.DiscreteLaplaceDpEvent(float(eps), 1))
    weights = np.full(len(levels), grid, np.int64)
    l1, l2 = sensitivities(weights, levels)
    sigma = z * l2 * (1.0 + 1e-12)  # GaussianDpEvent(sigma / l2) stays >= z after rounding
    return StatsPlan("gaussian", weights, l1, l2, sigma, sigma ** 2 + 1.0 / 12.0,
                     dp_event.GaussianDpEvent(float(z)))
