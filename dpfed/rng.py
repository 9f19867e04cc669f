"""The one source of randomness in dpfed: a ChaCha20 keystream (a CSPRNG).

By default the 256-bit key comes from the operating system's CSPRNG (``os.urandom``), so noise
cannot be predicted or replayed. :meth:`SecureRNG.from_seed` derives the key from a seed for tests
and reproducible simulations only; it is a distinct constructor and it warns
(:class:`ReproducibleSeedWarning`), so the choice shows in code review and in logs.

Everything privacy-critical (noise, Poisson sampling masks) should draw from the methods here,
which are built on exact integer operations on the keystream's bits. :meth:`SecureRNG.numpy`
returns a NumPy ``Generator`` keyed from this stream, for randomness that does not protect
privacy (data splits, k-means++ seeding inside a block, shuffles of public data).
"""
from __future__ import annotations

import hashlib
import os
import threading
import warnings

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

__all__ = ["SecureRNG", "ReproducibleSeedWarning", "default_rng"]

_TWO64 = 1 << 64


class ReproducibleSeedWarning(UserWarning):
    """Raised when a generator is seeded explicitly: fine for tests, never for production."""


class SecureRNG:
    """Cryptographically secure, vectorised random source (ChaCha20 keystream).

    Use ``SecureRNG()`` in production. ``SecureRNG.from_seed(s)`` is reproducible and warns.
    The object is thread-safe: each draw takes a lock while it reads the keystream.
    """

    def __init__(self, *, _key: bytes | None = None, _reproducible: bool = False) -> None:
        key = os.urandom(32) if _key is None else _key
        if len(key) != 32:
            raise ValueError("a ChaCha20 key has 32 bytes")
        # 16-byte nonce = 4-byte little-endian block counter + 12-byte nonce; start at zero.
        self._cipher = Cipher(algorithms.ChaCha20(key, b"\x00" * 16), mode=None).encryptor()
        self._lock = threading.Lock()
        self._zeros = np.zeros(1 << 16, dtype=np.uint8)
        self.reproducible = _reproducible

    @classmethod
    def from_seed(cls, seed: int | str | bytes) -> "SecureRNG":
        """A reproducible generator keyed by SHA-256 of ``seed``. For tests and simulations only."""
        warnings.warn(
            "SecureRNG seeded explicitly: its noise is reproducible and offers no privacy "
            "against anyone who knows the seed; use SecureRNG() for real releases",
            ReproducibleSeedWarning,
            stacklevel=2,
        )
        if isinstance(seed, int):
            material = b"int:" + str(seed).encode()
        elif isinstance(seed, str):
            material = b"str:" + seed.encode()
        else:
            material = b"bytes:" + bytes(seed)
        return cls(_key=hashlib.sha256(material).digest(), _reproducible=True)

    # -- raw material ------------------------------------------------------------------------
    def bytes(self, n: int) -> bytes:
        """``n`` keystream bytes."""
        return self._stream(n).tobytes()

    def _stream(self, n: int) -> np.ndarray:
        """``n`` keystream bytes as a uint8 array (encrypts a cached zero buffer in place: the
        same keystream as ``update(b"\\0" * n)`` without allocating two n-byte objects)."""
        out = np.empty(n + 64, dtype=np.uint8)
        with self._lock:
            if self._zeros.size < n:
                self._zeros = np.zeros(max(n, 2 * self._zeros.size), dtype=np.uint8)
            written = self._cipher.update_into(memoryview(self._zeros)[:n], out)
        assert written == n
        return out[:n]

    def uint64(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Uniform 64-bit unsigned integers."""
        count = int(np.prod(size)) if not isinstance(size, int) else size
        return self._stream(8 * count).view("<u8").astype(np.uint64, copy=False).reshape(size)

    def _uint32(self, count: int) -> np.ndarray:
        """Uniform 32-bit unsigned integers (flat)."""
        return self._stream(4 * count).view("<u4").astype(np.uint32, copy=False)

    # -- exact integer draws -----------------------------------------------------------------
    def integers(self, high: int | np.ndarray, size: int | tuple[int, ...] | None = None) -> np.ndarray:
        """Exactly uniform integers in ``[0, high)`` by rejection (no modulo bias).

        ``high`` is a positive integer below 2**63, or an int64 array broadcast against ``size``.
        """
        high_arr = np.asarray(high, dtype=np.int64)
        if np.any(high_arr <= 0):
            raise ValueError("integers(high): high must be positive")
        if size is None:
            size = high_arr.shape
        if high_arr.ndim == 0:
            return self._integers_scalar(int(high_arr), size)
        high_arr = np.broadcast_to(high_arr, size).astype(np.uint64).ravel()
        n = high_arr.size
        out = np.empty(n, dtype=np.uint64)
        # accept x < limit, where limit is the largest multiple of high below 2**64
        limit = np.uint64(_TWO64 - 1) - (np.uint64(_TWO64 - 1) % high_arr + np.uint64(1)) % high_arr
        todo = np.arange(n)
        while todo.size:
            x = self.uint64(todo.size)
            ok = x <= limit[todo]
            idx = todo[ok]
            out[idx] = x[ok] % high_arr[idx]
            todo = todo[~ok]
        return out.astype(np.int64).reshape(size)

    def _integers_scalar(self, high: int, size: int | tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(size)) if not isinstance(size, int) else size
        if high == 1:
            return np.zeros(size, dtype=np.int64)
        if high & (high - 1) == 0:  # power of two: mask, no rejection
            mask = high - 1
            if high <= 1 << 32:
                return (self._uint32(count) & np.uint32(mask)).astype(np.int64).reshape(size)
            return (self.uint64(count) & np.uint64(mask)).astype(np.int64).reshape(size)
        if high <= 1 << 32:  # 32-bit words halve the keystream
            words, limit, h = self._uint32, np.uint32((1 << 32) - ((1 << 32) % high) - 1), np.uint32(high)
        else:
            words, limit, h = self.uint64, np.uint64(_TWO64 - (_TWO64 % high) - 1), np.uint64(high)
        parts, have = [], 0
        while have < count:  # accept x <= limit: exactly uniform, no modulo bias
            need = count - have
            x = words(need)
            if x.size and x.max() > limit:  # rare unless high is close to the word size
                x = x[x <= limit]
            parts.append(x % h)
            have += x.size
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        out = out.view(np.int64) if out.dtype == np.uint64 else out.astype(np.int64)
        return out.reshape(size)

    def bernoulli_rational(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        """Exact Bernoulli(num/den) for non-negative integer arrays with 0 < den < 2**63."""
        num = np.asarray(num, dtype=np.int64)
        den = np.asarray(den, dtype=np.int64)
        shape = np.broadcast_shapes(num.shape, den.shape)
        return self.integers(np.broadcast_to(den, shape), shape) < np.broadcast_to(num, shape)

    # -- floating-point draws (for continuous mechanisms and sampling masks) -----------------
    def uniform(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Uniform floats in [0, 1) on the 2**-53 grid."""
        return (self.uint64(size) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def normal(self, size: int | tuple[int, ...], scale: float = 1.0) -> np.ndarray:
        """Gaussian draws by the Box-Muller transform on keystream uniforms."""
        count = int(np.prod(size)) if not isinstance(size, int) else size
        half = (count + 1) // 2
        u1 = 1.0 - self.uniform(half)  # in (0, 1]
        u2 = self.uniform(half)
        r = np.sqrt(-2.0 * np.log(u1))
        z = np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)])[:count]
        return (z * scale).reshape(size)

    def poisson_mask(self, n: int, q: float) -> np.ndarray:
        """Poisson sampling: each of ``n`` records is included independently with probability q."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"sampling rate must lie in [0, 1], got {q}")
        return self.uniform(n) < q

    # -- derived generators --------------------------------------------------------------------
    def spawn(self, n: int) -> list["SecureRNG"]:
        """``n`` independent child generators keyed from this stream (same reproducibility)."""
        return [SecureRNG(_key=self.bytes(32), _reproducible=self.reproducible) for _ in range(n)]

    def numpy(self) -> np.random.Generator:
        """A NumPy Generator keyed by 256 bits of this stream, for non-privacy-critical draws."""
        seed = int.from_bytes(self.bytes(32), "little")
        return np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(seed)))


def default_rng(seed: int | str | bytes | None = None) -> SecureRNG:
    """``SecureRNG()`` when ``seed`` is None, else the reproducible (warning) generator."""
    return SecureRNG() if seed is None else SecureRNG.from_seed(seed)
