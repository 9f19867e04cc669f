"""Accounting and calibration of distributed discrete Gaussian noise (KLS21).

Epsilon of ``steps`` Poisson-subsampled releases of a :class:`DistributedDiscreteGaussianDpEvent`
by its RDP curve (:func:`dpfed.core.events.event_rdp`) and the RDP -> (epsilon, delta) conversion of
Canonne, Kamath & Steinke 2020, Prop. 12 (:func:`ddgauss_epsilon`), and the smallest share sigma
that meets a target (:func:`calibrate_sigma_share`). Kairouz, Liu & Steinke, ICML 2021 (KLS21).
"""
from __future__ import annotations

import math

from dp_accounting.rdp import rdp_privacy_accountant

from dpfed.core.events import RDP_ORDERS, DistributedDiscreteGaussianDpEvent, event_rdp
from dpfed.core.rotation import padded_dimension
from dpfed.core.rounding import DEFAULT_BETA, rounded_l1_bound, rounded_l2_bound

__all__ = ["ddgauss_epsilon", "distributed_dp_sgd_epsilon", "calibrate_sigma_share"]


def ddgauss_epsilon(event: DistributedDiscreteGaussianDpEvent, delta: float, *,
                    sampling_rate: float = 1.0, steps: int = 1) -> float:
    """Epsilon at ``delta`` of ``steps`` adaptive releases of ``event``, each on a Poisson(q)
    subsample (q = 1: no subsampling), by RDP composition and the RDP -> (eps, delta) conversion
    of Canonne, Kamath & Steinke 2020, Prop. 12 (dp-accounting's ``compute_epsilon``)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    if steps == 0:
        return 0.0
    rdp = int(steps) * event_rdp(event, RDP_ORDERS, sampling_rate)
    return float(rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, rdp, delta)[0])


def distributed_dp_sgd_epsilon(sigma_share: float, honest_parties: int, *, clip: float, gamma: float,
                               dimension: int, sampling_rate: float, steps: int, delta: float,
                               beta: float = DEFAULT_BETA) -> float:
    """Epsilon of DP-SGD whose sums go through :func:`encode`: each record's clipped vector is one
    encoded row (sensitivities from :func:`rounded_l2_bound`), ``honest_parties`` shares of
    N_Z(0, sigma_share^2) per round, ``steps`` Poisson(q) rounds."""
    d = padded_dimension(dimension)
    l2 = rounded_l2_bound(clip / gamma, beta, d)
    event = DistributedDiscreteGaussianDpEvent(float(sigma_share), int(honest_parties), l2,
                                               rounded_l1_bound(l2, d), d)
    return ddgauss_epsilon(event, delta, sampling_rate=sampling_rate, steps=steps)


def calibrate_sigma_share(target_epsilon: float, delta: float, *, honest_parties: int,
                          l2_sensitivity: float, l1_sensitivity: float, dimension: int,
                          sampling_rate: float = 1.0, steps: int = 1, rtol: float = 1e-4) -> float:
    """Smallest sigma_share (to ``rtol``, never below it) whose :func:`ddgauss_epsilon` meets
    ``target_epsilon``: bisection in log sigma on a bracket where the target is missed / met
    (epsilon decreases in sigma: every term of :func:`ddgauss_rdp` does). At least 1/2."""
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ValueError(f"target_epsilon must be positive and finite, got {target_epsilon!r}")

    def eps(s: float) -> float:
        ev = DistributedDiscreteGaussianDpEvent(float(s), int(honest_parties), float(l2_sensitivity),
                                                float(l1_sensitivity), int(dimension))
        return ddgauss_epsilon(ev, delta, sampling_rate=sampling_rate, steps=steps)

    lo = 0.5
    if eps(lo) <= target_epsilon:
        return lo
    hi = 1.0
    while eps(hi) > target_epsilon:
        lo, hi = hi, 2.0 * hi
        if hi > 2.0**40:
            raise ValueError("no sigma_share below 2^40 meets the target")
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        if eps(mid) > target_epsilon:
            lo = mid
        else:
            hi = mid
    return hi
