"""Calibrated noise against dp_accounting directly (an independent reference), at the corners of the job
ranges: the calibrated noise meets the target under the PLD accountant the ledger uses (never weaker), and
noise smaller by a little more than the calibration tolerance misses it (the calibration is tight).

Deterministic (no randomness): no false alarms."""
from __future__ import annotations

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant

from dpfed.core import accounting

RTOL = 1e-4


def _reference_epsilon(event: dp_accounting.DpEvent, delta: float, target: float) -> float:
    """dp_accounting's own PLD accountant on the ledger's grid for ``target``."""
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=accounting.pld_grid(target))
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def _sgd(sigma: float, q: float, steps: int) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)


@pytest.mark.parametrize("target,delta,q,steps", [
    (0.001, 1e-5, 0.01, 5000),   # the smallest job epsilon (a grid as wide as a tenth of it)
    (1.0, 1e-5, 0.01, 5000),     # the LVQ default
    (100.0, 1e-5, 0.01, 5000),   # the largest epsilon corner
    (1.0, 1e-9, 0.01, 100),
    (1.0, 0.5, 1.0, 1),
])
def test_dp_sgd_calibration_meets_target_and_is_tight(target: float, delta: float, q: float, steps: int) -> None:
    sigma = accounting.calibrate_noise_multiplier(target, delta, q, steps, rtol=RTOL)
    assert _reference_epsilon(_sgd(sigma, q, steps), delta, target) <= target
    assert _reference_epsilon(_sgd(sigma * (1 - 3 * RTOL), q, steps), delta, target) > target


@pytest.mark.parametrize("target,delta", [(0.001, 1e-5), (1.0, 1e-5), (100.0, 1e-5), (1.0, 0.999), (1e-3, 1e-9)])
def test_gaussian_calibration_meets_target_and_is_tight(target: float, delta: float) -> None:
    z = accounting.gaussian_noise_multiplier(target, delta, rtol=1e-5)
    assert _reference_epsilon(dp_accounting.GaussianDpEvent(z), delta, target) <= target
    assert _reference_epsilon(dp_accounting.GaussianDpEvent(z * (1 - 3e-5)), delta, target) > target
