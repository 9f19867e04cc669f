"""SecAgg's symmetric primitives: length-prefixed encoding, HKDF-SHA256 (RFC 5869), X25519 agreement, the
ChaCha20 mask generator mod 2^B and the derivation labels of pairwise seeds and envelopes
(Bonawitz et al. CCS 2017, Sec. 4: PRG and KA instantiated).
"""
from __future__ import annotations

import functools
import hmac
import struct
from collections.abc import Sequence

import numpy as np
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

__all__ = ['lp', 'lp_field', 'hkdf_extract', 'hkdf_expand', 'hkdf', 'agree', 'mask_dtype', 'clear_top', 'add_masks', 'expand_mask', 'pairwise_seed', 'pairwise_info', 'envelope_key', 'envelope_info', 'envelope_ad']


def lp(*parts: bytes | str | int) -> bytes:
    """Unambiguous length-prefixed encoding (4-byte big-endian length per field; ints as 8-byte signed)."""
    return b"".join(len(p).to_bytes(4, "big") + p if isinstance(p, bytes) else lp_field(p) for p in parts)


@functools.lru_cache(maxsize=1 << 14)
def lp_field(p: str | int) -> bytes:
    """One name, job id or round, encoded as in :func:`_lp` (public values only: cached)."""
    b = p.encode() if isinstance(p, str) else struct.pack(">q", p)
    return len(b).to_bytes(4, "big") + b


def hkdf_extract(secret: bytes) -> bytes:
    """HKDF-Extract with no salt (RFC 5869: HMAC-SHA256 keyed with 32 zero bytes): the PRK of an
    agreement, computed once per neighbour and job."""
    return hmac.digest(bytes(32), secret, "sha256")


def hkdf_expand(prk: bytes, info: bytes) -> bytes:
    """HKDF-Expand to 32 bytes: its single block T(1) = HMAC-SHA256(PRK, info || 0x01)."""
    return hmac.digest(prk, info + b"\x01", "sha256")


def hkdf(secret: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) of 32 bytes with no salt: the same bytes as ``cryptography``'s HKDF, with
    two HMAC calls instead of a KDF object per derivation (thousands per round)."""
    return hkdf_expand(hkdf_extract(secret), info)


def agree(sk: x25519.X25519PrivateKey, pk: bytes) -> bytes:
    """X25519(sk, pk) for a raw 32-byte public key: every key agreement of the protocol goes through
    here (one per neighbour, key pair and advert: once per job)."""
    return sk.exchange(x25519.X25519PublicKey.from_public_bytes(pk))



_CHUNK = 1 << 16  # mask words per step: a buffer of at most 512 KB stays in cache and is reused
_ZEROS = bytes(8 * _CHUNK)


def mask_dtype(bits: int) -> np.dtype:
    """The narrowest of uint8/16/32/64 with at least ``bits`` bits: the mask word read from the keystream
    and the dtype of the masking arithmetic. It wraps mod 2^(8 * itemsize), a multiple of 2^B, so the
    sum is exact mod 2^B and each word mod 2^B is uniform. (Words of ceil(B/8) bytes when that is 3, 5,
    6 or 7 need unaligned strided reads, measured no faster than the next power of two.)"""
    for nbytes in (1, 2, 4, 8):
        if bits <= 8 * nbytes:
            return np.dtype(f"u{nbytes}")
    raise ValueError(f"bits must lie in [1, 64], got {bits}")


def clear_top(a: np.ndarray, bits: int) -> np.ndarray:
    """a mod 2^bits in place (a no-op when the word has exactly ``bits`` bits); returns a."""
    if bits < 8 * a.itemsize:
        a &= a.dtype.type((1 << bits) - 1)
    return a


def add_masks(acc: np.ndarray, masks: Sequence[tuple[bytes, bool]], round_: int) -> None:
    """acc += sum of +-PRG(seed) mod 2^(8 * acc.itemsize) over (seed, negative) pairs; PRG = ChaCha20
    keystream (256-bit seed, nonce from ``round_``) read as little-endian words of acc's width (an
    unsigned dtype, see :func:`mask_dtype`), chunk by chunk."""
    w = acc.itemsize
    nonce = struct.pack("<QQ", 0, round_)  # 64-bit block counter (0) then the round as nonce
    encs = [(Cipher(algorithms.ChaCha20(seed, nonce), mode=None).encryptor(), neg) for seed, neg in masks]
    buf = bytearray(w * _CHUNK)
    words = np.frombuffer(buf, dtype=f"<u{w}")
    zeros = memoryview(_ZEROS)
    for lo in range(0, acc.size, _CHUNK):
        n = min(_CHUNK, acc.size - lo)
        part = acc[lo:lo + n]
        for enc, neg in encs:
            enc.update_into(zeros[: w * n], buf)
            if neg:
                part -= words[:n]
            else:
                part += words[:n]


def expand_mask(seed: bytes, round_: int, d: int, bits: int) -> np.ndarray:
    """d masks mod 2^bits as uint64: the ChaCha20 keystream (256-bit ``seed``, nonce from ``round_``)
    read as little-endian words of :func:`mask_dtype` (bits), the top bits cleared."""
    m = np.zeros(d, dtype=mask_dtype(bits))
    add_masks(m, [(seed, False)], round_)
    return clear_top(m, bits).astype(np.uint64)


def pairwise_seed(shared: bytes, job_id: str, round_: int, u: str, v: str) -> bytes:
    """k_uv,r = HKDF-SHA256(X25519 secret) bound to job, round and the two names in order."""
    return hkdf_expand(hkdf_extract(shared), pairwise_info(job_id, round_, u, v))


_PAIRWISE_TAG = lp(b"dpfed-secagg-pairwise-v1")
_ENVELOPE_TAG = lp(b"dpfed-secagg-envelope-v1")
_ENVELOPE_AD_TAG = lp(b"dpfed-secagg-envelope-ad-v1")


def pairwise_info(job_id: str, round_: int, u: str, v: str) -> bytes:
    """lp(tag, job, round, the two names in order), from cached fields (75 derivations per party and round)."""
    a, b = (u, v) if u <= v else (v, u)
    return _PAIRWISE_TAG + lp_field(job_id) + lp_field(round_) + lp_field(a) + lp_field(b)


def envelope_key(shared: bytes, job_id: str, round_: int, sender: str, receiver: str) -> bytes:
    return hkdf_expand(hkdf_extract(shared), envelope_info(job_id, round_, sender, receiver))


def envelope_info(job_id: str, round_: int, sender: str, receiver: str) -> bytes:
    return _ENVELOPE_TAG + lp_field(job_id) + lp_field(round_) + lp_field(sender) + lp_field(receiver)


def envelope_ad(job_id: str, round_: int, sender: str, receiver: str) -> bytes:
    return _ENVELOPE_AD_TAG + lp_field(job_id) + lp_field(round_) + lp_field(sender) + lp_field(receiver)
