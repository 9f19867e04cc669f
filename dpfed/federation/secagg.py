"""Secure aggregation (SecAgg, Bonawitz et al. CCS 2017) over SecAgg+ graphs (Bell et al. CCS 2020).

Transport independent: small dataclasses of bytes, strings and numpy arrays, and two state
machines, :class:`SecAggClient` (one per party and job) and :class:`SecAggServer` (the coordinator's
aggregation). Threat model: a semi-honest coordinator colluding with fewer than ``threshold`` parties
of any neighbourhood; it learns the sum of the survivors' inputs mod 2^B and nothing else about any
single honest input. Not covered: malicious inputs (a party can add anything), traffic metadata
(who sent what when), a coordinator that deviates from the protocol beyond what the parties check
(below), and biased choice of the graph seed (it must come from the job specification).

One round r (Bonawitz et al., Fig. 4, every key fresh per round):

1. ``advertise_keys(r)``: fresh X25519 pairs c (envelopes) and s (pairwise masks); both public keys
   signed with the party's certificate key (ECDSA-SHA256 over job, name, round, keys). Every receiver
   checks the certificate chain against the deployment CA, CN == name, OU == party and the
   signature, so the coordinator cannot substitute keys (:class:`KeySubstitutionError`).
2. ``share_keys(r, adverts)``: a fresh self-mask seed b_u,r and the mask key s_u,r^SK are Shamir
   shared (threshold t) among the neighbours that advertised, in ChaCha20-Poly1305 envelopes keyed by
   HKDF(X25519(c_u, c_v)) with sender, receiver, job and round in the associated data. The same
   agreement gives the key of v's envelope to u (HKDF info v -> u), kept for step 3 in the round's
   state: one X25519 per neighbour and key pair per round (c here, s in step 3), erased by ``forget``.
3. ``masked_input(r, x, envelopes)``: y = x + PRG(b_u,r) + sum_v sign(u, v) PRG(k_uv,r) mod 2^B,
   k_uv,r = HKDF(X25519(s_u,r, s_v,r)), PRG = ChaCha20 keystream read as little-endian words of the
   narrowest of 8, 16, 32, 64 bits holding B (:func:`mask_dtype`), added in that dtype.
4. ``unmask(r, survivors, dropped)``: per neighbour, the share of b_v,r (v survived) or of s_v,r^SK
   (v dropped), never both; refused if the request contradicts an earlier one for r, or lists
   fewer than ``min_survivors`` survivors.

Why s is fresh per round and not amortised over the job: the coordinator legitimately learns
b_u,r for every round u survives; if s_u were shared over the job and u dropped in a later round,
reconstructing s_u would unmask every earlier input of u. Per-round keys cost one signature, a
few X25519 operations and ~170 bytes per neighbour; steps 1-2 of round r+1 can ride with steps 3-4
of round r (each client keeps its state per round), so a round still costs two exchanges.
Certificates are verified once per job (cached by fingerprint).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
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
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from dpfed.core.errors import DpfedError

__all__ = [
    "SecAggError", "KeySubstitutionError", "EnvelopeError", "ProtocolError", "UnmaskRefused",
    "TooFewSurvivors", "ReconstructionError", "MaskedInputError",
    "SecAggConfig", "KeyAdvert", "Envelope", "MaskedInput", "MaskedSum", "UnmaskRequest", "UnmaskResponse",
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
    """Unambiguous length-prefixed encoding (4-byte big-endian length per field)."""
    out = bytearray()
    for p in parts:
        b = p.encode() if isinstance(p, str) else (struct.pack(">q", p) if isinstance(p, int) else p)
        out += struct.pack(">I", len(b)) + b
    return bytes(out)


def _hkdf(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def _agree(sk: x25519.X25519PrivateKey, pk: bytes) -> bytes:
    """X25519(sk, pk) for a raw 32-byte public key: every key agreement of the protocol goes through
    here (one per neighbour and key pair per round)."""
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
    a, b = sorted((u, v))
    return _hkdf(shared, _lp(b"dpfed-secagg-pairwise-v1", job_id, round_, a, b))


def _envelope_key(shared: bytes, job_id: str, round_: int, sender: str, receiver: str) -> bytes:
    return _hkdf(shared, _lp(b"dpfed-secagg-envelope-v1", job_id, round_, sender, receiver))


def _envelope_ad(job_id: str, round_: int, sender: str, receiver: str) -> bytes:
    return _lp(b"dpfed-secagg-envelope-ad-v1", job_id, round_, sender, receiver)


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
        object.__setattr__(self, "_graph", neighbourhoods(names, self.degree,
                                                          _hkdf(self.graph_seed, _lp(b"dpfed-secagg-graph-v1", self.job_id, *names))))

    @property
    def neighbour_count(self) -> int:
        return len(self.parties) - 1 if self.degree is None else min(self.degree, len(self.parties) - 1)

    def neighbours(self, name: str) -> tuple[str, ...]:
        return self._graph[name]  # type: ignore[attr-defined]

    def x_of(self, name: str) -> int:
        """The Shamir x-coordinate of shares held by ``name`` (1 + its roster index)."""
        return self.parties.index(name) + 1


@dataclass(frozen=True)
class KeyAdvert:
    """Step 1 message: a party's public keys for one round, signed with its certificate key."""

    job_id: str
    round: int
    name: str
    c_pk: bytes
    s_pk: bytes
    cert_pem: bytes
    signature: bytes

    def signed_bytes(self) -> bytes:
        return _lp(b"dpfed-secagg-advert-v1", self.job_id, self.round, self.name, self.c_pk, self.s_pk)


@dataclass(frozen=True)
class Envelope:
    """Step 2 message: sender's shares for receiver, ChaCha20-Poly1305 under HKDF(X25519(c_u, c_v))."""

    job_id: str
    round: int
    sender: str
    receiver: str
    nonce: bytes
    ciphertext: bytes


@dataclass(frozen=True, eq=False)
class MaskedInput:
    """Step 3 message: the masked vector (uint64 words < 2^B)."""

    job_id: str
    round: int
    name: str
    y: np.ndarray


@dataclass(frozen=True, eq=False)
class MaskedSum:
    """Step 3 merged on its way (an ingress shard, a Ray worker): the sum mod 2^B of the masked inputs
    of ``names``. The server counts its names exactly as that many separate masked inputs
    (:class:`MaskedInput`; their sum is what it adds up anyway)."""

    job_id: str
    round: int
    names: tuple[str, ...]
    y: np.ndarray


@dataclass(frozen=True)
class UnmaskRequest:
    """Step 4 request: who is counted (survivors) and who is not (dropped) in round ``round``."""

    job_id: str
    round: int
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]


@dataclass(frozen=True)
class UnmaskResponse:
    """Step 4 answer: shares of self-mask seeds b (survivors) and of mask keys s^SK (dropped)."""

    job_id: str
    round: int
    name: str
    self_mask_shares: dict[str, bytes]
    mask_key_shares: dict[str, bytes]


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
class _Round:
    c_sk: x25519.X25519PrivateKey
    s_sk: x25519.X25519PrivateKey
    advert: KeyAdvert
    adverts: dict[str, KeyAdvert] = field(default_factory=dict)  # verified neighbours' adverts
    envelopes: list[Envelope] | None = None
    b: bytes | None = None
    open_keys: dict[str, bytes] = field(default_factory=dict)  # neighbour -> key of its envelope to me
    held: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)  # sender -> (s share, b share)
    y: np.ndarray | None = None  # the masked input as sent, in mask_dtype(B) words
    x_digest: bytes | None = None
    status: dict[str, str] = field(default_factory=dict)  # neighbour -> "survivor" | "dropped"


class SecAggClient:
    """One party's side of secure aggregation for one job (Bonawitz et al. 2017, Fig. 4).

    ``cert_key_pem``/``cert_pem``: the party's certificate and its private key (EC P-256, PEM);
    ``ca_cert_pem``: the deployment CA, against which every other party's keys are checked.
    """

    def __init__(self, config: SecAggConfig, name: str, cert_pem: bytes, cert_key_pem: bytes,
                 ca_cert_pem: bytes) -> None:
        if name not in config.parties:
            raise ValueError(f"{name!r} is not in the job's roster")
        self.config, self.name = config, name
        self._certs = _CertCache(ca_cert_pem)
        self._cert_pem = cert_pem
        key = serialization.load_pem_private_key(cert_key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the certificate key must be an EC key")
        self._sign_key = key
        if self._certs.verify(cert_pem, name).public_numbers() != key.public_key().public_numbers():
            raise ValueError("the certificate does not match the private key")
        self._rounds: dict[int, _Round] = {}

    def _round(self, r: int) -> _Round:
        st = self._rounds.get(r)
        if st is None:
            raise ProtocolError(f"round {r}: advertise_keys must come first")
        return st

    def advertise_keys(self, r: int) -> KeyAdvert:
        """Step 1: fresh c and s key pairs for round ``r``, signed (repeated calls return the same)."""
        if r in self._rounds:
            return self._rounds[r].advert
        if r < 0:
            raise ValueError("rounds are non-negative")
        c, s = x25519.X25519PrivateKey.generate(), x25519.X25519PrivateKey.generate()
        raw = lambda k: k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)  # noqa: E731
        unsigned = KeyAdvert(self.config.job_id, r, self.name, raw(c), raw(s), self._cert_pem, b"")
        sig = self._sign_key.sign(unsigned.signed_bytes(), ec.ECDSA(hashes.SHA256()))
        adv = KeyAdvert(unsigned.job_id, r, self.name, unsigned.c_pk, unsigned.s_pk, self._cert_pem, sig)
        self._rounds[r] = _Round(c, s, adv)
        return adv

    def _verify_advert(self, a: KeyAdvert, r: int) -> None:
        if a.job_id != self.config.job_id or a.round != r:
            raise KeySubstitutionError(f"advert of {a.name!r} is for job {a.job_id!r} round {a.round}, not this one")
        pub = self._certs.verify(a.cert_pem, a.name)
        try:
            pub.verify(a.signature, a.signed_bytes(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise KeySubstitutionError(f"the keys advertised for {a.name!r} in round {r} are not signed by it") from None

    def share_keys(self, r: int, adverts: Iterable[KeyAdvert]) -> list[Envelope]:
        """Step 2: verify the neighbours' adverts, Shamir-share s_u,r^SK and a fresh b_u,r among them."""
        st = self._round(r)
        if st.envelopes is not None:
            return st.envelopes
        nbrs = set(self.config.neighbours(self.name))
        got: dict[str, KeyAdvert] = {}
        for a in adverts:
            if a.name == self.name:
                if a != st.advert:
                    raise KeySubstitutionError(f"my own advert for round {r} came back altered")
                continue
            if a.name not in nbrs:
                continue
            self._verify_advert(a, r)
            if a.name in got and got[a.name] != a:
                raise KeySubstitutionError(f"two different adverts for {a.name!r} in round {r}")
            got[a.name] = a
        keys = [st.advert.c_pk, st.advert.s_pk] + [k for a in got.values() for k in (a.c_pk, a.s_pk)]
        if len(set(keys)) != len(keys):
            raise KeySubstitutionError(f"round {r}: advertised public keys are not all distinct")
        t = self.config.threshold
        if len(got) < t:
            raise ProtocolError(f"round {r}: {len(got)} neighbours advertised keys, threshold {t}")
        st.adverts = got
        st.b = os.urandom(_SECRET)
        holders = sorted(got)
        xs = [self.config.x_of(v) for v in holders]
        s_raw = st.s_sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                      serialization.NoEncryption())
        s_sh = shamir_split(int.from_bytes(s_raw, "big"), xs, t)
        b_sh = shamir_split(int.from_bytes(st.b, "big"), xs, t)
        out, job = [], self.config.job_id
        for v, x, ss, bs in zip(holders, xs, s_sh, b_sh, strict=True):
            shared = _agree(st.c_sk, got[v].c_pk)  # X25519(c_u, c_v): once per round, both directions
            key = _envelope_key(shared, job, r, self.name, v)
            st.open_keys[v] = _envelope_key(shared, job, r, v, self.name)  # erased with the round (forget)
            nonce = os.urandom(12)
            ct = ChaCha20Poly1305(key).encrypt(nonce, _share_bytes(x, ss) + _share_bytes(x, bs),
                                               _envelope_ad(self.config.job_id, r, self.name, v))
            out.append(Envelope(self.config.job_id, r, self.name, v, nonce, ct))
        st.envelopes = out
        return out

    def masked_input(self, r: int, x_mod: np.ndarray, envelopes: Iterable[Envelope]) -> MaskedInput:
        """Step 3: open the envelopes addressed to me; y = x + PRG(b) + sum of signed pairwise masks."""
        st = self._round(r)
        if st.envelopes is None:
            raise ProtocolError(f"round {r}: share_keys must come before masked_input")
        x = np.asarray(x_mod)
        if x.dtype != np.uint64 or x.ndim != 1:
            raise ValueError("x_mod must be a 1-d uint64 array")
        bits = self.config.bits
        if x.size and int(x.max()) >> bits:
            raise ValueError(f"x_mod has entries >= 2^{bits}")
        acc = x.astype(mask_dtype(bits))  # exact (x < 2^B) and a fresh contiguous array
        digest = hashlib.sha256(acc).digest()  # of x in B-bit words: equal iff the inputs are equal
        if st.y is not None:
            if digest != st.x_digest:
                raise ProtocolError(f"round {r}: a second, different input (its mask would cancel)")
            return MaskedInput(self.config.job_id, r, self.name, st.y.astype(np.uint64))
        held: dict[str, tuple[bytes, bytes]] = {}
        my_x = self.config.x_of(self.name)
        for e in envelopes:
            if e.receiver != self.name:
                raise EnvelopeError(f"envelope for {e.receiver!r} delivered to {self.name!r}")
            key = st.open_keys.get(e.sender)  # derived in share_keys: no second agreement
            if key is None:
                raise ProtocolError(f"round {r}: envelope from {e.sender!r}, whose keys I did not accept")
            try:
                pt = ChaCha20Poly1305(key).decrypt(e.nonce, e.ciphertext,
                                                   _envelope_ad(e.job_id, e.round, e.sender, e.receiver))
            except InvalidTag:
                raise EnvelopeError(f"round {r}: envelope from {e.sender!r} fails authentication") from None
            if e.job_id != self.config.job_id or e.round != r:
                raise EnvelopeError(f"envelope for job {e.job_id!r} round {e.round} offered in round {r}")
            ss, bs = pt[:_SHARE], pt[_SHARE:]
            if len(bs) != _SHARE or _share_parse(ss)[0] != my_x or _share_parse(bs)[0] != my_x:
                raise EnvelopeError(f"envelope from {e.sender!r} holds malformed shares")
            held[e.sender] = (ss, bs)
        if len(held) + 1 < self.config.threshold:
            raise ProtocolError(f"round {r}: only {len(held)} neighbours shared keys")
        pairs = [(pairwise_seed(_agree(st.s_sk, st.adverts[v].s_pk), self.config.job_id, r, self.name, v),
                  v < self.name) for v in sorted(held)]
        _add_masks(acc, [(st.b, False)] + pairs, r)  # party u adds +m_uv if u < v, else -m_uv
        st.held, st.y, st.x_digest = held, _clear_top(acc, bits), digest
        return MaskedInput(self.config.job_id, r, self.name, acc.astype(np.uint64))

    def unmask(self, r: int, survivors: Sequence[str], dropped: Sequence[str]) -> UnmaskResponse:
        """Step 4: per neighbour either its b share (survivor) or its s^SK share (dropped), never both.

        Refused (nothing revealed) if fewer than ``min_survivors`` survivors are listed, a party is
        listed both ways, I am not a survivor, a neighbour is listed whose shares I never got, or
        the request contradicts an earlier one for this round.
        """
        st = self._round(r)
        if st.y is None:
            raise UnmaskRefused(f"round {r}: I sent no masked input")
        surv, drop = set(survivors), set(dropped)
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
        unknown = ((surv | drop) & nbrs) - set(st.held)
        if unknown:
            raise UnmaskRefused(f"round {r}: {sorted(unknown)} listed but never shared keys with me")
        new = {v: ("survivor" if v in surv else "dropped") for v in (surv | drop) & nbrs}
        clash = [v for v, s in new.items() if st.status.get(v, s) != s]
        if clash:
            raise UnmaskRefused(f"round {r}: request contradicts an earlier one for {sorted(clash)}")
        st.status.update(new)
        b_out = {v: st.held[v][1] for v, s in st.status.items() if s == "survivor"}
        s_out = {v: st.held[v][0] for v, s in st.status.items() if s == "dropped"}
        return UnmaskResponse(self.config.job_id, r, self.name, b_out, s_out)

    def forget(self, r: int) -> None:
        """Erase the secrets of round ``r`` (keys, seeds, shares, envelope keys) once the coordinator
        has finished it."""
        self._rounds.pop(r, None)


# ----------------------------------------------------------------------------------- server

@dataclass
class _ServerRound:
    adverts: dict[str, KeyAdvert] = field(default_factory=dict)
    mask_sets: dict[str, set[str]] = field(default_factory=dict)  # receiver -> senders routed to it
    total: np.ndarray | None = None  # the sum of the counted masked inputs, mod 2^64
    request: UnmaskRequest | None = None
    refused: str = ""  # why the masked inputs could not be counted (the round is over)


class SecAggServer:
    """The coordinator's side: relays adverts and envelopes, collects masked inputs, unmasks the sum."""

    def __init__(self, config: SecAggConfig) -> None:
        self.config = config
        self._rounds: dict[int, _ServerRound] = {}

    def _r(self, r: int) -> _ServerRound:
        return self._rounds.setdefault(r, _ServerRound())

    def route_adverts(self, r: int, adverts: Iterable[KeyAdvert]) -> dict[str, list[KeyAdvert]]:
        """Step 1 relay: each advertising party receives its neighbours' adverts."""
        st = self._r(r)
        st.adverts = {a.name: a for a in adverts if a.job_id == self.config.job_id and a.round == r}
        return {u: [st.adverts[v] for v in self.config.neighbours(u) if v in st.adverts] for u in st.adverts}

    def route_envelopes(self, r: int, envelopes: Iterable[Envelope]) -> dict[str, list[Envelope]]:
        """Step 2 relay: envelopes by receiver; only pairs that both shared keys are kept."""
        by: dict[str, list[Envelope]] = {}
        for e in envelopes:
            by.setdefault(e.receiver, []).append(e)
        senders = {e.sender for es in by.values() for e in es}
        st = self._r(r)
        out = {u: [e for e in by.get(u, []) if e.sender in senders] for u in senders}
        st.mask_sets = {u: {e.sender for e in es} for u, es in out.items()}
        return out

    def collect_masked(self, r: int, inputs: Iterable[MaskedInput | MaskedSum], length: int | None = None) -> UnmaskRequest:
        """Step 3: the survivors are those whose masked input arrived, alone or inside a partial sum;
        the rest of step 2 are dropped. Every input must be of this job and round, from parties that
        shared keys, none counted twice, all of one length (``length`` if given): otherwise
        :class:`MaskedInputError` and the round is over (no request, nothing unmasked, ever)."""
        st = self._r(r)
        if st.refused:
            raise MaskedInputError(st.refused)
        if st.request is not None:
            return st.request  # inputs arriving after this are late: never counted
        try:
            total, names = self._add_inputs(r, st, inputs, length)
        except MaskedInputError as exc:
            st.refused = str(exc)
            raise
        surv = tuple(sorted(names))
        if len(surv) < self.config.min_survivors:
            raise ReconstructionError(f"round {r}: {len(surv)} survivors < {self.config.min_survivors}; round aborted")
        st.total = total
        st.request = UnmaskRequest(self.config.job_id, r, surv,
                                   tuple(sorted(set(st.mask_sets) - set(surv))))
        return st.request

    def _add_inputs(self, r: int, st: _ServerRound, inputs: Iterable[MaskedInput | MaskedSum],
                    length: int | None) -> tuple[np.ndarray | None, set[str]]:
        """The sum mod 2^64 of every input and the union of their parties (checked, see collect_masked)."""
        total: np.ndarray | None = None
        names: set[str] = set()
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
                    raise MaskedInputError(f"round {r}: a masked input of {w!r}, which shared no keys; round refused")
                names.add(w)
            y = np.asarray(m.y)
            if y.dtype != np.uint64 or y.ndim != 1:
                raise MaskedInputError(f"round {r}: a masked input is a 1-d uint64 array, got {y.dtype} {y.shape}")
            want = length if length is not None else (y.size if total is None else total.size)
            if y.size != want:
                raise MaskedInputError(f"round {r}: a masked input of {y.size} words, {want} expected")
            total = y.copy() if total is None else total + y
        return total, names

    def unmask(self, r: int, responses: Iterable[UnmaskResponse]) -> np.ndarray:
        """Step 4: reconstruct b_v,r of survivors and s_u,r^SK of dropped parties, return the sum mod 2^B."""
        st = self._r(r)
        req = st.request
        if req is None:
            raise ProtocolError(f"round {r}: collect_masked first")
        t, bits, job = self.config.threshold, self.config.bits, self.config.job_id
        b_sh: dict[str, list[bytes]] = {}
        s_sh: dict[str, list[bytes]] = {}
        for resp in responses:
            if resp.name not in req.survivors or resp.round != r:
                continue
            for v, sh in resp.self_mask_shares.items():
                b_sh.setdefault(v, []).append(sh)
            for v, sh in resp.mask_key_shares.items():
                s_sh.setdefault(v, []).append(sh)
        assert st.total is not None  # a request lists >= 1 survivor, so some input was counted
        total = st.total.astype(mask_dtype(bits))  # mod 2^(8 * itemsize): exact mod 2^B
        masks = [(_reconstruct_secret(b_sh.get(v, []), t), True) for v in req.survivors]  # remove +PRG(b_v)
        surv = set(req.survivors)
        for u in req.dropped:
            sk = x25519.X25519PrivateKey.from_private_bytes(_reconstruct_secret(s_sh.get(u, []), t))
            pk = sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            if pk != st.adverts[u].s_pk:
                raise ReconstructionError(f"round {r}: reconstructed mask key of {u!r} does not match its advert")
            for v in sorted(v for v in surv if u in st.mask_sets.get(v, ())):
                k = pairwise_seed(_agree(sk, st.adverts[v].s_pk), job, r, u, v)
                masks.append((k, v < u))  # survivor v added +m_uv if v < u: remove it
        _add_masks(total, masks, r)
        return _clear_top(total, bits).astype(np.uint64)
