"""Shamir secret sharing (Shamir 1979) over GF(2^521 - 1), and the byte form of a share of a 32-byte secret.
"""
from __future__ import annotations

import secrets
import struct
from collections.abc import Sequence

from dpfed.federation.secagg_messages import ReconstructionError

__all__ = ['PRIME', 'ELEM_BYTES', 'SHARE_BYTES', 'SECRET_BYTES', 'shamir_split', 'shamir_reconstruct', 'share_bytes', 'share_parse', 'reconstruct_secret']


PRIME = (1 << 521) - 1  # Mersenne prime: one field element holds a 32-byte secret
ELEM_BYTES = 66  # bytes per field element
SHARE_BYTES = 2 + ELEM_BYTES  # x (uint16) + y
SECRET_BYTES = 32


def shamir_split(secret: int, xs: Sequence[int], t: int, p: int = PRIME) -> list[int]:
    """Shares f(x) for x in ``xs`` of a random degree-(t-1) polynomial with f(0) = secret over GF(p)
    (Shamir 1979). Coefficients from the OS CSPRNG; any t shares determine the secret, t-1 are
    uniform and independent of it."""
    if not 1 <= t <= len(xs):
        raise ValueError(f"threshold {t} must lie in [1, {len(xs)}]")
    if not 0 <= secret < p or len(set(xs)) != len(xs) or any(not 0 < x < p for x in xs):
        raise ValueError("secret must lie in [0, p) and the xs be distinct and non-zero mod p")
    return shamir_eval(secret, [secrets.randbelow(p) for _ in range(t - 1)], xs, p)


def shamir_eval(secret: int, coeffs: Sequence[int], xs: Sequence[int], p: int) -> list[int]:
    """Evaluate secret + c_1 x + ... + c_{t-1} x^{t-1} at each x (Horner)."""
    out = []
    for x in xs:
        acc = 0
        for c in reversed(coeffs):
            acc = (acc + c) * x % p
        out.append((acc + secret) % p)
    return out


def shamir_reconstruct(points: Sequence[tuple[int, int]], p: int = PRIME) -> int:
    """f(0) by Lagrange interpolation through the given (x, y) points (all of them are used)."""
    xs = [x for x, _ in points]
    if len(set(x % p for x in xs)) != len(xs) or any(x % p == 0 for x in xs):
        raise ReconstructionError("share x-coordinates must be distinct and non-zero")
    total = 0
    for i, (xi, yi) in enumerate(points):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                num = num * xj % p
                den = den * (xj - xi) % p
        total = (total + yi * num * pow(den, -1, p)) % p
    return total


def share_bytes(x: int, y: int) -> bytes:
    return struct.pack(">H", x) + y.to_bytes(ELEM_BYTES, "big")


def share_parse(b: bytes) -> tuple[int, int]:
    if len(b) != SHARE_BYTES:
        raise ReconstructionError(f"a share is {SHARE_BYTES} bytes, got {len(b)}")
    return struct.unpack(">H", b[:2])[0], int.from_bytes(b[2:], "big")


def reconstruct_secret(shares: Sequence[bytes], t: int) -> bytes:
    """The 32-byte secret from >= t shares; with more than t, a second t-subset must agree."""
    pts = sorted({share_parse(s) for s in shares})
    if len({x for x, _ in pts}) != len(pts):
        raise ReconstructionError("two different shares at the same x")
    if len(pts) < t:
        raise ReconstructionError(f"{len(pts)} shares, threshold {t}")
    s = shamir_reconstruct(pts[:t])
    if len(pts) > t and shamir_reconstruct(pts[-t:]) != s:
        raise ReconstructionError("shares are inconsistent (not on one polynomial of degree t-1)")
    if s >> (8 * SECRET_BYTES):
        raise ReconstructionError("reconstructed value is not a 32-byte secret")
    return s.to_bytes(SECRET_BYTES, "big")
