"""SecAgg's errors and messages: small frozen dataclasses of bytes, strings and numpy arrays, transport
independent (:mod:`dpfed.federation.secure_wire` turns them into task arrays).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from dpfed.core.errors import DpfedError
from dpfed.federation.secagg_crypto import lp

__all__ = ['SecAggError', 'KeySubstitutionError', 'EnvelopeError', 'ProtocolError', 'UnmaskRefused', 'TooFewSurvivors', 'ReconstructionError', 'MaskedInputError', 'KeyAdvert', 'AdvertRef', 'Envelope', 'MaskedInput', 'MaskedSum', 'UnmaskRequest', 'UnmaskResponse']


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
        return lp(b"dpfed-secagg-advert-v2", self.job_id, self.name, self.c_pk, self.s_pk)

    def digest(self) -> bytes:
        """SHA-256 of everything in the advert: the key of the receivers' verification cache and what an
        :class:`AdvertRef` names (computed once per advert object)."""
        d: bytes | None = self.__dict__.get("_digest")
        if d is None:
            d = hashlib.sha256(lp(self.signed_bytes(), self.cert_pem, self.signature)).digest()
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
