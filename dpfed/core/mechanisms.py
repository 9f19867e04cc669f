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
  m compositions of ``accounting.DiscreteGaussianDpEvent(sigma, s)``, accounted by dp-accounting's
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
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

import numpy as np
from numpy.typing import ArrayLike
from dp_accounting import dp_event

from dpfed.core import accounting
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import (
    MAX_ROUNDED_GAUSSIAN_SIGMA,
    _bernoulli_exp_lazy,
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
_MAX_GRID_INT = 2.0**61       # |value| / 2^-k must stay below this (int64 headroom for noise)
_EXACT_DLAP_MAX_S = 4096      # DiscreteLaplaceDpEvent PLDs enumerate ~S points
_EPS_DEN = 2**20              # epsilon as a rational with this denominator (rounded down)
_MAX_GRID_SIGMA = 2.0**27     # Gaussian noise std on the grid (rounded-Gaussian float filter)
MAX_ACCOUNTED_DG_SIGMA = 2.0**14  # discrete_gaussian: its exact PLD costs ~23 sigma points


@dataclass(frozen=True)
class Release:
    """A mechanism's output ``value`` and the ``event`` (dp-accounting) describing its spend.

    ``details`` holds the calibration actually used (grid bits, sensitivity on the grid, noise
    scale, provable zCDP rho, ...) for audit logs; it never contains data values.
    """

    value: Any
    event: dp_event.DpEvent
    details: Mapping[str, Any] = field(default_factory=dict)


# -- validation ---------------------------------------------------------------------------------
def _positive(x: Any, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number")
    return v


def _real_array(value: Any) -> np.ndarray:
    try:
        x = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("value must be a real number or array of real numbers") from None
    if not np.all(np.isfinite(x)):
        raise ValueError("value contains NaN or infinity; clamp to public bounds first")
    return x


def _int_array(value: Any) -> np.ndarray:
    x = np.asarray(value)
    if x.dtype.kind in "iub":
        return x.astype(np.int64)
    if x.dtype.kind == "f":
        if not np.all(np.isfinite(x)):
            raise ValueError("value contains NaN or infinity")
        if np.all(x == np.round(x)) and np.all(np.abs(x) < 2.0**62):
            return x.astype(np.int64)
    raise ValueError("discrete mechanisms need integer-valued input (counts); "
                     "use laplace()/gaussian() for real values")


def _grid_bits_check(grid_bits: int | None) -> int | None:
    if grid_bits is None:
        return None
    if int(grid_bits) != grid_bits or not -1000 <= grid_bits <= 1000:
        raise ValueError("grid_bits must be an integer in [-1000, 1000]")
    return int(grid_bits)


def _to_grid(x: np.ndarray, k: int) -> np.ndarray:
    """round(x * 2^k) as int64; x * 2^k is exact in binary floating point."""
    scaled = np.ldexp(x, k)
    if scaled.size and (scaled.max() >= _MAX_GRID_INT or scaled.min() <= -_MAX_GRID_INT):
        raise ValueError(f"values too large for the public grid 2^-{k}: clamp them to public bounds "
                         "or pass a smaller grid_bits")
    grid: np.ndarray = np.rint(scaled).astype(np.int64)
    return grid


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


def _down(x: float) -> float:
    return float(np.nextafter(x, 0.0))


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
    return f if Fraction(f) <= x else _down(f)


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


def discrete_laplace(value: ArrayLike, *, sensitivity: int, epsilon: float, rng: SecureRNG) -> Release:
    """Exact discrete Laplace (two-sided geometric) mechanism for integer queries (Ghosh,
    Roughgarden & Sundararajan 2009; sampler CKS20 Alg. 2): value + Z, P(Z=z) ∝ exp(-eps|z|/S),
    ``sensitivity`` S = integer L1 sensitivity. Output: int64 array of the input's shape."""
    x = _int_array(value)
    eps = _positive(epsilon, "epsilon")
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
    x = _real_array(value)
    sens = _positive(sensitivity, "sensitivity")
    eps = _positive(epsilon, "epsilon")
    d = max(x.size, 1)
    k = _grid_bits_check(grid_bits)
    if k is None:
        k = _laplace_grid_bits(sens, eps, d)
    sens_grid = math.floor(math.ldexp(sens, k)) + d  # ||round(x) - round(x')||_1 <= this integer
    if sens_grid >= 2**52:
        raise ValueError("sensitivity too large for the chosen grid; pass a smaller grid_bits")
    scale = _dlap_scale(sens_grid, eps)
    ints = _to_grid(x, k)
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
    eps = _positive(epsilon, "epsilon")
    dlt = _positive(delta, "delta")
    if dlt >= 1:
        raise ValueError("delta must lie in (0, 1)")
    sens = _positive(sensitivity, "sensitivity")
    if not analytic:
        if eps >= 1:
            raise ValueError("the classic Gaussian calibration needs epsilon < 1 "
                             "(Dwork & Roth Thm. A.1); use analytic=True")
        return math.sqrt(2 * math.log(1.25 / dlt)) * sens / eps
    z = accounting.gaussian_noise_multiplier(eps, dlt, accountant="analytic", rtol=1e-13)
    return _up(z * sens)


def _integer_sensitivity(x: Any, name: str) -> int:
    v = _positive(x, name)
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
    :class:`dpfed.core.accounting.DiscreteGaussianDpEvent` (exact discrete-Gaussian PLD, zCDP for RDP),
    provably valid; sigma is limited to 2^14 so that its PLD stays cheap (about 0.6 s). For large
    sigma or an L2 sensitivity use :func:`rounded_gaussian`, charged exactly as the Gaussian.
    """
    x = _int_array(value)
    sens = _integer_sensitivity(sensitivity, "sensitivity")
    m = _integer_sensitivity(coordinates, "coordinates")
    sig = _positive(sigma, "sigma")
    if sig > MAX_ACCOUNTED_DG_SIGMA:
        raise ValueError(f"discrete_gaussian supports sigma <= 2^14 (its exact PLD enumerates ~23 sigma "
                         f"points); use rounded_gaussian() for sigma {sig:g}")
    noisy = _checked_add(x, sample_discrete_gaussian(sig, x.shape, rng))  # exactly N_Z(0, sig^2)
    one = accounting.DiscreteGaussianDpEvent(sigma=sig, sensitivity=sens)
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
    return _positive(sigma, "sigma")


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
    x = _int_array(value)
    sens = _positive(sensitivity, "sensitivity")
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
    x = _real_array(value)
    sens = _positive(sensitivity, "sensitivity")
    z = _positive(noise_multiplier, "noise_multiplier")
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
    x = _real_array(value)
    share = _share(parties)
    if share != 1.0 and noise_multiplier is None:
        raise ValueError("parties > 1 needs a noise_multiplier")
    planned_z = noise_multiplier
    if share != 1.0:
        noise_multiplier = _positive(noise_multiplier, "noise_multiplier") * share
    sens = _positive(sensitivity, "sensitivity")
    d = max(x.size, 1)
    given = [sigma is not None, epsilon is not None or delta is not None, noise_multiplier is not None]
    if sum(given) != 1 or (given[1] and (epsilon is None or delta is None)):
        raise ValueError("give sigma or (epsilon and delta) or noise_multiplier: exactly one of them")
    if sigma is not None:
        sig_est = sigma = _positive(sigma, "sigma")
    elif noise_multiplier is not None:
        sig_est = _positive(noise_multiplier, "noise_multiplier") * sens * (1 + _GRID_REL)
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
    ints = _to_grid(x, k)
    noisy = _checked_add(ints, sample_rounded_gaussian(sigma_grid, x.shape, rng))
    out = _from_grid(noisy, k)
    if noise_multiplier is not None:  # sigma_grid = _up(z sens_grid) >= z sens_grid in real numbers
        event = dp_event.GaussianDpEvent(noise_multiplier=float(noise_multiplier if planned_z is None else planned_z))
    else:
        event = dp_event.GaussianDpEvent(noise_multiplier=_down(sigma_grid / sens_grid))
    details = {"grid_bits": k, "sensitivity_on_grid": sens_grid, "sigma": sigma,
               "rho": _up(sens_grid * sens_grid / (2 * sigma_grid * sigma_grid))}
    if epsilon is not None and delta is not None:  # both or neither (checked above)
        details.update(epsilon=float(epsilon), delta=float(delta))
    return Release(out if out.ndim else float(out), event, details)


# -- exponential mechanism -----------------------------------------------------------------------
def _eps_fraction(epsilon: float) -> Fraction:
    """epsilon as a rational with denominator <= 2^20, rounded down (never more privacy loss)."""
    f = Fraction(epsilon)
    if f.denominator > _EPS_DEN:
        f = Fraction(math.floor(f * _EPS_DEN), _EPS_DEN)
    if f <= 0:
        raise ValueError("epsilon below 2^-20 is not supported")
    return f


def exponential(scores: ArrayLike, *, sensitivity: float, epsilon: float, rng: SecureRNG,
                monotonic: bool = False, size: int | None = None) -> Release:
    """Exponential mechanism (McSherry & Talwar 2007): index i with probability
    ∝ exp(eps * q_i / (2 * sensitivity)) (``monotonic=True``: / sensitivity, valid when every
    score moves in the same direction between neighbours). epsilon-DP.

    Exact: scores are rounded to the public grid sensitivity*2^-20 (sensitivity grows by one
    step), then a uniform proposal i is accepted with exact probability
    exp(-eps (q_max - q_i) / (c * sens)) (CKS20 Alg. 1): rejection sampling from the exact law.
    ``size=m`` draws m independent selections (an int64 array; the event is their m-fold
    composition).
    """
    q = _real_array(scores)
    if q.ndim != 1 or q.size == 0:
        raise ValueError("scores must be a non-empty 1-D array")
    sens = _positive(sensitivity, "sensitivity")
    eps = _positive(epsilon, "epsilon")
    e = _eps_fraction(eps)
    k = 20 - math.frexp(sens)[1]  # sens * 2^k in [2^19, 2^20)
    s = _to_grid(q, k)
    sens_grid = math.floor(math.ldexp(sens, k)) + 1
    c = 1 if monotonic else 2
    den = e.denominator * c * sens_grid  # gamma_i = e_num (s_max - s_i) / den
    gap = int(s.max()) - s  # >= 0, < 2^62
    if int(gap.max()) * e.numerator < 2**62:  # vectorised exact integer arithmetic
        num = gap * e.numerator
        qq, rr = num // den, num % den
    else:  # exact Python integers; q is capped at 2^62 (acceptance e^-(2^62): never happens)
        qr = [divmod(int(v) * e.numerator, den) for v in gap]
        qq = np.array([min(a, 2**62) for a, _ in qr], dtype=np.int64)
        rr = np.array([b for _, b in qr], dtype=np.int64)
    if size is not None and (int(size) != size or size < 1):
        raise ValueError("size must be a positive integer")
    m = 1 if size is None else int(size)
    n = q.size
    chosen = np.empty(m, dtype=np.int64)
    pending = np.arange(m)
    while pending.size:  # each pending selection proposes up to `per` uniform candidates
        per = max(1, min(2 * n, (1 << 21) // pending.size))
        idx = rng.integers(n, (pending.size, per))
        ok = _bernoulli_exp_lazy(qq[idx.ravel()], rr[idx.ravel()], den, rng).reshape(idx.shape)
        hit = ok.any(axis=1)
        first = ok.argmax(axis=1)  # the first accepted proposal of an i.i.d. stream is exact
        chosen[pending[hit]] = idx[hit, first[hit]]
        pending = pending[~hit]
    event = dp_event.DiscreteLaplaceDpEvent(noise_parameter=eps, sensitivity=1)
    choice: int | np.ndarray
    if size is None:
        choice = int(chosen[0])
    else:
        choice, event = chosen, dp_event.SelfComposedDpEvent(event, m)
    return Release(choice, event, {"epsilon": eps, "grid_bits": k, "monotonic": monotonic})


# -- randomized response ------------------------------------------------------------------------
def _rr_probs(k: int, epsilon: float) -> tuple[float, float]:
    e = float(_eps_fraction(epsilon))
    z = math.exp(e) + k - 1
    return math.exp(e) / z, 1.0 / z


def randomized_response(values: ArrayLike, *, k: int, epsilon: float, rng: SecureRNG) -> Release:
    """k-ary (generalised) randomized response, each value in {0..k-1} (Warner 1965; Kairouz,
    Oh & Viswanath 2016 for k > 2): keep with probability e^eps/(e^eps + k - 1), else report one
    of the other k - 1 values uniformly. epsilon-local-DP per value (replace-one).

    Exact: propose y uniform in {0..k-1}; accept y = v always and y != v with probability
    exp(-eps) (CKS20 Alg. 1 on rational eps, rounded down to denominator 2^20).
    """
    if int(k) != k or k < 2:
        raise ValueError("k must be an integer >= 2")
    k = int(k)
    eps = _positive(epsilon, "epsilon")
    v = _int_array(values)
    if v.size and (v.min() < 0 or v.max() >= k):
        raise ValueError(f"values must lie in 0..{k - 1}")
    e = _eps_fraction(eps)
    flat = v.ravel()
    out = np.empty_like(flat)
    pending = np.arange(flat.size)
    while pending.size:
        y = rng.integers(k, pending.size)
        acc = y == flat[pending]
        other = np.flatnonzero(~acc)  # these are kept with probability exp(-eps)
        m = other.size
        acc[other] = _bernoulli_exp_lazy(np.full(m, e.numerator // e.denominator, np.int64),
                                       np.full(m, e.numerator % e.denominator, np.int64),
                                       e.denominator, rng)
        out[pending[acc]] = y[acc]
        pending = pending[~acc]
    p = k / (math.exp(eps) + k - 1)  # dp-accounting: prob. of a uniformly random bucket
    event = dp_event.RandomizedResponseDpEvent(noise_parameter=_down(p), num_buckets=k)
    res = out.reshape(v.shape)
    return Release(res if res.ndim else int(res), event, {"epsilon": eps, "k": k})


def rr_frequencies(responses: ArrayLike, *, k: int, epsilon: float) -> np.ndarray:
    """Unbiased estimate of the true frequency of each category from GRR responses:
    pi_v = (f_v - q) / (p - q), f the observed frequencies, p = e^eps/(e^eps+k-1), q = 1/(e^eps+k-1)
    (Wang et al. 2017, "Locally differentially private protocols for frequency estimation", eq. 2).
    Uses the same rational epsilon as :func:`randomized_response`, so it is exactly unbiased."""
    if int(k) != k or k < 2:
        raise ValueError("k must be an integer >= 2")
    k = int(k)
    eps = _positive(epsilon, "epsilon")
    r = _int_array(responses).ravel()
    if r.size == 0:
        raise ValueError("no responses")
    if r.min() < 0 or r.max() >= k:
        raise ValueError(f"responses must lie in 0..{k - 1}")
    p, q = _rr_probs(k, eps)
    f = np.bincount(r, minlength=k) / r.size
    return (f - q) / (p - q)
