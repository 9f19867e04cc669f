"""Exact Polya (negative binomial) shares of the discrete Laplace, for distributed pure-DP noise.

The geometric law P(G = k) = (1 - p) p^k on {0, 1, ...} is infinitely divisible: it is the sum of m
independent negative binomials NB(1/m, p), P(X = k) = Gamma(k + 1/m) / (k! Gamma(1/m)) (1 - p)^(1/m) p^k
(Goryczka & Xiong 2017, "A comprehensive comparison of multiparty secure additions with differential
privacy", IEEE TDSC 2017: the distributed geometric mechanism). So if each of m parties adds the *Polya share*
NB(1/m, p) - NB(1/m, p), the m shares sum to G1 - G2, the discrete Laplace P(x) ∝ p^|x| with
p = exp(-1/scale) (:func:`dpfed.core.samplers.sample_discrete_laplace`'s law); more shares add independent
noise (NB(k/m, p) differences), which privacy may ignore (post-processing).

Sampler (exact; the method of :mod:`dpfed.core.samplers`): NB(r, p) is compound Poisson (Quenouille 1949),
NB(r, p) = L_1 + ... + L_N with N ~ Poisson(r lambda), lambda = -ln(1 - p), and L_i i.i.d. logarithmic,
P(L = k) = p^k / (k lambda). N is drawn by inversion of a uniform U against a table of Poisson CDF values
enclosed by mpmath interval arithmetic; L by Kemp's (1981) formula L = 1 + floor(E / w(V lambda)),
w(a) = -ln(1 - e^-a), E ~ Exp(1) and V ~ U(0, 1) (given V, L - 1 is geometric with ratio 1 - e^(-V lambda),
whose mixture over V is the logarithmic law). The uniforms are known to 53 random bits; every decision
(which CDF cell holds U; which integer floor(E / w) is) is taken in float64 only where an outward error
bound proves it (elementary functions assumed within 16 ulp, as in :mod:`dpfed.core.samplers`), else
exactly with more random bits and mpmath interval arithmetic at increasing precision (the lazy comparison
of von Neumann and Karney 2016). The output law is exactly the stated pmf, with no floating-point bias.

``scale`` is rounded up to a rational t/s as for the discrete Laplace (:func:`laplace_fraction`): never
less noise than asked.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from dpfed.core.bernoulli import collect_samples, size_tuple
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import laplace_fraction, sample_discrete_laplace

__all__ = ["sample_negative_binomial", "sample_polya_share", "polya_share_variance", "geometric_tail_bound",
           "MAX_POLYA_SCALE", "MAX_POLYA_SHARES"]

MAX_POLYA_SCALE = 2**40   # floor(E / w) stays far below 2^52, where float64 resolves integers
MAX_POLYA_SHARES = 1 << 20
_REL_W = 2.0**-44         # relative error bound of the float w(a) (module docstring; derived in _log_filter)
_REL_E = 2.0**-46         # relative error bound of the float -ln V
_ULP = 2.0**-50          # widening of a float product or quotient (covers its 1-2 roundings)
_MIN_TOP = 1 << 21        # a 53-bit uniform below 2^-32 is too coarse for the float filter: exact path


def _params(scale: float | Fraction, shares: int) -> tuple[Fraction, int]:
    f = laplace_fraction(scale)
    if f > MAX_POLYA_SCALE:
        raise ValueError(f"Polya share scale too large for exact sampling (max 2**40), got {float(f):.3g}")
    if not (isinstance(shares, (int, np.integer)) and 1 <= int(shares) <= MAX_POLYA_SHARES):
        raise ValueError(f"shares must be an integer in [1, {MAX_POLYA_SHARES}], got {shares!r}")
    return f, int(shares)


def _lambda_iv(scale: Fraction, prec: int) -> Any:
    """lambda = -ln(1 - exp(-s/t)) as an mpmath interval at ``prec`` bits."""
    from mpmath import iv

    iv.prec = prec
    return -iv.log(1 - iv.exp(-iv.mpf(scale.denominator) / scale.numerator))


def _outward(x: Any) -> tuple[float, float]:
    """Floats enclosing the mpmath interval ``x``."""
    return float(np.nextafter(float(x.a), -np.inf)), float(np.nextafter(float(x.b), np.inf))


def _poisson_table(mu: Any, tail: float = 2.0**-50) -> tuple[np.ndarray, np.ndarray]:
    """Float bounds lo[k] <= F_k <= hi[k] of the Poisson(mu) CDF, mu an mpmath interval, up to the first k with
    1 - F_k < ``tail`` (the rare U beyond the table takes the exact path)."""
    from mpmath import iv

    term = iv.exp(-mu)
    cdf, lo, hi = term, [], []
    for k in range(1, 100_000):
        a, b = _outward(cdf)
        lo.append(max(a, 0.0))
        hi.append(min(b, 1.0))
        if a > 1.0 - tail:
            break
        term = term * mu / k
        cdf = cdf + term
    return np.array(lo), np.array(hi)


def _uniform53(rng: SecureRNG, n: int) -> np.ndarray:
    """``n`` 53-bit uniform integers (U in [u, u + 1) / 2^53, the rest of its bits not yet drawn)."""
    u: np.ndarray = (rng.uint64(n) >> np.uint64(11)).astype(np.int64)
    return u


def _poisson(n: int, scale: Fraction, shares: int, rng: SecureRNG, exact_only: bool) -> np.ndarray:
    """``n`` exact Poisson(lambda / shares) draws: N = the smallest k with U < F_k (module docstring)."""
    mu = _lambda_iv(scale, 160) / shares
    lo, hi = _poisson_table(mu)
    u = _uniform53(rng, n)
    ulo = u.astype(np.float64) * 2.0**-53          # exact: u < 2^53
    uhi = (u + 1).astype(np.float64) * 2.0**-53
    k = np.searchsorted(lo, uhi, side="left")      # first k with U_hi <= lo[k] <= F_k
    prev = np.where(k > 0, hi[np.maximum(k - 1, 0)], -1.0)
    decided = (k < lo.size) & (prev <= ulo) & ~np.full(n, exact_only)  # F_{k-1} <= hi[k-1] <= U_lo
    out = k.astype(np.int64)
    for i in np.flatnonzero(~decided):
        out[i] = _poisson_exact(int(u[i]), scale, shares, rng)
    return out


def _poisson_exact(u: int, scale: Fraction, shares: int, rng: SecureRNG) -> int:
    """One Poisson draw from the 53 known bits ``u`` of U, finished with mpmath intervals and more bits."""
    from mpmath import iv

    nbits, prec = 53, 128
    while True:
        mu = _lambda_iv(scale, prec) / shares
        U = iv.mpf([u, u + 1]) / iv.mpf(2) ** nbits
        term = iv.exp(-mu)
        cdf = term
        for k in range(0, 1_000_000):
            if U.b <= cdf.a:
                return k
            if not U.a >= cdf.b:
                break  # undecided at this precision
            term = term * mu / (k + 1)
            cdf = cdf + term
        u = (u << 64) | int(rng.uint64(1)[0])
        nbits += 64
        prec += 96


def _w_float(a: np.ndarray) -> np.ndarray:
    """w(a) = -ln(1 - e^-a) in float64, relative error < 2^-46 (16-ulp elementary functions): for a <= ln 2,
    -log(-expm1(-a)) (x = -expm1(-a) <= 1/2 within 2^-48 relative moves -ln x by 2^-48 <= 2^-48 w / ln 2);
    above, -log1p(-exp(-a)) (z = e^-a < 1/2 within 2^-48: w moves by <= 2 z 2^-48 <= 2^-47 w, as w >= z)."""
    small = a <= math.log(2.0)
    with np.errstate(divide="ignore"):
        w_small = -np.log(-np.expm1(-a))
    w_large = -np.log1p(-np.exp(-a))
    w: np.ndarray = np.where(small, w_small, w_large)
    return w


def _logarithmic(n: int, scale: Fraction, rng: SecureRNG, exact_only: bool) -> np.ndarray:
    """``n`` exact logarithmic draws, P(L = k) = p^k / (k lambda), by Kemp's L = 1 + floor(E / w(V lambda)).

    Float filter: V in [v, v + 1) / 2^53 and E = -ln V' with V' in [e, e + 1) / 2^53; lambda in
    [lam_lo, lam_hi] (mpmath, outward); w decreasing, so w(V lambda) in [w(A_hi)(1 - 2^-44), w(A_lo)(1 + 2^-44)]
    with A_lo, A_hi the product endpoints widened by one ulp; E in [-ln(e + 1) (1 - 2^-46), -ln(e) (1 + 2^-46)];
    y = E / w widened by 4 ulp. Decided where both ends of y have the same floor below 2^52."""
    lam_lo, lam_hi = _outward(_lambda_iv(scale, 160))
    v, e = _uniform53(rng, n), _uniform53(rng, n)
    wide = (v < _MIN_TOP) | (e < _MIN_TOP) | np.full(n, exact_only)
    vf, ef = v.astype(np.float64) * 2.0**-53, e.astype(np.float64) * 2.0**-53
    a_lo = vf * lam_lo * (1.0 - _ULP)
    a_hi = (vf + 2.0**-53) * lam_hi * (1.0 + _ULP)
    w_lo = _w_float(np.maximum(a_hi, 2.0**-300)) * (1.0 - _REL_W)
    w_hi = _w_float(np.maximum(a_lo, 2.0**-300)) * (1.0 + _REL_W)
    with np.errstate(divide="ignore"):
        e_lo = -np.log(ef + 2.0**-53) * (1.0 - _REL_E)
        e_hi = -np.log(np.maximum(ef, 2.0**-60)) * (1.0 + _REL_E)
    y_lo = e_lo / w_hi * (1.0 - _ULP)
    y_hi = e_hi / w_lo * (1.0 + _ULP)
    ok = ~wide & (y_hi < 2.0**52) & (np.floor(np.maximum(y_lo, 0.0)) == np.floor(y_hi))
    out = np.ones(n, dtype=np.int64)
    out[ok] += np.floor(y_hi[ok]).astype(np.int64)
    for i in np.flatnonzero(~ok):
        out[i] = _logarithmic_exact(int(v[i]), int(e[i]), scale, rng)
    return out


def _logarithmic_exact(v: int, e: int, scale: Fraction, rng: SecureRNG) -> int:
    """One logarithmic draw from the 53 known bits of V and V', finished with mpmath intervals and more bits."""
    import mpmath
    from mpmath import iv

    nbits, prec = 53, 128
    while True:
        lam = _lambda_iv(scale, prec)
        if v > 0 and e > 0:
            V = iv.mpf([v, v + 1]) / iv.mpf(2) ** nbits
            E = -iv.log(iv.mpf([e, e + 1]) / iv.mpf(2) ** nbits)
            y = E / -iv.log(1 - iv.exp(-(V * lam)))
            lo, hi = int(mpmath.floor(y.a)), int(mpmath.floor(y.b))
            if lo == hi:
                return 1 + lo
        v = (v << 64) | int(rng.uint64(1)[0])
        e = (e << 64) | int(rng.uint64(1)[0])
        nbits += 64
        prec += 96


def _negative_binomial(n: int, scale: Fraction, shares: int, rng: SecureRNG, exact_only: bool) -> np.ndarray:
    counts = _poisson(n, scale, shares, rng, exact_only)
    total = int(counts.sum())
    out = np.zeros(n, dtype=np.int64)
    if total:
        owner, logs = np.repeat(np.arange(n), counts), _logarithmic(total, scale, rng, exact_only)
        if int(logs.max()) * int(counts.max()) < 2**52:  # float64 sums of these integers are exact
            out = np.rint(np.bincount(owner, weights=logs.astype(np.float64), minlength=n)).astype(np.int64)
        else:
            np.add.at(out, owner, logs)
    return out


def sample_negative_binomial(scale: float | Fraction, shares: int, size: int | tuple[int, ...], rng: SecureRNG,
                             *, _exact_only: bool = False) -> np.ndarray:
    """Exact NB(1/shares, p), p = exp(-1/scale): ``shares`` i.i.d. draws sum to the geometric (1 - p) p^k
    (module docstring; ``scale`` rounded up by :func:`laplace_fraction`). ``_exact_only`` (tests only) sends
    every decision down the exact interval-arithmetic path."""
    f, m = _params(scale, shares)
    shape = size_tuple(size)
    return collect_samples(shape, lambda need: _negative_binomial(need, f, m, rng, _exact_only))


def sample_polya_share(scale: float | Fraction, shares: int, size: int | tuple[int, ...], rng: SecureRNG,
                       *, _exact_only: bool = False) -> np.ndarray:
    """One party's share NB(1/shares, p) - NB(1/shares, p): any ``shares`` independent shares sum to exactly the
    discrete Laplace P(x) ∝ exp(-|x| / scale) (``scale`` rounded up as :func:`laplace_fraction`)."""
    f, m = _params(scale, shares)
    shape = size_tuple(size)
    if m == 1 and not _exact_only:  # NB(1, p) - NB(1, p) is the discrete Laplace itself (CKS20's sampler)
        return sample_discrete_laplace(f, shape, rng)
    n = int(np.prod(shape))
    both = _negative_binomial(2 * n, f, m, rng, _exact_only) if n else np.zeros(0, np.int64)
    return (both[:n] - both[n:]).reshape(shape)


def polya_share_variance(scale: float | Fraction, shares: int) -> float:
    """Variance of one share: 2 p / (1 - p)^2 / shares, p = exp(-1/scale) (scale rounded up as sampled)."""
    f, m = _params(scale, shares)
    q = math.exp(-1.0 / float(f))
    return 2.0 * q / (1.0 - q) ** 2 / m


def geometric_tail_bound(scale: float | Fraction, shares: int, total_shares: int, prob: float) -> float:
    """A bound x with P(|sum of ``total_shares`` Polya shares| >= x) <= ``prob``: the sum is NB(a) - NB(a),
    a = total_shares / shares, stochastically below a difference of n = ceil(a) geometric sums, and a sum of n
    geometrics reaches x only if one reaches x / n: P <= 2 n p^(x / n), so x = n scale ln(2 n / prob)."""
    f, m = _params(scale, shares)
    n = max(1, math.ceil(int(total_shares) / m))
    return n * float(f) * math.log(2.0 * n / float(prob))
