"""SecAgg's consistency round (Bonawitz et al. CCS 2017, malicious-server protocol, "ConsistencyCheck";
per neighbourhood as in SecAgg+, Bell et al. CCS 2020): every survivor signs the survivor set it is told,
and answers the unmask step only for exactly that set, with signatures on it from enough neighbours.

Between the masked input and the unmask step the coordinator sends each survivor u the survivor set S it
claims and the digests of the survivors' adverts (:class:`ConsistencyRequest`). u checks that it is in S,
that S has at least P_min members of the roster, and that the digests of itself and of every neighbour it
masked with are the adverts it used; it then signs, once per round, with its certificate key (ECDSA
P-256, the key that signed its advert), the message of :func:`consistency_message`: protocol version, job,
bits, round, the sorted S, and digests of the roster and of the survivors' adverts. A second, different
set for the same round is refused. The coordinator relays the signatures with the unmask request; u
answers it only if the request's survivors are exactly the set it signed and its signatures
(:func:`check_signatures`) hold its own and valid ones from at least t neighbours it masked with, all
on that message, no signer twice, no signer outside S. Anything else is refused: nothing revealed, the
round aborts. Why t > c then suffices against a coordinator that lies: :mod:`dpfed.federation.secagg_graph`.

The certificates are those of the adverts, verified against the deployment CA (party role, CN = name,
not on the revocation list) when the advert arrived: a signature counts only under a key u verified.
"""
from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from dpfed.federation.secagg_crypto import lp
from dpfed.federation.secagg_messages import UnmaskRefused

__all__ = ["SECAGG_VERSION", "ConsistencyRefused", "ConsistencyRequest", "consistency_message",
           "check_signatures", "sign_message"]

#: The SecAgg protocol version signed into every consistency message (5: the consistency round).
SECAGG_VERSION = 5
_TAG = b"dpfed-secagg-consistency-v1"


class ConsistencyRefused(UnmaskRefused):
    """A survivor set or its signatures do not pass the consistency round: nothing is revealed."""


@dataclass(frozen=True)
class ConsistencyRequest:
    """The coordinator's claim for round ``round``: the survivors and the digests of their adverts."""

    job_id: str
    round: int
    survivors: tuple[str, ...]
    advert_digests: Mapping[str, bytes]


def consistency_message(job_id: str, bits: int, round_: int, roster: Sequence[str], survivors: Sequence[str],
                        advert_digests: Mapping[str, bytes]) -> bytes:
    """What a survivor signs: version, job, bits, round, the sorted survivor set, SHA-256 of the roster
    and of the survivors' (name, advert digest) pairs; every field length-prefixed."""
    surv = sorted(survivors)
    roster_digest = hashlib.sha256(lp(b"roster", *sorted(roster))).digest()
    adverts = hashlib.sha256(lp(b"adverts", *[f for v in surv for f in (v, advert_digests[v])])).digest()
    return lp(_TAG, SECAGG_VERSION, job_id, bits, round_, roster_digest, adverts, len(surv), *surv)


def sign_message(key: ec.EllipticCurvePrivateKey, message: bytes) -> bytes:
    """ECDSA-SHA256 with the party's certificate key."""
    return key.sign(message, ec.ECDSA(hashes.SHA256()))


def check_signatures(message: bytes, signatures: Sequence[tuple[str, bytes]], *, own: str,
                     keys: Mapping[str, ec.EllipticCurvePublicKey], survivors: Collection[str],
                     threshold: int) -> int:
    """The number of valid neighbour signatures on ``message`` (``keys``: own and neighbours' verified
    certificate keys); :class:`ConsistencyRefused` for a signer listed twice or outside the survivors, an
    invalid signature under a known key, a missing own signature, or fewer than ``threshold`` valid
    neighbour signatures. Signers without a key here (not neighbours masked with) are not counted."""
    names = [n for n, _ in signatures]
    if len(set(names)) != len(names):
        raise ConsistencyRefused("a signer is listed twice")
    outside = set(names) - set(survivors)
    if outside:
        raise ConsistencyRefused(f"signatures of parties outside the survivor set: {sorted(outside)}")
    count, own_ok = 0, False
    for name, sig in signatures:
        key = keys.get(name)
        if key is None:
            continue
        try:
            key.verify(sig, message, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise ConsistencyRefused(f"the signature of {name!r} on the survivor set is not valid") from None
        if name == own:
            own_ok = True
        else:
            count += 1
    if not own_ok:
        raise ConsistencyRefused("this party's own signature on the survivor set is missing")
    if count < threshold:
        raise ConsistencyRefused(f"{count} neighbours signed the survivor set, threshold {threshold}")
    return count
