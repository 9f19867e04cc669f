"""Secure aggregation (SecAgg, Bonawitz et al. CCS 2017) over SecAgg+ graphs (Bell et al. CCS 2020),
with the key setup amortised over the job.

Transport independent: small dataclasses of bytes, strings and numpy arrays, and two state
machines, :class:`SecAggClient` (one per party and job) and :class:`SecAggServer` (the coordinator's
aggregation of one round). Threat model: a semi-honest coordinator colluding with fewer than
``threshold`` parties of any neighbourhood; it learns the sum of the survivors' inputs mod 2^B and
nothing else about any single honest input. Not covered: malicious inputs (a party can add anything),
traffic metadata (who sent what when), a coordinator that deviates from the protocol beyond what the
parties check (below: it could, for instance, call v dropped to v's neighbours and a survivor to
others; the signed consistency round of Bonawitz et al.'s malicious variant is not implemented), and
biased choice of the graph seed (it must come from the job specification).

Once per job (per client: a party that restarts makes a new one, with new keys):

0. ``advert()``: long-term X25519 pairs c_u (envelopes) and s_u (pairwise masks), both public keys
   signed with the party's certificate key (ECDSA-SHA256 over job, name and keys): one signature per
   job. A receiver checks the certificate chain against the deployment CA, CN == name, OU == party and
   the signature once per advert (a party's advert seen before is recognised; a changed one is checked
   again), so the coordinator cannot substitute
   keys (:class:`KeySubstitutionError`); it computes X25519(c_u, c_v) and X25519(s_u, s_v) once per
   neighbour and advert and keeps them for the job.

One round r (two exchanges: masked input, unmask):

1. ``masked_input(r, x, adverts)``: the coordinator sends u the current adverts of its neighbours
   (and u's own, which must be u's current one: a restarted party refuses a round announced with its
   old keys), each in full or, if u verified it in an earlier round, as an :class:`AdvertRef`: its
   name and SHA-256 digest, which u resolves only to the advert it verified itself (an unknown digest
   is refused, so a reference can name no key u has not checked). u masks with exactly the listed
   neighbours A_u,r:
   y = x + PRG(b_u,r) + sum_{v in A_u,r} sign(u, v) PRG(k_uv,r) mod 2^B, where
   k_uv,r = HKDF(X25519(s_u, s_v); job, r, u, v in order) and b_u,r is a FRESH self-mask seed (OS
   CSPRNG) Shamir-shared (threshold t) among A_u,r in ChaCha20-Poly1305 envelopes keyed by
   HKDF(X25519(c_u, c_v); job, r, sender, receiver) with sender, receiver, job and round in the
   associated data. The envelopes travel with y: if y arrives they do; if not, u is dropped and
   b_u,r is never needed. PRG = ChaCha20 keystream (nonce from r) read as little-endian words of the
   narrowest of 8, 16, 32, 64 bits holding B (:func:`mask_dtype`), added in that dtype.
2. ``unmask(r, survivors, dropped, envelopes)``: for each neighbour v in A_u,r listed as a survivor,
   u opens v's envelope and returns its share of b_v,r; for each listed as dropped it returns the
   per-round pairwise seed k_uv,r itself. Never both for one v in one round; refused (nothing
   revealed) with fewer than ``min_survivors`` survivors, with fewer than t of u's own neighbours
   among them (then b_u,r could not be rebuilt anyway), a contradiction or a second different
   request for r. The server rebuilds each survivor's b_v,r from t shares and removes the masks. The
   coordinator asks only the survivors it needs (:meth:`SecAggServer.unmaskers`), the others with the
   same request only if one of those is silent: a party not asked reveals nothing of the round.

Why this is safe (what the coordinator holds per round is what per-round keys gave it): k_uv,r is an
HKDF output bound to the round, so revealing it for a dropped v unmasks nothing of any other round
nor any other pair (HKDF as a PRF of the secret agreement), and the envelope keys are other HKDF
outputs of another agreement. A party v declared dropped in round r: every honest neighbour refuses
to return a share of b_v,r (it listed v as dropped, and answers r once), so the coordinator and
fewer than t colluders hold < t shares, which are uniform and independent of b_v,r (Shamir); an
honest party opens only the envelopes of parties it was told survived, so routing v's late envelopes
to it gains nothing; a late y_v minus every revealed k_vw,r is x_v + PRG(b_v,r): uniform. A survivor's b_u,r is rebuilt,
but its pairwise seeds with surviving neighbours are never revealed (each honest neighbour reveals
k_uv,r only for a v it was told dropped), so y_u alone stays masked by them; they cancel only in the
sum. b_u,r is fresh each round: b of round r says nothing about round r'. Per round the coordinator
learns the survivors' b and the pairwise seeds of (survivor, dropped) pairs: exactly the masks it
could recompute with fresh keys per round from the dropped party's rebuilt key, nothing more.

What is given up against fresh keys per round: (a) a party's memory taken mid-job (or its long-term
X25519 keys) exposes its pairwise seeds of every round of the job, not one round's (with per-round
keys, only the current round's keys are alive); the self-mask seeds of finished rounds are erased by
``forget`` and stay out of reach. (b) Dropout tolerance in the unmask step: a survivor that does not
answer the unmask request while one of its neighbours dropped leaves its k_uv,r unrevealed, and the
round is aborted (with per-round keys the dropped party's key was rebuilt from any t neighbours).
(c) A restarted party (new keys) misses the rounds until its new advert reached its neighbours.
The long-term keys live as long as the client: ``close`` erases them (the party session drops its
clients with the job).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import hashlib
import hmac
import math
import os
import secrets
import struct
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from dpfed.core.errors import DpfedError

__all__ = [
    "SecAggError", "KeySubstitutionError", "EnvelopeError", "ProtocolError", "UnmaskRefused",
    "TooFewSurvivors", "ReconstructionError", "MaskedInputError",
    "SecAggConfig", "KeyAdvert", "AdvertRef", "Envelope", "MaskedInput", "MaskedSum", "UnmaskRequest", "UnmaskResponse",
    "SecAggClient", "SecAggServer",
    "PRIME", "shamir_split", "shamir_reconstruct", "harary_parameters", "neighbourhoods",
    "expand_mask", "mask_dtype", "pairwise_seed",
]

PRIME = (1 << 521) - 1  # Mersenne prime: one field element holds a 32-byte secret
_ELEM = 66  # bytes per field element
_SHARE = 2 + _ELEM  # x (uint16) + y
_SECRET = 32


# ----------------------------------------------------------------------------------- errors

class SecAggError(DpfedError):
    """Base class of every secure-aggregation failure."""


class KeySubstitutionError(SecAggError):
    """An advertised key is not signed by the named party's CA-issued certificate."""


class EnvelopeError(SecAggError):
    """An envelope fails authentication (tampered, re-addressed, replayed across rounds/jobs)."""


class ProtocolError(SecAggError):
    """A step is called out of order, twice with different content, or with inconsistent data."""


class UnmaskRefused(SecAggError):
    """The party refuses an unmask request (both kinds of share asked, or contradicts an earlier one)."""


class TooFewSurvivors(UnmaskRefused):
    """Fewer than the minimum number of survivors are listed: nothing is revealed."""


class ReconstructionError(SecAggError):
    """The coordinator holds too few (or inconsistent) shares to unmask."""


class MaskedInputError(SecAggError):
    """Masked inputs that cannot be counted (a party twice, another length, another round, a party that
    shared no keys): the round is refused before any unmask request, nothing of it is unmasked."""


# ----------------------------------------------------------------------------------- encoding

def _lp(*parts: bytes | str | int) -> bytes:
    """Unambiguous length-prefixed encoding (4-byte big-endian length per field; ints as 8-byte signed)."""
    return b"".join(len(p).to_bytes(4, "big") + p if isinstance(p, bytes) else _lp_field(p) for p in parts)


@functools.lru_cache(maxsize=1 << 14)
def _lp_field(p: str | int) -> bytes:
    """One name, job id or round, encoded as in :func:`_lp` (public values only: cached)."""
    b = p.encode() if isinstance(p, str) else struct.pack(">q", p)
    return len(b).to_bytes(4, "big") + b


def _extract(secret: bytes) -> bytes:
    """HKDF-Extract with no salt (RFC 5869: HMAC-SHA256 keyed with 32 zero bytes): the PRK of an
    agreement, computed once per neighbour and job."""
    return hmac.digest(bytes(32), secret, "sha256")


def _expand(prk: bytes, info: bytes) -> bytes:
    """HKDF-Expand to 32 bytes: its single block T(1) = HMAC-SHA256(PRK, info || 0x01)."""
    return hmac.digest(prk, info + b"\x01", "sha256")


def _hkdf(secret: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) of 32 bytes with no salt: the same bytes as ``cryptography``'s HKDF, with
    two HMAC calls instead of a KDF object per derivation (thousands per round)."""
    return _expand(_extract(secret), info)


def _agree(sk: x25519.X25519PrivateKey, pk: bytes) -> bytes:
    """X25519(sk, pk) for a raw 32-byte public key: every key agreement of the protocol goes through
    here (one per neighbour, key pair and advert: once per job)."""
    return sk.exchange(x25519.X25519PublicKey.from_public_bytes(pk))


# ----------------------------------------------------------------------------------- Shamir

def shamir_split(secret: int, xs: Sequence[int], t: int, p: int = PRIME) -> list[int]:
    """Shares f(x) for x in ``xs`` of a random degree-(t-1) polynomial with f(0) = secret over GF(p)
    (Shamir 1979). Coefficients from the OS CSPRNG; any t shares determine the secret, t-1 are
    uniform and independent of it."""
    if not 1 <= t <= len(xs):
        raise ValueError(f"threshold {t} must lie in [1, {len(xs)}]")
    if not 0 <= secret < p or len(set(xs)) != len(xs) or any(not 0 < x < p for x in xs):
        raise ValueError("secret must lie in [0, p) and the xs be distinct and non-zero mod p")
    return _shamir_eval(secret, [secrets.randbelow(p) for _ in range(t - 1)], xs, p)


def _shamir_eval(secret: int, coeffs: Sequence[int], xs: Sequence[int], p: int) -> list[int]:
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


def _share_bytes(x: int, y: int) -> bytes:
    return struct.pack(">H", x) + y.to_bytes(_ELEM, "big")


def _share_parse(b: bytes) -> tuple[int, int]:
    if len(b) != _SHARE:
        raise ReconstructionError(f"a share is {_SHARE} bytes, got {len(b)}")
    return struct.unpack(">H", b[:2])[0], int.from_bytes(b[2:], "big")


def _reconstruct_secret(shares: Sequence[bytes], t: int) -> bytes:
    """The 32-byte secret from >= t shares; with more than t, a second t-subset must agree."""
    pts = sorted({_share_parse(s) for s in shares})
    if len({x for x, _ in pts}) != len(pts):
        raise ReconstructionError("two different shares at the same x")
    if len(pts) < t:
        raise ReconstructionError(f"{len(pts)} shares, threshold {t}")
    s = shamir_reconstruct(pts[:t])
    if len(pts) > t and shamir_reconstruct(pts[-t:]) != s:
        raise ReconstructionError("shares are inconsistent (not on one polynomial of degree t-1)")
    if s >> (8 * _SECRET):
        raise ReconstructionError("reconstructed value is not a 32-byte secret")
    return s.to_bytes(_SECRET, "big")


# ----------------------------------------------------------------------------------- graph

def _log_tail(logpmf: np.ndarray) -> np.ndarray:
    """log P(X >= i) for i = 0..k from log pmf values (stable in log space)."""
    from scipy.special import logsumexp

    return np.array([logsumexp(logpmf[i:]) for i in range(len(logpmf))])


def harary_parameters(n: int, corrupt_fraction: float, dropout_fraction: float, *,
                      security_bits: float = 40.0, correctness_bits: float = 20.0) -> tuple[int, int]:
    """(degree k, threshold t) of a random Harary graph for ``n`` parties (Bell et al. 2020, Sec. 4).

    Smallest even k such that (a) removing the corrupt and dropped parties disconnects the graph with
    probability < 2^-(sec+1) (union bound over pairs of k/2-long gaps in the ring), (b) a party has
    >= t corrupt neighbours with probability < 2^-(sec+1)/n and (c) < t surviving neighbours with
    probability < 2^-cor/n; neighbour counts are hypergeometric, tails summed exactly in log space.
    """
    from scipy.stats import hypergeom

    if not (0 <= corrupt_fraction < 1 and 0 <= dropout_fraction < 1 and corrupt_fraction + dropout_fraction <= 0.9):
        raise ValueError("need 0 <= corrupt, dropout < 1 and corrupt + dropout <= 0.9")
    adv = math.floor(corrupt_fraction * n + 1e-12)
    surv = math.ceil((1 - dropout_fraction) * n - 1e-12)
    bad = adv + (n - surv)
    lsec = -(security_bits + 1) * math.log(2)
    for k in range(2, n - 1, 2):
        if k <= bad:
            log_gap = (math.log(n) + math.log(n - k - 1) - math.log(2) + math.lgamma(bad + 1)
                       + math.lgamma(n - k + 1) - math.lgamma(n + 1) - math.lgamma(bad - k + 1))
            if log_gap >= lsec:
                continue
        j = np.arange(k + 1)
        adv_tail = _log_tail(hypergeom(n, adv, k).logpmf(j)) if adv else np.where(j == 0, 0.0, -np.inf)
        t = max(2, int(j[adv_tail < lsec - math.log(n)][0]))  # P(>= t corrupt neighbours) negligible
        if t > k:
            continue
        log_cdf = np.logaddexp.accumulate(hypergeom(n, surv, k).logpmf(j))  # log P(surviving <= i)
        if log_cdf[t - 1] < -correctness_bits * math.log(2) - math.log(n):  # P(< t survive) small
            return k, t
    raise ValueError(f"no Harary parameters for n={n}, corrupt={corrupt_fraction}, dropout={dropout_fraction}")


def _permutation(seed: bytes, n: int) -> np.ndarray:
    """A public random permutation of range(n): argsort of ChaCha20 keystream words."""
    keys = expand_mask(seed, 0, n, 64)
    return np.argsort(keys, kind="stable")


def neighbourhoods(parties: Sequence[str], degree: int | None, seed: bytes) -> dict[str, tuple[str, ...]]:
    """Each party's neighbours: all others (``degree`` None) or a Harary graph H(degree, n) on a public
    random ordering of the parties (SecAgg+, Bell et al. 2020): position i joins i +- 1..degree/2."""
    names = sorted(parties)
    n = len(names)
    if degree is None or degree >= n - 1:
        return {u: tuple(v for v in names if v != u) for u in names}
    if degree < 2 or degree % 2:
        raise ValueError("the Harary degree must be even and >= 2")
    order = [names[i] for i in _permutation(seed, n)]
    pos = {u: i for i, u in enumerate(order)}
    half = degree // 2
    return {u: tuple(sorted(order[(pos[u] + o) % n] for o in range(-half, half + 1) if o)) for u in names}


# ----------------------------------------------------------------------------------- masks

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


def _clear_top(a: np.ndarray, bits: int) -> np.ndarray:
    """a mod 2^bits in place (a no-op when the word has exactly ``bits`` bits); returns a."""
    if bits < 8 * a.itemsize:
        a &= a.dtype.type((1 << bits) - 1)
    return a


def _add_masks(acc: np.ndarray, masks: Sequence[tuple[bytes, bool]], round_: int) -> None:
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
    _add_masks(m, [(seed, False)], round_)
    return _clear_top(m, bits).astype(np.uint64)


def pairwise_seed(shared: bytes, job_id: str, round_: int, u: str, v: str) -> bytes:
    """k_uv,r = HKDF-SHA256(X25519 secret) bound to job, round and the two names in order."""
    return _expand(_extract(shared), _pairwise_info(job_id, round_, u, v))


_PAIRWISE_TAG = _lp(b"dpfed-secagg-pairwise-v1")
_ENVELOPE_TAG = _lp(b"dpfed-secagg-envelope-v1")
_ENVELOPE_AD_TAG = _lp(b"dpfed-secagg-envelope-ad-v1")


def _pairwise_info(job_id: str, round_: int, u: str, v: str) -> bytes:
    """_lp(tag, job, round, the two names in order), from cached fields (75 derivations per party and round)."""
    a, b = (u, v) if u <= v else (v, u)
    return _PAIRWISE_TAG + _lp_field(job_id) + _lp_field(round_) + _lp_field(a) + _lp_field(b)


def _envelope_key(shared: bytes, job_id: str, round_: int, sender: str, receiver: str) -> bytes:
    return _expand(_extract(shared), _envelope_info(job_id, round_, sender, receiver))


def _envelope_info(job_id: str, round_: int, sender: str, receiver: str) -> bytes:
    return _ENVELOPE_TAG + _lp_field(job_id) + _lp_field(round_) + _lp_field(sender) + _lp_field(receiver)


def _envelope_ad(job_id: str, round_: int, sender: str, receiver: str) -> bytes:
    return _ENVELOPE_AD_TAG + _lp_field(job_id) + _lp_field(round_) + _lp_field(sender) + _lp_field(receiver)


# ----------------------------------------------------------------------------------- messages

@dataclass(frozen=True)
class SecAggConfig:
    """Public parameters of one job, identical at every party and the coordinator.

    ``parties``: the roster; ``bits``: B (all arithmetic mod 2^B, 1 <= B <= 62); ``min_survivors``:
    P_min (no unmasking below it); ``corrupt_fraction`` and ``dropout_fraction``: the design point of
    the graph and threshold; ``degree``/``threshold``: overrides; ``complete_graph_max``: the complete
    graph is used up to this many parties; ``graph_seed``: public, from the job specification.
    """

    job_id: str
    parties: tuple[str, ...]
    bits: int = 32
    min_survivors: int = 2
    corrupt_fraction: float = 0.05
    dropout_fraction: float = 0.3
    complete_graph_max: int = 64
    degree: int | None = None
    threshold: int | None = None
    graph_seed: bytes = b""

    def __post_init__(self) -> None:
        names = tuple(sorted(self.parties))
        object.__setattr__(self, "parties", names)
        if len(set(names)) != len(names) or len(names) < 2:
            raise ValueError("parties must be >= 2 distinct names")
        if len(names) >= 1 << 16:
            raise ValueError("at most 65535 parties (share x-coordinates are 16-bit)")
        if not 1 <= self.bits <= 62:
            raise ValueError("bits must lie in [1, 62]")
        if not 1 <= self.min_survivors <= len(names):
            raise ValueError("min_survivors must lie in [1, number of parties]")
        n = len(names)
        if self.degree is None and n > self.complete_graph_max:
            k, t = harary_parameters(n, self.corrupt_fraction, self.dropout_fraction)
            object.__setattr__(self, "degree", k if k < n - 1 else None)
            if self.threshold is None:
                object.__setattr__(self, "threshold", t)
        if self.threshold is None:
            nb = self.neighbour_count
            t1 = math.floor(self.corrupt_fraction * n + 1e-12)  # colluders the threshold must exceed
            t2 = math.ceil((1 - self.dropout_fraction) * n - 1e-12) - 1  # surviving neighbours of a survivor
            if t2 <= t1:
                raise ValueError(f"no threshold: {t1} colluders vs {t2} surviving neighbours")
            object.__setattr__(self, "threshold", max(2, t1 + 1, min(t2, nb // 2 + 1)))
        if not 1 <= self.threshold <= self.neighbour_count:
            raise ValueError(f"threshold {self.threshold} must lie in [1, {self.neighbour_count}]")
        object.__setattr__(self, "_xs", {n: i + 1 for i, n in enumerate(names)})
        object.__setattr__(self, "_graph", neighbourhoods(names, self.degree,
                                                          _hkdf(self.graph_seed, _lp(b"dpfed-secagg-graph-v1", self.job_id, *names))))

    @property
    def neighbour_count(self) -> int:
        return len(self.parties) - 1 if self.degree is None else min(self.degree, len(self.parties) - 1)

    def neighbours(self, name: str) -> tuple[str, ...]:
        return self._graph[name]  # type: ignore[attr-defined]

    def x_of(self, name: str) -> int:
        """The Shamir x-coordinate of shares held by ``name`` (1 + its roster index)."""
        return self._xs[name]  # type: ignore[attr-defined,no-any-return]


@dataclass(frozen=True)
class KeyAdvert:
    """A party's long-term public keys for one job (one client), signed with its certificate key."""

    job_id: str
    name: str
    c_pk: bytes
    s_pk: bytes
    cert_pem: bytes
    signature: bytes

    def signed_bytes(self) -> bytes:
        return _lp(b"dpfed-secagg-advert-v2", self.job_id, self.name, self.c_pk, self.s_pk)

    def digest(self) -> bytes:
        """SHA-256 of everything in the advert: the key of the receivers' verification cache and what an
        :class:`AdvertRef` names (computed once per advert object)."""
        d: bytes | None = self.__dict__.get("_digest")
        if d is None:
            d = hashlib.sha256(_lp(self.signed_bytes(), self.cert_pem, self.signature)).digest()
            object.__setattr__(self, "_digest", d)
        return d


@dataclass(frozen=True)
class AdvertRef:
    """An advert the receiver verified in an earlier round of the job, named by its :meth:`KeyAdvert.digest`
    (32 bytes instead of a certificate and a signature per neighbour and round). The receiver resolves it
    only to the advert of that name it holds verified, and refuses a digest it does not hold."""

    name: str
    digest: bytes


@dataclass(frozen=True)
class Envelope:
    """Sender's share of b_sender,r for receiver, ChaCha20-Poly1305 under HKDF(X25519(c_u, c_v), r)."""

    job_id: str
    round: int
    sender: str
    receiver: str
    nonce: bytes
    ciphertext: bytes


@dataclass(frozen=True, eq=False)
class MaskedInput:
    """Step 1 message: the masked vector (uint64 words < 2^B) and the sender's envelopes."""

    job_id: str
    round: int
    name: str
    y: np.ndarray
    envelopes: tuple[Envelope, ...] = ()


@dataclass(frozen=True, eq=False)
class MaskedSum:
    """Step 1 merged on its way (an ingress shard, a Ray worker): the sum mod 2^B of the masked inputs
    of ``names`` and their envelopes. The server counts its names exactly as that many separate masked
    inputs (:class:`MaskedInput`; their sum is what it adds up anyway)."""

    job_id: str
    round: int
    names: tuple[str, ...]
    y: np.ndarray
    envelopes: tuple[Envelope, ...] = ()


@dataclass(frozen=True)
class UnmaskRequest:
    """Step 2 request: who is counted (survivors) and who is not (dropped) in round ``round``."""

    job_id: str
    round: int
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]


@dataclass(frozen=True)
class UnmaskResponse:
    """Step 2 answer: shares of the survivors' self-mask seeds b_v,r, and the responder's pairwise seeds
    k_uv,r with its dropped neighbours v (never both for one v)."""

    job_id: str
    round: int
    name: str
    self_mask_shares: dict[str, bytes]
    pairwise_seeds: dict[str, bytes]



# ----------------------------------------------------------------------------------- certificates

class _CertCache:
    """CA-chain verification of party certificates, cached by certificate bytes."""

    def __init__(self, ca_cert_pem: bytes) -> None:
        self._ca = x509.load_pem_x509_certificate(ca_cert_pem)
        self._ok: dict[bytes, tuple[str, ec.EllipticCurvePublicKey]] = {}

    def verify(self, pem: bytes, name: str) -> ec.EllipticCurvePublicKey:
        hit = self._ok.get(pem)
        if hit is None:
            try:
                cert = x509.load_pem_x509_certificate(pem)
                verifier = (PolicyBuilder().store(Store([self._ca])).time(_dt.datetime.now(_dt.timezone.utc))
                            .build_client_verifier())
                verifier.verify(cert, [])
            except (ValueError, VerificationError) as e:
                raise KeySubstitutionError(f"certificate offered for {name!r} is not issued by the deployment CA: {e}") from None
            cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            ou = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
            key = cert.public_key()
            if not isinstance(key, ec.EllipticCurvePublicKey):
                raise KeySubstitutionError(f"certificate for {name!r} does not hold an EC key")
            hit = (str(cn[0].value) if cn else "", key)
            if not ou or ou[0].value != "party":
                raise KeySubstitutionError(f"certificate for {name!r} is not a party certificate")
            self._ok[pem] = hit
        if hit[0] != name:
            raise KeySubstitutionError(f"keys claimed for {name!r} come with the certificate of {hit[0]!r}")
        return hit[1]


# ----------------------------------------------------------------------------------- client

@dataclass
class _Peer:
    """A neighbour's verified advert and the job's two agreements with it (kept for the job)."""

    advert: KeyAdvert
    digest: bytes
    c_prk: bytes  # HKDF-Extract(X25519(c_u, c_v)): envelope keys, HKDF-Expand per round and direction
    s_prk: bytes  # HKDF-Extract(X25519(s_u, s_v)): pairwise seeds, HKDF-Expand per round


@dataclass
class _Round:
    peers: dict[str, _Peer]  # A_u,r: the neighbours masked with in this round
    b: bytes  # the fresh self-mask seed b_u,r
    seeds: dict[str, bytes]  # v -> k_uv,r
    envelopes: tuple[Envelope, ...]
    y: np.ndarray | None = None  # the masked input as sent, in mask_dtype(B) words
    x_digest: bytes = b""
    request: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    response: UnmaskResponse | None = None


class SecAggClient:
    """One party's side of secure aggregation for one job (see the module docstring).

    ``cert_key_pem``/``cert_pem``: the party's certificate and its private key (EC P-256, PEM);
    ``ca_cert_pem``: the deployment CA, against which every other party's keys are checked. The
    long-term X25519 keys are made here and signed once.
    """

    def __init__(self, config: SecAggConfig, name: str, cert_pem: bytes, cert_key_pem: bytes,
                 ca_cert_pem: bytes) -> None:
        if name not in config.parties:
            raise ValueError(f"{name!r} is not in the job's roster")
        self.config, self.name = config, name
        self._certs = _CertCache(ca_cert_pem)
        key = serialization.load_pem_private_key(cert_key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the certificate key must be an EC key")
        if self._certs.verify(cert_pem, name).public_numbers() != key.public_key().public_numbers():
            raise ValueError("the certificate does not match the private key")
        self._c_sk: x25519.X25519PrivateKey | None = x25519.X25519PrivateKey.generate()
        self._s_sk: x25519.X25519PrivateKey | None = x25519.X25519PrivateKey.generate()
        raw = lambda k: k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)  # noqa: E731
        unsigned = KeyAdvert(config.job_id, name, raw(self._c_sk), raw(self._s_sk), cert_pem, b"")
        sig = key.sign(unsigned.signed_bytes(), ec.ECDSA(hashes.SHA256()))  # once per job
        self._advert = dataclasses.replace(unsigned, signature=sig)
        self._peers: dict[str, _Peer] = {}
        self._rounds: dict[int, _Round] = {}
        self._masked: set[int] = set()  # rounds masked (ever, in this client): never a second input

    def advert(self) -> KeyAdvert:
        """This party's signed long-term public keys for the job (the same for every round)."""
        return self._advert

    def _keys(self) -> tuple[x25519.X25519PrivateKey, x25519.X25519PrivateKey]:
        if self._c_sk is None or self._s_sk is None:
            raise ProtocolError("the job's keys were erased (close)")
        return self._c_sk, self._s_sk

    def _peer(self, a: KeyAdvert) -> _Peer:
        """The verified peer for advert ``a`` (checked and agreed once per advert, then cached)."""
        known = self._peers.get(a.name)
        if known is not None and known.advert == a:  # checked before: no hash, no signature, no agreement
            return known
        digest = a.digest()
        if a.job_id != self.config.job_id:
            raise KeySubstitutionError(f"advert of {a.name!r} is for job {a.job_id!r}, not this one")
        pub = self._certs.verify(a.cert_pem, a.name)
        try:
            pub.verify(a.signature, a.signed_bytes(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise KeySubstitutionError(f"the keys advertised for {a.name!r} are not signed by it") from None
        mine = {self._advert.c_pk, self._advert.s_pk}
        if a.c_pk == a.s_pk or {a.c_pk, a.s_pk} & mine:
            raise KeySubstitutionError(f"the keys advertised for {a.name!r} repeat a key")
        c_sk, s_sk = self._keys()
        peer = _Peer(a, digest, _extract(_agree(c_sk, a.c_pk)), _extract(_agree(s_sk, a.s_pk)))  # once per advert
        self._peers[a.name] = peer
        return peer

    def verify_adverts(self, r: int, adverts: Iterable[KeyAdvert | AdvertRef]) -> dict[str, _Peer]:
        """A_u,r: the listed neighbours, verified (once per advert: later calls hit the cache, and an
        :class:`AdvertRef` must name an advert verified before); my own advert must be listed and current."""
        nbrs = set(self.config.neighbours(self.name))
        got: dict[str, _Peer] = {}
        own = False
        for a in adverts:
            if a.name == self.name:
                if (a.digest != self._advert.digest()) if isinstance(a, AdvertRef) else (a != self._advert):
                    raise KeySubstitutionError(f"round {r}: my advert came back altered or outdated "
                                               "(keys of an earlier session?)")
                own = True
                continue
            if a.name not in nbrs:
                continue
            if isinstance(a, AdvertRef):
                known = self._peers.get(a.name)
                if known is None or known.digest != a.digest:
                    raise ProtocolError(f"round {r}: the advert of {a.name!r} is named by a digest this party "
                                        "has not verified (it must be sent in full)")
                peer = known
            else:
                peer = self._peer(a)
            if a.name in got and got[a.name].digest != peer.digest:
                raise KeySubstitutionError(f"two different adverts for {a.name!r} in round {r}")
            got[a.name] = peer
        if not own:
            raise ProtocolError(f"round {r}: my own advert is not among the round's adverts")
        keys = [k for p in got.values() for k in (p.advert.c_pk, p.advert.s_pk)]
        if len(set(keys)) != len(keys):
            raise KeySubstitutionError(f"round {r}: advertised public keys are not all distinct")
        if len(got) < self.config.threshold:
            raise ProtocolError(f"round {r}: {len(got)} neighbours with keys, threshold {self.config.threshold}")
        return got

    def prepare_round(self, r: int, adverts: Iterable[KeyAdvert | AdvertRef]) -> tuple[Envelope, ...]:
        """The round's keys before its input: A_u,r verified, a fresh b_u,r Shamir-shared into envelopes,
        the pairwise seeds k_uv,r. Called by :meth:`masked_input`; a repeat with the same adverts returns
        the same envelopes; a round forgotten is never prepared again."""
        if r < 0:
            raise ValueError("rounds are non-negative")
        peers = self.verify_adverts(r, adverts)
        st = self._rounds.get(r)
        if st is not None:
            if {v: p.digest for v, p in peers.items()} != {v: p.digest for v, p in st.peers.items()}:
                raise ProtocolError(f"round {r}: another neighbour set than before (the masks would not cancel)")
            return st.envelopes
        if r in self._masked:
            raise ProtocolError(f"round {r} was masked and forgotten: never a second masked input")
        job, t = self.config.job_id, self.config.threshold
        b = os.urandom(_SECRET)
        holders = sorted(peers)
        shares = shamir_split(int.from_bytes(b, "big"), [self.config.x_of(v) for v in holders], t)
        envs = []
        nonces = os.urandom(12 * len(holders))  # one random 96-bit nonce per envelope
        for i, (v, y_share) in enumerate(zip(holders, shares, strict=True)):
            key = _expand(peers[v].c_prk, _envelope_info(job, r, self.name, v))
            nonce = nonces[12 * i:12 * i + 12]
            ct = ChaCha20Poly1305(key).encrypt(nonce, _share_bytes(self.config.x_of(v), y_share),
                                               _envelope_ad(job, r, self.name, v))
            envs.append(Envelope(job, r, self.name, v, nonce, ct))
        seeds = {v: _expand(peers[v].s_prk, _pairwise_info(job, r, self.name, v)) for v in holders}
        self._rounds[r] = _Round(dict(peers), b, seeds, tuple(envs))
        self._masked.add(r)
        return tuple(envs)

    def masked_input(self, r: int, x_mod: np.ndarray, adverts: Iterable[KeyAdvert | AdvertRef]) -> MaskedInput:
        """Step 1: y = x + PRG(b_u,r) + signed pairwise masks with the listed neighbours, and the
        envelopes carrying the shares of the fresh b_u,r (a repeat returns the same message)."""
        x = np.asarray(x_mod)
        if x.dtype != np.uint64 or x.ndim != 1:
            raise ValueError("x_mod must be a 1-d uint64 array")
        bits = self.config.bits
        if x.size and int(x.max()) >> bits:
            raise ValueError(f"x_mod has entries >= 2^{bits}")
        acc = x.astype(mask_dtype(bits))  # exact (x < 2^B) and a fresh contiguous array
        digest = hashlib.sha256(acc).digest()  # of x in B-bit words: equal iff the inputs are equal
        self.prepare_round(r, adverts)
        st = self._rounds[r]
        if st.y is not None:
            if digest != st.x_digest:
                raise ProtocolError(f"round {r}: a second, different input (its mask would cancel)")
            return MaskedInput(self.config.job_id, r, self.name, st.y.astype(np.uint64), st.envelopes)
        _add_masks(acc, [(st.b, False)] + [(st.seeds[v], v < self.name) for v in sorted(st.seeds)], r)  # +m_uv if u < v
        st.y, st.x_digest = _clear_top(acc, bits), digest
        return MaskedInput(self.config.job_id, r, self.name, acc.astype(np.uint64), st.envelopes)

    def _open(self, st: _Round, r: int, e: Envelope) -> bytes:
        """My share of b_{e.sender},r from its envelope (authenticated, addressed to me, this round)."""
        if e.receiver != self.name:
            raise EnvelopeError(f"envelope for {e.receiver!r} delivered to {self.name!r}")
        if e.job_id != self.config.job_id or e.round != r:
            raise EnvelopeError(f"envelope for job {e.job_id!r} round {e.round} offered in round {r}")
        key = _expand(st.peers[e.sender].c_prk, _envelope_info(e.job_id, r, e.sender, self.name))
        try:
            pt = ChaCha20Poly1305(key).decrypt(e.nonce, e.ciphertext, _envelope_ad(e.job_id, r, e.sender, self.name))
        except InvalidTag:
            raise EnvelopeError(f"round {r}: envelope from {e.sender!r} fails authentication") from None
        if len(pt) != _SHARE or _share_parse(pt)[0] != self.config.x_of(self.name):
            raise EnvelopeError(f"envelope from {e.sender!r} holds a malformed share")
        return pt

    def unmask(self, r: int, survivors: Sequence[str], dropped: Sequence[str],
               envelopes: Iterable[Envelope]) -> UnmaskResponse:
        """Step 2: per neighbour I masked with, its b share (survivor, from its envelope) or our pairwise
        seed k_uv,r (dropped), never both.

        Refused (nothing revealed) if fewer than ``min_survivors`` survivors are listed, fewer than t
        of my neighbours, a party is listed both ways, I am not a survivor, a neighbour is listed that I
        did not mask with, or the request differs from an earlier one for this round.
        """
        st = self._rounds.get(r)
        if st is None or st.y is None:
            raise UnmaskRefused(f"round {r}: I hold no masked input of this round")
        surv, drop = set(survivors), set(dropped)
        request = (tuple(sorted(surv)), tuple(sorted(drop)))
        if st.request is not None:
            if request != st.request or st.response is None:
                raise UnmaskRefused(f"round {r}: a second, different unmask request")
            return st.response
        if len(surv) < self.config.min_survivors:
            raise TooFewSurvivors(f"round {r}: {len(surv)} survivors listed, at least "
                                  f"{self.config.min_survivors} required; nothing revealed")
        both = surv & drop
        if both:
            raise UnmaskRefused(f"round {r}: {sorted(both)} listed both as survivor and dropped")
        if self.name not in surv:
            raise UnmaskRefused(f"round {r}: I am not listed as a survivor")
        if not (surv | drop) <= set(self.config.parties):
            raise UnmaskRefused(f"round {r}: unknown parties listed")
        nbrs = set(self.config.neighbours(self.name))
        unknown = ((surv | drop) & nbrs) - set(st.peers)
        if unknown:
            raise UnmaskRefused(f"round {r}: {sorted(unknown)} listed but I did not mask with them")
        if len(surv & set(st.peers)) < self.config.threshold:
            raise UnmaskRefused(f"round {r}: {len(surv & set(st.peers))} of my neighbours listed as survivors, "
                                f"threshold {self.config.threshold}: my self mask could not be rebuilt")
        b_out: dict[str, bytes] = {}
        for e in envelopes:  # opened (and checked) before anything is committed
            if e.sender in surv and e.sender in st.peers and e.sender not in b_out:
                b_out[e.sender] = self._open(st, r, e)
        st.request = request  # from here on only this request is answered
        st.response = UnmaskResponse(self.config.job_id, r, self.name, b_out,
                                     {v: st.seeds[v] for v in sorted(drop & set(st.peers))})
        return st.response

    def forget(self, r: int) -> None:
        """Erase the secrets of round ``r`` (b_u,r, pairwise seeds, shares) once it is finished; the
        round can never be masked again."""
        self._rounds.pop(r, None)

    def forget_except(self, r: int) -> None:
        """Erase the secrets of every round but ``r``."""
        for q in [q for q in self._rounds if q != r]:
            self.forget(q)

    def close(self) -> None:
        """The job is over: erase every round's secrets, the long-term keys and the agreements."""
        self._rounds.clear()
        self._peers.clear()
        self._c_sk = self._s_sk = None


# ----------------------------------------------------------------------------------- server

@dataclass
class _ServerRound:
    adverts: dict[str, KeyAdvert] = field(default_factory=dict)
    mask_sets: dict[str, set[str]] = field(default_factory=dict)  # u -> A_u,r (routed to u)
    total: np.ndarray | None = None  # the sum of the counted masked inputs, mod 2^64
    boxes: dict[str, list[Envelope]] = field(default_factory=dict)  # receiver -> survivors' envelopes
    request: UnmaskRequest | None = None
    refused: str = ""  # why the masked inputs could not be counted (the round is over)


class SecAggServer:
    """The coordinator's side of one round: routes adverts, collects masked inputs (with their envelopes),
    unmasks the sum."""

    def __init__(self, config: SecAggConfig) -> None:
        self.config = config
        self._rounds: dict[int, _ServerRound] = {}

    def _r(self, r: int) -> _ServerRound:
        return self._rounds.setdefault(r, _ServerRound())

    def route_adverts(self, r: int, adverts: Iterable[KeyAdvert]) -> dict[str, list[KeyAdvert]]:
        """Each party with a known advert receives its own and its neighbours' (A_u,r, symmetric)."""
        st = self._r(r)
        st.adverts = {a.name: a for a in adverts if a.job_id == self.config.job_id and a.name in self.config.parties}
        st.mask_sets = {u: {v for v in self.config.neighbours(u) if v in st.adverts} for u in st.adverts}
        return {u: [st.adverts[u]] + [st.adverts[v] for v in sorted(st.mask_sets[u])] for u in st.adverts}

    def collect_masked(self, r: int, inputs: Iterable[MaskedInput | MaskedSum], length: int | None = None) -> UnmaskRequest:
        """The survivors are those whose masked input arrived, alone or inside a partial sum; the rest
        of the routed parties are dropped. Every input must be of this job and round, from routed
        parties, none counted twice, all of one length (``length`` if given), its envelopes from its
        own parties to their neighbours: otherwise :class:`MaskedInputError` and the round is over (no
        request, nothing unmasked, ever)."""
        st = self._r(r)
        if st.refused:
            raise MaskedInputError(st.refused)
        if st.request is not None:
            return st.request  # inputs arriving after this are late: never counted
        try:
            total, names, envs = self._add_inputs(r, st, inputs, length)
        except MaskedInputError as exc:
            st.refused = str(exc)
            raise
        surv = tuple(sorted(names))
        if len(surv) < self.config.min_survivors:
            raise ReconstructionError(f"round {r}: {len(surv)} survivors < {self.config.min_survivors}; round aborted")
        st.total = total
        st.boxes = {u: [] for u in surv}
        for e in envs:
            if e.receiver in names:
                st.boxes[e.receiver].append(e)
        st.request = UnmaskRequest(self.config.job_id, r, surv, tuple(sorted(set(st.mask_sets) - set(surv))))
        return st.request

    def envelopes_for(self, r: int, name: str) -> list[Envelope]:
        """The survivors' envelopes addressed to ``name`` (sent with its unmask request)."""
        return list(self._r(r).boxes.get(name, []))

    def unmaskers(self, r: int) -> tuple[str, ...]:
        """The survivors to send the unmask request first: few, but enough to remove every mask if they
        all answer. Every survivor with a dropped neighbour it masked with (only it can reveal that
        pairwise seed), then, greedily, the survivor holding envelopes of the most survivors still short
        of t holders, until each survivor's b_v,r has t share holders among them (ties broken in an
        order rotated by the round, which spreads the work over the parties). Asking fewer survivors
        reveals less (only their shares); the rest are asked, with the same request, only if some of
        these do not answer (``SecureGather``). With t = 2 and 24 Harary neighbours of 100 parties that
        is 12 parties instead of 100 (27 at t = 6): a round without dropouts asks an eighth of them."""
        st = self._r(r)
        req = st.request
        if req is None:
            raise ProtocolError(f"round {r}: collect_masked first")
        surv, drop = list(req.survivors), set(req.dropped)
        m, t = len(surv), self.config.threshold
        index = {u: i for i, u in enumerate(surv)}
        holds = np.zeros((m, m), dtype=bool)  # holds[u, v]: survivor u holds survivor v's envelope
        for u in surv:
            for e in st.boxes.get(u, ()):
                if e.sender in index:
                    holds[index[u], index[e.sender]] = True
        chosen = np.array([bool(st.mask_sets.get(u, set()) & drop) for u in surv], dtype=bool)
        need = t - holds[chosen].sum(axis=0)
        order = np.roll(np.arange(m), -(r % m)) if m else np.arange(0)
        while (need > 0).any():
            score = holds[order][:, need > 0].sum(axis=1)
            score[chosen[order]] = -1
            best = int(np.argmax(score))
            if score[best] <= 0:  # nobody left can help: ask everyone (reconstruction will say what lacks)
                return tuple(surv)
            u = int(order[best])
            chosen[u] = True
            need = need - holds[u]
        return tuple(u for u, c in zip(surv, chosen, strict=True) if c)

    def _add_inputs(self, r: int, st: _ServerRound, inputs: Iterable[MaskedInput | MaskedSum],
                    length: int | None) -> tuple[np.ndarray | None, set[str], list[Envelope]]:
        """The sum mod 2^64 of every input, the union of their parties and their envelopes (checked,
        see collect_masked)."""
        total: np.ndarray | None = None
        names: set[str] = set()
        envs: list[Envelope] = []
        for m in inputs:
            who = (m.name,) if isinstance(m, MaskedInput) else tuple(m.names)
            if m.job_id != self.config.job_id or m.round != r:
                raise MaskedInputError(f"round {r}: a masked input of job {m.job_id!r} round {m.round} offered")
            if not who:
                raise MaskedInputError(f"round {r}: a partial sum of no party")
            for w in who:
                if w in names:
                    raise MaskedInputError(f"round {r}: party {w!r} counted twice; round refused")
                if w not in st.mask_sets:
                    raise MaskedInputError(f"round {r}: a masked input of {w!r}, which was sent no keys; round refused")
                names.add(w)
            for e in m.envelopes:
                if e.sender not in who or e.receiver not in st.mask_sets.get(e.sender, ()) or \
                        e.job_id != self.config.job_id or e.round != r:
                    raise MaskedInputError(f"round {r}: an envelope from {e.sender!r} to {e.receiver!r} does not "
                                           "belong with its masked input; round refused")
                envs.append(e)
            y = np.asarray(m.y)
            if y.dtype != np.uint64 or y.ndim != 1:
                raise MaskedInputError(f"round {r}: a masked input is a 1-d uint64 array, got {y.dtype} {y.shape}")
            want = length if length is not None else (y.size if total is None else total.size)
            if y.size != want:
                raise MaskedInputError(f"round {r}: a masked input of {y.size} words, {want} expected")
            total = y.copy() if total is None else total + y
        return total, names, envs

    def unmask(self, r: int, responses: Iterable[UnmaskResponse]) -> np.ndarray:
        """Rebuild b_v,r of the survivors from t shares, take each survivor's revealed pairwise seeds with
        its dropped neighbours, return the sum mod 2^B (:class:`ReconstructionError` if anything lacks)."""
        st = self._r(r)
        req = st.request
        if req is None:
            raise ProtocolError(f"round {r}: collect_masked first")
        t, bits = self.config.threshold, self.config.bits
        surv, drop = set(req.survivors), set(req.dropped)
        b_sh: dict[str, list[bytes]] = {}
        seeds: dict[tuple[str, str], bytes] = {}
        for resp in responses:
            if resp.name not in surv or resp.round != r or resp.job_id != self.config.job_id:
                continue
            for v, sh in resp.self_mask_shares.items():
                if v in surv:
                    b_sh.setdefault(v, []).append(sh)
            for v, k in resp.pairwise_seeds.items():
                if v in drop and len(k) == _SECRET:
                    seeds[(resp.name, v)] = k
        assert st.total is not None  # a request lists >= 1 survivor, so some input was counted
        total = st.total.astype(mask_dtype(bits))  # mod 2^(8 * itemsize): exact mod 2^B
        masks = [(_reconstruct_secret(b_sh.get(v, []), t), True) for v in req.survivors]  # remove +PRG(b_v)
        for u in req.survivors:
            for v in sorted(st.mask_sets.get(u, set()) & drop):
                k = seeds.get((u, v))
                if k is None:
                    raise ReconstructionError(f"round {r}: survivor {u!r} did not reveal its pairwise seed with "
                                              f"dropped {v!r}")
                masks.append((k, u < v))  # survivor u added +m_uv if u < v: remove it
        _add_masks(total, masks, r)
        return _clear_top(total, bits).astype(np.uint64)
