"""Exact coins and random-integer primitives of dpfed's samplers (Canonne, Kamath & Steinke 2020).

:func:`bernoulli_exp` is an exact Bernoulli(exp(-num/den)) (replaces CKS20 Algorithm 1) by lazy
comparison of a uniform real, of which only the bits needed are drawn, with exp(-gamma): float64 where
a proven error margin settles it (:func:`float_below`), else mpmath interval arithmetic
(:func:`interval_below`), as in von Neumann's and Karney's exact samplers. Also: fair coins
(:func:`random_bits`), the geometric law of ratio e^-1 (:func:`geometric_exp_minus_one`, CKS20 Alg. 2's
building block) and the masked-loop helpers every sampler shares (:func:`size_tuple`,
:func:`collect_samples`). Used by :mod:`dpfed.core.samplers`, :mod:`dpfed.core.dgauss_alias` and
:mod:`dpfed.core.mechanisms`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dpfed.core.rng import SecureRNG

__all__ = ["bernoulli_exp", "bernoulli_exp_lazy", "size_tuple", "collect_samples", "random_bits",
           "geometric_exp_minus_one", "float_below", "interval_below"]

_FACT12 = math.factorial(12)  # 479001600 < 2**32: one 32-bit draw decides 12 steps of Alg. 1
_FACT_THRESH = np.array([_FACT12 // math.factorial(k) for k in range(1, 13)], dtype=np.int64)


def size_tuple(size: int | tuple[int, ...]) -> tuple[int, ...]:
    """``size`` (an int or a tuple of ints) as a shape tuple; ValueError when negative."""
    if isinstance(size, (int, np.integer)):
        if size < 0:
            raise ValueError("size must be non-negative")
        return (int(size),)
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise ValueError("size must be non-negative")
    return size


def collect_samples(shape: tuple[int, ...], batch: Callable[[int], np.ndarray]) -> np.ndarray:
    """Fill an int64 array of ``shape`` from ``batch(need)``, which returns i.i.d. accepted
    samples (any number); a prefix of i.i.d. samples is i.i.d., so truncation keeps the law."""
    n = int(np.prod(shape))
    parts, have = [], 0
    while have < n:
        got = batch(n - have)[: n - have]
        parts.append(got)
        have += got.size
    out = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    return out.reshape(shape)


def random_bits(rng: SecureRNG, n: int) -> np.ndarray:
    """``n`` fair coins (bool array) from ceil(n/8) keystream bytes."""
    raw = np.frombuffer(rng.bytes((n + 7) // 8), dtype=np.uint8)
    return np.unpackbits(raw, count=n).astype(bool)


def _bernoulli_exp_minus_one(rng: SecureRNG, n: int) -> np.ndarray:
    """``n`` exact Bernoulli(exp(-1)) draws (CKS20 Alg. 1 with gamma = 1).

    Alg. 1 stops at the first K with Bernoulli(1/K) = 0 and returns [K odd]; P(K > k) = 1/k!.
    One uniform M in [0, 12!) decides the first 12 steps at once (K > k  <=>  M < 12!/k!, exact
    because k! divides 12!); the 1 in 12! chains that survive continue one step at a time.
    """
    return _exp_minus_one_from_uniform(rng.integers(_FACT12, n), rng)


def _exp_minus_one_from_uniform(m: np.ndarray, rng: SecureRNG) -> np.ndarray:
    """[K odd] for Alg. 1 with gamma = 1, from M uniform on [0, 12!) (see above)."""
    # K = 2 <=> M in [12!/2, 12!) (even); K = 3 <=> M in [12!/6, 12!/2) (odd); 1/24 go on
    out: np.ndarray = (m < _FACT_THRESH[1]) & (m >= _FACT_THRESH[2])
    rest = np.flatnonzero(m < _FACT_THRESH[3])
    if rest.size:
        # K = 1 + #{k in 1..12 : M < 12!/k!}   (thresholds decrease in k)
        k = 1 + np.searchsorted(-_FACT_THRESH, -m[rest], side="left")
        long = np.flatnonzero(k > 12)
        if long.size:  # probability 1/12! per draw: continue Algorithm 1 sequentially
            kk = np.full(long.size, 13, dtype=np.int64)
            pending = np.arange(long.size)
            while pending.size:
                a = rng.integers(kk[pending]) < 1  # Bernoulli(1/K)
                pending = pending[a]
                kk[pending] += 1
            k[long] = kk
        out[rest] = (k & 1).astype(bool)
    return out


def geometric_exp_minus_one(rng: SecureRNG, n: int) -> np.ndarray:
    """V >= 0 with P(V = v) = (1 - e^-1) e^-v: count Bernoulli(e^-1) successes before a failure."""
    v = np.zeros(n, dtype=np.int64)
    pending = np.arange(n)
    while pending.size:
        ok = _bernoulli_exp_minus_one(rng, pending.size)
        pending = pending[ok]
        v[pending] += 1
    return v


def float_below(w: np.ndarray, a: np.ndarray, err: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Float filter of [U < a] for U in [w, w+1) / 2^32 (w uint32 or its float64 copy), ``a``
    known to within ``err``: (surely below, surely not below); neither means undecided.
    Products by 2^32 are exact, and w + 1 <= 2^32 is an exact float."""
    wf = np.asarray(w, dtype=np.float64)
    return wf + 1.0 <= (a - err) * 2.0**32, wf >= (a + err) * 2.0**32


def interval_below(w: int, nu: int, a: Any) -> bool | None:
    """[U < a] for U in [w, w+1) / 2^nu against the mpmath interval ``a``: True or False when
    the intervals decide it, None when more bits of U (or a tighter ``a``) are needed."""
    from mpmath import iv

    u = iv.mpf([w, w + 1]) / iv.mpf(2) ** nu
    if u.b <= a.a:
        return True
    if u.a >= a.b:
        return False
    return None


def bernoulli_exp_lazy(q: np.ndarray | None, r: np.ndarray, den: int | np.ndarray,
                        rng: SecureRNG) -> np.ndarray:
    """Exact Bernoulli(exp(-(q + r/den))) for int64 arrays q >= 0 (or None),
    0 <= r < den < 2**62 (den a scalar or an array), by lazy
    comparison: the coin is [U < e^{-gamma}] for a uniform real U of which only 32 bits are drawn.

    Float filter: gamma_f = q + r/den has relative error <= 2^-50 (int64 -> float64 conversions,
    one division, one addition), so a = exp(-gamma_f) is within a (gamma 2^-50 + 16 ulp) <=
    2^-50/e + 2^-48 < 2^-46 of e^{-gamma} (a gamma <= 1/e). Where U's 2^-32-wide interval clears a by that margin
    the decision is proven; the rest (~2^-31 of the coins) draws more bits of U and compares with
    mpmath interval arithmetic on the exact rational gamma. Several times faster than CKS20
    Algorithm 1's chain of Bernoulli(gamma/k) coins, with the identical (exact) law.
    """
    n = r.size
    gamma = r.astype(np.float64)
    gamma /= den if np.ndim(den) == 0 else np.asarray(den, dtype=np.float64)
    if q is not None:
        gamma += q
    a = np.exp(-gamma, out=gamma)
    w = rng._uint32(n)
    out, above = float_below(w, a, 2.0**-46)
    undecided = ~(out | above)
    for i in np.flatnonzero(undecided):
        d = int(den) if np.ndim(den) == 0 else int(np.asarray(den)[i])
        num = (int(q[i]) if q is not None else 0) * d + int(r[i])
        out[i] = _uniform_below_exp(int(w[i]), num, d, rng)
    return out


def _uniform_below_exp(w: int, num: int, den: int, rng: SecureRNG) -> bool:
    """[U < exp(-num/den)] for U = (w + U')/2^32, drawing U' lazily (32 bits at a time) and
    deciding with outward-rounded mpmath intervals."""
    from mpmath import iv

    nu, prec = 32, 96
    while True:
        iv.prec = prec
        below = interval_below(w, nu, iv.exp(-(iv.mpf(num) / iv.mpf(den))))
        if below is not None:
            return below
        w = (w << 32) | int(rng._uint32(1)[0])
        nu += 32
        prec += 64


def bernoulli_exp(gamma_num: ArrayLike, gamma_den: ArrayLike, rng: SecureRNG) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)), vectorised (lazy comparison, see :func:`bernoulli_exp_lazy`).

    ``gamma_num >= 0`` and ``0 < gamma_den < 2**62`` are integers or int64 arrays (broadcast).
    """
    num = np.asarray(gamma_num)
    den = np.asarray(gamma_den)
    if num.dtype.kind not in "iu" or den.dtype.kind not in "iu":
        raise ValueError("bernoulli_exp needs integer numerators and denominators")
    num, den = np.broadcast_arrays(num.astype(np.int64), den.astype(np.int64))
    if np.any(num < 0) or np.any(den <= 0) or np.any(den >= 2**62):
        raise ValueError("bernoulli_exp needs num >= 0 and 0 < den < 2**62")
    shape = num.shape
    num, den = num.ravel(), den.ravel()
    return bernoulli_exp_lazy(num // den, num % den, den, rng).reshape(shape)
