"""Exact discrete Gaussian, vectorised: rejection from a step envelope chosen by an alias table.

Target P(y) ∝ f(|y|), f(y) = exp(-y²/(2σ²)) on Z (Canonne, Kamath & Steinke 2020's law), the same
law as :func:`dpfed.core.samplers.sample_discrete_gaussian` (the reference), about 3x faster for the
large σ of secure-aggregation noise shares (KLS21). Rejection sampling (von Neumann) from an envelope
that is a step function on y >= 0 with exact integer heights:

* regular blocks j = 0 .. J-1 of w = 2^s integers [j w, (j+1) w), height G_j = ceil(λ f(j w)) >= λ f(y)
  on the block (f decreases on y >= 0; G_j from outward-rounded interval arithmetic, so never below);
* a tail y >= T = J w of mass 2 G_T w_T, G_T = ceil(λ f(T)): the sub-block k >= 0 of width
  w_T >= σ² ln 2 / T has height G_T 2^-k, which dominates f there because
  f(T + k w_T) <= f(T) exp(-T k w_T / σ²) <= f(T) 2^-k;
* a dummy block (every proposal in it is rejected) that fills the total mass to exactly 2^K.

One K = 53-bit uniform word picks (block, offset) with probability exactly 1/2^K each, through an
integer alias table (Walker 1977, Vose 1991; every column's two parts tile their entries' offsets);
offset o of block j splits into y = j w + (o mod w) and rem = o div w, uniform on [0, G_j), and the
proposal is accepted iff rem + U' < λ f(y) for a fresh uniform real U' in [0, 1). So
P(y, accepted) = λ f(y) / 2^K for every y >= 0 (tail: P(k) = 2^-(k+1), y uniform on the sub-block,
rem on [0, G_T), accepted iff rem + U' < λ 2^k f(y): the same product). A random sign, rejecting
"-0", gives P(y) ∝ f(|y|) on Z. The decision rem + U' < λ f(y) is taken by float64 where a proven
margin settles it (only rem = floor(λ f(y)) needs U' at all), else exactly by mpmath intervals with
U' drawn 32 bits at a time (lazy comparison, as in :mod:`dpfed.core.samplers`). The law is exact,
not approximate; every random bit comes from :class:`~dpfed.core.rng.SecureRNG`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpfed.core.bernoulli import random_bits, size_tuple
from dpfed.core.memo import shared_cache
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import dg_sigma

__all__ = ["sample_discrete_gaussian_alias"]

_K = 53                       # bits of a proposal word: every mass and offset is exact in float64
_BLOCKS_PER_SIGMA = 64        # block width w = 2^floor(log2(σ / 64)) (>= 1): acceptance ~ 0.99
_CUT = 10.0                   # regular blocks up to T ~ 10 σ: the tail holds mass ~ e^-50
_CHUNK = 1 << 15              # proposals per float pass: the temporaries stay in L2 cache
_LN2_UP = Fraction(69315, 100000)  # > ln 2


@dataclass(frozen=True)
class _Table:
    """The envelope and its alias table for one σ and cut. Entries: the J positive regular blocks
    (y in [j w, (j+1) w), height ceil(λ f(j w))), the J negative ones (y in [-(j+1) w, -j w - 1],
    height ceil(λ f(j w + 1))), the positive and the negative tail, the dummy. Per key = 2 column +
    part (part 1: the alias part): the entry, the offset base, the y base (j w, or ~(j w) = -1 - j w so
    that y = base XOR (o mod w)) and the squeeze bound (rem < squeeze proves acceptance)."""

    sigma: float
    s: int                    # block width w = 2^s
    blocks: int               # J
    lam: int                  # λ: heights are ceil(λ f(.)), masses sum to 2^K
    tail_start: int           # T = J w
    tail_width: int           # w_T
    tail_height: int          # G_T
    col_bits: int             # 2^col_bits alias columns of capacity 2^(K - col_bits)
    thresh: np.ndarray        # per column: the own part is r < thresh
    key_entry: np.ndarray     # per key: entry index
    key_obase: np.ndarray     # per key: offset = r + obase
    key_ybase: np.ndarray     # per key: y = ybase XOR (offset mod w)
    key_squeeze: np.ndarray   # per key: floor(λ min f) over the block (0 for tails and the dummy)
    heights: tuple[int, ...]  # per regular entry G_j (2 J of them), then G_T
    rho: float                # relative error bound of the float value of λ f(y) on regular blocks
    acceptance: float         # P(a proposal is accepted), for batch sizes only


def _f_bounds(y: int, sigma: float) -> tuple[Fraction, Fraction]:
    """Rationals lo <= exp(-y²/(2σ²)) <= hi (mpmath interval, outward rounding; σ an exact float)."""
    from mpmath import iv, libmp

    iv.prec = 80
    lo, hi = iv.exp(-(iv.mpf(y) ** 2) / (2 * iv.mpf(sigma) ** 2))._mpi_  # exact endpoints
    return Fraction(*libmp.to_rational(lo)), Fraction(*libmp.to_rational(hi))


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


@shared_cache(maxsize=32)  # single-flight: co-hosted parties offered one job build a table once
def _table(sigma: float, cut: float) -> _Table:
    s = max(0, math.floor(math.log2(sigma / _BLOCKS_PER_SIGMA))) if sigma >= _BLOCKS_PER_SIGMA else 0
    w = 1 << s
    blocks = max(1, math.ceil(cut * sigma / w))
    tail_start = blocks * w
    tail_width = max(1, _ceil(Fraction(sigma) ** 2 * _LN2_UP / tail_start))
    assert Fraction(tail_width * tail_start) >= Fraction(sigma) ** 2 * _LN2_UP
    bound = functools.lru_cache(maxsize=None)(lambda y: _f_bounds(y, sigma))
    # positive block j: y in [j w, (j+1) w - 1]; negative block j: |y| in [j w + 1, (j+1) w]
    f_up = ([bound(j * w)[1] for j in range(blocks)] + [bound(j * w + 1)[1] for j in range(blocks)]
            + [bound(tail_start)[1]])
    # λ so that the masses sum to at most 2^K (heights are ceilings: each adds < 1 per block)
    total = float(sum(f_up[:-1]) * w + 4 * f_up[-1] * tail_width)
    lam = int((2**_K - 2 * (blocks * w + 2 * tail_width) - 2) / (total * (1 + 1e-9)))
    while True:
        heights = [_ceil(f * lam) for f in f_up]
        masses = [g * w for g in heights[:-1]] + [2 * heights[-1] * tail_width] * 2
        if sum(masses) <= 2**_K:
            break
        lam = int(lam * (1 - 1e-6))
    masses.append(2**_K - sum(masses))  # the dummy block
    squeeze = ([int(bound((j + 1) * w - 1)[0] * lam) for j in range(blocks)]
               + [int(bound((j + 1) * w)[0] * lam) for j in range(blocks)] + [0, 0, 0])
    ybase = [j * w for j in range(blocks)] + [~(j * w) for j in range(blocks)] + [0, 0, 0]
    col_bits = max(1, (len(masses) - 1).bit_length())
    thresh, entry, obase = _alias_table(masses, col_bits)
    gamma_max = ((tail_start + 1) / sigma) ** 2 / 2
    rho = gamma_max * 2.0**-49 + 2.0**-46  # see _rest
    p_accept = lam * math.sqrt(2 * math.pi) * sigma / 2**_K  # Σ_Z f ~ σ sqrt(2π)
    pad = [0] * (1 << col_bits)
    return _Table(float(sigma), s, blocks, lam, tail_start, tail_width, heights[-1], col_bits, thresh,
                  entry, obase, np.array(ybase + pad, dtype=np.int64)[entry],
                  np.array(squeeze + pad, dtype=np.int64)[entry], tuple(heights), rho,
                  min(1.0, max(p_accept, 0.05)))


def _alias_table(masses: list[int], col_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer alias table (Vose 1991) of entries with the given masses (sum 2^K) in 2^col_bits
    columns of capacity C = 2^(K - col_bits): column i holds [0, thresh_i) of entry i and
    [thresh_i, C) of entry alias_i. Returns thresh and, per key 2 i + part, the entry and the base
    with offset = r + base; the offsets of each entry's parts tile [0, mass) (checked), so
    (column, r) -> (entry, offset) is a bijection and every (entry, offset) has probability 2^-K."""
    cols, cap = 1 << col_bits, 1 << (_K - col_bits)
    mass = masses + [0] * (cols - len(masses))
    left = list(mass)
    used = [0] * cols
    thresh = [cap] * cols
    entry = [i for i in range(cols) for _ in (0, 1)]
    base = [0] * (2 * cols)
    small = [i for i in range(cols) if left[i] < cap]
    large = [i for i in range(cols) if left[i] >= cap]
    while small and large:
        i, g = small.pop(), large.pop()
        thresh[i], base[2 * i] = left[i], used[i]
        used[i] += left[i]
        entry[2 * i + 1], base[2 * i + 1] = g, used[g] - left[i]  # r in [left_i, cap)
        used[g] += cap - left[i]
        left[g] -= cap - left[i]
        (small if left[g] < cap else large).append(g)
    for i in small + large:  # exactly full columns (the masses sum to cols * cap)
        assert left[i] == cap
        base[2 * i] = used[i]
        used[i] += cap
    assert used == mass, "alias table does not tile the masses"
    return (np.array(thresh, dtype=np.int64), np.array(entry, dtype=np.int64),
            np.array(base, dtype=np.int64))


def _below(rem: int, y: int, scale: int, sigma: float, rng: SecureRNG) -> bool:
    """Exactly [rem + U' < scale exp(-y²/(2σ²))] for a uniform real U' in [0, 1) drawn lazily
    (32 bits at a time) against an outward-rounded mpmath interval."""
    from mpmath import iv

    w, nu, prec = 0, 0, 96
    while True:
        iv.prec = prec
        target = iv.exp(-(iv.mpf(y) ** 2) / (2 * iv.mpf(sigma) ** 2)) * scale
        u = iv.mpf(rem) + iv.mpf([w, w + 1]) / iv.mpf(2) ** nu
        if u.b <= target.a:
            return True
        if u.a >= target.b:
            return False
        w = (w << 32) | int(rng._uint32(1)[0])
        nu += 32
        prec += 64


def _tail(tab: _Table, negative: bool, rng: SecureRNG) -> int | None:
    """One proposal from a tail envelope (k ~ Geometric(1/2), m uniform on sub-block k, rem on
    [0, G_T)), y = m or -1 - m: y if accepted, else None. Selected with probability ~ e^-50."""
    k = 0
    while random_bits(rng, 1)[0]:
        k += 1
    m = tab.tail_start + k * tab.tail_width + int(rng.integers(tab.tail_width, 1)[0])
    y = ~m if negative else m
    rem = int(rng.integers(tab.tail_height, 1)[0])
    return y if _below(rem, y, tab.lam << k, tab.sigma, rng) else None


def _chunk(tab: _Table, u: np.ndarray, rng: SecureRNG, exact_only: bool) -> np.ndarray:
    """The accepted values of the proposals with words ``u`` (int64 < 2^K), in proposal order.
    Most are accepted by the exact integer squeeze rem < floor(λ min_block f) <= λ f(y) - ... (then
    rem + U' < λ f(y) for every U'); the rest go to :func:`_rest`. Table look-ups by ``np.take``
    (keys are in range by construction: ``mode="clip"`` only skips numpy's bounds check)."""
    shift = _K - tab.col_bits
    r = u & ((1 << shift) - 1)
    key = u >> shift
    part = r >= np.take(tab.thresh, key, mode="clip")
    key <<= 1
    key += part
    o = r
    o += np.take(tab.key_obase, key, mode="clip")
    y = o & ((1 << tab.s) - 1)
    y ^= np.take(tab.key_ybase, key, mode="clip")
    o >>= tab.s                                  # rem, uniform on [0, G_j)
    accept = o < np.take(tab.key_squeeze, key, mode="clip")
    if exact_only:
        accept[:] = False
    rest = np.flatnonzero(~accept)
    if rest.size:
        accept[rest] = _rest(tab, y, o, tab.key_entry[key[rest]], rest, rng, exact_only)
    kept: np.ndarray = y[accept]
    return kept


def _rest(tab: _Table, y: np.ndarray, rem: np.ndarray, entry: np.ndarray, idx: np.ndarray,
          rng: SecureRNG, exact_only: bool) -> np.ndarray:
    """Decisions for the proposals ``idx`` the squeeze left open (~2%): y (overwritten for tails).

    Regular blocks: v = λ exp(-y² / (2σ²)) in float64; y and rem are exact (< 2^53), y² and
    1/(2σ²) carry <= 2^-50 relative error together, so the exponent is off by <= γ 2^-50 <= γ_max
    2^-50 (γ_max = (T+1)²/(2σ²)), numpy's exp adds <= 2^-48 (16 ulp) and the products 2^-52:
    |v - λ f(y)| <= rho v with rho = γ_max 2^-49 + 2^-46. Accepted surely iff rem + 1 <= v (1 - rho),
    rejected surely iff rem >= v (1 + rho); the rest (rem ~ floor(λ f(y)), probability ~ 1/G_j) is
    decided exactly (:func:`_below`). Tails draw afresh (:func:`_tail`); the dummy rejects."""
    yi, ri = y[idx], rem[idx]
    regular = entry < 2 * tab.blocks
    yf = yi.astype(np.float64)
    v = np.exp(-(yf * yf) * (0.5 / (tab.sigma * tab.sigma))) * float(tab.lam)
    rf = ri.astype(np.float64)
    accept = regular & (rf + 1.0 <= v * (1.0 - tab.rho))
    undecided = regular & ~accept & (rf < v * (1.0 + tab.rho))
    if exact_only:
        accept &= False
        undecided = regular
    for i in np.flatnonzero(undecided):
        accept[i] = _below(int(ri[i]), int(yi[i]), tab.lam, tab.sigma, rng)
    for i in np.flatnonzero((entry == 2 * tab.blocks) | (entry == 2 * tab.blocks + 1)):
        got = _tail(tab, bool(entry[i] == 2 * tab.blocks + 1), rng)
        if got is not None:
            y[idx[i]], accept[i] = got, True
    decided: np.ndarray = accept
    return decided


def sample_discrete_gaussian_alias(sigma: float | Fraction, size: int | tuple[int, ...], rng: SecureRNG,
                                   *, _cut: float = _CUT, _exact_only: bool = False) -> np.ndarray:
    """Exact discrete Gaussian P(y) ∝ exp(-y²/(2σ²)) on Z, vectorised (see the module docstring);
    the same law as :func:`dpfed.core.samplers.sample_discrete_gaussian` (σ rounded up to a float the
    same way, at most 2^28). ``_cut`` (tests only) moves the tail to ~ _cut σ so that the tail path
    runs often; ``_exact_only`` (tests only) sends every regular proposal to the exact path."""
    sig = dg_sigma(sigma)
    tab = _table(sig, float(_cut))

    shape = size_tuple(size)
    n = math.prod(shape)
    out = np.empty(n, dtype=np.int64)
    have = 0
    while have < n:  # accepted samples in proposal order, written in place; a prefix of i.i.d. samples is i.i.d.
        k = int((n - have) / tab.acceptance * 1.02) + 32  # batch size only: any value keeps the law exact
        words = rng.uint64(k)
        words >>= np.uint64(64 - _K)
        u = words.view(np.int64)
        for lo in range(0, k, _CHUNK):
            got = _chunk(tab, u[lo:lo + _CHUNK], rng, _exact_only)[: n - have]
            out[have:have + got.size] = got
            have += got.size
            if have == n:
                break
    return out.reshape(shape)
