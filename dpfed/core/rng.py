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
import math
import os
import threading
import warnings
from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

__all__ = ["SecureRNG", "ReproducibleSeedWarning", "default_rng"]

_TWO64 = 1 << 64


def _ziggurat_tables(layers: int = 256,
                     r: float = 3.6541528853610088) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Ziggurat of the half-normal f(x) = exp(-x^2 / 2) (Marsaglia & Tsang 2000): layer i has
    width x[i] and lies between heights f(x[i]) and f(x[i + 1]) (x[layers] = 0, f = 1); the base
    layer 0 is [0, x[0]] x [0, f(r)] with x[0] = v / f(r), whose part beyond r stands for the tail.
    Every layer has area v; with r for 256 layers the top layer's area matches v to ~1e-13."""
    def f(t: float) -> float:
        return math.exp(-0.5 * t * t)

    v = r * f(r) + math.sqrt(math.pi / 2) * math.erfc(r / math.sqrt(2))
    x = [v / f(r), r]
    for i in range(1, layers - 1):
        x.append(math.sqrt(-2.0 * math.log(f(x[i]) + v / x[i])))
    x.append(0.0)
    xs = np.array(x)  # layers + 1 edges
    fs = np.exp(-0.5 * xs * xs)
    return xs[:-1].copy(), xs[1:].copy(), fs, r


_ZIG_X, _ZIG_XNEXT, _ZIG_F, _ZIG_R = _ziggurat_tables()
# indexed by key = layer + 256 * sign: the signed width scaled by 2**-53 (so k * width = +-u x[layer]
# exactly, k the 53-bit integer) and the core bound x[layer + 1]
_ZIG_SIGNED_WIDTH = np.concatenate([_ZIG_X, -_ZIG_X]) * 2.0 ** -53
_ZIG_CORE = np.concatenate([_ZIG_XNEXT, _ZIG_XNEXT])
_ZIG_CHUNK = 1 << 17  # ~1 MB per float temporary: fewest Python steps without page-fault-heavy buffers


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
    def from_seed(cls, seed: int | str | bytes) -> SecureRNG:
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
            # numpy arrays are buffers; numpy's stubs do not say so for Python < 3.12
            written = self._cipher.update_into(memoryview(self._zeros)[:n], out)  # type: ignore[arg-type]
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
        high_arr: np.ndarray = np.asarray(high, dtype=np.int64)
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
                masked: np.ndarray = self._uint32(count) & np.uint32(mask)
            else:
                masked = self.uint64(count) & np.uint64(mask)
            return masked.astype(np.int64).reshape(size)
        words: Callable[[int], np.ndarray]
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
        top: np.ndarray = self.uint64(size) >> np.uint64(11)
        return top.astype(np.float64) * (1.0 / (1 << 53))

    def normal(self, size: int | tuple[int, ...], scale: float = 1.0, *, out: np.ndarray | None = None) -> np.ndarray:
        """Gaussian draws by the Box-Muller transform on keystream uniforms.

        ``out`` (optional, float64, C-contiguous, ``size`` elements) receives the draws, saving an
        allocation. The values are bit-identical to the plain call: the same keystream words and the
        same floating-point operations, only evaluated in place (first half r cos(theta), second half
        r sin(theta)).
        """
        count = int(np.prod(size)) if not isinstance(size, int) else size
        half = (count + 1) // 2
        if out is None:
            out = np.empty(size, dtype=np.float64)
        elif out.dtype != np.float64 or out.size != count or not out.flags.c_contiguous:
            raise ValueError("normal(out=...): need a C-contiguous float64 array with one slot per draw")
        z = out.reshape(-1)
        u = self._uniform_flat(2 * half)  # u1 (first half) then u2: the same words as two uniform() calls
        u1, theta = u[:half], u[half:]
        np.subtract(1.0, u1, out=u1)  # in (0, 1]
        np.log(u1, out=u1)
        u1 *= -2.0
        r = np.sqrt(u1, out=u1)
        theta *= 2 * np.pi
        np.cos(theta, out=z[:half])
        z[:half] *= r
        rest = count - half  # half or half - 1 (odd count: the last sine is not used)
        np.sin(theta[:rest], out=z[half:])
        z[half:] *= r[:rest]
        if scale != 1.0:
            z *= scale
        return out

    def normal_ziggurat(self, size: int | tuple[int, ...], scale: float = 1.0, *,
                        out: np.ndarray | None = None) -> np.ndarray:
        """Gaussian draws by the ziggurat method (Marsaglia & Tsang 2000), vectorised: no sine/cosine.

        Exact in law like :meth:`normal` (a rejection sampler: layer, sign and a 53-bit uniform from
        one keystream word; points inside a layer's core are accepted at once (~99%), the rest go
        through the exact wedge test or the exact tail sampler of Marsaglia (1964), and a rejected
        draw is redrawn from scratch), up to floating-point rounding as for :meth:`normal` (the layer
        areas agree to ~1e-13 relative). About twice as fast as :meth:`normal` for large draws (it
        works in ~1 MB chunks); the values differ from :meth:`normal`'s. ``out`` as in :meth:`normal`.
        """
        count = int(np.prod(size)) if not isinstance(size, int) else size
        if out is None:
            out = np.empty(size, dtype=np.float64)
        elif out.dtype != np.float64 or out.size != count or not out.flags.c_contiguous:
            raise ValueError("normal_ziggurat(out=...): need a C-contiguous float64 array with one slot per draw")
        z = out.reshape(-1)
        for a in range(0, count, _ZIG_CHUNK):  # cache-sized chunks: small temporaries, no page faults
            zc = z[a:a + _ZIG_CHUNK]
            todo = self._ziggurat_pass(zc)
            while todo.size:  # the ~1% outside a layer's core: fresh independent attempts
                vals = np.empty(todo.size)
                again = self._ziggurat_pass(vals)
                done = np.ones(todo.size, dtype=bool)
                done[again] = False
                zc[todo[done]] = vals[done]
                todo = todo[again]
            if scale != 1.0:
                zc *= scale
        return out

    def _ziggurat_pass(self, z: np.ndarray) -> np.ndarray:
        """One ziggurat attempt per slot of ``z``; returns the slots whose attempt was rejected."""
        n = z.size
        w = self._stream(8 * n).view("<u8")
        key = (w.view("<u2")[0::4] & np.uint16(511)).astype(np.intp)  # bits 0-7 layer, bit 8 sign
        w >>= np.uint64(11)                                            # bits 11-63: k, u = k / 2**53
        np.multiply(w.astype(np.float64), _ZIG_SIGNED_WIDTH[key], out=z)  # +-u x[layer] (exact scaling)
        edge = np.flatnonzero(np.abs(z) >= _ZIG_CORE[key])  # outside the layer's core [0, x[layer + 1])
        if not edge.size:
            return edge
        layer, negative = key[edge] & 255, key[edge] >= 256
        tail = layer == 0
        if tail.any():  # base layer beyond r: a draw from the tail x > r (Marsaglia 1964)
            t = self._normal_tail(int(tail.sum()))
            z[edge[tail]] = np.where(negative[tail], -t, t)
        wedge = ~tail
        if not wedge.any():
            return edge[:0]
        # accept (|x|, y) under the curve, y uniform in the layer's height band [f(x[i]), f(x[i + 1]))
        lw, xw = layer[wedge], z[edge[wedge]]
        y = _ZIG_F[lw] + self._uniform_flat(lw.size) * (_ZIG_F[lw + 1] - _ZIG_F[lw])
        accepted: np.ndarray = edge[wedge][y >= np.exp(-0.5 * xw * xw)]
        return accepted

    def _normal_tail(self, count: int) -> np.ndarray:
        """``count`` draws of |N(0, 1)| conditioned on exceeding r (Marsaglia 1964, exact rejection)."""
        out = np.empty(count)
        todo = np.arange(count)
        while todo.size:
            u = self._uniform_flat(2 * todo.size)
            x = -np.log1p(-u[:todo.size]) / _ZIG_R     # Exp(r) excess, 1 - u in (0, 1]
            y = -np.log1p(-u[todo.size:])
            ok = 2.0 * y > x * x
            out[todo[ok]] = _ZIG_R + x[ok]
            todo = todo[~ok]
        return out

    def _uniform_flat(self, count: int) -> np.ndarray:
        """``uniform(count)`` computed with one temporary (flat float64 array)."""
        x = self._stream(8 * count).view("<u8")
        x >>= np.uint64(11)
        u = x.astype(np.float64)
        u *= 1.0 / (1 << 53)
        return u

    def poisson_mask(self, n: int, q: float) -> np.ndarray:
        """Poisson sampling: each of ``n`` records is included independently with probability q."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"sampling rate must lie in [0, 1], got {q}")
        return self.uniform(n) < q

    # -- derived generators --------------------------------------------------------------------
    def spawn(self, n: int) -> list[SecureRNG]:
        """``n`` independent child generators keyed from this stream (same reproducibility)."""
        return [SecureRNG(_key=self.bytes(32), _reproducible=self.reproducible) for _ in range(n)]

    def numpy(self) -> np.random.Generator:
        """A NumPy Generator keyed by 256 bits of this stream, for non-privacy-critical draws."""
        seed = int.from_bytes(self.bytes(32), "little")
        return np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(seed)))


def default_rng(seed: int | str | bytes | None = None) -> SecureRNG:
    """``SecureRNG()`` when ``seed`` is None, else the reproducible (warning) generator."""
    return SecureRNG() if seed is None else SecureRNG.from_seed(seed)
