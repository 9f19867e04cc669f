"""The privacy plan of a logistic-regression / linear-SVM job from its public params only (local or float
distributed noise); secure-aggregation jobs: :mod:`dpfed.algorithms.linear_models.secure` (RDP).

* Round 0 (``count``): each party releases its number of records with exact rounded-Gaussian noise
  round(sigma Z) (sensitivity 1, charged as ``GaussianDpEvent(z_c)``), z_c calibrated alone for
  ``count_fraction * epsilon``: the coordinator needs the expected batch size q n to average the steps'
  sums (GLVQ's ``init = "zero"`` round, the same accounting).
* Rounds 1..T: T = round(epochs / q) DP-SGD steps on clipped per-record gradients, each the
  Poisson-subsampled Gaussian ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` (Abadi et al. 2016);
  ``sampling_rate = 1`` is noisy full-batch gradient descent (every record in every step). z is the
  smallest for which the PLD composition of the count and the T steps meets (epsilon, delta)
  (:func:`dpfed.algorithms.dpsgd.calibrate`); it is computed once when the job is created
  (:func:`prepare_params`), stored in the job's public params, and re-checked by every party before it charges.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

import dp_accounting
from dp_accounting import DpEvent

from dpfed.algorithms import dpsgd
from dpfed.algorithms.linear_models.defaults import DEFAULTS
from dpfed.core import accounting
from dpfed.core.memo import shared_cache

__all__ = ["PLAN_KEYS", "LinearPlan", "privacy_plan", "prepare_params"]

#: The params a plan depends on (with the noise multiplier when given).
PLAN_KEYS = ("epsilon", "delta", "epochs", "sampling_rate", "count_fraction")


@dataclass(frozen=True)
class LinearPlan:
    """Noise parameters and DP events of a job, derived from public params only."""

    steps: int
    noise_multiplier: float          # DP-SGD z (noise std = z * clip on a step's sum)
    count_noise: float               # the count's rounded-Gaussian sigma (sensitivity 1)
    count_event: DpEvent
    event: DpEvent                   # whole job: count + T steps


@shared_cache(maxsize=64)
def _plan_cached(key: str, noise_multiplier: float | None) -> LinearPlan:
    p = json.loads(key)
    eps, delta = float(p["epsilon"]), float(p["delta"])
    q, cf = float(p["sampling_rate"]), float(p["count_fraction"])
    steps = dpsgd.steps_for(float(p["epochs"]), q)
    if not 0.0 < cf < 1.0:
        raise ValueError(f"count_fraction must lie in (0, 1), got {cf}")
    if steps < 1:
        raise ValueError("epochs / sampling_rate must give at least one step")
    if not delta > 0:
        raise ValueError("DP-SGD needs delta > 0")
    zc = accounting.gaussian_noise_multiplier(cf * eps, delta, rtol=1e-5)
    count_event = dp_accounting.GaussianDpEvent(zc)
    sgd = dpsgd.calibrate(eps, delta, q, steps, prior=count_event, noise_multiplier=noise_multiplier)
    return LinearPlan(steps, sgd.noise_multiplier, zc, count_event, sgd.event)


def privacy_plan(params: Mapping[str, Any]) -> LinearPlan:
    """The job's plan; calibrates z (PLD, a few seconds, cached) unless params carry it."""
    return _plan_cached(*dpsgd.plan_key(params, DEFAULTS, PLAN_KEYS))


def prepare_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Fill in defaults and the calibrated ``noise_multiplier`` (so parties need not calibrate; secure jobs:
    :func:`dpfed.algorithms.linear_models.secure.secure_linear_plan`)."""
    return dpsgd.prepared(params, DEFAULTS, lambda p: privacy_plan(p).noise_multiplier)
