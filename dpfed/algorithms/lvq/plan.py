"""The privacy plan of a GLVQ / GMLVQ job from its public params only (local or float distributed noise).

* Round 0 (``init``, budget epsilon_1 = ``init_fraction`` * epsilon): per-class counts (sensitivity 1:
  exact rounded Gaussian round(sigma Z), charged exactly as the Gaussian, or exact discrete Laplace) and
  per-class coordinate sums of the rescaled records. ``gaussian``: L2 sensitivity sqrt(d) (or
  ``init_clip``), one Gaussian mechanism split between counts and sums (the two noise multipliers compose
  to exactly the one calibrated for epsilon_1). ``laplace``: the paper's mechanism, L1 sensitivity d, pure
  epsilon split. ``zero``: only counts are released.
* Rounds 1..T: T = epochs / q Poisson-subsampled Gaussian DP-SGD steps; sigma (``noise_multiplier``) is
  the smallest for which the PLD composition of the initialisation and the T steps meets (epsilon,
  delta) (:func:`dpfed.algorithms.dpsgd.calibrate`). It is computed once when the job is created
  (:func:`prepare_params`), stored in the job's public params, and re-checked by every party before it
  charges. Secure-aggregation jobs are planned by :mod:`dpfed.algorithms.lvq.secure` (RDP).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

import dp_accounting
from dp_accounting import DpEvent, dp_event

from dpfed.algorithms import dpsgd
from dpfed.algorithms.lvq.defaults import DEFAULTS
from dpfed.core import accounting
from dpfed.core.memo import shared_cache

__all__ = ["PLAN_KEYS", "PrivacyPlan", "privacy_plan", "prepare_params", "init_noise"]

#: The params a plan depends on (with the noise multiplier when given).
PLAN_KEYS = ("epsilon", "delta", "epochs", "sampling_rate", "init", "init_fraction", "count_fraction")


@dataclass(frozen=True)
class PrivacyPlan:
    """Noise parameters and DP events of a job, derived from public params only."""

    steps: int
    noise_multiplier: float          # DP-SGD sigma (noise std = sigma * clip)
    count_noise: float               # count noise: discrete Gaussian sigma, or discrete Laplace scale
    sum_noise: float                 # sum noise multiplier: Gaussian std / sqrt(d), or Laplace scale / d
    init_event: DpEvent
    event: DpEvent                   # whole job: init + T steps
    count_epsilon: float = 0.0       # Laplace initialisation: the counts' and the sums' epsilon
    sum_epsilon: float = 0.0

    def init_counts_only(self) -> bool:
        return self.sum_noise == 0.0


def _gaussian_multiplier(eps: float, delta: float) -> float:
    """Smallest Gaussian noise multiplier z with PLD epsilon(Gaussian(z), delta) <= eps (to 1e-5):
    the one calibration, :func:`dpfed.core.accounting.gaussian_noise_multiplier`."""
    return accounting.gaussian_noise_multiplier(eps, delta, rtol=1e-5)


def init_noise(init: str, eps1: float, delta: float, count_fraction: float) -> tuple[float, float, DpEvent]:
    """(count noise, sum noise, event) of the initialisation with budget ``eps1`` (module docstring)."""
    if init == "gaussian":
        z = _gaussian_multiplier(eps1, delta)
        zc, zs = z / math.sqrt(count_fraction), z / math.sqrt(1.0 - count_fraction)
        return zc, zs, accounting.compose([dp_accounting.GaussianDpEvent(zc), dp_accounting.GaussianDpEvent(zs)])
    if init == "laplace":
        ec, es = count_fraction * eps1, (1.0 - count_fraction) * eps1  # as PrivacyPlan.count/sum_epsilon
        # The sums go through the floating-point-safe dpfed.core.mechanisms.laplace (es-DP); it is charged as
        # the worst es-DP mechanism (Kairouz, Oh & Viswanath 2015), valid whatever its grid.
        return 1.0 / ec, 1.0 / es, accounting.compose([dp_event.DiscreteLaplaceDpEvent(ec, 1),
                                                       accounting.EpsilonDeltaBoundDpEvent(es, 0.0)])
    if init == "zero":
        z = _gaussian_multiplier(eps1, delta)
        return z, 0.0, dp_accounting.GaussianDpEvent(z)
    raise ValueError(f"init must be 'gaussian', 'laplace' or 'zero', got {init!r}")


@shared_cache(maxsize=64)
def _plan_cached(key: str, noise_multiplier: float | None) -> PrivacyPlan:
    p = json.loads(key)
    eps, delta = float(p["epsilon"]), float(p["delta"])
    q = float(p["sampling_rate"])
    steps = dpsgd.steps_for(float(p["epochs"]), q)
    frac, cf = float(p["init_fraction"]), float(p["count_fraction"])
    if not 0.0 < frac < 1.0:
        raise ValueError(f"init_fraction must lie in (0, 1), got {frac}")
    if not 0.0 < cf < 1.0:
        raise ValueError(f"count_fraction must lie in (0, 1), got {cf}")
    if steps < 1:
        raise ValueError("epochs / sampling_rate must give at least one step")
    zc, zs, init_event = init_noise(str(p["init"]), frac * eps, delta, cf)
    sgd = dpsgd.calibrate(eps, delta, q, steps, prior=init_event, noise_multiplier=noise_multiplier)
    lap = (frac * eps * cf, frac * eps * (1.0 - cf)) if p["init"] == "laplace" else (0.0, 0.0)
    return PrivacyPlan(steps, sgd.noise_multiplier, zc, zs, init_event, sgd.event, *lap)


def privacy_plan(params: Mapping[str, Any]) -> PrivacyPlan:
    """The job's plan; calibrates sigma (PLD, a few seconds, cached) unless params carry it."""
    return _plan_cached(*dpsgd.plan_key(params, DEFAULTS, PLAN_KEYS))


def prepare_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Fill in defaults and the calibrated ``noise_multiplier`` (so parties need not calibrate; secure jobs:
    :func:`dpfed.algorithms.lvq.secure.secure_lvq_plan`)."""
    return dpsgd.prepared(params, DEFAULTS, lambda p: privacy_plan(p).noise_multiplier)
