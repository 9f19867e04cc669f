"""Mechanisms with a categorical output: the exponential mechanism (McSherry & Talwar 2007) and
k-ary randomized response (Warner 1965; Kairouz, Oh & Viswanath 2016), both exact (CKS20's Bernoulli
coins on rational parameters, :func:`dpfed.core.bernoulli.bernoulli_exp_lazy`).

Events: the exponential mechanism is charged ``DiscreteLaplaceDpEvent(epsilon, 1)``, whose privacy-loss
distribution is +-epsilon with probabilities e^eps/(1+e^eps), 1/(1+e^eps): the binary randomized-response
pair that dominates every pure epsilon-DP mechanism (Kairouz, Oh & Viswanath 2015), valid under
add/remove; randomized response ``RandomizedResponseDpEvent(k/(e^eps + k - 1), k)`` (REPLACE_ONE).
"""
from __future__ import annotations

import math

import numpy as np
from dp_accounting import dp_event
from numpy.typing import ArrayLike

from dpfed.core.bernoulli import bernoulli_exp_lazy
from dpfed.core.release import Release, eps_fraction, float_down, int_array, positive, real_array, to_grid
from dpfed.core.rng import SecureRNG

__all__ = ["exponential", "randomized_response", "rr_frequencies"]


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
    q = real_array(scores)
    if q.ndim != 1 or q.size == 0:
        raise ValueError("scores must be a non-empty 1-D array")
    sens = positive(sensitivity, "sensitivity")
    eps = positive(epsilon, "epsilon")
    e = eps_fraction(eps)
    k = 20 - math.frexp(sens)[1]  # sens * 2^k in [2^19, 2^20)
    s = to_grid(q, k)
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
        ok = bernoulli_exp_lazy(qq[idx.ravel()], rr[idx.ravel()], den, rng).reshape(idx.shape)
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
    e = float(eps_fraction(epsilon))
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
    eps = positive(epsilon, "epsilon")
    v = int_array(values)
    if v.size and (v.min() < 0 or v.max() >= k):
        raise ValueError(f"values must lie in 0..{k - 1}")
    e = eps_fraction(eps)
    flat = v.ravel()
    out = np.empty_like(flat)
    pending = np.arange(flat.size)
    while pending.size:
        y = rng.integers(k, pending.size)
        acc = y == flat[pending]
        other = np.flatnonzero(~acc)  # these are kept with probability exp(-eps)
        m = other.size
        acc[other] = bernoulli_exp_lazy(np.full(m, e.numerator // e.denominator, np.int64),
                                       np.full(m, e.numerator % e.denominator, np.int64),
                                       e.denominator, rng)
        out[pending[acc]] = y[acc]
        pending = pending[~acc]
    p = k / (math.exp(eps) + k - 1)  # dp-accounting: prob. of a uniformly random bucket
    event = dp_event.RandomizedResponseDpEvent(noise_parameter=float_down(p), num_buckets=k)
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
    eps = positive(epsilon, "epsilon")
    r = int_array(responses).ravel()
    if r.size == 0:
        raise ValueError("no responses")
    if r.min() < 0 or r.max() >= k:
        raise ValueError(f"responses must lie in 0..{k - 1}")
    p, q = _rr_probs(k, eps)
    f = np.bincount(r, minlength=k) / r.size
    return (f - q) / (p - q)
