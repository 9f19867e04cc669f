"""Privacy loss distribution of the distributed discrete Gaussian, built from its probability mass functions.

The noise of a :class:`~dpfed.core.events.DistributedDiscreteGaussianDpEvent` is, per coordinate, the
sum Y of ``parties`` i.i.d. discrete Gaussians N_Z(0, sigma_share^2) (KLS21): a distribution on Z whose
pmf is the n-fold convolution of the discrete Gaussian's (computed here exactly in float64, all terms
positive). For an integer shift a, the pair (Y + a, Y) is a pair of pmfs on Z, so its privacy loss
distribution is exact (dp-accounting's ``from_two_probability_mass_functions``, pessimistic rounding
on the grid; Meiser & Mohammadi 2018). Poisson subsampling at rate q (add/remove) takes the pairs
(remove) upper = (1-q) p + q p(. - a), lower = p and (add) upper = p, lower = the same mixture, both
directions kept (dp-accounting's convention for subsampled additive noise).

When the pmf pair is exact for the event (:func:`exact_shift`), every case proved:
* dimension 1: the shift is an integer a with |a| <= min(Delta_2, Delta_1). Y is log-concave (the
  discrete Gaussian is, and convolution keeps discrete log-concavity, Hoggar 1974), so the shifted
  family has a monotone likelihood ratio, the most powerful tests are threshold tests whatever a > 0,
  and their power grows with a (also for the mixture (1-q) p + q p(. - a), whose power is (1-q) alpha +
  q times the shifted power): the pair at the largest a dominates every smaller one, in both directions.
* one coordinate moves by one (Delta_2^2 < 2 or Delta_1 < 2, integer shifts): the other coordinates are
  the same independent noise in both worlds and drop out; the 1-D pair at a = 1 remains.
* without subsampling and Delta_2 < 2: every coordinate of an integer shift is in {-1, 0, 1}, at most
  m = min(floor(Delta_2^2), floor(Delta_1), d) of them non-zero: the pair is the product of at most m
  unit pairs, dominated by exactly m of them (the product with fewer is a post-processing, dropping
  coordinates), i.e. the m-fold composition of the 1-D unit pair.
Otherwise (larger shifts in several dimensions, "party" rounding, whose shift is a real vector rounded
at random) no exact pmf pair is known: the ledger accounts a "record" event by the PLD of the Gaussian
mechanism that dominates it up to a pointwise factor (:mod:`dpfed.core.ddgauss_gdp`), and the rest by its RDP
curve (KLS21 Prop. 14, :func:`dpfed.core.events.event_rdp`) combined with the PLD of the others
(:class:`dpfed.core.accountants` docstring), provable upper bounds as well.

Truncation: the pmfs are kept on [-W, W] with W - a = ceil(sqrt(2 n sigma^2 * 80)); the discrete
Gaussian is sigma^2-sub-Gaussian (Canonne, Kamath & Steinke 2020, Cor. 9), so the sum is n sigma^2-
sub-Gaussian and the upper distribution's mass outside [-W, W] is <= 2 exp(-80) < 4e-35 (mixture or
not). That mass is added to the PLD's infinity mass (a loss of +infinity): pessimistic, and exact about it.

Floating point: each share's pmf is kept on [-B, B], B = 2 (W + a) + 1 (a share beyond B while the sum is
within W + a needs the other shares to sum below -(W + a): relative weight below exp(-160)), and the n-fold
convolution of positive arrays has relative error below (K u) per level (K <= :data:`MAX_SUPPORT` terms,
u = 2^-53, at most 2 log2(n) + 2 levels): every computed mass is within a factor 1 +- :data:`PMF_RELATIVE_ERROR`
of the true one. For k such releases composed, true upper <= (1 + eta)^k computed upper and true lower >=
(1 - eta)^k computed lower pointwise, so delta(eps) <= (1 + eta)^k delta_computed(eps - k log((1 + eta) /
(1 - eta))): the accountant asks its PLD at that smaller delta and adds that epsilon
(:class:`dpfed.core.accountants` ``_PLDAccountant``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpfed.core.events import DistributedDiscreteGaussianDpEvent, event_invalid

__all__ = ["exact_shift", "sum_pmf", "ddgauss_pld", "MAX_SUPPORT", "TAIL_MASS", "PMF_RELATIVE_ERROR"]

#: Largest support (points of Z) of the summed pmf built; beyond it the RDP curve is used.
MAX_SUPPORT = 60_001
#: ln of the sub-Gaussian tail kept out of each side of the support.
_TAIL_LOG = 80.0
#: Upper bound on the upper distribution's mass outside the support (both sides).
TAIL_MASS = 2.0 * math.exp(-_TAIL_LOG)
#: Relative error of every computed mass, at most (module docstring: 60,001 * 34 * 2^-53 < 2.3e-10).
PMF_RELATIVE_ERROR = 1e-9


def exact_shift(event: DistributedDiscreteGaussianDpEvent, sampling_rate: float = 1.0) -> tuple[int, int] | None:
    """(shift a, repetitions m) when the event's worst case is m independent 1-D pairs at shift a (module
    docstring), else None."""
    if event_invalid(event) or event.rounding != "record":
        return None
    l2, l1, d = float(event.l2_sensitivity), float(event.l1_sensitivity), int(event.dimension)
    if d == 1:
        return max(1, int(math.floor(min(l2, l1) + 1e-12))), 1
    if l2 * l2 < 2.0 or l1 < 2.0:
        return 1, 1
    if l2 < 2.0 and sampling_rate >= 1.0:
        return 1, int(min(math.floor(l2 * l2 + 1e-12), math.floor(l1 + 1e-12), d))
    return None


def _half_width(sigma_share: float, parties: int) -> int:
    return int(math.ceil(math.sqrt(2.0 * parties * sigma_share ** 2 * _TAIL_LOG)))


def sum_pmf(sigma_share: float, parties: int, reach: int) -> tuple[np.ndarray, int] | None:
    """(pmf, offset): the pmf of the sum of ``parties`` i.i.d. N_Z(0, sigma_share^2), accurate on -reach..reach
    (module docstring), as an array over -offset..offset (index i is the integer i - offset); None when its
    support would exceed :data:`MAX_SUPPORT`."""
    w1 = reach if parties == 1 else 2 * reach + 1
    if parties * (2 * w1 + 1) > MAX_SUPPORT:
        return None
    x = np.arange(-w1, w1 + 1, dtype=np.float64)
    base = np.exp(-x * x / (2.0 * sigma_share ** 2))
    base /= base.sum()  # the mass beyond w1 is below 1e-35 of the total: within PMF_RELATIVE_ERROR
    out, power, k = np.ones(1), base, int(parties)
    while k:  # n-fold convolution by squaring; all terms positive, so tails keep their relative precision
        if k & 1:
            out = np.convolve(out, power)
        k >>= 1
        if k:
            power = np.convolve(power, power)
    return out, (out.size - 1) // 2


def _log_pmfs(p: np.ndarray, offset: int, lo: int, hi: int, shift: int,
              q: float) -> tuple[dict[Any, float], dict[Any, float]]:
    """log p and log((1-q) p + q p(. - shift)) on the integers lo..hi."""
    xs = np.arange(lo, hi + 1)
    base = p[xs + offset]
    mixed = q * p[xs - shift + offset] + (1.0 - q) * base if q < 1.0 else p[xs - shift + offset]
    with np.errstate(divide="ignore"):
        keys = xs.tolist()
        return (dict(zip(keys, np.log(base).tolist(), strict=True)),
                dict(zip(keys, np.log(mixed).tolist(), strict=True)))


def ddgauss_pld(event: DistributedDiscreteGaussianDpEvent, sampling_rate: float, grid: float) -> tuple[Any, int] | None:
    """(PLD, k): the PLD (dp-accounting ``PrivacyLossDistribution``, pessimistic, on ``grid``) of ``event``
    Poisson-subsampled at ``sampling_rate`` (add/remove) and the number k of computed pmf pairs composed in it
    (each within :data:`PMF_RELATIVE_ERROR`), or None when no exact pmf pair is known (module docstring)."""
    shape = exact_shift(event, sampling_rate)
    if shape is None or not 0.0 < sampling_rate <= 1.0:
        return None
    shift, reps = shape
    width = _half_width(float(event.sigma_share), int(event.parties)) + shift
    built = sum_pmf(float(event.sigma_share), int(event.parties), width + shift)
    if built is None:
        return None
    p, offset = built
    log_p, log_m = _log_pmfs(p, offset, -width, width, shift, float(sampling_rate))
    tail = {"outside": math.log(TAIL_MASS)}  # upper mass outside the support: privacy loss +infinity
    opts: dict[str, Any] = {"pessimistic_estimate": True, "value_discretization_interval": grid}
    remove = pld_lib.from_two_probability_mass_functions(log_p, {**log_m, **tail}, **opts)
    if sampling_rate >= 1.0:  # (p(. - a), p) and (p, p(. - a)) are mirror images: one direction
        one = remove
    else:
        add = pld_lib.from_two_probability_mass_functions(log_m, {**log_p, **tail}, **opts)
        one = pld_lib.PrivacyLossDistribution(remove._pmf_remove, add._pmf_remove)
    return (one.self_compose(reps) if reps > 1 else one), reps
