"""The privacy plan of DP-SGD from public parameters only: the steps, the noise multiplier, the event.

T = round(epochs / q) Poisson-subsampled Gaussian steps (Abadi et al. 2016) after an optional earlier
release of the same job (``prior``, e.g. a private initialisation), accounted together by PLD: the
noise multiplier z is the smallest for which ``prior`` composed with the T steps meets (epsilon,
delta) (:func:`dpfed.core.accounting.calibrate_noise_multiplier`). Under secure aggregation the steps
are planned by :mod:`dpfed.algorithms.dpsgd.secure` instead (RDP).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from dp_accounting import DpEvent

from dpfed.algorithms.secure_noise import is_secure
from dpfed.core import accounting

__all__ = ["DpSgdPlan", "calibrate", "steps_for", "spent", "plan_key", "prepared"]


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


def spent(event: DpEvent, epsilon: float, delta: float) -> tuple[float, bool]:
    """The epsilon that ``event`` spends at ``delta`` by PLD on the target's grid, and whether it is only a
    proven lower bound (cheap, where the event is far over ``epsilon``): what a party compares with the job's
    stated epsilon before it charges."""
    low = accounting.exceeds(event, delta, epsilon) if delta > 0 else None
    if low is not None:
        return low, True
    return accounting.epsilon(event, delta, pld_discretization=accounting.pld_grid(epsilon)), False


def plan_key(params: Mapping[str, Any], defaults: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, float | None]:
    """A learner's plan cache key: the public params ``keys`` its plan depends on (defaults filled in, as sorted
    JSON), and the noise multiplier the params carry (None: to be calibrated)."""
    full = {**defaults, **params}
    nm = params.get("noise_multiplier")
    return json.dumps({k: full[k] for k in keys}, sort_keys=True), None if nm is None else float(nm)


def prepared(params: Mapping[str, Any], defaults: Mapping[str, Any],
             multiplier: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
    """``params`` with the defaults and, for a private job not under secure aggregation (planned by RDP instead),
    the calibrated ``noise_multiplier`` (so parties need not calibrate; each re-checks it before it charges)."""
    out = {**defaults, **params}
    if out.get("private", True) and not is_secure(out):
        out["noise_multiplier"] = multiplier(out)
    return out
