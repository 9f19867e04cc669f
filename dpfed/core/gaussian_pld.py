"""dp-accounting's PLD of the (Poisson-subsampled) Gaussian mechanism, built with its hockey-stick curve
evaluated in one NumPy pass instead of one Python call per grid point.

dp-accounting 0.6 builds this PLD by the connect-the-dots algorithm (Doroshenko et al. 2022): the hockey-stick
divergence delta(epsilon) at every multiple of the grid between two bounds, each point through
``inverse_privacy_loss`` (Zhu, Dong & Wang 2022 for subsampling: the privacy loss without subsampling
log(1 + (e^eps - 1) / q) for REMOVE, -log(1 + (e^-eps - 1) / q) for ADD), one Python call per point. A
Gaussian with a small noise multiplier has hundreds of thousands of points: most of a calibration's time,
seconds per offer (issue 24 item 5). :class:`FastGaussianPrivacyLoss` computes the same formulas, with the
same floating-point operations in the same order, for all points at once; everything else (bounds, tails,
the connect-the-dots PMF) is dp-accounting's own. ``tests/core/test_gaussian_pld.py`` checks the PMFs are
identical to dp-accounting's.
"""
from __future__ import annotations

import math
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting import privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm

__all__ = ["FastGaussianPrivacyLoss", "gaussian_pld", "gaussian_event_pld"]

_ADD, _REMOVE = plm.AdjacencyType.ADD, plm.AdjacencyType.REMOVE


class FastGaussianPrivacyLoss(plm.GaussianPrivacyLoss):
    """``GaussianPrivacyLoss`` whose ``get_delta_for_epsilon`` takes an array in one pass (ADD and REMOVE)."""

    def _x_cutoffs(self, eps: np.ndarray) -> np.ndarray:
        """``inverse_privacy_loss`` of every entry of ``eps`` (dp-accounting's formulas, vectorised)."""
        s, var, q = float(self.sensitivity), float(self._standard_deviation) ** 2, float(self.sampling_prob)
        sign = 1.0 if self.adjacency_type == _REMOVE else -1.0
        if q == 1.0:
            loss = eps
        else:  # log_a_times_exp_b_plus_c(1/q, sign * eps, 1 - 1/q) = d + log1p(-exp(log(-c) - d)), d = b + log(a)
            a, c = 1 / q, 1 - 1 / q
            b = sign * eps
            d = b + np.log(a)
            with np.errstate(divide="ignore", invalid="ignore"):
                loss = np.where(b == 0, np.log(a + c), d + np.log1p(-np.exp(np.log(-c) - d)))
            loss = sign * loss
            edge = math.log(1 - q) if sign > 0 else -math.log(1 - q)  # where dp-accounting returns the limit
            idx = np.flatnonzero(np.abs(eps - edge) <= 1e-8 * abs(edge))  # a superset of math.isclose's
            near = np.array([math.isclose(float(eps[i]), edge) for i in idx], dtype=bool)
            loss = np.asarray(loss, dtype=float)
            loss[idx[near]] = -math.inf if sign > 0 else math.inf
        x = -0.5 * s - loss * var / s
        return x + s if sign < 0 else x

    def get_delta_for_epsilon(self, epsilon: Any) -> Any:
        if self.adjacency_type not in (_ADD, _REMOVE) or np.ndim(epsilon) == 0:
            return super().get_delta_for_epsilon(epsilon)
        epsilons = np.asarray(epsilon, dtype=float)
        deltas = np.zeros_like(epsilons, dtype=float)
        q = self.sampling_prob
        if q == 1.0:
            inverse = np.full_like(epsilons, True, dtype=bool)
        elif self.adjacency_type == _ADD:
            inverse = epsilons < -math.log1p(-q)
        else:
            inverse = epsilons > math.log1p(-q)
            deltas[~inverse] = -np.expm1(epsilons[~inverse])
        x = self._x_cutoffs(epsilons[inverse])
        deltas[inverse] = self.mu_upper_cdf(x) - np.exp(epsilons[inverse] + self.mu_lower_log_cdf(x))
        return np.clip(deltas, 0, 1)


def gaussian_pld(standard_deviation: float, grid: float, sampling_prob: float = 1.0) -> Any:
    """``pld_lib.from_gaussian_mechanism(standard_deviation, value_discretization_interval=grid,
    sampling_prob=sampling_prob)`` (add/remove, connect the dots, pessimistic), computed faster."""

    def single(adjacency: Any) -> Any:
        loss = FastGaussianPrivacyLoss(standard_deviation, sensitivity=1, pessimistic_estimate=True,
                                       log_mass_truncation_bound=-50, sampling_prob=sampling_prob,
                                       adjacency_type=adjacency)
        return pld_lib._create_pld_pmf_from_monotone_privacy_loss(
            loss, pessimistic_estimate=True, value_discretization_interval=grid, use_connect_dots=True)

    return pld_lib._pld_for_subsampled_mechanism(single, sampling_prob)


def gaussian_event_pld(event: Any, count: int, grid: float, relation: Any) -> Any:
    """The PLD dp-accounting's PLD accountant composes for ``count`` x ``event`` when that is a Gaussian or a
    Poisson-subsampled Gaussian under add/remove (the same PMF: :func:`gaussian_pld`), else None (its own way)."""
    inner, q = event, 1.0
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        inner, q = event.event, float(event.sampling_probability)
    if not isinstance(inner, dp_accounting.GaussianDpEvent) or \
            relation is not privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE:
        return None
    if inner.noise_multiplier == 0 or q == 0 or count <= 0:
        return None  # dp-accounting's own cases (nothing, or a non-private release)
    if inner is event:  # count Gaussians at once: one Gaussian with noise / sqrt(count), as dp-accounting does
        return gaussian_pld(float(event.noise_multiplier) / math.sqrt(count), grid)
    return gaussian_pld(float(inner.noise_multiplier), grid, q).self_compose(count)
