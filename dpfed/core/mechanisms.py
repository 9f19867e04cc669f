"""Differentially private mechanisms that return their output *and* what it spent.

Every function returns a :class:`Release` whose ``event`` is a dp-accounting ``DpEvent`` describing
the spend exactly or conservatively, so accounting never depends on a caller remembering.
Neighbouring relation: add/remove one record, except randomized response (local DP: one person's
value replaced, dp-accounting's ``REPLACE_ONE``).

Floating-point safety (Mironov 2012): no float noise ever touches the output. Integer queries get
exact integer noise (:mod:`dpfed.core.samplers`); real vectors are rounded to a public grid 2^-k,
the rounding error is added to the sensitivity (each coordinate moves by at most one grid step:
L1 grows by d*2^-k, L2 by sqrt(d)*2^-k, as OpenDP's float-to-bigint does), exact integer
noise (discrete Laplace; rounded Gaussian) is added on the grid and the integer result is
scaled back (post-processing).

Event choices (each checked numerically in tests/test_mechanisms.py against dp-accounting):

* discrete Laplace, integer L1 sensitivity S <= 4096: ``DiscreteLaplaceDpEvent(1/scale, S)`` (exact).
  Larger S (the grid): ``LaplaceDpEvent(scale/(S+1))``. The discrete Laplace's privacy curve is
  slightly *worse* than the continuous one at the same S (dp-accounting PLDs show it); it is
  dominated by the continuous one at sensitivity S+1, so the scale is calibrated to (S+1)/epsilon.
* discrete Gaussian (integer query; one record moves m coordinates by at most the integer s):
  m compositions of ``accounting.ScalarDiscreteGaussianDpEvent(sigma, s)``, accounted by dp-accounting's
  exact discrete-Gaussian PLD (and by its zCDP rho = s^2/(2 sigma^2), Canonne, Kamath & Steinke
  2020, Prop. 5, under RDP). Provable; the domination argument is in that event's docstring.
* Gaussian on reals (the grid) and ``rounded_gaussian`` on integers: the noise is round(sigma Z),
  sampled exactly; on an integer query it is a post-processing of the continuous Gaussian
  mechanism, so ``GaussianDpEvent(sigma / D)`` is exact (D = L2 sensitivity, on the grid for reals).
* exponential mechanism: ``DiscreteLaplaceDpEvent(epsilon, 1)``, whose privacy-loss
  distribution is +-epsilon with probabilities e^eps/(1+e^eps), 1/(1+e^eps): the binary
  randomized-response pair that dominates every pure epsilon-DP mechanism (Kairouz, Oh &
  Viswanath 2015), valid under add/remove.
* randomized response: ``RandomizedResponseDpEvent(k/(e^eps + k - 1), k)`` (REPLACE_ONE).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from dp_accounting import dp_event

from dpfed.core.categorical import exponential, randomized_response, rr_frequencies
from dpfed.core.release import (
    Release,
    float_down,
    int_array,
    positive,
    real_array,
    to_grid,
)
from dpfed.core import accounting
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import (
    MAX_ROUNDED_GAUSSIAN_SIGMA,
    laplace_fraction,
    sample_discrete_gaussian,
    sample_discrete_laplace,
    sample_rounded_gaussian,
)

__all__ = [
    "Release",
    "laplace",
    "gaussian",
    "discrete_laplace",
    "discrete_laplace_scale",
    "discrete_gaussian",
    "rounded_gaussian",
    "float_gaussian",
    "exponential",
    "randomized_response",
    "rr_frequencies",
    "gaussian_sigma",
]

_GRID_REL = 2.0**-20          # target: rounding inflates the sensitivity by at most ~1e-6
_MAX_GRID_SCALE = 2.0**50     # discrete Laplace scale on the grid (samplers allow 2**52)
_EXACT_DLAP_MAX_S = 4096      # DiscreteLaplaceDpEvent PLDs enumerate ~S points
_MAX_GRID_SIGMA = 2.0**27     # Gaussian noise std on the grid (rounded-Gaussian float filter)
MAX_ACCOUNTED_DG_SIGMA = 2.0**14  # discrete_gaussian: its exact PLD costs ~23 sigma points


def _grid_bits_check(grid_bits: int | None) -> int | None:
    if grid_bits is None:
        return None
    if int(grid_bits) != grid_bits or not -1000 <= grid_bits <= 1000:
        raise ValueError("grid_bits must be an integer in [-1000, 1000]")
    return int(grid_bits)


def _from_grid(z: np.ndarray, k: int) -> np.ndarray:
    """z * 2^-k as floats: a deterministic function of the integers (post-processing)."""
    if -1000 <= k <= 1000:
        return z * math.ldexp(1.0, -k)  # exact power-of-two scaling of float(z)
    return np.ldexp(z.astype(np.float64), -k)


def _checked_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b for int64 arrays with |a| < 2^62; refuses (probability < e^-500 for grid noise)
    when the noise is so large that the sum could overflow."""
    if b.size and (b.max() >= 2**62 or b.min() <= -(2**62)) or \
            a.size and (a.max() >= 2**62 or a.min() <= -(2**62)):
        raise OverflowError("noisy value would overflow int64; nothing was released")
    total: np.ndarray = a + b
    return total


def _up(x: float) -> float:
    return float(np.nextafter(x, np.inf))


# -- Laplace ------------------------------------------------------------------------------------
def _float_at_least(x: Fraction) -> float:
    """The smallest float >= the rational x."""
    f = float(x)
    return f if Fraction(f) >= x else _up(f)


def _float_at_most(x: Fraction) -> float:
    """The largest float <= the rational x."""
    f = float(x)
    return f if Fraction(f) <= x else float_down(f)


def _dlap_event(scale: Fraction, sens: int) -> dp_event.DpEvent:
    """The event of discrete Laplace noise of rational ``scale`` on integer L1 sensitivity ``sens``,
    its parameter the tightest float on the conservative side."""
    if sens <= _EXACT_DLAP_MAX_S:
        return dp_event.DiscreteLaplaceDpEvent(noise_parameter=_float_at_least(1 / scale), sensitivity=sens)
    return dp_event.LaplaceDpEvent(noise_multiplier=_float_at_most(scale / (sens + 1)))


def _dlap_scale(sens: int, epsilon: float) -> Fraction:
    """Scale for integer sensitivity ``sens``: S/eps when the exact event is used, else (S+1)/eps,
    rounded up so that the event's float parameter is exactly within ``epsilon``: its pure epsilon
    (noise_parameter * S, or 1 / noise_multiplier) is <= ``epsilon`` in exact arithmetic."""
    eps = Fraction(epsilon)
    if sens <= _EXACT_DLAP_MAX_S:
        return laplace_fraction(1 / Fraction(_float_at_most(eps / sens)))
    return laplace_fraction((sens + 1) * Fraction(_float_at_least(1 / eps)))


def discrete_laplace_scale(sensitivity: int, epsilon: float) -> Fraction:
    """The rational scale :func:`discrete_laplace` uses for integer L1 ``sensitivity`` at ``epsilon``: S / epsilon
    up to S = 4096, (S + 1) / epsilon above, rounded up so that S / scale <= epsilon exactly."""
    if int(sensitivity) != sensitivity or sensitivity < 1:
        raise ValueError("discrete_laplace_scale needs a positive integer sensitivity")
    return _dlap_scale(int(sensitivity), positive(epsilon, "epsilon"))


def discrete_laplace(value: ArrayLike, *, sensitivity: int, epsilon: float, rng: SecureRNG) -> Release:
    """Exact discrete Laplace (two-sided geometric) mechanism for integer queries (Ghosh,
    Roughgarden & Sundararajan 2009; sampler CKS20 Alg. 2): value + Z, P(Z=z) ∝ exp(-eps|z|/S),
    ``sensitivity`` S = integer L1 sensitivity. Output: int64 array of the input's shape."""
    x = int_array(value)
    eps = positive(epsilon, "epsilon")
    if int(sensitivity) != sensitivity or sensitivity < 1:
        raise ValueError("discrete_laplace needs a positive integer sensitivity")
    sens = int(sensitivity)
    scale = _dlap_scale(sens, eps)
    noise = sample_discrete_laplace(scale, x.shape, rng)
    out = _checked_add(x, noise)
    return Release(out if out.ndim else int(out), _dlap_event(scale, sens),
                   {"scale": float(scale), "sensitivity": sens, "epsilon": eps})


def _laplace_grid_bits(sensitivity: float, epsilon: float, d: int) -> int:
    # rounding adds d * 2^-k to the L1 sensitivity: aim for d*2^-k <= 2^-20 * sensitivity ...
    k = math.ceil(math.log2(d / (_GRID_REL * sensitivity)))
    # ... but keep the grid scale (S+1)/eps = (sens*2^k + d + 1)/eps below 2^50
    room = _MAX_GRID_SCALE * epsilon - d - 1
    if room <= 0:
        raise ValueError("too many coordinates for this epsilon: d/epsilon exceeds 2^50")
    return min(k, math.floor(math.log2(room / sensitivity)))


def laplace(value: ArrayLike, *, sensitivity: float, epsilon: float, rng: SecureRNG,
            grid_bits: int | None = None) -> Release:
    """Floating-point-safe Laplace mechanism for a real vector with L1 ``sensitivity``.

    Mironov (2012) safe: round to the public grid 2^-k (k from sensitivity, epsilon and the
    dimension d when ``grid_bits`` is None), integer sensitivity S = floor(sens*2^k) + d, exact
    discrete Laplace of scale (S[+1])/eps on the grid, scale back. Satisfies epsilon-DP.
    """
    x = real_array(value)
    sens = positive(sensitivity, "sensitivity")
    eps = positive(epsilon, "epsilon")
    d = max(x.size, 1)
    k = _grid_bits_check(grid_bits)
    if k is None:
        k = _laplace_grid_bits(sens, eps, d)
    sens_grid = math.floor(math.ldexp(sens, k)) + d  # ||round(x) - round(x')||_1 <= this integer
    if sens_grid >= 2**52:
        raise ValueError("sensitivity too large for the chosen grid; pass a smaller grid_bits")
    scale = _dlap_scale(sens_grid, eps)
    ints = to_grid(x, k)
    noisy = _checked_add(ints, sample_discrete_laplace(scale, x.shape, rng))
    out = _from_grid(noisy, k)
    details = {"grid_bits": k, "sensitivity_on_grid": sens_grid, "scale": math.ldexp(float(scale), -k),
               "epsilon": eps}
    return Release(out if out.ndim else float(out), _dlap_event(scale, sens_grid), details)


# -- Gaussian -----------------------------------------------------------------------------------
def gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float = 1.0,
                   analytic: bool = True) -> float:
    """Noise standard deviation for (epsilon, delta)-DP with L2 ``sensitivity``.

    analytic=True: the smallest sigma with delta(sigma) <= delta (Balle & Wang 2018, Alg. 1), by
    the one calibration :func:`dpfed.core.accounting.calibrate` on the exact Gaussian curve; the
    returned value always satisfies the bound.
    analytic=False: the classic sqrt(2 ln(1.25/delta)) * sensitivity / epsilon (Dwork & Roth
    2014, Thm. A.1), which is only valid for epsilon < 1.
    """
    eps = positive(epsilon, "epsilon")
    dlt = positive(delta, "delta")
    if dlt >= 1:
        raise ValueError("delta must lie in (0, 1)")
    sens = positive(sensitivity, "sensitivity")
    if not analytic:
        if eps >= 1:
            raise ValueError("the classic Gaussian calibration needs epsilon < 1 "
                             "(Dwork & Roth Thm. A.1); use analytic=True")
        return math.sqrt(2 * math.log(1.25 / dlt)) * sens / eps
    z = accounting.gaussian_noise_multiplier(eps, dlt, accountant="analytic", rtol=1e-13)
    return _up(z * sens)


def _integer_sensitivity(x: Any, name: str) -> int:
    v = positive(x, name)
    if v != math.floor(v) or v >= 2**31:
        raise ValueError(f"{name} of the discrete Gaussian must be an integer (the largest change of "
                         "one coordinate); for an L2 sensitivity use rounded_gaussian()")
    return int(v)


def discrete_gaussian(value: ArrayLike, *, sigma: float, rng: SecureRNG, sensitivity: int = 1,
                      coordinates: int = 1) -> Release:
    """Exact discrete Gaussian mechanism for integer queries (Canonne, Kamath & Steinke 2020):
    value + Z, P(Z=z) ∝ exp(-||z||²/(2 sigma²)). Output: int64 array of the input's shape.

    One record changes at most ``coordinates`` entries of ``value``, each by at most the integer
    ``sensitivity`` (a count: 1 and 1; a histogram under add/remove: 1 and 1; a record adding to
    one cell of each of F tables: 1 and F). The event is ``coordinates`` compositions of
    :class:`dpfed.core.accounting.ScalarDiscreteGaussianDpEvent` (exact discrete-Gaussian PLD, zCDP for RDP),
    provably valid; sigma is limited to 2^14 so that its PLD stays cheap (about 0.6 s). For large
    sigma or an L2 sensitivity use :func:`rounded_gaussian`, charged exactly as the Gaussian.
    """
    x = int_array(value)
    sens = _integer_sensitivity(sensitivity, "sensitivity")
    m = _integer_sensitivity(coordinates, "coordinates")
    sig = positive(sigma, "sigma")
    if sig > MAX_ACCOUNTED_DG_SIGMA:
        raise ValueError(f"discrete_gaussian supports sigma <= 2^14 (its exact PLD enumerates ~23 sigma "
                         f"points); use rounded_gaussian() for sigma {sig:g}")
    noisy = _checked_add(x, sample_discrete_gaussian(sig, x.shape, rng))  # exactly N_Z(0, sig^2)
    one = accounting.ScalarDiscreteGaussianDpEvent(sigma=sig, sensitivity=sens)
    event = one if m == 1 else dp_event.SelfComposedDpEvent(one, m)
    rho = _up(m * sens * sens / (2 * sig * sig))
    return Release(noisy if noisy.ndim else int(noisy), event,
                   {"sigma": sig, "sensitivity": sens, "coordinates": m, "rho": rho})


def _calibrated_sigma(sens: float, sigma: float | None, epsilon: float | None, delta: float | None,
                      analytic: bool) -> float:
    if sigma is None:
        if epsilon is None or delta is None:
            raise ValueError("give sigma, or both epsilon and delta")
        return gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sens, analytic=analytic)
    if epsilon is not None or delta is not None:
        raise ValueError("give sigma or (epsilon, delta), not both")
    return positive(sigma, "sigma")


def _share(parties: int) -> float:
    """Noise share of one of ``parties`` parties: 1/sqrt(P) of the std (1/P of the variance)."""
    if int(parties) != parties or parties < 1:
        raise ValueError("parties must be a positive integer")
    return 1.0 / math.sqrt(int(parties)) if parties > 1 else 1.0


def rounded_gaussian(value: ArrayLike, *, sensitivity: float, rng: SecureRNG, sigma: float | None = None,
                     epsilon: float | None = None, delta: float | None = None,
                     analytic: bool = True, parties: int = 1) -> Release:
    """Gaussian mechanism for integer queries with L2 ``sensitivity``: value + round(sigma Z),
    Z ~ N(0, I), sampled exactly (:func:`dpfed.core.samplers.sample_rounded_gaussian`).

    Integer in, integer out (no floating-point leak), and a post-processing of the continuous
    Gaussian mechanism (value is an integer, so round(value + sigma Z) = value + round(sigma Z)):
    ``event = GaussianDpEvent(sigma / sensitivity)`` exactly, with no discretisation factor; sigma
    up to 2^40 (beyond ~2^30 more draws take the slow exact path). Give ``sigma``, or ``epsilon``
    and ``delta``.

    ``parties = P > 1`` (distributed noise, simulation only): this party adds a discrete Gaussian
    share N_Z(0, sigma^2 / P) and the event is that of the *sum* of the P parties' releases,
    ``GaussianDpEvent(sigma / sensitivity)`` as above; it protects a party only when the
    coordinator sees nothing but that sum (secure aggregation). The sum of P discrete Gaussian
    shares is close to, not exactly, one of variance sigma^2 (Canonne, Kamath & Steinke 2020, Sec. 4).
    """
    x = int_array(value)
    sens = positive(sensitivity, "sensitivity")
    sig = _calibrated_sigma(sens, sigma, epsilon, delta, analytic)
    share = _share(parties)
    if share == 1.0:
        noise = sample_rounded_gaussian(sig, x.shape, rng)
    else:
        noise = sample_discrete_gaussian(sig * share, x.shape, rng)
    noisy = _checked_add(x, noise)
    details = {"sigma": sig, "sensitivity": sens, "rho": _up(sens * sens / (2 * sig * sig)), "parties": int(parties)}
    if epsilon is not None and delta is not None:  # both or neither (checked above)
        details.update(epsilon=float(epsilon), delta=float(delta))
    return Release(noisy if noisy.ndim else int(noisy),
                   dp_event.GaussianDpEvent(noise_multiplier=_float_at_most(Fraction(sig) / Fraction(sens))),
                   details)


def float_gaussian(value: ArrayLike, *, sensitivity: float, noise_multiplier: float, rng: SecureRNG,
                   parties: int = 1) -> Release:
    """The DP-SGD Gaussian mechanism on a clipped sum: value + N(0, (z * sensitivity)^2 I) as float
    draws from the ChaCha20 keystream by the ziggurat method (:meth:`SecureRNG.normal_ziggurat`,
    exact in law), as Opacus and TF Privacy add it (Abadi et al. 2016, Alg. 1). Not
    floating-point safe in Mironov's sense; :func:`gaussian` with ``noise_multiplier`` is the safe
    (slower) variant. ``value`` must already have L2 sensitivity <= ``sensitivity`` (clip first).
    Event ``GaussianDpEvent(z)``; ``parties = P > 1``: this party adds 1/P of the variance and the
    event is that of the sum of the P releases (secure aggregation only, see :func:`rounded_gaussian`).
    """
    x = real_array(value)
    sens = positive(sensitivity, "sensitivity")
    z = positive(noise_multiplier, "noise_multiplier")
    std = z * sens * _share(parties)
    noisy = x + rng.normal_ziggurat(x.shape if x.ndim else 1, std).reshape(x.shape)
    return Release(noisy if noisy.ndim else float(noisy), dp_event.GaussianDpEvent(noise_multiplier=z),
                   {"sigma": std, "sensitivity": sens, "parties": int(parties)})


def gaussian(value: ArrayLike, *, sensitivity: float, rng: SecureRNG, sigma: float | None = None,
             epsilon: float | None = None, delta: float | None = None, analytic: bool = True,
             grid_bits: int | None = None, noise_multiplier: float | None = None,
             parties: int = 1) -> Release:
    """Floating-point-safe Gaussian mechanism for a real vector with L2 ``sensitivity``.

    Give exactly one of: ``sigma`` (noise std); ``epsilon`` and ``delta`` (calibrated by
    :func:`gaussian_sigma` against the grid-inflated sensitivity); or ``noise_multiplier`` z (for
    algorithms whose privacy plan charges ``GaussianDpEvent(z)``: the std becomes z times the
    grid-inflated sensitivity, so the event's multiplier is >= z and the plan stays an upper
    bound -- the grid is paid for in noise, ~1e-6 relative, never in privacy).
    Rounds to the public grid 2^-k (L2 sensitivity on the grid sens*2^k + sqrt(d)), adds exact
    rounded-Gaussian noise round(sigma 2^k Z) on the grid and scales back: a post-processing of
    the continuous Gaussian mechanism on the grid integers, so
    ``event = GaussianDpEvent(sigma_g / sens_g)`` exactly (see the module notes).
    ``parties = P > 1`` (with ``noise_multiplier`` only; distributed noise, simulation only): this
    party adds the noise of multiplier z/sqrt(P) and the event is that of the sum of the P
    releases, ``GaussianDpEvent(z)`` (secure aggregation only, see :func:`rounded_gaussian`).
    """
    x = real_array(value)
    share = _share(parties)
    if share != 1.0 and noise_multiplier is None:
        raise ValueError("parties > 1 needs a noise_multiplier")
    planned_z = noise_multiplier
    if share != 1.0:
        noise_multiplier = positive(noise_multiplier, "noise_multiplier") * share
    sens = positive(sensitivity, "sensitivity")
    d = max(x.size, 1)
    given = [sigma is not None, epsilon is not None or delta is not None, noise_multiplier is not None]
    if sum(given) != 1 or (given[1] and (epsilon is None or delta is None)):
        raise ValueError("give sigma or (epsilon and delta) or noise_multiplier: exactly one of them")
    if sigma is not None:
        sig_est = sigma = positive(sigma, "sigma")
    elif noise_multiplier is not None:
        sig_est = positive(noise_multiplier, "noise_multiplier") * sens * (1 + _GRID_REL)
    else:
        assert epsilon is not None and delta is not None  # checked above
        sig_est = gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sens * (1 + _GRID_REL),
                                 analytic=analytic)
    k = _grid_bits_check(grid_bits)
    if k is None:
        # sqrt(d) * 2^-k <= 2^-20 * sens, but sigma * 2^k <= 2^27 (keeps the sampler's float
        # filter deciding all but ~1e-5 of the draws; see samplers.sample_rounded_gaussian)
        k = math.ceil(math.log2(math.sqrt(d) / (_GRID_REL * sens)))
        k = min(k, math.floor(math.log2(_MAX_GRID_SIGMA / sig_est)))
    sens_grid = _up(_up(math.ldexp(sens, k)) + _up(math.sqrt(d)))  # L2 of round(x)-round(x')
    if noise_multiplier is not None:
        sigma = math.ldexp(_up(float(noise_multiplier) * sens_grid), -k)
    elif sigma is None:
        assert epsilon is not None and delta is not None  # checked above
        sigma = gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=math.ldexp(sens_grid, -k),
                               analytic=analytic)
    sigma_grid = math.ldexp(sigma, k)
    if sigma_grid > MAX_ROUNDED_GAUSSIAN_SIGMA:
        raise ValueError("sigma too large for the chosen grid; pass a smaller grid_bits")
    ints = to_grid(x, k)
    noisy = _checked_add(ints, sample_rounded_gaussian(sigma_grid, x.shape, rng))
    out = _from_grid(noisy, k)
    if noise_multiplier is not None:  # sigma_grid = _up(z sens_grid) >= z sens_grid in real numbers
        event = dp_event.GaussianDpEvent(noise_multiplier=float(noise_multiplier if planned_z is None else planned_z))
    else:
        event = dp_event.GaussianDpEvent(noise_multiplier=float_down(sigma_grid / sens_grid))
    details = {"grid_bits": k, "sensitivity_on_grid": sens_grid, "sigma": sigma,
               "rho": _up(sens_grid * sens_grid / (2 * sigma_grid * sigma_grid))}
    if epsilon is not None and delta is not None:  # both or neither (checked above)
        details.update(epsilon=float(epsilon), delta=float(delta))
    return Release(out if out.ndim else float(out), event, details)
