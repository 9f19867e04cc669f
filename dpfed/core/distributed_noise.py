"""Distributed discrete Gaussian noise for secure aggregation: encoding, modulus, accounting.

Kairouz, Liu & Steinke, ICML 2021, "The Distributed Discrete Gaussian Mechanism for Federated
Learning with Secure Aggregation" (arXiv 2102.06387, cited as KLS21). A party turns its real vector
into integers mod 2^B that secure aggregation can sum (KLS21 Alg. 1):

    clip to L2 norm c  ->  x' = R x / gamma   (R: two overlapping randomized Hadamard blocks of
    n = 2^floor(log2 d) coordinates with public signs, orthogonal, d coordinates: :func:`rotate`)
    ->  conditional randomized rounding of x' to Z^d (retry until ||round||_2 <= Delta_2)
    ->  + a noise share y ~ N_Z(0, sigma_share^2)^d (exact sampler, SecureRNG)  ->  mod 2^B.

The server decodes the sum mod 2^B: centre to [-2^(B-1), 2^(B-1)), times gamma, inverse rotation.
KLS21 pads to d' = 2^ceil(log2 d) for one Hadamard block; here nothing is padded, so every length,
the sensitivities and the accounting use d itself, and the upload is d * B bits. The only price is
flatness: a coordinate's variance proxy is ||x||^2 / n with n > d/2 instead of ||x||^2 / d'
(:func:`rotation_block`), which enters the modulus headroom (:func:`choose_gamma`,
:func:`wraparound_bound`), never the privacy. ``sigma_share`` is in integer (lattice) units, so the
real noise of one share is gamma * sigma_share.

Privacy unit: one *encoded vector* (one row given to :func:`quantize`). Adding or removing it moves
the integer sum by its rounded vector, of L2 norm <= Delta_2 (:func:`rounded_l2_bound`) and L1 norm
<= Delta_1 (:func:`rounded_l1_bound`): KLS21's client-level setting. For record-level privacy inside
a party, pass the party's per-record vectors as rows (each rounded on its own, then summed).
"party" rounding (:func:`quantize_party_sum`) rounds a party's float sum of clipped rows once instead:
one record then moves the real vector that is rounded by at most clip / gamma, and
:func:`party_rounding_rdp` accounts the rounding by a coupling argument.

Accounting (RDP, add/remove neighbours): the sum of n i.i.d. N_Z(0, sigma^2) shares is close to
N_Z(0, n sigma^2) (KLS21 Thm. 1 / Prop. 14, :func:`ddgauss_rdp`); Poisson subsampling by the binomial
expansion, valid in both directions because the mechanism is symmetric under a reflection
(:func:`poisson_subsampled_rdp`, with the proof), for integer orders.
Wrap-around mod 2^B is a post-processing of the noisy sum: it costs utility, never privacy; its
probability is bounded by :func:`wraparound_bound` (sub-Gaussian tails, union over coordinates).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable

import attr
import numpy as np
from dp_accounting import dp_event
from dp_accounting.dp_event import DpEvent
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from dpfed.core.rng import SecureRNG
from dpfed.core.dgauss_alias import sample_discrete_gaussian_alias

__all__ = [
    "DistributedDiscreteGaussianDpEvent", "DistributedNoisePlan", "RDP_ORDERS",
    "padded_dimension", "rotation_block", "rotation_signs", "fwht", "rotate", "unrotate", "clip_rows",
    "rounded_l2_bound", "rounded_l1_bound", "conditional_round", "conditional_round32", "quantize", "add_noise_mod",
    "encode", "modular_sum", "decode_integers", "decode", "choose_gamma", "choose_bits",
    "wraparound_bound", "event_invalid", "ddgauss_tau", "ddgauss_rdp", "poisson_subsampled_rdp", "event_rdp",
    "ROUNDINGS", "party_sum_l2_bound", "party_round", "quantize_party_sum", "party_row_sum", "party_rounding_rdp",
    "ddgauss_epsilon", "distributed_dp_sgd_epsilon", "calibrate_sigma_share", "plan_distributed_noise",
]

#: Integer Renyi orders used here (the subsampling bound is for integer orders).
RDP_ORDERS = np.array(list(range(2, 129)) + [160, 192, 256, 384, 512], dtype=np.int64)
#: KLS21 Alg. 1's default conditional-rounding parameter beta = e^-1/2.
DEFAULT_BETA = math.exp(-0.5)
_MAX_BITS = 62
# H_{2^k} = kron of H_{2^b} blocks, b <= 5: each stage one BLAS product; n 2^b k / b flops in all, so a
# smaller b is cheaper until per-call overhead dominates (b = 4..6 measured fastest at n = 2^19)
_HADAMARD_BLOCK_BITS = 5
_CHUNK_ELEMENTS = 1 << 20  # rows are encoded in chunks of about this many coordinates (~30 MB of temporaries)
#: Longer rows are encoded in float64 (:func:`quantize`): the float32 pre-check of
#: :func:`conditional_round32` needs (d + 1) 2^-24 < 1/4.
_FLOAT32_MAX_DIMENSION = (1 << 22) - 1
_ROTATION_DOMAIN = b"dpfed.distributed_noise.rotation.v1\x00"
#: The two encodings of :class:`DistributedNoisePlan` (``rounding``).
ROUNDINGS = ("record", "party")
#: "party" rounding: relative float64 margin per summed row in the sensitivity (:func:`party_sum_l2_bound`).
_PARTY_FLOAT_MARGIN = 2.0 ** -26
_MAX_PARTY_ROWS = 10 ** 9
#: "party" rounding: bound on |P(round up) - frac| (float frac and the 2^-53 uniform grid: < 2^-51).
_PARTY_ROUNDING_SLACK = 2.0 ** -48


# --------------------------------------------------------------------------- rotation

def padded_dimension(d: int) -> int:
    """Length of an encoded vector: ``d`` itself (validated). The rotation keeps the dimension
    (:func:`rotate`), so nothing is padded; the name is kept for existing callers."""
    if int(d) != d or d < 1:
        raise ValueError(f"dimension must be a positive integer, got {d!r}")
    return int(d)


def rotation_block(d: int) -> int:
    """n = 2^floor(log2 d), the length of each Hadamard block of :func:`rotate` (d/2 < n <= d).
    Every coordinate of the rotation of x is sub-Gaussian with variance proxy ||x||^2 / n over the
    public signs (the "flatness" of KLS21 §4.2 with d' replaced by n)."""
    return 1 << (padded_dimension(d).bit_length() - 1)


def _sign_bits(seed: bytes, n: int) -> np.ndarray:
    """n public sign bits (uint8 0/1) from a ChaCha20 keystream keyed by SHA-256 of ``seed``."""
    key = hashlib.sha256(_ROTATION_DOMAIN + bytes(seed)).digest()
    stream = SecureRNG(_key=key, _reproducible=True)
    return np.unpackbits(np.frombuffer(stream.bytes((n + 7) // 8), dtype=np.uint8))[:n]


def rotation_signs(seed: bytes, n: int) -> np.ndarray:
    """The public diagonal D of the rotation: n signs +-1.0 (bit 1 is -1) from a ChaCha20 keystream
    keyed by SHA-256 of ``seed`` (same on every platform). Public randomness, so a fixed key is
    correct here; the seed must be fixed before the data are (e.g. from job id and round)."""
    signs: np.ndarray = np.where(_sign_bits(seed, n), -1.0, 1.0)
    return signs


@functools.lru_cache(maxsize=16)
def _hadamard(bits: int, dtype: str = "float64") -> np.ndarray:
    """Sylvester's Hadamard matrix H_{2^bits} (entries +-1, H[i, j] = (-1)^popcount(i & j))."""
    i = np.arange(1 << bits)
    and_ = i[:, None] & i[None, :]
    parity = np.zeros_like(and_)
    for b in range(bits):
        parity ^= (and_ >> b) & 1
    h: np.ndarray = (1.0 - 2.0 * parity).astype(dtype)
    h.setflags(write=False)
    return h


def fwht(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Walsh-Hadamard transform ``scale`` H_n x along the last axis (n a power of two), Sylvester
    order. H_n = H_{2^b1} (x) ... (x) H_{2^bm} with blocks of <= 32, so the transform is a few BLAS
    products over a reshaped array (~ 6.4 n log2(n) flops, no Python loop over entries); ``scale``
    rides on the first block's matrix. float32 input is transformed in float32 (the encoder's
    rotation, :func:`quantize`: single-precision BLAS, about 2-4x faster), anything else in float64."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        x = x.astype(np.float64, copy=False)
    n = x.shape[-1]
    if n < 1 or n & (n - 1):
        raise ValueError(f"the last axis must have a power-of-two length, got {n}")
    lead = x.shape[:-1]
    k = n.bit_length() - 1
    stages = -(-k // _HADAMARD_BLOCK_BITS) if k else 0
    blocks = [k // stages + (i < k % stages) for i in range(stages)] if stages else []
    y = x.reshape(-1, n)
    if not blocks:
        scaled: np.ndarray = (y * x.dtype.type(scale)).reshape(lead + (n,))
        return scaled
    left, right = y.shape[0], n
    for i, b in enumerate(blocks):
        h = _hadamard(b, x.dtype.name)
        if i == 0 and scale != 1.0:
            h = h * x.dtype.type(scale)
        right >>= b
        if right == 1:
            y = y.reshape(-1, 1 << b) @ h
        else:
            y = np.matmul(h, y.reshape(left, 1 << b, right))
        left <<= b
    return y.reshape(lead + (n,))


def _rotation_parts(seed: bytes, d: int, width: int = 64) -> list[tuple[slice, np.ndarray]]:
    """The blocks of :func:`rotate`: (coordinates, sign masks) for the first n coordinates and,
    unless d = n, the last n, with independent public signs (one keystream of 2n signs). A mask is
    the sign bit (bit ``width`` - 1 of a float64 or float32 word) where the sign is -1: XOR on the
    float's bits multiplies by D exactly. Cached per (seed, d, width): a party encodes a round's
    rows in several chunks with one seed (read-only arrays)."""
    return _rotation_parts_cached(bytes(seed), int(d), int(width))


@functools.lru_cache(maxsize=4)
def _rotation_parts_cached(seed: bytes, d: int, width: int) -> list[tuple[slice, np.ndarray]]:
    n = rotation_block(d)
    utype = np.uint64 if width == 64 else np.uint32
    masks = _sign_bits(seed, n if n == d else 2 * n).astype(utype)
    masks <<= utype(width - 1)
    masks.setflags(write=False)
    parts = [(slice(0, n), masks[:n])]
    if n < d:
        parts.append((slice(d - n, d), masks[n:]))
    return parts


def rotate(rows: np.ndarray, seed: bytes) -> np.ndarray:
    """R x for each row, R = R_2 R_1 in d dimensions (no padding): R_1 = H D_1 / sqrt(n) on the
    first n = 2^floor(log2 d) coordinates, R_2 = H D_2 / sqrt(n) on the last n (n >= d/2, so the
    two blocks cover every coordinate; for d = n, R = R_1 is KLS21 Alg. 1's rotation).

    R is orthogonal (a product of orthogonal maps), so ||R x|| = ||x|| and KLS21's sensitivity
    argument is unchanged with d' = d. Flatness: a coordinate that only R_1 writes is a Rademacher
    sum over D_1 with variance proxy ||x_{:n}||^2 / n; one that R_2 writes is, given D_1, a
    Rademacher sum over D_2 (independent) of the input of R_2, whose norm is <= ||x||: so every
    coordinate is sub-Gaussian with variance proxy ||x||^2 / n <= 2 ||x||^2 / d (KLS21 §4.2's
    bound with d' replaced by n; :func:`rotation_block`)."""
    out = np.array(rows, dtype=np.float64, ndmin=2)  # a copy, transformed in place
    _rotate_inplace(out, seed)
    return out


def _rotate_inplace(out: np.ndarray, seed: bytes) -> None:
    """``out`` <- R ``out`` (see :func:`rotate`), block by block, in the precision of ``out``
    (float64, or float32 for the encoder: :func:`quantize`)."""
    width = 8 * out.dtype.itemsize
    for cols, masks in _rotation_parts(seed, out.shape[-1], width):
        block = out[..., cols]
        block.view(masks.dtype)[...] ^= masks  # D x
        out[..., cols] = fwht(block, 1.0 / math.sqrt(block.shape[-1]))


def unrotate(rows: np.ndarray, seed: bytes, dimension: int) -> np.ndarray:
    """Inverse of :func:`rotate`: R^T = R_1^T R_2^T with R_i^T = D_i H / sqrt(n) (the blocks in
    reverse order). ``rows`` have ``dimension`` coordinates."""
    out = np.array(rows, dtype=np.float64)
    if out.shape[-1] != padded_dimension(dimension):
        raise ValueError(f"expected {dimension} coordinates, got {out.shape[-1]}")
    for cols, masks in reversed(_rotation_parts(seed, dimension)):
        block = fwht(out[..., cols], 1.0 / math.sqrt(masks.size))
        block.view(np.uint64)[...] ^= masks
        out[..., cols] = block
    return out


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


# --------------------------------------------------------------------------- rounding

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


# --------------------------------------------------------------------------- plan, encode, decode

@dataclasses.dataclass(frozen=True)
class DistributedNoisePlan:
    """Public parameters of one distributed-noise release (all parties and the server agree).

    ``sigma_share`` is each party's noise share in integer units; ``honest_parties`` is the number
    of shares the accounting counts (minimum survivors minus colluders); ``vectors`` and ``parties``
    bound the encoded vectors and noise shares in one sum (for the modulus headroom).
    """

    dimension: int
    clip: float
    gamma: float
    bits: int
    sigma_share: float
    beta: float = DEFAULT_BETA
    honest_parties: int = 1
    parties: int = 1
    vectors: int = 1
    sampling_rate: float = 1.0
    steps: int = 1
    #: "record": every record's row rounded on its own (:func:`quantize`, KLS21 Alg. 1); "party": a party's
    #: clipped rows summed in float64 and the sum rounded once (:func:`quantize_party_sum`).
    rounding: str = "record"
    #: "party" rounding: a public bound on the rows a party sums (its sum is clipped to rows_max * clip).
    rows_max: int = 1

    def __post_init__(self) -> None:
        padded_dimension(self.dimension)
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {ROUNDINGS}, got {self.rounding!r}")
        if not (isinstance(self.rows_max, int) and 1 <= self.rows_max <= _MAX_PARTY_ROWS):
            raise ValueError(f"rows_max must be an integer in [1, {_MAX_PARTY_ROWS}], got {self.rows_max!r}")
        if not (self.gamma > 0 and math.isfinite(self.gamma)):
            raise ValueError(f"gamma must be positive and finite, got {self.gamma!r}")
        if not (int(self.bits) == self.bits and 2 <= self.bits <= _MAX_BITS):
            raise ValueError(f"bits must be an integer in [2, {_MAX_BITS}], got {self.bits!r}")
        if not self.sigma_share >= 0.5:
            raise ValueError(f"sigma_share must be >= 1/2 (KLS21 Thm. 1), got {self.sigma_share!r}")
        if not (1 <= self.honest_parties <= self.parties and self.vectors >= 1):
            raise ValueError("need 1 <= honest_parties <= parties and vectors >= 1")
        rounded_l2_bound(self.clip / self.gamma, self.beta, self.padded_dimension)

    @property
    def padded_dimension(self) -> int:
        """Coordinates of an encoded vector: ``dimension`` (no padding; name kept for callers)."""
        return padded_dimension(self.dimension)

    @property
    def l2_sensitivity(self) -> float:
        """Delta_2 in integer units. "party" rounding: the bound on how far one record moves the scaled,
        rotated party sum before rounding, clip / gamma plus the float margin (:func:`party_sum_l2_bound`).
        "record" rounding: the norm bound of one rounded vector, in d dimensions. Valid
        without padding: R is orthogonal, so ||R x / gamma|| <= clip / gamma, and the conditional
        rounding bound (KLS21 Alg. 1, :func:`rounded_l2_bound`) holds for any vector of R^d."""
        if self.rounding == "party":
            return party_sum_l2_bound(self.clip / self.gamma, self.rows_max)
        return rounded_l2_bound(self.clip / self.gamma, self.beta, self.padded_dimension)

    @property
    def l1_sensitivity(self) -> float:
        return rounded_l1_bound(self.l2_sensitivity, self.padded_dimension)

    def event(self) -> DpEvent:
        """The release(s) as a DpEvent: ``steps`` x (Poisson(q) x the distributed discrete Gaussian)."""
        ev: DpEvent = DistributedDiscreteGaussianDpEvent(
            float(self.sigma_share), int(self.honest_parties), float(self.l2_sensitivity),
            float(self.l1_sensitivity), int(self.padded_dimension), str(self.rounding))
        if self.sampling_rate < 1:
            ev = dp_event.PoissonSampledDpEvent(float(self.sampling_rate), ev)
        return ev if self.steps == 1 else dp_event.SelfComposedDpEvent(ev, int(self.steps))

    def wraparound(self) -> tuple[float, float]:
        """:func:`wraparound_bound` of this plan (per coordinate, any coordinate)."""
        return wraparound_bound(self.bits, self.gamma, vectors=self.vectors, shares=self.parties,
                                clip=self.clip, dimension=self.dimension,
                                sigma_share=self.sigma_share)


def quantize(x: np.ndarray, plan: DistributedNoisePlan, *, seed: bytes,
             rng: SecureRNG) -> np.ndarray:
    """Clip, rotate, scale by 1/gamma and conditionally round each row of ``x`` (1-D: one vector);
    returns the int64 sum of the rounded rows (length d). Each row is one privacy unit. The clip
    factor and 1/gamma are applied in one pass and the rotation works on that copy (R is linear).

    The rotation and the rounding run in float32 (:func:`fwht`, :func:`conditional_round32`). A
    float error cannot break privacy: the sensitivity argument (KLS21 Thm. 1) needs only that each
    row's rounded integer vector has ||r||_2 <= Delta_2, and that is checked exactly in integers
    after rounding, whatever real vector the floats produced; the rounded vectors and the noise
    share are integers, summed exactly. Floats only move the point that is rounded: by < 2^-24
    relative per float32 operation, so ||fl(R x / gamma) - R x / gamma|| <~ 2^-24 (log2 d + 3)
    ||x|| / gamma (a few 1e-6 of the vector), far below the rounding's own sqrt(d)/2 and the noise
    (tests/core/test_distributed_noise.py checks the decoded sums against the float64 pipeline)."""
    rows = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if rows.shape[-1] != plan.dimension:
        raise ValueError(f"expected vectors of dimension {plan.dimension}, got {rows.shape[-1]}")
    total = np.zeros(plan.dimension, dtype=np.int64)
    step = max(1, _CHUNK_ELEMENTS // plan.dimension)  # bounded memory for many rows
    bound = plan.l2_sensitivity
    single = plan.dimension < _FLOAT32_MAX_DIMENSION  # conditional_round32's pre-check needs (d+1) 2^-24 < 1/4
    for lo in range(0, rows.shape[0], step):
        scaled = clip_rows(rows[lo:lo + step], plan.clip, scale=1.0 / plan.gamma,
                           dtype=np.float32 if single else np.float64)
        _rotate_inplace(scaled, seed)
        rounded = conditional_round32(scaled, bound, rng) if single else conditional_round(scaled, bound, rng)
        total += rounded.sum(axis=0)
    return total


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


def quantize_party_sum(total: np.ndarray, plan: DistributedNoisePlan, *, seed: bytes,
                       rng: SecureRNG) -> np.ndarray:
    """"party" rounding: a party's float64 sum of clipped rows (``total``, length d) clipped to
    rows_max * clip (a public bound, so the float error is public too; a projection, 1-Lipschitz),
    scaled by 1/gamma, rotated in float64 and rounded once (:func:`party_round`): int64, length d.
    One rotation and one rounding per party and round instead of per record: privacy rests on the
    coupling bound of :func:`party_rounding_rdp`, not on a norm check."""
    if plan.rounding != "party":
        raise ValueError("quantize_party_sum needs a plan with rounding 'party'")
    s = np.array(total, dtype=np.float64, ndmin=2)
    if s.shape != (1, plan.dimension):
        raise ValueError(f"expected one vector of dimension {plan.dimension}, got shape {np.shape(total)}")
    scaled = clip_rows(s, plan.clip * plan.rows_max, scale=1.0 / plan.gamma, dtype=np.float64)
    _rotate_inplace(scaled, seed)
    return party_round(scaled[0], rng)


def party_row_sum(rows: np.ndarray, clip: float) -> np.ndarray:
    """Sum of the rows each clipped to L2 norm ``clip``, in float64 (the input of :func:`quantize_party_sum`)."""
    r = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    summed: np.ndarray = clip_rows(r, clip, dtype=np.float64).sum(axis=0)
    return summed


def add_noise_mod(values: np.ndarray, sigma_share: float, bits: int, rng: SecureRNG) -> np.ndarray:
    """(values + y) mod 2^bits as uint64, y ~ N_Z(0, sigma_share^2) i.i.d. from the exact vectorised
    sampler (:func:`dpfed.core.dgauss_alias.sample_discrete_gaussian_alias`)."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu":
        raise TypeError("add_noise_mod takes integer values")
    noise = sample_discrete_gaussian_alias(sigma_share, values.shape, rng)  # a new int64 array
    noise += values.astype(np.int64, copy=False)
    noise &= (1 << int(bits)) - 1
    wrapped: np.ndarray = noise.view(np.uint64)
    return wrapped


def encode(x: np.ndarray, plan: DistributedNoisePlan, *, seed: bytes, rng: SecureRNG) -> np.ndarray:
    """A party's message for secure aggregation: quantize(x) + noise share, mod 2^B (KLS21 Alg. 1)."""
    return add_noise_mod(quantize(x, plan, seed=seed, rng=rng), plan.sigma_share, plan.bits, rng)


def modular_sum(messages: np.ndarray, bits: int) -> np.ndarray:
    """Sum of uint64 messages (first axis) mod 2^bits: what secure aggregation reveals."""
    total = np.sum(np.asarray(messages, dtype=np.uint64), axis=0, dtype=np.uint64)  # wraps mod 2^64
    wrapped: np.ndarray = total & np.uint64((1 << int(bits)) - 1)
    return wrapped


def decode_integers(total: np.ndarray, bits: int) -> np.ndarray:
    """The sum mod 2^bits as centred signed integers in [-2^(bits-1), 2^(bits-1))."""
    v = (np.asarray(total, dtype=np.uint64) & np.uint64((1 << int(bits)) - 1)).astype(np.int64)
    half = 1 << (int(bits) - 1)
    centred: np.ndarray = v - (v >= half) * (2 * half)
    return centred


def decode(total: np.ndarray, plan: DistributedNoisePlan, *, seed: bytes) -> np.ndarray:
    """Server side: centre the sum mod 2^B, multiply by gamma, rotate back: the noisy real sum."""
    return unrotate(decode_integers(total, plan.bits) * plan.gamma, seed, plan.dimension)


# --------------------------------------------------------------------------- modulus

def _sum_variance_proxy(gamma: float, vectors: int, shares: int, clip: float, dimension: int,
                        sigma_share: float) -> float:
    """Variance proxy (integer units) of one coordinate of the sum before rounding error: signal
    (rotation signs: ||sum x||^2 / (gamma^2 n) <= (vectors clip / gamma)^2 / n, n the Hadamard block
    of :func:`rotation_block`, see :func:`rotate`) plus noise (N_Z(0, s^2) is s^2-sub-Gaussian,
    Canonne, Kamath & Steinke 2020)."""
    n = rotation_block(dimension)
    return (vectors * clip / gamma) ** 2 / n + shares * sigma_share ** 2


def choose_gamma(bits: int, *, vectors: int, shares: int, clip: float, dimension: int,
                 sigma_real: float, k_sigma: float = 4.0) -> float:
    """Granularity gamma such that k_sigma sub-Gaussian standard deviations of a coordinate of the
    sum, plus the rounding errors (< 1 per vector), fit in [-2^(B-1), 2^(B-1)):
    gamma = k sqrt((vectors c)^2 / n + shares sigma_real^2) / (2^(B-1) - vectors)
    (KLS21 §4.2 / §4.4 with flatness rho = 1 and d' replaced by the block n of
    :func:`rotation_block`, d/2 < n <= d; ``sigma_real`` = gamma * sigma_share)."""
    headroom = 2.0 ** (int(bits) - 1) - vectors
    if headroom <= 0:
        raise ValueError(f"{bits} bits cannot hold the rounding errors of {vectors} vectors")
    n = rotation_block(dimension)
    return k_sigma * math.sqrt((vectors * clip) ** 2 / n + shares * sigma_real ** 2) / headroom


def choose_bits(gamma: float, *, vectors: int, shares: int, clip: float, dimension: int,
                sigma_share: float, k_sigma: float = 4.0) -> int:
    """Fewest bits B with 2^(B-1) >= k_sigma sqrt(variance proxy) + vectors (see :func:`choose_gamma`)."""
    need = k_sigma * math.sqrt(_sum_variance_proxy(gamma, vectors, shares, clip, dimension,
                                                   sigma_share)) + vectors
    bits = max(2, math.ceil(math.log2(need)) + 1)
    if bits > _MAX_BITS:
        raise ValueError(f"{bits} bits needed, more than {_MAX_BITS}")
    return bits


def wraparound_bound(bits: int, gamma: float, *, vectors: int, shares: int, clip: float,
                     dimension: int, sigma_share: float) -> tuple[float, float]:
    """(p, P): p bounds the probability that a given coordinate of the sum leaves
    [-2^(B-1), 2^(B-1)) (so wraps mod 2^B), P bounds that any of the d coordinates does.

    S_j = A_j + E_j + N_j: signal A_j sub-Gaussian over the public rotation signs (fixed before the
    data) with variance proxy ||sum x||^2 / (gamma^2 n) for every coordinate j, also those the two
    overlapping blocks of :func:`rotate` both write (see there); rounding errors |E_j| < vectors,
    noise N_j sub-Gaussian; A and N independent, so p = 2 exp(-(2^(B-1) - vectors)^2 / (2 v)) and
    P = min(1, d p) (union bound over the d coordinates: no padding). Wrap-around is a
    post-processing of the noisy sum: it costs accuracy, not privacy."""
    t = 2.0 ** (int(bits) - 1) - vectors
    if t <= 0:
        return 1.0, 1.0
    v = _sum_variance_proxy(gamma, vectors, shares, clip, dimension, sigma_share)
    p = min(1.0, 2.0 * math.exp(-t * t / (2.0 * v)))
    return p, min(1.0, padded_dimension(dimension) * p)


# --------------------------------------------------------------------------- accounting

@attr.define(frozen=True)
class DistributedDiscreteGaussianDpEvent(DpEvent):
    """x + Z on Z^dimension, Z the sum of ``parties`` i.i.d. N_Z(0, sigma_share^2)^dimension shares,
    for integer queries x whose neighbours differ by a vector of L2 norm <= ``l2_sensitivity`` and
    L1 norm <= ``l1_sensitivity`` (KLS21 Thm. 1 / Prop. 14). RDP: :func:`ddgauss_rdp`;
    Poisson-subsampled: :func:`poisson_subsampled_rdp` (binomial expansion, both directions).
    ``parties`` counts the shares the adversary does not know (survivors minus colluders)."""

    sigma_share: float
    parties: int
    l2_sensitivity: float
    l1_sensitivity: float
    dimension: int
    #: "record": the shift is one rounded row (norm <= l2_sensitivity, KLS21 Prop. 14); "party": the shift
    #: moves a real vector of norm <= l2_sensitivity that is rounded once per party (coupling bound).
    rounding: str = "record"


def event_invalid(event: DistributedDiscreteGaussianDpEvent) -> str | None:
    """Why ``event`` cannot be accounted, or None."""
    if not (event.sigma_share >= 0.5 and math.isfinite(event.sigma_share)):
        return "DistributedDiscreteGaussianDpEvent needs a finite sigma_share >= 1/2 (KLS21 Thm. 1)"
    for name in ("parties", "dimension"):
        v = getattr(event, name)
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return f"DistributedDiscreteGaussianDpEvent needs an integer {name} >= 1"
    if not (event.l2_sensitivity > 0 and event.l1_sensitivity > 0
            and math.isfinite(event.l2_sensitivity) and math.isfinite(event.l1_sensitivity)):
        return "DistributedDiscreteGaussianDpEvent needs positive finite sensitivities"
    if event.rounding not in ROUNDINGS:
        return f"DistributedDiscreteGaussianDpEvent rounding must be one of {ROUNDINGS}"
    return None


def ddgauss_tau(sigma_share: float, parties: int) -> float:
    """tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k + 1)) (KLS21 Thm. 1)."""
    k = np.arange(1, int(parties), dtype=np.float64)
    return float(10.0 * np.exp(-2.0 * math.pi ** 2 * sigma_share ** 2 * k / (k + 1.0)).sum())


def ddgauss_rdp(orders: np.ndarray, sigma_share: float, parties: int, l2_sensitivity: float,
                l1_sensitivity: float, dimension: int) -> np.ndarray:
    """Renyi DP of the sum of ``parties`` discrete Gaussian shares (KLS21 Prop. 14, eq. (17)):
    with s = sqrt(n) sigma, a2 = Delta_2 / s, a1 = Delta_1 / s and tau from :func:`ddgauss_tau`,
    D_alpha <= min(alpha a2^2 / 2 + tau d, alpha/2 (a2^2 + 2 a1 tau + tau^2 d),
    alpha/2 (a2 + tau sqrt(d))^2). For n = 1 (tau = 0) this is CKS20's alpha Delta_2^2/(2 sigma^2)."""
    bad = event_invalid(DistributedDiscreteGaussianDpEvent(
        float(sigma_share), int(parties), float(l2_sensitivity), float(l1_sensitivity), int(dimension)))
    if bad:
        raise ValueError(bad)
    a = np.asarray(orders, dtype=np.float64)
    s = math.sqrt(parties) * sigma_share
    a2, a1, tau, d = l2_sensitivity / s, l1_sensitivity / s, ddgauss_tau(sigma_share, parties), dimension
    t1 = 0.5 * a * a2 ** 2 + tau * d
    t2 = 0.5 * a * (a2 ** 2 + 2.0 * a1 * tau + tau ** 2 * d)
    t3 = 0.5 * a * (a2 + tau * math.sqrt(d)) ** 2
    return np.minimum(np.minimum(t1, t2), t3)


def party_rounding_rdp(orders: np.ndarray, sigma_share: float, parties: int, l2_sensitivity: float,
                       dimension: int) -> np.ndarray:
    """Renyi bound for "party" rounding (:func:`quantize_party_sum`): one record moves the party's real
    vector y (scaled, rotated sum) by v, ||v||_2 <= Delta = ``l2_sensitivity``, and y is rounded once
    (:func:`party_round`), then the sum N of ``parties`` honest N_Z(0, sigma^2) shares is added.

    Coupling: the rounding is a fixed function of (y, u), u the uniforms, drawn independently of the
    data; with u shared by the two worlds, delta_u = round(y + v) - round(y) has independent coordinates
    floor(v_i) + Bernoulli(frac(v_i) + e_i), |e_i| < 2^-48. Both output laws are mixtures over u with the
    same weights, so by joint convexity of exp((l-1) D_l) (and for a Poisson-subsampled round, per u, the
    expansion and reflection lemma of :func:`poisson_subsampled_rdp`, as every pair (c_u + N, c_u +
    delta_u + N) is reflection-symmetric) it suffices to bound E_u exp((l-1) D_l(N + delta_u || N)) <=
    e^((l-1) tau d) E_u exp(t ||delta_u||^2), t = l (l-1) / (2 n sigma^2) (KLS21 Prop. 14, first form).
    Per coordinate, with X = delta - v in {-p, 1-p} (p = frac|v|, by symmetry v >= 0), Hoeffding's lemma
    on t X (2v + X), whose range is <= t (2v + 1) and mean <= t (1/4 + |e| (2v + 1)), gives
    log E e^(t delta^2) <= t v^2 + t/4 + t |e| (2v + 1) + t^2 (2v + 1)^2 / 8
                        <= (t + t^2) v^2 + (t + t^2) / 4 + t |e| (2v + 1)   ((2v+1)^2 <= 8 v^2 + 2).
    Summing over d coordinates with sum v^2 <= Delta^2 and sum |v| <= sqrt(d) Delta:
        eps(l) = tau d + [(t + t^2)(Delta^2 + d/4) + t 2^-48 (2 sqrt(d) Delta + d)] / (l - 1),
    which is ``l (Delta^2 + d/4) / (2 n sigma^2)`` to first order: KLS21's conditional rounding bound
    without its beta term, so rounding once per party costs no more privacy than once per record."""
    bad = event_invalid(DistributedDiscreteGaussianDpEvent(
        float(sigma_share), int(parties), float(l2_sensitivity), float(l2_sensitivity), int(dimension), "party"))
    if bad:
        raise ValueError(bad)
    a = np.asarray(orders, dtype=np.float64)
    if not (a > 1).all():
        raise ValueError("party_rounding_rdp needs orders > 1")
    d, delta = float(dimension), float(l2_sensitivity)
    t = a * (a - 1.0) / (2.0 * parties * sigma_share ** 2)
    log_mgf = (t + t * t) * (delta ** 2 + 0.25 * d) + t * _PARTY_ROUNDING_SLACK * (2.0 * math.sqrt(d) * delta + d)
    out: np.ndarray = ddgauss_tau(sigma_share, parties) * d + log_mgf / (a - 1.0)
    return out


def poisson_subsampled_rdp(base_rdp: Callable[[np.ndarray], np.ndarray], sampling_rate: float, orders: np.ndarray) -> np.ndarray:
    """RDP of a *reflection-symmetric* additive mechanism on a Poisson(q) subsample, add/remove
    neighbours, integer alpha >= 2: with eps(l) the base mechanism's RDP,

        eps'(alpha) = 1/(alpha-1) log sum_{l=0}^alpha C(alpha, l) q^l (1-q)^(alpha-l) e^((l-1) eps(l))

    (the l = 0, 1 terms are (1-q)^(alpha-1) (alpha q - q + 1)), capped by eps(alpha). This is the
    form of Mironov, Talwar & Zhang 2019 (integer alpha) and of Zhu & Wang 2019's tight bound
    without the factor 3 of their general Thm. 6, which has a per-round floor independent of the noise.

    Why it holds here. Fix the rest of the round (other records, their rounding, other parties'
    shares), so one record moves the output between mu0 = law(a + N) and mu1 = law(a + r + N), r the
    record's rounded integer vector, N the sum of the honest shares (symmetric on Z^d); the
    subsampled output is M = (1-q) mu0 + q mu1 (mixtures over the fixed parts and over r are the same
    on both sides, so joint convexity of exp((alpha-1) D_alpha) reduces to this case).
    * Remove, D_alpha(M || mu0): expand E_mu0[((1-q) + q R)^alpha], R = dmu1/dmu0, by the binomial
      theorem; E_mu0[R^l] = e^((l-1) D_l(mu1 || mu0)) <= e^((l-1) eps(l)). Exact for any mechanism.
    * Add, D_alpha(mu0 || M) <= D_alpha(M || mu0) because T(z) = 2a + r - z swaps mu0 and mu1 (N is
      symmetric and the lattice is invariant), so the law nu of R under mu0 satisfies
      int f(R) dnu = int R f(1/R) dnu. Then 2 e^((alpha-1) D(M||mu0)) = int a(R) dnu and
      2 e^((alpha-1) D(mu0||M)) = int b(R) dnu with, for x = 1-q+qR, y = 1-q+q/R and
      phi(t) = t^alpha - t^(1-alpha): a - b = phi(x) + R phi(y). For R >= 1 put w = q (R-1)/R, so
      x = 1 + R w, y = 1 - w and R >= 1/(1-w); G(R) = phi(1 + R w) + R phi(1 - w) is convex in R
      (phi'' >= 0 on [1, inf)), G(1/(1-w)) = 0, and G'(1/(1-w)) = z^(1-alpha) k(z) >= 0 with
      z = 1 - w, k(z) = (alpha-1) - alpha z + alpha z^(2 alpha - 1) - (alpha-1) z^(2 alpha), convex on
      (0, 1] with k(1) = k'(1) = 0; so a >= b for R >= 1, and for R < 1 by (a - b)(1/R) = (a - b)(R)/R.
      (MTZ 2019, Thm. 5, show the same for the continuous Gaussian.)
    Tests: tests/core/test_distributed_noise.py computes both directions exactly for sums of discrete
    Gaussian shares and checks a >= b on a grid. ``base_rdp(ls)`` maps an int array of orders to RDP
    values. Evaluated in log space, vectorised over (alpha, l)."""
    orders = np.asarray(orders)
    if not (np.all(orders == np.floor(orders)) and np.all(orders >= 2)):
        raise ValueError("the binomial subsampling bound needs integer orders >= 2")
    orders = orders.astype(np.int64)
    if not 0 <= sampling_rate <= 1:
        raise ValueError(f"sampling_rate must be in [0, 1], got {sampling_rate!r}")
    direct = np.asarray(base_rdp(orders), dtype=np.float64)
    if sampling_rate == 1:
        return direct
    if sampling_rate == 0:
        return np.zeros(orders.shape)
    lq, l1q = math.log(sampling_rate), math.log1p(-sampling_rate)
    ls = np.arange(2, int(orders.max()) + 1)
    eps = np.asarray(base_rdp(ls), dtype=np.float64)
    al = orders[:, None].astype(np.float64)
    lf = ls[None, :].astype(np.float64)
    valid = lf <= al
    alc = np.where(valid, al, lf)  # keep gammaln's argument positive where masked
    log_comb = special.gammaln(alc + 1) - special.gammaln(lf + 1) - special.gammaln(alc - lf + 1)
    # each l >= 2 term minus its value at zero RDP, C q^l (1-q)^(a-l) (e^((l-1) eps(l)) - 1): the
    # binomial weights sum to exactly 1, so small results keep their digits
    ex = np.maximum((lf - 1) * eps[None, :], 1e-300)
    with np.errstate(over="ignore"):
        log_expm1 = np.where(ex > 40.0, ex, np.log(np.expm1(np.minimum(ex, 40.0))))
    terms = log_comb + lf * lq + (alc - lf) * l1q + log_expm1
    terms = np.where(valid, terms, -np.inf)
    rest = special.logsumexp(terms, axis=1)  # log of sum_{l>=2} C q^l (1-q)^(a-l) (e^((l-1) eps) - 1)
    with np.errstate(over="ignore", divide="ignore"):
        total = np.where(rest < 0, np.log1p(np.exp(np.minimum(rest, 0.0))), np.logaddexp(0.0, rest))
    capped: np.ndarray = np.minimum(total / (orders - 1), direct)
    return capped


def event_rdp(event: DistributedDiscreteGaussianDpEvent, orders: np.ndarray,
              sampling_rate: float = 1.0) -> np.ndarray:
    """RDP of ``event`` (Poisson-subsampled at ``sampling_rate``) at any orders >= 1: a fractional
    order takes the value at ceil(order) (and below 2 the value at 2), as D_alpha grows with alpha."""
    bad = event_invalid(event)
    if bad:
        raise ValueError(bad)
    ints = np.maximum(2, np.ceil(np.asarray(orders, dtype=np.float64))).astype(np.int64)

    def base(ls: np.ndarray) -> np.ndarray:
        if event.rounding == "party":
            return party_rounding_rdp(ls, event.sigma_share, event.parties, event.l2_sensitivity, event.dimension)
        return ddgauss_rdp(ls, event.sigma_share, event.parties, event.l2_sensitivity,
                           event.l1_sensitivity, event.dimension)

    return poisson_subsampled_rdp(base, sampling_rate, ints)


def ddgauss_epsilon(event: DistributedDiscreteGaussianDpEvent, delta: float, *,
                    sampling_rate: float = 1.0, steps: int = 1) -> float:
    """Epsilon at ``delta`` of ``steps`` adaptive releases of ``event``, each on a Poisson(q)
    subsample (q = 1: no subsampling), by RDP composition and the RDP -> (eps, delta) conversion
    of Canonne, Kamath & Steinke 2020, Prop. 12 (dp-accounting's ``compute_epsilon``)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    if steps == 0:
        return 0.0
    rdp = int(steps) * event_rdp(event, RDP_ORDERS, sampling_rate)
    return float(rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, rdp, delta)[0])


def distributed_dp_sgd_epsilon(sigma_share: float, honest_parties: int, *, clip: float, gamma: float,
                               dimension: int, sampling_rate: float, steps: int, delta: float,
                               beta: float = DEFAULT_BETA) -> float:
    """Epsilon of DP-SGD whose sums go through :func:`encode`: each record's clipped vector is one
    encoded row (sensitivities from :func:`rounded_l2_bound`), ``honest_parties`` shares of
    N_Z(0, sigma_share^2) per round, ``steps`` Poisson(q) rounds."""
    d = padded_dimension(dimension)
    l2 = rounded_l2_bound(clip / gamma, beta, d)
    event = DistributedDiscreteGaussianDpEvent(float(sigma_share), int(honest_parties), l2,
                                               rounded_l1_bound(l2, d), d)
    return ddgauss_epsilon(event, delta, sampling_rate=sampling_rate, steps=steps)


def calibrate_sigma_share(target_epsilon: float, delta: float, *, honest_parties: int,
                          l2_sensitivity: float, l1_sensitivity: float, dimension: int,
                          sampling_rate: float = 1.0, steps: int = 1, rtol: float = 1e-4) -> float:
    """Smallest sigma_share (to ``rtol``, never below it) whose :func:`ddgauss_epsilon` meets
    ``target_epsilon``: bisection in log sigma on a bracket where the target is missed / met
    (epsilon decreases in sigma: every term of :func:`ddgauss_rdp` does). At least 1/2."""
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ValueError(f"target_epsilon must be positive and finite, got {target_epsilon!r}")

    def eps(s: float) -> float:
        ev = DistributedDiscreteGaussianDpEvent(float(s), int(honest_parties), float(l2_sensitivity),
                                                float(l1_sensitivity), int(dimension))
        return ddgauss_epsilon(ev, delta, sampling_rate=sampling_rate, steps=steps)

    lo = 0.5
    if eps(lo) <= target_epsilon:
        return lo
    hi = 1.0
    while eps(hi) > target_epsilon:
        lo, hi = hi, 2.0 * hi
        if hi > 2.0**40:
            raise ValueError("no sigma_share below 2^40 meets the target")
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        if eps(mid) > target_epsilon:
            lo = mid
        else:
            hi = mid
    return hi


def plan_distributed_noise(target_epsilon: float, delta: float, *, clip: float, dimension: int,
                           bits: int, parties: int, survivors_min: int, colluders: int = 0,
                           vectors: int | None = None, sampling_rate: float = 1.0, steps: int = 1,
                           beta: float = DEFAULT_BETA, k_sigma: float = 4.0) -> DistributedNoisePlan:
    """Gamma and sigma_share for a target (epsilon, delta) over ``steps`` Poisson(q) releases at
    ``bits`` bits: the survivors_min - colluders honest shares alone meet the target; gamma leaves
    k_sigma standard deviations of headroom for up to ``parties`` shares and ``vectors`` encoded
    vectors (default ``parties``). Fixed point: gamma from sigma_real = gamma sigma_share
    (:func:`choose_gamma`), sigma_share calibrated at that gamma (:func:`calibrate_sigma_share`);
    the returned sigma_share is calibrated at the returned gamma, so the target is met exactly."""
    honest = int(survivors_min) - int(colluders)
    if not (1 <= honest and survivors_min <= parties):
        raise ValueError("need colluders < survivors_min <= parties")
    vectors = int(parties if vectors is None else vectors)
    d = padded_dimension(dimension)

    def sigma_at(gamma: float) -> float:
        l2 = rounded_l2_bound(clip / gamma, beta, d)
        return calibrate_sigma_share(target_epsilon, delta, honest_parties=honest, l2_sensitivity=l2,
                                     l1_sensitivity=rounded_l1_bound(l2, d), dimension=d,
                                     sampling_rate=sampling_rate, steps=steps)

    gamma = choose_gamma(bits, vectors=vectors, shares=parties, clip=clip, dimension=d,
                         sigma_real=clip, k_sigma=k_sigma)
    for _ in range(30):
        sigma = sigma_at(gamma)
        new = choose_gamma(bits, vectors=vectors, shares=parties, clip=clip, dimension=d,
                           sigma_real=sigma * gamma, k_sigma=k_sigma)
        if abs(new / gamma - 1.0) < 1e-3:
            break
        gamma = new
    return DistributedNoisePlan(dimension=int(dimension), clip=float(clip), gamma=gamma, bits=int(bits),
                                sigma_share=sigma_at(gamma), beta=beta, honest_parties=honest,
                                parties=int(parties), vectors=vectors,
                                sampling_rate=float(sampling_rate), steps=int(steps))
