"""Exact discrete samplers (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for DP").

Every output law is exactly the stated pmf (Mironov 2012's attack has nothing to exploit): samples
are built from uniform random integers from :class:`dpfed.core.rng.SecureRNG` by integer arithmetic,
and each irrational decision ("is the uniform real U below e^-gamma?") is taken by float64 only
where a proven error margin settles it, else exactly with more random bits and mpmath interval
arithmetic (lazy comparison, as in von Neumann's and Karney's exact samplers). Every algorithm is a
*masked* rejection loop over the whole array: each round draws for the still-pending entries only,
so the number of numpy passes is logarithmic in the size.

* :func:`bernoulli_exp`            -- exact Bernoulli(exp(-num/den)) (replaces CKS20 Algorithm 1).
* :func:`sample_discrete_laplace`  -- CKS20 Algorithm 2, P(x) ∝ exp(-|x|/scale) on Z.
* :func:`sample_discrete_gaussian` -- P(x) ∝ exp(-x²/(2σ²)) on Z: round(X) for a step-density X drawn
  by rejection from the Laplace law (replaces CKS20 Algorithm 3; same law, ~3x faster).
* :func:`sample_rounded_gaussian`  -- round(σZ), Z ~ N(0,1), exact by lazy interval comparisons
  (a post-processing of the continuous Gaussian, so charged exactly as one).

Parameters are turned into rationals with bounded denominators, always rounding the noise scale
*up* (more noise, never less privacy); a parameter that would overflow int64 raises ValueError.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from dpfed.core.bernoulli import (
    bernoulli_exp,
    bernoulli_exp_lazy,
    collect_samples,
    float_below,
    geometric_exp_minus_one,
    interval_below,
    random_bits,
    size_tuple,
)
from dpfed.core.rng import SecureRNG

__all__ = [
    "bernoulli_exp",
    "sample_discrete_laplace",
    "sample_discrete_gaussian",
    "sample_rounded_gaussian",
    "laplace_fraction",
    "dg_sigma",
    "MAX_LAPLACE_SCALE",
    "MAX_GAUSSIAN_SIGMA",
]

MAX_LAPLACE_SCALE = 2**52   # numerator t of scale t/s; t*(V+1) stays far below 2**63
MAX_GAUSSIAN_SIGMA = 2**28  # keeps the float filter deciding all but ~1e-5 of the proposals
_LAPLACE_MAX_DEN = 2**20    # denominator bound for rational scales (rounded up)


def _check_positive_param(x: float | Fraction, name: str) -> Fraction:
    if isinstance(x, Fraction):
        f = x
    else:
        xf = float(x)
        if not math.isfinite(xf):
            raise ValueError(f"{name} must be finite")
        f = Fraction(xf)
    if f <= 0:
        raise ValueError(f"{name} must be positive")
    return f


def _ceil_fraction(x: Fraction, max_den: int) -> Fraction:
    """Smallest p/max_den >= x, unless x already has a denominator <= max_den."""
    if x.denominator <= max_den:
        return x
    return Fraction(-((-x.numerator * max_den) // x.denominator), max_den)


def laplace_fraction(scale: float | Fraction) -> Fraction:
    """The rational scale t/s >= ``scale`` actually used by :func:`sample_discrete_laplace`."""
    f = _check_positive_param(scale, "scale")
    f = _ceil_fraction(f, _LAPLACE_MAX_DEN if f < 2**30 else 1)
    if f.numerator > MAX_LAPLACE_SCALE:
        raise ValueError("discrete Laplace scale too large for exact int64 sampling (max 2**52)")
    return f


def sample_discrete_laplace(scale: float | Fraction, size: int | tuple[int, ...],
                            rng: SecureRNG) -> np.ndarray:
    """Exact discrete Laplace: P(x) = (1-e^{-1/b})/(1+e^{-1/b}) exp(-|x|/b), b = scale (CKS20 Alg. 2).

    ``scale`` is rounded *up* to a rational t/s with s <= 2**20 (exact for dyadic floats like
    2**-k multiples and integers); the scale actually used is :func:`laplace_fraction`.
    """
    frac = laplace_fraction(scale)
    t, s = frac.numerator, frac.denominator
    # oversample by the exact acceptance rate (+2%); any shortfall gets another pass
    return collect_samples(size_tuple(size), lambda need: _laplace_candidates(
        t, s, int(need / _laplace_acceptance(t, s) * 1.02) + 32, rng))


def _laplace_acceptance(t: int, s: int) -> float:
    """P(a proposal of :func:`_laplace_candidates` is kept): the U step keeps
    (1-e^-1)/(t(1-e^{-1/t})), and "-0" is rejected with probability (1-e^{-s/t})/2."""
    keep_u = 1.0 if t == 1 else -math.expm1(-1.0) / (-t * math.expm1(-1.0 / t))
    return keep_u * (1.0 + math.exp(-s / t)) / 2.0


def _laplace_candidates(t: int, s: int, m: int, rng: SecureRNG) -> np.ndarray:
    """One vectorised pass of CKS20 Alg. 2 over ``m`` proposals; returns the accepted ones
    (i.i.d. discrete Laplace with scale t/s, in random order, so any prefix is exact too)."""
    if t > 1:
        # U on [0, t) with P(U = u) ∝ exp(-u/t): uniform U kept with probability exp(-U/t)
        u = rng.integers(t, m)
        u = u[bernoulli_exp_lazy(None, u, t, rng)]
    else:
        u = np.zeros(m, dtype=np.int64)
    v = geometric_exp_minus_one(rng, u.size)
    x = u + t * v          # P(X = x) ∝ exp(-x/t)
    y = x // s if s > 1 else x   # geometric with ratio exp(-s/t)
    b = random_bits(rng, y.size)
    bad = b & (y == 0)     # reject "-0" so zero is not counted twice
    if bad.any():
        ok = ~bad
        y, b = y[ok], b[ok]
    signed: np.ndarray = np.where(b, -y, y)
    return signed


def dg_sigma(sigma: float | Fraction) -> float:
    """sigma as a float, rounded *up* if it is a non-dyadic Fraction (never less noise)."""
    f = _check_positive_param(sigma, "sigma")
    if f > MAX_GAUSSIAN_SIGMA:
        raise ValueError("discrete Gaussian sigma too large for exact sampling (max 2**28)")
    x = float(f)
    return x if Fraction(x) >= f else float(np.nextafter(x, np.inf))


def _dg_envelope(sigma: float) -> tuple[float, float]:
    """(t, m): Laplace proposal scale t and a dyadic m >= max_r [(r + 1/2)/t - r^2/(2 sigma^2)]
    over integers r >= 0 (the log of the rejection constant; see :func:`sample_discrete_gaussian`)."""
    t = max(sigma, 0.5)
    r0 = sigma * sigma / t
    best = max((r + 0.5) / t - r * r / (2 * sigma * sigma) for r in {0, math.floor(r0), math.ceil(r0)})
    return t, best + 2.0**-30 * (1.0 + abs(best))  # float error of `best` is < 2^-50 (1 + |best|)


def sample_discrete_gaussian(sigma: float | Fraction, size: int | tuple[int, ...],
                             rng: SecureRNG) -> np.ndarray:
    """Exact discrete Gaussian P(y) ∝ exp(-y²/(2σ²)) on Z (Canonne, Kamath & Steinke 2020's law).

    Y = round(X) for X with the step density f(x) ∝ exp(-round(x)²/(2σ²)) (X = Y + uniform on the
    cell [Y - 1/2, Y + 1/2)), and X is drawn by rejection from the Laplace law: X = ±t E, E ~ Exp(1),
    accepted with probability exp(|x|/t - round(x)²/(2σ²) - m) <= 1, where m bounds the exponent
    (on the cell of r, |x| <= |r| + 1/2; :func:`_dg_envelope`). Acceptance about
    0.76 exp(-1/(2σ)) for σ >= 1. Every decision (the cell of x; U below the acceptance
    probability) is made by float64 under a proven margin, or exactly by mpmath intervals with
    more random bits, as in :func:`sample_rounded_gaussian`; the law is exact, not approximate.
    ``sigma`` above 2^28 is refused (the float filter would defer too often).
    """
    sig = dg_sigma(sigma)
    t, m = _dg_envelope(sig)
    inv2s2 = 1.0 / (2.0 * sig * sig)
    acc = min(1.0, math.sqrt(2 * math.pi) * sig / (2 * t * math.exp(m)))

    def batch(need: int) -> np.ndarray:
        k = int(need / max(acc, 0.05) * 1.05) + 32  # batch size only: any value keeps the law exact
        v, w, sign = rng.uint64(k), rng._uint32(k), random_bits(rng, k)
        decided, keep, r = np.zeros(k, bool), np.zeros(k, bool), np.zeros(k, np.int64)
        for lo in range(0, k, _RG_CHUNK):
            sl = slice(lo, lo + _RG_CHUNK)
            decided[sl], keep[sl], r[sl] = _dg_float_decide(v[sl], w[sl], sign[sl], t, m, inv2s2)
        for i in np.flatnonzero(~decided):
            got = _dg_exact_one(int(v[i]), int(w[i]), bool(sign[i]), t, sig, m, rng)
            if got is not None:
                keep[i], r[i] = True, got
        return r[keep]

    return collect_samples(size_tuple(size), batch)


def _dg_float_decide(v: np.ndarray, w: np.ndarray, neg: np.ndarray, t: float, m: float,
                     inv2s2: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float filter of :func:`sample_discrete_gaussian` (see :func:`_rg_float_decide` for the
    error budget of E and of rounding). x = ±t E; r = floor(x + 1/2) where proven; then
    gamma = m + r² inv2s2 - E >= 0 with error err_e + 2^-49 (m + r² inv2s2 + E), and
    a = exp(-gamma) within a err_gamma + 2^-47 (a <= 1 up to that error)."""
    ef, err_e, wide = _lazy_exponential(v)
    e_copy = ef.copy()
    err_copy = err_e.copy()
    y = ef
    y *= t
    err_e *= t * (1.0 + _RG_REL)
    err_e += _RG_REL * y + 2.0**-50            # err_x (y >= 0; + the rounding of x + 1/2 below)
    np.negative(y, out=y, where=neg)           # x
    y += 0.5
    r = np.floor(y)
    y -= r
    cell_ok = (y > err_e) & (y < 1.0 - err_e)
    q = r * r * inv2s2                         # exact r (|r| < 2^40), q within 2^-52 relative
    gamma = m + q - e_copy
    err_g = err_copy + 2.0**-49 * (m + q + e_copy)
    a = np.exp(-gamma, out=gamma)
    err_a = a * err_g + 2.0**-47
    accept, reject = float_below(w, a, err_a)
    decided = cell_ok & (accept | reject) & ~wide
    return decided, accept & decided, r.astype(np.int64)


def _dg_exact_one(v: int, w: int, neg: bool, t: float, sigma: float, m: float,
                  rng: SecureRNG) -> int | None:
    """Exact decision for one proposal of :func:`sample_discrete_gaussian` (mpmath intervals,
    64 more bits of V / 32 of U per round until decided): the integer, or None if rejected."""
    from mpmath import iv

    nv, nu, prec = 64, 32, 128
    while True:
        iv.prec = prec
        r = None
        if v > 0:
            e = -iv.log(iv.mpf([v, v + 1]) / iv.mpf(2) ** nv)
            x = e * iv.mpf(t)
            x = (-x if neg else x) + iv.mpf(0.5)
            lo, hi = _mp_floor(x.a), _mp_floor(x.b)
            if lo == hi:
                r = lo
                gamma = iv.mpf(m) + iv.mpf(r) ** 2 / (2 * iv.mpf(sigma) ** 2) - e
                below = interval_below(w, nu, iv.exp(-gamma))
                if below is not None:
                    return r if below else None
        v = (v << 64) | int(rng.uint64(1)[0])
        nv += 64
        if r is not None:  # the cell is known: U is what is undecided (and E, slightly)
            w = (w << 32) | int(rng._uint32(1)[0])
            nu += 32
        prec += 96


# --------------------------------------------------------------------------- rounded Gaussian
# round(sigma * Z), Z ~ N(0, 1), sampled *exactly* (the output law is the ideal one, with no
# floating-point bias): |Z| is drawn by rejection from Exp(1) using lazily-known uniform reals, and
# every decision (accept? which integer?) is taken by float64 arithmetic only where a rigorous
# error margin proves the ideal real-number decision; the rare undecided proposals (about 2^-30 of
# them at sigma <= 2^20) are finished with more random bits and mpmath interval arithmetic
# (outward rounding), the lazy-comparison idea of von Neumann / Karney 2016 ("Sampling exactly
# from the normal distribution"). A mechanism x + round(sigma Z) on an integer x is a
# post-processing of the continuous Gaussian mechanism x + sigma Z (x integer, so
# round(x + sigma Z) = x + round(sigma Z)): it is charged *exactly* as GaussianDpEvent(sigma/D).

MAX_ROUNDED_GAUSSIAN_SIGMA = 2**40  # sigma * E stays far below 2**52: float64 resolves half-integers
_LN2_64 = 64 * math.log(2.0)
_RG_CHUNK = 1 << 15   # proposals per float-filter pass: its ~30 temporaries stay in L2 cache
_RG_REL = 2.0**-46    # relative error allowed for float64 log / exp / products (each within a few ulp)
_RG_ACCEPT = math.sqrt(math.pi / 2.0) * math.exp(-0.5)  # 0.760: P(a proposal is accepted)


def _lazy_exponential(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """E = -ln V ~ Exp(1) from V-bits ``v`` (uint64), V = (v + V')/2^64 with V' not yet drawn.

    Returns (ef, err_e, wide): |E - ef| <= err_e rigorously, where ef = -ln(float(v) 2^-64)
    (the power-of-two scaling is exact) and err_e = 1/v (the unknown V': ln(1 + 1/v)) + 2^-52
    (float(v) is within 2^-53 relative, so ln moves by <= 2^-53) + 2^-48 ef (float64 log is
    accurate to a few ulp; 16 are allowed). ``wide`` marks v < 2^32 (probability 2^-32): V known
    too coarsely, left to the exact path.
    """
    vf = v.astype(np.float64)
    wide = vf < 2.0**32
    np.maximum(vf, 2.0**32, out=vf)
    ef = np.log(vf * 2.0**-64)
    np.negative(ef, out=ef)
    err_e = np.reciprocal(vf, out=vf)
    err_e += 2.0**-48 * ef + 2.0**-52
    return ef, err_e, wide


def _round_scaled(ef: np.ndarray, err_e: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(ok, r): r = round(scale E) wherever ``ok`` proves it (y = scale ef is off by at most
    scale err_e (1 + 2^-46) + |y| 2^-46, and y + 1/2 by at most 2^-54 more; y must clear a
    half-integer by that much, with 2^-50 to spare).
    Consumes (overwrites) ``ef`` and ``err_e``."""
    y = ef
    y *= scale
    err_e *= scale * (1.0 + _RG_REL)
    err_e += _RG_REL * np.abs(y) + 2.0**-50    # err_y (+ the rounding of y + 1/2 below, <= 2^-54)
    y += 0.5
    r = np.floor(y)
    y -= r                                     # distance above the half-integer below
    return (y > err_e) & (y < 1.0 - err_e), r.astype(np.int64)


def _rg_float_decide(v: np.ndarray, w: np.ndarray, sigma: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float filter for rounded-Gaussian proposals with V-bits ``v`` and U-bits ``w`` (uint32).

    Ideal proposal: E = -ln V ~ Exp(1) (:func:`_lazy_exponential`), U = (w + U')/2^32. Ideal
    decisions: accept iff U < exp(-(E - 1)^2 / 2) -- rejection from Exp(1) to the half-normal,
    whose density ratio is e^{-E^2/2} / e^{-E} ∝ e^{-(E-1)^2/2} -- then output round(sigma E).
    Returns (decided, accepted, r): where ``decided`` the ideal decisions are proven to be
    ``accepted`` and (if accepted) ``r``. For a = exp(-(ef-1)^2/2), |da/dE| = |E-1| a, and
    max_x (1+|x|) e^{-x^2/2} < 1.34, max_x (1+x^2) e^{-x^2/2} < 1.22 bound the float error, so
    |a - ideal| <= 1.34 err_e + 2^-45 (2^-45 >> 1.22 x 16 ulp of exp and the products).
    """
    ef, err_e, wide = _lazy_exponential(v)
    dev = ef - 1.0
    dev *= dev
    dev *= -0.5
    a = np.exp(dev, out=dev)
    err_a = 1.34 * err_e
    err_a += 2.0**-45
    accept, reject = float_below(w, a, err_a)
    round_ok, r = _round_scaled(ef, err_e, sigma)
    decided = reject | (accept & round_ok)
    decided &= ~wide
    return decided, accept & decided, r


def _rg_interval_decide(v: int, nv: int, w: int, nu: int, sigma: float, prec: int,
                        accepted: bool) -> tuple[str, int]:
    """One exact decision step with mpmath interval arithmetic at ``prec`` bits.

    V in [v, v+1) / 2^nv, U in [w, w+1) / 2^nu. Returns ("reject", 0), ("accept", r) or
    ("more", 0) when the intervals do not decide yet (then draw more bits)."""
    from mpmath import iv

    iv.prec = prec
    if v == 0:
        return "more", 0
    e = -iv.log(iv.mpf([v, v + 1]) / iv.mpf(2) ** nv)
    if not accepted:
        below = interval_below(w, nu, iv.exp(-((e - 1) ** 2) / 2))
        if below is None:
            return "more", 0
        if not below:
            return "reject", 0
    y = e * iv.mpf(sigma) + iv.mpf(0.5)
    lo, hi = _mp_floor(y.a), _mp_floor(y.b)
    return ("accept", lo) if lo == hi else ("accept?", 0)


def _mp_floor(x: Any) -> int:
    import mpmath

    return int(mpmath.floor(x))


def _rg_exact_one(v: int, w: int, sigma: float, rng: SecureRNG) -> int | None:
    """Finish one proposal exactly: round(sigma E) if accepted, None if rejected. Further bits of
    V (64 at a time) and U (32 at a time) are drawn lazily until the intervals decide."""
    nv, nu, prec, accepted = 64, 32, 128, False
    while True:
        verdict, r = _rg_interval_decide(v, nv, w, nu, sigma, prec, accepted)
        if verdict == "reject":
            return None
        if verdict == "accept":
            return r
        accepted = verdict == "accept?"  # accepted, but the rounding needs more bits of V
        v = (v << 64) | int(rng.uint64(1)[0])
        nv += 64
        if not accepted:
            w = (w << 32) | int(rng._uint32(1)[0])
            nu += 32
        prec += 96


def _check_rg_sigma(sigma: float) -> float:
    s = float(sigma)
    if not (math.isfinite(s) and s > 0):
        raise ValueError("sigma must be positive and finite")
    if s > MAX_ROUNDED_GAUSSIAN_SIGMA:
        raise ValueError("rounded Gaussian sigma too large (max 2**40)")
    return s


def sample_rounded_gaussian(sigma: float, size: int | tuple[int, ...], rng: SecureRNG,
                            *, _exact_only: bool = False) -> np.ndarray:
    """Exact samples of round(sigma Z), Z ~ N(0,1): P(R = j) = Phi((j+1/2)/sigma) - Phi((j-1/2)/sigma).

    Integer-valued, so adding it to an integer query leaks nothing through floating point
    (Mironov 2012), and x + R is a post-processing of the Gaussian mechanism x + sigma Z, whose
    privacy it therefore has exactly (no discretisation factor, unlike the discrete Gaussian).
    About 1.3 proposals per sample, each 12 keystream bytes and a sign bit. ``_exact_only``
    (tests only) sends every proposal down the exact interval-arithmetic path.
    """
    s = _check_rg_sigma(sigma)

    def batch(need: int) -> np.ndarray:
        m = need if _exact_only else int(need / _RG_ACCEPT * 1.02) + 32
        v, w, sign = rng.uint64(m), rng._uint32(m), random_bits(rng, m)
        decided, keep, r = np.zeros(m, bool), np.zeros(m, bool), np.zeros(m, np.int64)
        for lo in range(0, 0 if _exact_only else m, _RG_CHUNK):
            sl = slice(lo, lo + _RG_CHUNK)
            decided[sl], keep[sl], r[sl] = _rg_float_decide(v[sl], w[sl], s)
        for i in np.flatnonzero(~decided):
            got = _rg_exact_one(int(v[i]), int(w[i]), s, rng)
            if got is not None:
                keep[i], r[i] = True, got
        return np.where(sign[keep], -r[keep], r[keep])

    return collect_samples(size_tuple(size), batch)
