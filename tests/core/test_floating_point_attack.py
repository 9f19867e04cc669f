"""Mironov's (CCS 2012) floating-point attack on the textbook Laplace mechanism.

NumPy's ``Generator.laplace`` draws U on the 2^-53 grid and returns loc +- scale*log(2U) (or
log(2 - 2U)); a count released as ``count + noise`` therefore lands only on a sparse, input-
dependent set of doubles. The attacker below knows the sampler (as Mironov's does) and, for each
candidate count x in {0, 1}, decides whether the observed double is reachable from x at all by
re-running the exact floating-point recipe for the few grid values of U that could produce it.
It guesses the unique reachable candidate, or flips a coin.

* Against the naive release its success rate is ~0.90, far above the e^eps/(1+e^eps) = 0.73 that
  any eps=1-DP mechanism allows: the naive release is not DP.
* Against dpfed.core.mechanisms.laplace every output is an integer multiple of the public grid 2^-k
  reachable from both counts (discrete Laplace noise has full support on the integers), so the
  attack degrades to a coin flip (~0.5).
Thresholds are >= 8 binomial standard errors from the expected rates (false alarm < 1e-12).
Runtime: ~2 s.
"""
from __future__ import annotations

import math

import numpy as np

from dpfed.core.mechanisms import laplace
from dpfed.core.rng import SecureRNG

EPS = 1.0
SCALE = 1.0  # sensitivity 1 / epsilon 1
TRIALS = 3000


def _numpy_noise(k: int, b: float) -> float | None:
    """NumPy's random_laplace(loc=0, scale=b) for the uniform U = k * 2^-53 (numpy/random/src/
    distributions/distributions.c); math.log is the same C library log NumPy calls."""
    u = k * 2.0**-53
    if u >= 0.5:
        return 0.0 - b * math.log(2.0 - u - u)
    if u > 0.0:
        return 0.0 + b * math.log(u + u)
    return None


def reachable(y: float, x: int, b: float) -> bool:
    """Can ``float(x) + numpy_laplace_noise`` equal the double ``y`` exactly?"""
    n = y - x
    k0 = math.exp(n / b) * 2.0**52 if n < 0 else 2.0**53 - math.exp(-n / b) * 2.0**52
    window = int(abs(y) / b) + 4  # covers the rounding of y - x and of exp
    c = int(round(k0))
    for k in range(max(1, c - window), min(2**53 - 1, c + window) + 1):
        nz = _numpy_noise(k, b)
        if nz is not None and float(x) + nz == y:
            return True
    return False


def attack(outputs: np.ndarray, secrets: np.ndarray, coin: np.random.Generator) -> tuple[float, float]:
    """(success rate, fraction of trials where the true count was judged reachable)."""
    wins, true_ok = 0, 0
    for y, x in zip(outputs.tolist(), secrets.tolist(), strict=True):
        r0, r1 = reachable(y, 0, SCALE), reachable(y, 1, SCALE)
        true_ok += (r0, r1)[x]
        guess = 0 if (r0 and not r1) else 1 if (r1 and not r0) else int(coin.integers(2))
        wins += guess == x
    return wins / len(secrets), true_ok / len(secrets)


def test_attack_breaks_naive_numpy_laplace():
    g = np.random.default_rng(2012)
    secrets = g.integers(0, 2, TRIALS)
    outputs = secrets + g.laplace(0.0, SCALE, TRIALS)  # the textbook, unsafe release
    success, true_reachable = attack(outputs, secrets, np.random.default_rng(1))
    assert true_reachable == 1.0  # the attacker's model of the sampler is exact
    bound = math.exp(EPS) / (1 + math.exp(EPS))  # best success any eps-DP release allows
    se = math.sqrt(0.25 / TRIALS)
    assert success > bound + 8 * se, f"attack success {success:.3f} should exceed the DP bound {bound:.3f}"


def test_attack_fails_against_dpfed_laplace():
    rng = SecureRNG.from_seed("test_floating_point_attack")
    g = np.random.default_rng(2013)
    secrets = g.integers(0, 2, TRIALS)
    rel = laplace(secrets.astype(float), sensitivity=1.0, epsilon=EPS, rng=rng, grid_bits=20)
    k = rel.details["grid_bits"]
    # every output is on the public grid, and both counts reach every grid point
    assert np.all(np.ldexp(rel.value, k) == np.round(np.ldexp(rel.value, k)))
    success, _ = attack(rel.value, secrets, np.random.default_rng(1))
    se = math.sqrt(0.25 / TRIALS)
    assert abs(success - 0.5) < 8 * se, f"attack success {success:.3f} should be a coin flip"
