"""The privacy plan of a local-noise k-means fit (one party, or the estimator): every noise parameter and
the composed event, from the public job parameters alone. Shares of epsilon: record count 2 %, final sizes
5 %, the counts of all DP Lloyd steps 5 % (pure, discrete Laplace); the rest is calibrated (PLD, exactly the
job's (epsilon, delta)) between the sample-and-aggregate aggregator and the DP Lloyd steps' Gaussian sums."""
from __future__ import annotations

import math
from dataclasses import dataclass

from dp_accounting import dp_event

from dpfed.core import accounting
from dpfed.core.memo import shared_cache

__all__ = ["METHODS", "AGGREGATORS", "COUNT_SHARE", "SIZES_SHARE", "STEP_COUNT_SHARE", "KMeansPlan", "plan_event",
           "make_plan"]

METHODS = ("sample-aggregate", "lloyd")
AGGREGATORS = ("mean", "coa")
COUNT_SHARE = 0.02        # noisy record count (fixes m): 2 % of epsilon, pure
SIZES_SHARE = 0.05        # noisy final cluster sizes: 5 %, pure
STEP_COUNT_SHARE = 0.05   # noisy counts of all DP Lloyd steps together: 5 %, pure


# --------------------------------------------------------------------------- budget plan

def _share_multiplier(eps: float, delta: float) -> float:
    """The split rule between budget shares, not a calibration: a share ``eps`` of the scaled budget
    becomes the Gaussian multiplier sqrt(2 ln(1.25/delta))/eps (the classic exchange rate, Dwork &
    Roth 2014 Thm. A.1), which fixes how the (epsilon, delta) aggregator and the Gaussian steps share
    it; :func:`make_plan` then calibrates the one scale by :func:`dpfed.core.accounting.calibrate`."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / eps


@dataclass(frozen=True)
class KMeansPlan:
    """Every noise parameter of one party's fit, from public job parameters only."""

    method: str
    k: int
    aggregator: str
    count_noise: float            # discrete Laplace parameter (1/scale) of the record count, 0 = none
    agg_epsilon: float            # coa: (agg_epsilon, agg_delta) smooth-sensitivity release
    agg_delta: float
    agg_noise_multiplier: float   # mean: Gaussian multiplier of the clamped mean
    steps: int                    # DP Lloyd steps (refinement, or the whole of method lloyd)
    step_noise_multiplier: float  # Gaussian multiplier of each step's sums (sensitivity = radius)
    step_count_noise: float       # discrete Laplace parameter of each step's counts
    sizes_noise: float            # discrete Laplace parameter of the final cluster sizes
    epsilon: float
    delta: float


def plan_event(plan: KMeansPlan) -> dp_event.DpEvent:
    """The composition of all of a party's releases under ``plan``."""
    ev: list[dp_event.DpEvent] = []
    if plan.count_noise > 0:
        ev.append(dp_event.DiscreteLaplaceDpEvent(plan.count_noise, 1))
    if plan.method == "sample-aggregate":
        if plan.aggregator == "coa":
            ev.append(accounting.EpsilonDeltaBoundDpEvent(plan.agg_epsilon, plan.agg_delta))
        else:
            ev.append(dp_event.GaussianDpEvent(plan.agg_noise_multiplier))
    for _ in range(plan.steps):
        ev.append(dp_event.GaussianDpEvent(plan.step_noise_multiplier))
        ev.append(dp_event.DiscreteLaplaceDpEvent(plan.step_count_noise, 1))
    ev.append(dp_event.DiscreteLaplaceDpEvent(plan.sizes_noise, 1))
    return accounting.compose(ev)


def _plan_at(x: float, method: str, k: int, aggregator: str, steps: int, eps: float, delta: float,
             agg_weight: float) -> KMeansPlan:
    count = COUNT_SHARE * eps if method == "sample-aggregate" else 0.0
    scaled = x * eps  # the part of the budget that is calibrated
    agg_eps = scaled * agg_weight if method == "sample-aggregate" else 0.0
    step_eps = scaled * (1.0 - agg_weight) / steps if steps else 0.0
    return KMeansPlan(
        method=method, k=k, aggregator=aggregator, count_noise=count,
        agg_epsilon=agg_eps if aggregator == "coa" else 0.0, agg_delta=delta / 2 if aggregator == "coa" else 0.0,
        agg_noise_multiplier=(_share_multiplier(agg_eps, delta) if method == "sample-aggregate" and aggregator == "mean"
                              else 0.0),
        steps=steps, step_noise_multiplier=_share_multiplier(step_eps, delta) if steps else 0.0,
        step_count_noise=STEP_COUNT_SHARE * eps / steps if steps else 0.0,
        sizes_noise=SIZES_SHARE * eps, epsilon=eps, delta=delta)


@shared_cache(maxsize=256)
def make_plan(method: str, k: int, aggregator: str, steps: int, epsilon: float, delta: float) -> KMeansPlan:
    """Calibrate one budget scale x so that the PLD epsilon (at ``delta``) of :func:`plan_event` is
    within 0.1 % below ``epsilon``, never above: :func:`dpfed.core.accounting.calibrate` on the
    noise scale 1/x. Shares: record count 2 %, sizes 5 %, step counts 5 % (pure, fixed); the rest
    is split between the aggregator (1/2 if refining, else all) and the DP Lloyd steps (equal shares)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if aggregator not in AGGREGATORS:
        raise ValueError(f"aggregator must be one of {AGGREGATORS}, got {aggregator!r}")
    if method == "lloyd" and steps < 1:
        raise ValueError("DP Lloyd needs at least one iteration")
    agg_weight = 1.0 if method == "sample-aggregate" and steps == 0 else (0.5 if method == "sample-aggregate" else 0.0)

    def at(noise_scale: float) -> KMeansPlan:
        return _plan_at(1.0 / noise_scale, method, k, aggregator, steps, epsilon, delta, agg_weight)

    s = accounting.calibrate(lambda v: plan_event(at(v)), epsilon, delta, lo=1e-4, hi=1e4, guess=2.0, rtol=1e-3)
    return at(s)
