"""The public random rotation of the distributed-noise encoder (KLS21 Alg. 1, "flattening").

R = R_2 R_1 in d dimensions, no padding: two overlapping randomized Hadamard blocks of n =
2^floor(log2 d) coordinates with public signs from a ChaCha20 keystream (:func:`rotate`,
:func:`unrotate`), the Walsh-Hadamard transform as a few BLAS products (:func:`fwht`). Kairouz, Liu &
Steinke, ICML 2021 (KLS21), §4.2; the encoder that uses it is :mod:`dpfed.core.distributed_noise`.
"""
from __future__ import annotations

import functools
import hashlib
import math

import numpy as np

from dpfed.core.rng import SecureRNG

__all__ = ["padded_dimension", "rotation_block", "rotation_signs", "fwht", "rotate", "rotate_inplace",
           "unrotate"]

# H_{2^k} = kron of H_{2^b} blocks, b <= 5: each stage one BLAS product; n 2^b k / b flops in all, so a
# smaller b is cheaper until per-call overhead dominates (b = 4..6 measured fastest at n = 2^19)
_HADAMARD_BLOCK_BITS = 5
#: Domain of the public signs (unchanged since the encoder lived in ``distributed_noise``: same signs).
_ROTATION_DOMAIN = b"dpfed.distributed_noise.rotation.v1\x00"


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
    rotate_inplace(out, seed)
    return out


def rotate_inplace(out: np.ndarray, seed: bytes) -> None:
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
