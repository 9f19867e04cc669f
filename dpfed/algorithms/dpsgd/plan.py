"""The privacy plan of DP-SGD from public parameters only: the steps, the noise multiplier, the event.

T = round(epochs / q) Poisson-subsampled Gaussian steps (Abadi et al. 2016) after an optional earlier
release of the same job (``prior``, e.g. a private initialisation), accounted together by PLD: the
noise multiplier z is the smallest for which ``prior`` composed with the T steps meets (epsilon,
delta) (:func:`dpfed.core.accounting.calibrate_noise_multiplier`). Under secure aggregation the steps
are planned by :mod:`dpfed.algorithms.dpsgd.secure` instead (RDP).
"""
from __future__ import annotations

from dataclasses import dataclass

from dp_accounting import DpEvent

from dpfed.core import accounting

__all__ = ["DpSgdPlan", "calibrate", "steps_for"]


def steps_for(epochs: float, sampling_rate: float) -> int:
    """T = epochs / q rounded to the nearest integer (one epoch: 1 / q steps of expected batch q n)."""
    return int(round(float(epochs) / float(sampling_rate)))


@dataclass(frozen=True)
class DpSgdPlan:
    """T steps at rate q with noise multiplier z, and the event of ``prior`` composed with them."""

    noise_multiplier: float
    sampling_rate: float
    steps: int
    event: DpEvent


def calibrate(epsilon: float, delta: float, sampling_rate: float, steps: int, *, prior: DpEvent | None = None,
              noise_multiplier: float | None = None) -> DpSgdPlan:
    """The plan meeting (epsilon, delta) with ``prior`` (calibrates z, a few seconds, unless given: a
    party re-checks a given z by the plan's event before it charges)."""
    if noise_multiplier is None:
        noise_multiplier = accounting.calibrate_noise_multiplier(epsilon, delta, sampling_rate, steps,
                                                                 extra_event=prior)
    events = ([] if prior is None else [prior]) + [accounting.dp_sgd_event(noise_multiplier, sampling_rate, steps)]
    return DpSgdPlan(float(noise_multiplier), float(sampling_rate), int(steps), accounting.compose(events))
