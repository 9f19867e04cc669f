"""The Gaussian noise of an LVQ party's DP-SGD release: the ziggurat sampler's law, and the party's
noisy sum. Statistical tests use fixed seeds; each states its false-alarm rate. Runtime ~3 s."""
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from dpfed.algorithms.lvq import noisy_gradient_sum
from dpfed.algorithms.lvq.gradient import clipped_gradient_sum
from dpfed.core.rng import ReproducibleSeedWarning, SecureRNG

warnings.simplefilter("ignore", ReproducibleSeedWarning)
N = 1_000_000


@pytest.fixture(scope="module")
def draws() -> np.ndarray:
    return SecureRNG.from_seed("zig-law").normal_ziggurat(N)


def test_ziggurat_matches_the_normal_law(draws):
    # KS and a 100-bin chi-square against N(0, 1): false-alarm rate 1e-4 each
    assert stats.kstest(draws, "norm").pvalue > 1e-4
    edges = stats.norm.ppf(np.linspace(0, 1, 101)[1:-1])
    counts = np.bincount(np.searchsorted(edges, draws), minlength=100)
    assert stats.chisquare(counts).pvalue > 1e-4
    # mean / variance within 5 standard errors (false alarm < 1e-6)
    assert abs(draws.mean()) < 5 / math.sqrt(N)
    assert abs(draws.var() - 1.0) < 5 * math.sqrt(2 / N)


@pytest.mark.parametrize("t", [1.0, 2.5, 3.6541528853610088, 4.0, 4.5])
def test_ziggurat_tails_and_symmetry(draws, t):
    # counts beyond t (the base layer's edge r = 3.654 included: the exact tail sampler) within
    # 5 binomial sd (false alarm < 1e-6 per case); the two sides balance likewise
    p = math.erfc(t / math.sqrt(2))
    k = int((np.abs(draws) > t).sum())
    assert abs(k - N * p) < 5 * math.sqrt(N * p * (1 - p)) + 1
    pos = int((draws > t).sum())
    assert abs(pos - k / 2) < 5 * math.sqrt(k / 4) + 1


def test_ziggurat_draws_are_independent(draws):
    # lag-1 and lag-2 correlation of N iid draws: sd 1/sqrt(N); 5 sd bound (false alarm < 1e-6)
    for lag in (1, 2):
        assert abs(np.corrcoef(draws[:-lag], draws[lag:])[0, 1]) < 5 / math.sqrt(N)
    # the sign (bit 8) is independent of the magnitude (bits 11-63): same law of |z| on both sides
    assert stats.ks_2samp(draws[draws > 0], -draws[draws < 0]).pvalue > 1e-4


def test_ziggurat_shapes_scale_out_and_reproducibility():
    a = SecureRNG.from_seed(5).normal_ziggurat((3, 7), scale=2.5)
    b = SecureRNG.from_seed(5).normal_ziggurat(21, scale=1.0)
    assert a.shape == (3, 7) and np.allclose(a.ravel(), 2.5 * b)
    buf = np.empty((3, 7))
    assert SecureRNG.from_seed(5).normal_ziggurat((3, 7), 2.5, out=buf) is buf and np.array_equal(buf, a)
    assert SecureRNG.from_seed(5).normal_ziggurat(0).shape == (0,)
    with pytest.raises(ValueError):
        SecureRNG.from_seed(5).normal_ziggurat(4, out=np.empty(4, dtype=np.float32))
    # more than one chunk, with a ragged end
    big = SecureRNG.from_seed(6).normal_ziggurat(300_001)
    assert np.all(np.isfinite(big)) and abs(big.std() - 1.0) < 0.01


def test_box_muller_in_place_is_bit_identical_to_the_formula():
    """SecureRNG.normal was rewritten in place (and got ``out=``): same words, same floating-point ops."""
    def reference(rng: SecureRNG, count: int, scale: float) -> np.ndarray:
        half = (count + 1) // 2
        u1 = 1.0 - rng.uniform(half)
        u2 = rng.uniform(half)
        r = np.sqrt(-2.0 * np.log(u1))
        return np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)])[:count] * scale

    for count, scale in ((1, 1.0), (8, 0.5), (1001, 3.0)):
        want = reference(SecureRNG.from_seed(count), count, scale)
        got = SecureRNG.from_seed(count).normal(count, scale)
        buf = np.empty(count)
        SecureRNG.from_seed(count).normal(count, scale, out=buf)
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
        assert np.array_equal(buf.view(np.uint64), want.view(np.uint64))


def _step_inputs():
    """A small GMLVQ step (50 records, d = 30, 4 prototypes, 30 x 30 Omega) and its clean clipped sum."""
    rng = np.random.default_rng(0)
    d, K, r = 30, 4, 30
    X, y = rng.uniform(-1, 1, (50, d)), rng.integers(0, K, 50)
    W, omega = rng.normal(0, 0.3, (K, d)), rng.normal(0, 0.2, (r, d))
    wl = np.arange(K)
    return X, y, W, wl, omega, clipped_gradient_sum(X, y, W, wl, omega, 0.5)


def test_noisy_gradient_sum_adds_noise_of_the_stated_std_to_every_entry():
    X, y, W, wl, omega, clean = _step_inputs()
    K, d = W.shape
    std = 0.7
    noisy = noisy_gradient_sum(X, y, W, wl, omega, 0.5, std, SecureRNG.from_seed("step"))
    e = np.concatenate([(noisy.prototypes - clean.prototypes).ravel(), (noisy.omega - clean.omega).ravel()])
    # sample variance of n = 1020 draws: chi-square with n dof, two-sided 1e-4 false-alarm bounds
    n = e.size
    lo, hi = stats.chi2.ppf([5e-5, 1 - 5e-5], n) / n
    assert lo < np.mean(e ** 2) / std ** 2 < hi
    assert np.array_equal(noisy.norms, clean.norms)  # the clipping itself is unchanged
    # GLVQ (no Omega) and a GMLVQ step that does not learn Omega: noise on the prototypes only
    g = noisy_gradient_sum(X, y, W, wl, None, 0.5, std, SecureRNG.from_seed(1))
    assert g.omega is None and g.prototypes.shape == (K, d)
    g = noisy_gradient_sum(X, y, W, wl, omega, 0.5, std, SecureRNG.from_seed(1), learn_omega=False)
    assert np.all(g.omega == 0.0)


def test_exact_noise_puts_the_release_on_a_grid_with_the_stated_std():
    """exact=True: the released sum lies on a public grid 2^-k (floating-point safe) and the noise
    has the stated std (same chi-square bounds as above, false-alarm rate 1e-4)."""
    X, y, W, wl, omega, clean = _step_inputs()
    std = 0.7
    noisy = noisy_gradient_sum(X, y, W, wl, omega, 0.5, std, SecureRNG.from_seed("exact"), exact=True)
    flat = np.concatenate([noisy.prototypes.ravel(), noisy.omega.ravel()])
    k = next(b for b in range(10, 60) if np.all(np.ldexp(flat, b) == np.round(np.ldexp(flat, b))))
    assert k < 60 and not np.all(np.ldexp(flat, k - 1) == np.round(np.ldexp(flat, k - 1)))
    e = np.concatenate([(noisy.prototypes - clean.prototypes).ravel(), (noisy.omega - clean.omega).ravel()])
    n = e.size
    lo, hi = stats.chi2.ppf([5e-5, 1 - 5e-5], n) / n
    assert lo < np.mean(e ** 2) / std ** 2 < hi
    g = noisy_gradient_sum(X, y, W, wl, omega, 0.5, std, SecureRNG.from_seed(1), learn_omega=False, exact=True)
    assert np.all(g.omega == 0.0)
