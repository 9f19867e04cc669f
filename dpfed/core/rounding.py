"""Clipping and randomized rounding to integers for the distributed-noise encoder (KLS21 Alg. 1).

Per record ("record" rounding): each clipped, rotated, scaled row is rounded at random and retried
until its integer L2 norm is within Delta_2 (:func:`conditional_round`, :func:`conditional_round32`;
the bound :func:`rounded_l2_bound`). Per party ("party" rounding): the float sum of a party's clipped
rows is rounded once (:func:`party_round`), its sensitivity :func:`party_sum_l2_bound`. Kairouz, Liu &
Steinke, ICML 2021 (KLS21); the encoder that uses these is :mod:`dpfed.core.distributed_noise`.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dpfed.core.rng import SecureRNG

__all__ = ["DEFAULT_BETA", "clip_rows", "rounded_l2_bound", "rounded_l1_bound", "conditional_round",
           "conditional_round32", "party_sum_l2_bound", "party_round", "party_row_sum"]

#: KLS21 Alg. 1's default conditional-rounding parameter beta = e^-1/2.
DEFAULT_BETA = math.exp(-0.5)
#: "party" rounding: relative float64 margin per summed row in the sensitivity (:func:`party_sum_l2_bound`).
_PARTY_FLOAT_MARGIN = 2.0 ** -26


def clip_rows(rows: np.ndarray, clip: float, *, scale: float = 1.0,
              dtype: type = np.float64) -> np.ndarray:
    """Each row scaled by min(1, clip / ||row||_2) (KLS21 Alg. 1, first step), then by ``scale``
    (a new array of ``dtype``: float64, or float32 for the encoder, rounded once from the float64
    product). The norms are float64; a finite norm proves every entry finite, so the entries are
    only scanned when some norm is not (an overflowing norm clips its row to zero)."""
    if not (clip > 0 and math.isfinite(clip)):
        raise ValueError(f"clip must be positive and finite, got {clip!r}")
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    if not np.isfinite(norms).all() and not np.isfinite(rows).all():
        raise ValueError("the vector to encode has non-finite entries")
    big = norms > clip  # min(1, clip / norm) without dividing by a zero norm (no overflow warning)
    factor = np.ones_like(norms)
    factor[big] = clip / norms[big]
    factor *= scale
    clipped: np.ndarray = np.multiply(rows, factor[:, None], out=np.empty(rows.shape, dtype), casting="same_kind")
    return clipped



def rounded_l2_bound(norm: float, beta: float, dimension: int) -> float:
    """Delta_2 of KLS21 Alg. 1 (conditional randomized rounding): the L2 norm an integer vector
    rounded from one of norm <= ``norm`` in Z^d is retried to stay below,
    min(norm + sqrt(d), sqrt(norm^2 + d/4 + sqrt(2 ln(1/beta)) (norm + sqrt(d)/2))). The first
    term always holds (each coordinate moves by < 1); the second holds with probability >= 1 - beta
    per try. beta = 0 means no condition."""
    if not (norm > 0 and math.isfinite(norm)):
        raise ValueError(f"norm must be positive and finite, got {norm!r}")
    if not 0 <= beta < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    d = int(dimension)
    bound_1 = norm + math.sqrt(d)
    if beta == 0:
        return bound_1
    sq = norm * norm + 0.25 * d + math.sqrt(2.0 * math.log(1.0 / beta)) * (norm + 0.5 * math.sqrt(d))
    return min(bound_1, math.sqrt(sq))


def rounded_l1_bound(l2: float, dimension: int) -> float:
    """L1 bound of an integer vector of L2 norm <= l2 in Z^d: l2 * min(sqrt(d), l2)
    (Cauchy-Schwarz; and |v_j| <= v_j^2 for integers)."""
    return l2 * min(math.sqrt(dimension), l2)


def conditional_round(rows: np.ndarray, bound: float, rng: SecureRNG, *,
                      max_tries: int = 200) -> np.ndarray:
    """Randomized rounding of each row (coordinate v rounds up with probability v - floor(v)),
    retried for the rows whose rounded L2 norm exceeds ``bound`` (KLS21 Alg. 1). The accepted
    rows satisfy ||row||_2^2 <= bound^2 exactly (integer arithmetic): privacy rests on that check
    only. Raises instead of ever returning an unchecked row. Vectorised over rows: each try draws
    the uniforms of all pending rows in one call and re-draws only the rows that failed."""
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    if not (bound > 0 and bound * bound < 2.0**52):
        raise ValueError(f"bound must be in (0, 2^26), got {bound!r}")
    limit = math.floor(bound * bound)  # ||r||^2 is an integer: <= bound^2 iff <= floor(bound^2)
    floor = np.floor(rows)
    frac = rows - floor

    def draw(pending: np.ndarray | None) -> np.ndarray:
        fl, fr = (floor, frac) if pending is None else (floor[pending], frac[pending])
        cand = rng.uniform(fr.shape)
        np.less(cand, fr, out=cand)  # 1.0 where the coordinate rounds up
        cand += fl
        return cand

    return _accept_rounded(rows.shape, draw, limit, limit * (1.0 + 1e-9) + 1.0, max_tries)


def _accept_rounded(shape: tuple[int, ...], draw: Callable[[np.ndarray | None], np.ndarray], limit: int,
                    screen: float, max_tries: int) -> np.ndarray:
    """The retry loop of conditional rounding (KLS21 Alg. 1): ``draw(None)`` rounds every row once,
    ``draw(idx)`` the rows ``idx`` afresh (integer-valued floats). A row is accepted iff its float
    square sum is <= ``screen`` (a pre-check that keeps int64 from overflowing) and its exact int64
    square sum is <= ``limit``; failed rows are redrawn. int64 rows; raises after ``max_tries``."""
    out: np.ndarray | None = None
    pending = np.arange(shape[0])
    for attempt in range(max_tries):
        cand = draw(None if attempt == 0 else pending)
        ok = np.einsum("ij,ij->i", cand, cand) <= screen
        cand_int = (cand if ok.all() else cand[ok]).astype(np.int64)
        exact_ok = np.einsum("ij,ij->i", cand_int, cand_int) <= limit
        if attempt == 0 and ok.all() and exact_ok.all():
            return cand_int  # every row accepted at once (the usual case): no copy
        if out is None:
            out = np.empty(shape, dtype=np.int64)
        ok[ok] = exact_ok
        out[pending[ok]] = cand_int[exact_ok]
        pending = pending[~ok]
        if pending.size == 0:
            return out
    raise RuntimeError(f"conditional rounding failed {max_tries} times (input beyond its clip?)")


def conditional_round32(rows: np.ndarray, bound: float, rng: SecureRNG, *, max_tries: int = 200) -> np.ndarray:
    """:func:`conditional_round` of float32 rows (the encoder's, :func:`quantize`) with 32-bit
    uniforms; returns int64 rows whose squared L2 norm is checked <= floor(bound^2) exactly in int64.

    A coordinate v rounds to sign(v) (floor|v| + [U < 2^32 frac|v|]), U uniform on the integers
    [0, 2^32) from the ChaCha20 keystream (4 bytes per coordinate, half of the float64 path's 8).
    Exactness: frac|v| = |v| - floor|v| is exact in float32 (Sterbenz's lemma for |v| >= 1, trivial
    below), times 2^32 is exact (a power of two), and for an integer U, U < t iff U < ceil(t), so the
    decision is exactly [U / 2^32 < frac|v|]: P(round up in magnitude) = ceil(2^32 frac|v|) / 2^32,
    which is frac|v| itself for |v| >= 2^-9 (ulp(|v|) >= 2^-32) and exceeds it by < 2^-32 below:
    unbiased to 2^-32 per coordinate (the float64 path: 2^-53). Rounding the magnitude and restoring
    the sign (v's sign bit OR-ed in) gives the same law as rounding v (randomized rounding is odd),
    and avoids 1 - |v| for v in (-1, 0), which float32 cannot hold exactly. floor|v| + 1 is exact:
    frac|v| > 0 only below 2^23.

    Privacy rests only on the integer check, whatever the floats were: an accepted row has
    ||r||^2 <= floor(bound^2) in exact int64 arithmetic. The float32 pre-check only screens rows
    whose square sum could overflow int64: its error is <= g = (d+1) 2^-24 / (1 - (d+1) 2^-24)
    relative (Higham, Thm. 3.1, any summation order), so a row within the bound always passes
    (approx <= (1 + g) limit) and a passing one has ||r||^2 <= (1 + g) limit / (1 - g) + 1 < 2^62."""
    rows = np.atleast_2d(np.asarray(rows))
    if rows.dtype != np.float32:
        raise TypeError("conditional_round32 takes float32 rows")
    if not (bound > 0 and bound * bound < 2.0**52):
        raise ValueError(f"bound must be in (0, 2^26), got {bound!r}")
    u = (rows.shape[-1] + 1) * 2.0**-24
    if u >= 0.25:
        raise ValueError(f"rows of {rows.shape[-1]} coordinates are too long for the float32 pre-check")
    limit = math.floor(bound * bound)
    screen = limit * (1.0 + u / (1.0 - u)) + 1.0
    mag = np.abs(rows)
    floor = np.floor(mag)
    thr = np.subtract(mag, floor, out=mag)  # frac|v|, exact
    if not np.isfinite(thr).all():  # inf - inf is NaN: a non-finite entry would fail every try
        raise ValueError("the rows to round have non-finite entries")
    thr *= np.float32(2.0**32)
    np.ceil(thr, out=thr)  # integers <= 2^32 - 2^8 (frac <= 1 - 2^-24)
    thr_u = thr.astype(np.uint32)
    signs = rows.view(np.uint32) & np.uint32(1 << 31)

    def draw(pending: np.ndarray | None) -> np.ndarray:
        fl, th, sg = (floor, thr_u, signs) if pending is None else (floor[pending], thr_u[pending], signs[pending])
        up = rng._uint32(th.size).reshape(th.shape) < th
        cand: np.ndarray = np.add(fl, up, dtype=np.float32)
        bits = cand.view(np.uint32)
        bits |= sg  # sign(v) (floor|v| + up), exact
        return cand

    return _accept_rounded(rows.shape, draw, limit, screen, max_tries)



def party_sum_l2_bound(scaled_clip: float, rows_max: int) -> float:
    """How far one record can move a party's scaled, rotated sum before rounding, in integer units:
    scaled_clip (= clip / gamma; R is orthogonal and the sum clip is a projection, 1-Lipschitz) plus a
    margin for float64 error, 2^-26 rows_max scaled_clip: the computed sum has norm <= rows_max clip
    (:func:`quantize_party_sum` clips it), and the float errors of the row clips (norms of <= 2^22 terms:
    < 2^22 u relative even summed naively), the summation, the sum clip, the scaling and the rotation (BLAS
    products of <= 32 terms, 2 x 4 stages at d <= 2^22) stay below ~2^-29 ||S|| in each of the two
    neighbouring computations, u = 2^-53. Also covers the algorithm's own clipping of a row (its computed norm
    is exact to far less than this, e.g. LVQ's ghost clipping)."""
    if not (scaled_clip > 0 and math.isfinite(scaled_clip)):
        raise ValueError(f"scaled_clip must be positive and finite, got {scaled_clip!r}")
    return float(scaled_clip) * (1.0 + _PARTY_FLOAT_MARGIN * int(rows_max))


def party_round(values: np.ndarray, rng: SecureRNG) -> np.ndarray:
    """Unconditional randomized rounding of float64 values to int64: floor(v) + [u < v - floor(v)],
    u uniform on the 2^-53 grid (:meth:`SecureRNG.uniform`), one fresh u per coordinate. The same
    function of (v, u) in every world is what the coupling argument of :func:`party_rounding_rdp`
    needs: with u shared, round(v + x) - round(v) is distributed as floor(x) + Bernoulli(frac(x)),
    up to 2^-51 in the probability (float frac and the grid)."""
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).all():
        raise ValueError("party_round takes finite values")
    low = np.floor(v)
    up = rng.uniform(v.shape) < (v - low)
    out: np.ndarray = low.astype(np.int64) + up
    return out



def party_row_sum(rows: np.ndarray, clip: float) -> np.ndarray:
    """Sum of the rows each clipped to L2 norm ``clip``, in float64 (the input of :func:`quantize_party_sum`)."""
    r = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    summed: np.ndarray = clip_rows(r, clip, dtype=np.float64).sum(axis=0)
    return summed
