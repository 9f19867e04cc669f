"""A party's side of SecAgg for one job (:class:`SecAggClient`) and the CA checks of the other parties'
certificates; the protocol and its security argument are in :mod:`dpfed.federation.secagg`.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from dpfed.federation.secagg_consistency import ConsistencyRefused, check_signatures, consistency_message, sign_message
from dpfed.federation.secagg_crypto import (
    add_masks,
    agree,
    clear_top,
    envelope_ad,
    envelope_info,
    hkdf_expand,
    hkdf_extract,
    mask_dtype,
    pairwise_info,
)
from dpfed.federation.secagg_graph import SecAggConfig
from dpfed.federation.secagg_messages import (
    AdvertRef,
    Envelope,
    EnvelopeError,
    KeyAdvert,
    KeySubstitutionError,
    MaskedInput,
    ProtocolError,
    TooFewSurvivors,
    UnmaskRefused,
    UnmaskResponse,
)
from dpfed.federation.secagg_shamir import SECRET_BYTES, SHARE_BYTES, shamir_split, share_bytes, share_parse

__all__ = ['SecAggClient', 'CertCache']


class CertCache:
    """CA-chain verification of party certificates, cached by certificate bytes."""

    def __init__(self, ca_cert_pem: bytes, revoked: Collection[int] = (),
                 accept: Callable[[str, bytes], str | None] | None = None) -> None:
        self._ca = x509.load_pem_x509_certificate(ca_cert_pem)
        self._ok: dict[bytes, tuple[str, ec.EllipticCurvePublicKey]] = {}
        self._revoked = frozenset(revoked)  # serials on the deployment's revocation list
        self._accept = accept  # (name, DER) -> None, or why the party's own allowlist refuses it

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
            if cert.serial_number in self._revoked:
                raise KeySubstitutionError(f"the certificate offered for {name!r} is revoked")
            why = None if self._accept is None else self._accept(hit[0], cert.public_bytes(serialization.Encoding.DER))
            if why:
                raise KeySubstitutionError(f"the certificate offered for {name!r} is refused: {why}")
            self._ok[pem] = hit
        if hit[0] != name:
            raise KeySubstitutionError(f"keys claimed for {name!r} come with the certificate of {hit[0]!r}")
        return hit[1]



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
    signed: tuple[str, ...] | None = None  # the survivor set signed in the consistency round (once)
    message: bytes = b""  # what was signed (secagg_consistency.consistency_message)
    signature: bytes = b""


class SecAggClient:
    """One party's side of secure aggregation for one job (see the module docstring).

    ``cert_key_pem``/``cert_pem``: the party's certificate and its private key (EC P-256, PEM);
    ``ca_cert_pem``: the deployment CA, against which every other party's keys are checked. The
    long-term X25519 keys are made here and signed once.
    """

    def __init__(self, config: SecAggConfig, name: str, cert_pem: bytes, cert_key_pem: bytes,
                 ca_cert_pem: bytes, *, revoked: Collection[int] = (),
                 accept: Callable[[str, bytes], str | None] | None = None) -> None:
        if name not in config.parties:
            raise ValueError(f"{name!r} is not in the job's roster")
        self.config, self.name = config, name
        self._certs = CertCache(ca_cert_pem, revoked, accept)
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
        self._sign_key: ec.EllipticCurvePrivateKey | None = key  # signs the advert and each round's survivor set
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
        peer = _Peer(a, digest, hkdf_extract(agree(c_sk, a.c_pk)), hkdf_extract(agree(s_sk, a.s_pk)))  # once per advert
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
        b = os.urandom(SECRET_BYTES)
        holders = sorted(peers)
        shares = shamir_split(int.from_bytes(b, "big"), [self.config.x_of(v) for v in holders], t)
        envs = []
        nonces = os.urandom(12 * len(holders))  # one random 96-bit nonce per envelope
        for i, (v, y_share) in enumerate(zip(holders, shares, strict=True)):
            key = hkdf_expand(peers[v].c_prk, envelope_info(job, r, self.name, v))
            nonce = nonces[12 * i:12 * i + 12]
            ct = ChaCha20Poly1305(key).encrypt(nonce, share_bytes(self.config.x_of(v), y_share),
                                               envelope_ad(job, r, self.name, v))
            envs.append(Envelope(job, r, self.name, v, nonce, ct))
        seeds = {v: hkdf_expand(peers[v].s_prk, pairwise_info(job, r, self.name, v)) for v in holders}
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
        add_masks(acc, [(st.b, False)] + [(st.seeds[v], v < self.name) for v in sorted(st.seeds)], r)  # +m_uv if u < v
        st.y, st.x_digest = clear_top(acc, bits), digest
        return MaskedInput(self.config.job_id, r, self.name, acc.astype(np.uint64), st.envelopes)

    def _open(self, st: _Round, r: int, e: Envelope) -> bytes:
        """My share of b_{e.sender},r from its envelope (authenticated, addressed to me, this round)."""
        if e.receiver != self.name:
            raise EnvelopeError(f"envelope for {e.receiver!r} delivered to {self.name!r}")
        if e.job_id != self.config.job_id or e.round != r:
            raise EnvelopeError(f"envelope for job {e.job_id!r} round {e.round} offered in round {r}")
        key = hkdf_expand(st.peers[e.sender].c_prk, envelope_info(e.job_id, r, e.sender, self.name))
        try:
            pt = ChaCha20Poly1305(key).decrypt(e.nonce, e.ciphertext, envelope_ad(e.job_id, r, e.sender, self.name))
        except InvalidTag:
            raise EnvelopeError(f"round {r}: envelope from {e.sender!r} fails authentication") from None
        if len(pt) != SHARE_BYTES or share_parse(pt)[0] != self.config.x_of(self.name):
            raise EnvelopeError(f"envelope from {e.sender!r} holds a malformed share")
        return pt

    def sign_survivors(self, r: int, survivors: Sequence[str], advert_digests: Mapping[str, bytes]) -> bytes:
        """The consistency round: my signature on the survivor set S the coordinator claims for round r
        (:mod:`dpfed.federation.secagg_consistency`). Refused unless I sent a masked input in r, S holds me,
        at least P_min roster names and no name twice, the digests cover exactly S and those of me and of
        the neighbours I masked with are the adverts I used. One set per round: the same again gets the
        same signature, another is refused."""
        st = self._rounds.get(r)
        if st is None or st.y is None:
            raise ConsistencyRefused(f"round {r}: I hold no masked input of this round")
        surv = tuple(sorted(set(survivors)))
        if len(surv) != len(survivors) or set(advert_digests) != set(surv):
            raise ConsistencyRefused(f"round {r}: a survivor listed twice, or advert digests of other parties")
        if st.signed is not None:
            if surv != st.signed or consistency_message(self.config.job_id, self.config.bits, r, self.config.parties,
                                                        surv, advert_digests) != st.message:
                raise ConsistencyRefused(f"round {r}: a second, different survivor set (one is signed already)")
            return st.signature
        self._check_set(r, st, set(surv))
        mine = {self.name: self._advert.digest(), **{v: p.digest for v, p in st.peers.items()}}
        wrong = sorted(v for v in surv if v in mine and advert_digests[v] != mine[v])
        if wrong:
            raise ConsistencyRefused(f"round {r}: the adverts of {wrong} are not those this party used")
        if self._sign_key is None:
            raise ProtocolError("the job's keys were erased (close)")
        st.message = consistency_message(self.config.job_id, self.config.bits, r, self.config.parties, surv,
                                         advert_digests)
        st.signature, st.signed = sign_message(self._sign_key, st.message), surv
        return st.signature

    def _check_set(self, r: int, st: _Round, surv: set[str]) -> None:
        """A survivor set I may sign or unmask for (else :class:`UnmaskRefused`, nothing revealed)."""
        if len(surv) < self.config.min_survivors:
            raise TooFewSurvivors(f"round {r}: {len(surv)} survivors listed, at least "
                                  f"{self.config.min_survivors} required; nothing revealed")
        if self.name not in surv:
            raise UnmaskRefused(f"round {r}: I am not listed as a survivor")
        if not surv <= set(self.config.parties):
            raise UnmaskRefused(f"round {r}: unknown parties listed")
        unknown = (surv & set(self.config.neighbours(self.name))) - set(st.peers)
        if unknown:
            raise UnmaskRefused(f"round {r}: {sorted(unknown)} listed but I did not mask with them")
        if len(surv & set(st.peers)) < self.config.threshold:
            raise UnmaskRefused(f"round {r}: {len(surv & set(st.peers))} of my neighbours listed as survivors, "
                                f"threshold {self.config.threshold}: my self mask could not be rebuilt")

    def unmask(self, r: int, survivors: Sequence[str], dropped: Sequence[str], envelopes: Iterable[Envelope],
               signatures: Sequence[tuple[str, bytes]] = ()) -> UnmaskResponse:
        """Step 2: per neighbour I masked with, its b share (survivor, from its envelope) or our pairwise
        seed k_uv,r (dropped), never both.

        Refused (nothing revealed) unless the survivors are exactly the set I signed in the consistency
        round and ``signatures`` (signer, ECDSA signature) hold mine and valid ones on the same message
        from at least t neighbours I masked with (:func:`~dpfed.federation.secagg_consistency.check_signatures`);
        also refused if a party is listed both ways, a neighbour is listed that I did not mask with, or
        the request differs from an earlier one for this round.
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
        if st.signed is None:
            raise ConsistencyRefused(f"round {r}: no survivor set was signed (the consistency round is missing)")
        if request[0] != st.signed or len(surv) != len(survivors):
            raise ConsistencyRefused(f"round {r}: the unmask request's survivors are not the set this party signed")
        if surv & drop:
            raise UnmaskRefused(f"round {r}: {sorted(surv & drop)} listed both as survivor and dropped")
        self._check_set(r, st, surv)
        if not drop <= set(self.config.parties) or (drop & set(self.config.neighbours(self.name))) - set(st.peers):
            raise UnmaskRefused(f"round {r}: unknown parties listed as dropped, or neighbours I did not mask with")
        keys = {self.name: self._certs.verify(self._advert.cert_pem, self.name)}
        keys.update((v, self._certs.verify(p.advert.cert_pem, v)) for v, p in st.peers.items() if v in surv)
        check_signatures(st.message, signatures, own=self.name, keys=keys, survivors=surv,
                         threshold=self.config.threshold)
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
        self._sign_key = None
