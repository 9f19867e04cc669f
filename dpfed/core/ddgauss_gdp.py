"""The distributed discrete Gaussian in several coordinates, dominated by a Gaussian mechanism up to a pointwise factor.

A :class:`~dpfed.core.events.DistributedDiscreteGaussianDpEvent` with "record" rounding releases x + Y on Z^d, Y
with i.i.d. coordinates, each the sum of n = ``parties`` i.i.d. N_Z(0, sigma^2) shares, and neighbours move x by
an integer vector k with ||k||_2 <= Delta_2 and ||k||_1 <= Delta_1 (so ||k||_2 <= Delta := min(Delta_2,
Delta_1)). The worst k of the exact pmfs is not known beyond the cases of :mod:`dpfed.core.ddgauss_pld`; this
module bounds every k at once by comparing Y, coordinate by coordinate, with a noise Yhat that is *exactly* a
post-processing of a continuous Gaussian, and pays for the difference as a pointwise likelihood ratio.

1. The sum is a discrete Gaussian up to e^(+-tau1) pointwise. P(Y = z) is proportional to
   exp(-z^2 / (2 n sigma^2)) rho(L + u_z), L = {m in Z^n : sum m = 0}, rho(A) = sum_(a in A) exp(-|a|^2 /
   (2 sigma^2)), u_z in span(L) (split each x in Z^n with sum x = z as (z/n) 1 + its projection). Poisson
   summation on L (the kind of bound behind Kairouz, Liu & Steinke 2021's tau; proved here directly) gives
   rho(L + u) = C (1 + theta(u)), |theta(u)| <= Theta = sum_(w in L* \\ 0) exp(-2 pi^2 sigma^2 |w|^2), L* the
   projection of Z^n onto 1-perp. Taking the representative of w with last entry 0, w = P(m', 0), and Cauchy-Schwarz,
   |w|^2 = |m'|^2 - (sum m')^2 / n >= |m'|^2 / n, so Theta <= theta3(b)^(n-1) - 1 with b = 2 pi^2 sigma^2 / n,
   theta3(b) = sum_j exp(-b j^2) <= 1 + 2 e^-b / (1 - e^-b). Normalising, P(Y = z) / P(N_Z(0, S) = z) lies in
   [(1 - Theta)/(1 + Theta), (1 + Theta)/(1 - Theta)], S = n sigma^2: tau1 = log((1 + Theta)/(1 - Theta)).
2. A discrete Gaussian is a post-processing of a Gaussian up to e^(+-tau2) pointwise. For v < S draw
   G ~ N(0, S - v) and then Yhat ~ N_Z(G, v), the discrete Gaussian on Z centred at G (the smoothing / convolution
   step of Peikert, CRYPTO 2010, Thm. 3.1). Poisson summation, sum_j exp(-(j - g)^2/(2v)) = sqrt(2 pi v) (1 +
   theta(g)) with |theta(g)| <= theta_v = 2 e^(-2 pi^2 v) / (1 - e^(-2 pi^2 v)), gives P(Yhat = z) within
   [1/(1 + theta_v), 1/(1 - theta_v)] of the N(0, S) density phi_S(z), and N_Z(0, S)'s mass within [1/(1 + theta_S),
   1] of it (theta_S <= theta_v): the two pmfs are within e^(+-tau2) pointwise, tau2 = log((1 + theta_v)/(1 - theta_v)).
3. Yhat is exactly Gaussian-dominated. N_Z(g + k, v) = N_Z(g, v) + k for integer k, so x + Yhat (coordinatewise,
   independent kernels) is a fixed post-processing of x + G, G ~ N(0, (S - v) I_d), for every integer x. Hence the
   whole release with Yhat, also Poisson-subsampled and composed with anything, is a post-processing of the
   Gaussian mechanism of L2 sensitivity Delta and standard deviation sqrt(S - v) run the same way, and its privacy
   loss is dominated by that mechanism's (data-processing inequality for the hockey-stick divergence; the Gaussian
   pair dominates every shift of norm <= Delta, and Poisson subsampling and composition keep dominating pairs: Zhu,
   Dong & Wang, AISTATS 2022, arXiv 2106.08567, Def. 7, Thms. 10 and 11; in f-DP terms, mu-GDP with mu = Delta /
   sqrt(S - v), Dong, Roth & Su, JRSS-B 2022, Thm. 2.7, Prop. 2.8, Cor. 3.3). dp-accounting's PLD of the
   Poisson-subsampled Gaussian is an upper bound of that pair's (pessimistic discretisation).
4. Back to Y: per coordinate, P(Y = z) / P(Yhat = z) is within e^(+-tau), tau = tau1 + tau2; the d coordinates
   of one release multiply (e^(+-d tau)), a Poisson-subsampled release is a mixture of the same shape on both
   sides (same bound), and k composed releases multiply again (conditionally on the past: adaptive composition
   too). With a = k d tau, the real pair (U, L) and the dominated pair (Uhat, Lhat) satisfy U <= e^a Uhat and
   L >= e^-a Lhat pointwise, so delta_real(eps) <= e^a delta_hat(eps - 2 a): the correction the PLD accountant
   applies (:class:`dpfed.core.accountants`, the same one as for the pmf pairs of :mod:`dpfed.core.ddgauss_pld`).

v is the smallest of :data:`KERNEL_VARIANCES` whose tau2 costs at most :data:`LOG_RATIO_TARGET` per release (v = 1.5,
tau2 ~ 1e-12, for small d; v = 2, tau2 ~ 3e-17, for d = 368,640); the loss of privacy against the exact Gaussian
is a factor sqrt(S / (S - v)) on mu: below 1e-5 for most shares dpfed calibrates, 0.2 % for sigma = 10, n = 5
(bench/results/ddgauss_pld.md). The factor is not a formality: the summed shares are NOT exactly as private as the
Gaussian of the same variance (sigma 3, n 2, shift (2, 0): exact delta 0.09939 against the Gaussian's 0.09931 at
eps 0.25, tests/core/test_ddgauss_gdp.py). Why not the exact trade-off curve of the pmfs (f-DP checked at its
vertices): it needs the summed pmf on ~25 sqrt(n) sigma points, out of reach for the shares dpfed calibrates (sigma
from 10 to 10^6), and would gain at most about the kernel's sqrt(S / (S - v)). Requires S > v; "party" rounding
(a real shift rounded at random) stays with its RDP curve. Every float here is an upper bound: Theta and theta_v
are bounded through log1p / expm1, and a bound that underflows is raised to :data:`LOG_RATIO_FLOOR`.
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

from dp_accounting.pld import privacy_loss_distribution

from dpfed.core.events import DistributedDiscreteGaussianDpEvent, event_invalid

__all__ = ["GaussianDominance", "gaussian_dominance", "dominating_pld", "sum_log_ratio", "kernel_log_ratio",
           "KERNEL_VARIANCES", "LOG_RATIO_TARGET", "LOG_RATIO_FLOOR", "MAX_LOG_RATIO"]

#: Candidate variances v of the discrete kernel N_Z(G, v) (step 2 of the module docstring), smallest first.
KERNEL_VARIANCES = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)
#: The largest pointwise log-ratio d * tau2 per release the kernel may cost before a larger v is taken (10,000
#: releases at this cost move epsilon by 2e-6, a fiftieth of the finest PLD grid).
LOG_RATIO_TARGET = 1e-10
#: The PLD ledger takes the dominance only while the releases it composes cost at most this pointwise log-ratio
#: (2e-3 on epsilon); beyond (tiny shares, n sigma^2 of a few units) their RDP curve is the better bound.
MAX_LOG_RATIO = 1e-3
#: Any per-coordinate log-ratio bound below this (an underflowed exponential) is raised to it: still an upper bound.
LOG_RATIO_FLOOR = 1e-300


class GaussianDominance(NamedTuple):
    """One release is dominated by the Gaussian mechanism with this ``noise_multiplier`` (standard deviation over
    L2 sensitivity), up to the pointwise factor e^(+-``log_ratio``) (module docstring, steps 3 and 4)."""

    noise_multiplier: float
    log_ratio: float
    kernel_variance: float


def _log_ratio(theta: float) -> float:
    """log((1 + theta) / (1 - theta)), an upper bound for theta in [0, 1), infinity beyond."""
    if not theta < 1.0:
        return math.inf
    return max((math.log1p(theta) - math.log1p(-theta)) * (1.0 + 1e-9), LOG_RATIO_FLOOR)  # 1e-9: float slack


def _geometric_theta(b: float) -> float:
    """2 e^-b / (1 - e^-b) >= 2 sum_(j >= 1) e^(-b j^2) = theta3(b) - 1."""
    return 2.0 * math.exp(-b) / -math.expm1(-b)


def sum_log_ratio(sigma_share: float, parties: int) -> float:
    """tau1: the sum of ``parties`` N_Z(0, sigma_share^2) against N_Z(0, parties sigma_share^2), pointwise
    (module docstring, step 1); 0 for one share."""
    if parties <= 1:
        return 0.0
    t = _geometric_theta(2.0 * math.pi ** 2 * sigma_share ** 2 / parties)
    theta = math.expm1((parties - 1) * math.log1p(t))  # theta3(b)^(n-1) - 1
    return _log_ratio(theta)


def kernel_log_ratio(variance: float) -> float:
    """tau2: N_Z(0, S) against the kernel mixture N_Z(N(0, S - v), v), pointwise (module docstring, step 2)."""
    return _log_ratio(_geometric_theta(2.0 * math.pi ** 2 * variance))


def gaussian_dominance(event: DistributedDiscreteGaussianDpEvent) -> GaussianDominance | None:
    """The Gaussian mechanism that dominates one release of ``event`` up to a pointwise factor (module docstring),
    or None when the event is invalid, rounds per party, or its summed variance is too small for a kernel."""
    if event_invalid(event) or event.rounding != "record":
        return None
    sigma, n, d = float(event.sigma_share), int(event.parties), int(event.dimension)
    total = n * sigma * sigma
    shift = min(float(event.l2_sensitivity), float(event.l1_sensitivity))  # ||k||_2 <= ||k||_1
    tau1 = sum_log_ratio(sigma, n)
    fits = [v for v in KERNEL_VARIANCES if v < total]
    if not fits or not math.isfinite(tau1):
        return None
    v = next((v for v in fits if d * kernel_log_ratio(v) <= LOG_RATIO_TARGET), fits[-1])
    noise = math.sqrt(total - v) / shift * (1.0 - 1e-12)  # rounded down: a float rounding never undercharges
    return GaussianDominance(noise, d * (tau1 + kernel_log_ratio(v)), v)


@functools.lru_cache(maxsize=16)
def dominating_pld(noise_multiplier: float, sampling_rate: float, grid: float) -> Any:
    """dp-accounting's PLD (pessimistic, on ``grid``, add/remove: both directions) of the Gaussian mechanism of
    sensitivity 1 and this ``noise_multiplier``, Poisson-subsampled at ``sampling_rate``: step 3 of the module
    docstring. Cached: building it takes a few tenths of a second (one Python call per grid point) and a ledger
    recomputes its total from every recorded release at each charge. PLDs are immutable (compose makes new ones)."""
    return privacy_loss_distribution.from_gaussian_mechanism(
        noise_multiplier, sampling_prob=sampling_rate, pessimistic_estimate=True,
        value_discretization_interval=grid)
