"""The vectorised exact discrete Gaussian (dpfed.core.dgauss_alias) against the exact pmf computed
here (log-sum-exp of -y^2 / (2 sigma^2) over |y| <= 12 sigma + 6, the rest of the mass < e^-72) and
against the reference sampler (dpfed.core.samplers.sample_discrete_gaussian), by chi-square tests.

Each statistical test rejects at ALPHA = 1e-6 (fixed seeds; at most 26 such tests: a correct sampler
fails this file with probability below 3e-5 over seeds). The same tests reject deliberately broken
samplers (sigma 3 % too large, values off by one, zero counted on both sides) with p < 1e-30 at these
sample sizes, so they can fail. The envelope, the alias table and the decisions at the acceptance
boundary are also checked exactly (200-bit mpmath), where a statistical test could not see a bias of
1e-12. Runtime ~10 s.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import special, stats

from dpfed.core.dgauss_alias import _table, sample_discrete_gaussian_alias
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import sample_discrete_gaussian

ALPHA = 1e-6


def rng(tag) -> SecureRNG:
    return SecureRNG.from_seed(f"test_dgauss_alias:{tag}")


def exact_pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    k = math.ceil(12 * sigma) + 6
    y = np.arange(-k, k + 1)
    e = -(y.astype(np.float64) ** 2) / (2 * sigma * sigma)
    return y, np.exp(e - special.logsumexp(e))


def bins(sigma: float, n: int, per_bin: float = 40.0) -> tuple[np.ndarray, np.ndarray]:
    """Value edges (half-integers) of about equiprobable bins with >= per_bin expected counts each,
    and the exact probability of each bin (the outer bins take the tails to infinity)."""
    y, p = exact_pmf(sigma)
    m = int(max(2, min(500, n * 1.0 / per_bin)))
    cdf = np.cumsum(p)
    cuts = np.unique(np.searchsorted(cdf, np.linspace(0, 1, m + 1)[1:-1]))
    edges = np.concatenate([[-np.inf], y[cuts] + 0.5, [np.inf]])
    probs = np.add.reduceat(p, np.concatenate([[0], cuts + 1]))
    keep = probs * n >= 5  # drop empty-looking edges by merging into the next bin
    while not keep.all():
        i = int(np.flatnonzero(~keep)[0])
        j = i + 1 if i + 1 < probs.size else i - 1
        probs[j] += probs[i]
        probs = np.delete(probs, i)
        edges = np.delete(edges, i + 1 if j > i else i)
        keep = probs * n >= 5
    return edges, probs


def chi2_pvalue(samples: np.ndarray, sigma: float) -> float:
    """Goodness of fit of integer samples to N_Z(0, sigma^2) (chi-square over equiprobable bins)."""
    edges, probs = bins(sigma, samples.size)
    counts = np.histogram(samples, bins=edges)[0]
    expected = probs * samples.size
    stat = float(((counts - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(stat, probs.size - 1))


SIGMAS = [0.5, 0.9, 1.5, 3.0, 7.3, 64.0, 100.5, 2590.1, 2.0**18 + 0.3]


@pytest.mark.parametrize("sigma", SIGMAS)
def test_matches_the_exact_pmf(sigma):
    x = sample_discrete_gaussian_alias(sigma, 200_000, rng(f"pmf:{sigma}"))
    assert x.dtype == np.int64 and x.shape == (200_000,)
    assert chi2_pvalue(x, sigma) > ALPHA


@pytest.mark.parametrize("sigma", [2.7, 2590.1])
def test_agrees_with_the_reference_sampler(sigma):
    """Two-sample chi-square (homogeneity) against the existing exact sampler, same bins."""
    n = 200_000
    a = sample_discrete_gaussian_alias(sigma, n, rng(f"two:a:{sigma}"))
    b = sample_discrete_gaussian(sigma, n, rng(f"two:b:{sigma}"))
    edges, _ = bins(sigma, n)
    table = np.stack([np.histogram(a, bins=edges)[0], np.histogram(b, bins=edges)[0]])
    table = table[:, table.sum(axis=0) > 0]
    assert stats.chi2_contingency(table)[1] > ALPHA


@pytest.mark.parametrize("sigma", [1.3, 300.0])
def test_the_exact_path_alone_has_the_law(sigma):
    """Every regular proposal decided by mpmath intervals (the path ~1e-12 of proposals take)."""
    x = sample_discrete_gaussian_alias(sigma, 3000, rng(f"exact:{sigma}"), _exact_only=True)
    assert chi2_pvalue(x, sigma) > ALPHA


@pytest.mark.parametrize("sigma,cut", [(2.0, 0.6), (200.0, 0.5)])
def test_the_tail_envelope_has_the_law(sigma, cut):
    """The tail starts at ~ cut sigma here, so a large share of the samples comes from the
    geometric tail envelope (a path taken with probability ~ e^-50 at the default cut)."""
    tab = _table(sigma, cut)
    x = sample_discrete_gaussian_alias(sigma, 4000, rng(f"tail:{sigma}"), _cut=cut)
    assert (np.abs(x) >= tab.tail_start).mean() > 0.3  # the tail path really ran
    assert chi2_pvalue(x, sigma) > ALPHA


def test_rejects_broken_samplers():
    """The goodness-of-fit test above is not vacuous: it rejects, at the same sample size, a sampler
    with sigma 3 % too large, one whose values are off by one, and one that counts zero on both
    sides (no "-0" rejection)."""
    sigma, n = 7.3, 200_000
    good = sample_discrete_gaussian_alias(sigma, n, rng("broken:0"))
    wide = sample_discrete_gaussian_alias(sigma * 1.03, n, rng("broken:1"))
    # |y| with P(m) ∝ f(m) on m >= 0 (thin the m > 0 of |N_Z| by a coin), then a fair sign, no
    # "-0" rejection: P(0) is twice what it should be relative to the rest
    mag = np.abs(sample_discrete_gaussian_alias(sigma, 2 * n, rng("broken:2")))
    mag = mag[(mag == 0) | (rng("broken:3").integers(2, 2 * n) == 0)][:n]
    zero_twice = mag * (rng("broken:4").integers(2, mag.size) * 2 - 1)
    assert chi2_pvalue(good, sigma) > ALPHA
    assert chi2_pvalue(wide, sigma) < 1e-30
    assert chi2_pvalue(good + 1, sigma) < 1e-30
    assert chi2_pvalue(zero_twice, sigma) < 1e-30


def test_same_stream_same_samples_and_shapes():
    a = sample_discrete_gaussian_alias(5.0, (3, 7), rng("same"))
    b = sample_discrete_gaussian_alias(5.0, (3, 7), rng("same"))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (3, 7)
    assert sample_discrete_gaussian_alias(5.0, 0, rng("empty")).shape == (0,)
    with pytest.raises(ValueError):
        sample_discrete_gaussian_alias(0.0, 3, rng("bad"))
    with pytest.raises(ValueError):
        sample_discrete_gaussian_alias(2.0**29, 3, rng("bad"))


# --------------------------------------------------------------------------- the table, exactly

def f_exact(y: int, sigma: float) -> mpmath.mpf:
    with mpmath.workprec(200):
        return mpmath.exp(-mpmath.mpf(y) ** 2 / (2 * mpmath.mpf(sigma) ** 2))


@pytest.mark.parametrize("sigma", [0.7, 3.3, 150.2])
def test_envelope_dominates_and_the_alias_table_tiles(sigma):
    """Checked exactly (200-bit mpmath, independent of the module's interval code): on every block
    squeeze <= λ f(|y|) <= height for each y, the tail heights dominate (G_T >= λ f(T) and
    w_T T >= σ² ln 2), and each entry's alias parts tile [0, mass) with masses summing to 2^53."""
    tab = _table(sigma, 10.0)
    w, J, lam = 1 << tab.s, tab.blocks, tab.lam
    for e in range(2 * J):
        j, neg = e % J, e >= J
        ys = range(j * w + 1, (j + 1) * w + 1) if neg else range(j * w, (j + 1) * w)
        keys = np.flatnonzero(tab.key_entry == e)
        squeeze = int(tab.key_squeeze[keys[0]])
        assert (tab.key_squeeze[keys] == squeeze).all()
        for y in ys:
            v = lam * f_exact(y, sigma)
            assert squeeze <= v <= tab.heights[e], (e, y)
    with mpmath.workprec(200):
        assert lam * f_exact(tab.tail_start, sigma) <= tab.heights[-1] == tab.tail_height
        assert tab.tail_width * tab.tail_start >= mpmath.mpf(sigma) ** 2 * mpmath.log(2)
    cols, cap = 1 << tab.col_bits, 1 << (53 - tab.col_bits)
    thresh = np.repeat(tab.thresh, 2)
    lo = np.where(np.arange(2 * cols) % 2 == 0, 0, thresh) + tab.key_obase
    hi = np.where(np.arange(2 * cols) % 2 == 0, thresh, cap) + tab.key_obase
    total = 0
    for e in np.unique(tab.key_entry):
        k = np.flatnonzero((tab.key_entry == e) & (hi > lo))
        if not k.size:  # a padding column's entry: no mass
            continue
        order = np.argsort(lo[k])
        starts, ends = lo[k][order], hi[k][order]
        assert starts[0] == 0 and (starts[1:] == ends[:-1]).all()
        mass = int(ends[-1])
        if e < 2 * J:
            assert mass == tab.heights[e] * w
        total += mass
    assert total == 1 << 53


def word_for(tab, entry: int, offset: int) -> int:
    """The proposal word that the alias table maps to (entry, offset)."""
    cap = 1 << (53 - tab.col_bits)
    for key in np.flatnonzero(tab.key_entry == entry):
        col, part = divmod(int(key), 2)
        lo = int(tab.thresh[col]) if part else 0
        hi = cap if part else int(tab.thresh[col])
        r = offset - int(tab.key_obase[key])
        if lo <= r < hi:
            return (col << (53 - tab.col_bits)) | r
    raise AssertionError("offset not covered")


@pytest.mark.parametrize("sigma", [150.2, 2590.1])
def test_decisions_at_the_acceptance_boundary(sigma):
    """Proposals with rem next to λ f(y): rem <= ceil(λ f) - 2 is always accepted, rem >= ceil(λ f)
    always rejected (whatever U' is), for the first and last y of positive and negative blocks."""
    from dpfed.core.dgauss_alias import _chunk

    tab = _table(sigma, 10.0)
    w, J = 1 << tab.s, tab.blocks
    checked = set()
    for e in (0, 1, J // 2, J, J + 1, J + J // 2):
        j, neg = e % J, e >= J
        for off in (0, w - 1):
            m = j * w + off
            y = -1 - m if neg else m
            v = tab.lam * f_exact(y, sigma)
            c = int(mpmath.ceil(v))
            if c < 2:
                continue
            for rem, want in ((c - 2, True), (c, False), (c + 1, False)):
                if rem >= tab.heights[e]:
                    continue
                u = np.array([word_for(tab, e, rem * w + off)], dtype=np.int64)
                got = _chunk(tab, u, rng(f"edge:{e}:{off}:{rem}"), False)
                assert (got.size == 1) == want, (e, off, rem, c)
                if want:
                    assert got[0] == y
                checked.add(want)
    assert checked == {True, False}


@pytest.mark.parametrize("sigma", [150.2, 2.0**20 + 0.3])
def test_the_undecided_proposal_is_accepted_with_the_fractional_part(sigma):
    """rem = floor(λ f(y)) is accepted iff U' < frac(λ f(y)) for a fresh uniform U' (drawn lazily by
    the exact path): over 400 streams the acceptance count is Binomial(400, frac) (two-sided, ALPHA).
    At sigma 2^20, λ ~ 2^32 and the float filter's margin is far below 1, so it is the filter's
    bound (rem + 1 <= v (1 - rho)) that sends this proposal to the exact path."""
    from dpfed.core.dgauss_alias import _chunk

    tab = _table(sigma, 10.0)
    w = 1 << tab.s
    done = 0
    for e, off in ((0, 1), (3, w - 1), (tab.blocks + 2, 1), (tab.blocks + 5, w - 1), (7, w // 2)):
        m = (e % tab.blocks) * w + off
        y = -1 - m if e >= tab.blocks else m
        v = tab.lam * f_exact(y, sigma)
        frac = float(v - mpmath.floor(v))
        if not 0.05 < frac < 0.95 or int(mpmath.floor(v)) >= tab.heights[e]:
            continue
        u = np.array([word_for(tab, e, int(mpmath.floor(v)) * w + off)], dtype=np.int64)
        hits = sum(_chunk(tab, u, rng(f"frac:{e}:{t}"), False).size for t in range(400))
        assert stats.binomtest(hits, 400, frac).pvalue > ALPHA, (e, hits, frac)
        done += 1
    assert done >= 2


def test_threads_missing_one_table_build_it_once():
    """Co-hosted parties (threads of one process) offered the same job ask for one sampler table at once:
    it is built once, the others wait (a 100-party test spent 48 CPU s building it 100 times)."""
    import threading

    _table.cache_clear()
    sigma, cut = 1234.5678, 9.0
    barrier = threading.Barrier(8)

    def build() -> None:
        barrier.wait()
        _table(sigma, cut)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    info = _table.cache_info()
    assert (info.misses, info.hits) == (1, 7), info
