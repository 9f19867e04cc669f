"""Secure aggregation (SecAgg, Bonawitz et al. CCS 2017) over SecAgg+ graphs (Bell et al. CCS 2020),
with the key setup amortised over the job.

Transport independent: small dataclasses of bytes, strings and numpy arrays, and two state
machines, :class:`SecAggClient` (one per party and job) and :class:`SecAggServer` (the coordinator's
aggregation of one round), split by what they hold: ``secagg_crypto`` (HKDF, masks), ``secagg_shamir``,
``secagg_graph`` (graph, threshold, the threshold theorem), ``secagg_messages``, ``secagg_consistency``
(the signed survivor set), ``secagg_client``, ``secagg_server``; this module re-exports them. Threat
model: a coordinator that deviates from the protocol as it likes (any adverts routed, any survivor
sets claimed, different ones to different parties), colluding with fewer than ``threshold`` parties
of any neighbourhood; it learns the sum of the inputs of one set of survivors mod 2^B and nothing else
about any single honest input (proof in :mod:`dpfed.federation.secagg_graph`). Not covered: malicious
inputs (a party can add anything), traffic metadata (who sent what when), and the choice of the graph
seed (it comes from the job id, which the coordinator picks: the threshold is therefore set for the
worst placement of the colluders, not for a random one).

Once per job (per client: a party that restarts makes a new one, with new keys):

0. ``advert()``: long-term X25519 pairs c_u (envelopes) and s_u (pairwise masks), both public keys
   signed with the party's certificate key (ECDSA-SHA256 over job, name and keys): one signature per
   job. A receiver checks the certificate chain against the deployment CA, CN == name, OU == party and
   the signature once per advert (a party's advert seen before is recognised; a changed one is checked
   again), so the coordinator cannot substitute
   keys (:class:`KeySubstitutionError`); it computes X25519(c_u, c_v) and X25519(s_u, s_v) once per
   neighbour and advert and keeps them for the job.

One round r (three exchanges: masked input, consistency, unmask):

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
1b. ``sign_survivors(r, survivors, advert_digests)``: the consistency round
   (:mod:`dpfed.federation.secagg_consistency`): u signs, once per round, the survivor set the coordinator
   claims, and later answers the unmask step only for exactly that set, with signatures on it from at
   least t neighbours it masked with and its own.
2. ``unmask(r, survivors, dropped, envelopes, signatures)``: for each neighbour v in A_u,r listed as a survivor,
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

from dpfed.federation.secagg_client import SecAggClient
from dpfed.federation.secagg_consistency import SECAGG_VERSION, ConsistencyRefused, ConsistencyRequest
from dpfed.federation.secagg_crypto import (add_masks, envelope_ad, envelope_info, envelope_key, expand_mask, hkdf,
                                           mask_dtype, pairwise_info, pairwise_seed)
from dpfed.federation.secagg_graph import SecAggConfig, harary_parameters, neighbourhoods, safe_threshold
from dpfed.federation.secagg_messages import (AdvertRef, Envelope, EnvelopeError, KeyAdvert, KeySubstitutionError,
                                             MaskedInput, MaskedInputError, MaskedSum, ProtocolError,
                                             ReconstructionError, SecAggError, TooFewSurvivors, UnmaskRefused,
                                             UnmaskRequest, UnmaskResponse)
from dpfed.federation.secagg_server import SecAggServer
from dpfed.federation.secagg_shamir import (PRIME, reconstruct_secret, shamir_eval, shamir_reconstruct, shamir_split,
                                           share_parse)

__all__ = [
    "SecAggError", "KeySubstitutionError", "EnvelopeError", "ProtocolError", "UnmaskRefused",
    "TooFewSurvivors", "ReconstructionError", "MaskedInputError",
    "SecAggConfig", "KeyAdvert", "AdvertRef", "Envelope", "MaskedInput", "MaskedSum", "UnmaskRequest", "UnmaskResponse",
    "SecAggClient", "SecAggServer",
    "PRIME", "shamir_split", "shamir_reconstruct", "harary_parameters", "neighbourhoods",
    "expand_mask", "mask_dtype", "pairwise_seed",
    "SECAGG_VERSION", "ConsistencyRefused", "ConsistencyRequest", "safe_threshold",
]

# the former private names of this module, for its tests
_hkdf, _add_masks, _pairwise_info, _envelope_info, _envelope_ad, _envelope_key = (
    hkdf, add_masks, pairwise_info, envelope_info, envelope_ad, envelope_key)
_reconstruct_secret, _share_parse, _shamir_eval = reconstruct_secret, share_parse, shamir_eval
