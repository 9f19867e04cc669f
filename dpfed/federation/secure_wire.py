"""SecAgg messages as task arrays: the steps of a secure round over the existing wire format.

A secure round r is at most four tasks of round r, one per :class:`Stage` (protocol version 5; the
former ``secagg/share`` kind is gone): ``secagg/advertise`` only for parties whose long-term advert the
coordinator lacks, ``secagg/masked`` carrying the neighbours' adverts (arrays ``adv/*``: those the party
has not verified yet, in full; ``adr/*``: those it has, by digest, see
:class:`~dpfed.federation.secagg.AdvertRef`) and answered with the masked vector and the envelopes
(``env/*``), ``secagg/consistency`` carrying the survivor set (params ``survivors``) and the survivors'
advert digests (``cd/*``), answered with the party's signature on them (``sig``), and ``secagg/unmask``
carrying the envelopes addressed to the party and the signatures it checks (``sg/*``). Params are JSON,
arrays bytes as uint8 (variable-length blobs concatenated with an int64 length array), party names
as int64 indices into the job's roster, and the masked vector packed in the smallest unsigned type
that holds B bits (uint16 at B = 16: a quarter of float64). Both the party session and the
coordinator's :class:`SecureGather` use these.
"""
from __future__ import annotations

import enum
import functools
import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from dpfed.algorithms.contract import Aggregate, Answer, JobSpec, Task
from dpfed.algorithms.secure_noise import secure_params
from dpfed.federation import secagg as sa
from dpfed.federation.certs import valid_name

__all__ = ["secagg_config", "pack_blobs", "unpack_blobs", "adverts_to_arrays", "adverts_from_arrays",
           "envelopes_to_arrays", "envelopes_from_arrays", "pack_masked", "unpack_masked", "masked_part",
           "merge_masked", "masked_to_arrays", "ADV", "ADR", "ENV", "advert_refs_to_arrays",
           "advert_refs_from_arrays", "routed_adverts_to_arrays", "routed_adverts_from_arrays",
           "unmask_to_arrays",
           "unmask_from_arrays", "inner_task", "stage_of", "Stage", "INNER", "ADVERTISE", "MASKED", "CONSISTENCY",
           "UNMASK", "consistency_to_arrays", "consistency_from_arrays", "signatures_to_arrays",
           "signatures_from_arrays", "check_roster"]


class Stage(enum.Enum):
    """The SecAgg stages of one round, in order (a task's kind is the stage's value)."""

    ADVERTISE = "secagg/advertise"
    MASKED = "secagg/masked"
    CONSISTENCY = "secagg/consistency"
    UNMASK = "secagg/unmask"

    @property
    def order(self) -> int:
        return _ORDER[self]


_ORDER = {s: i for i, s in enumerate(Stage)}
ADVERTISE, MASKED, CONSISTENCY, UNMASK = (s.value for s in Stage)
INNER = "task/"  # prefix of the algorithm task's arrays inside a masked-input task
ADV = "adv/"  # prefix of the neighbours' adverts inside a masked-input task
ADR = "adr/"  # prefix of the references to adverts the party verified before (name, SHA-256 digest)
_DIGEST = 32
ENV = "env/"  # prefix of envelopes inside a masked-input answer and an unmask task
_ENV_KEYS = ("from", "to", "nonce", "nonce_len", "ct", "ct_len")


def stage_of(kind: str) -> Stage:
    """The stage a task kind names (a ValueError for any other kind)."""
    try:
        return Stage(kind)
    except ValueError:
        raise ValueError(f"a secure job's tasks are {', '.join(s.value for s in Stage)}; got {kind!r}") from None


def check_roster(roster: Sequence[str]) -> None:
    """A roster SecAgg can run: 2..65535 distinct valid party names (ValueError naming what is wrong)."""
    if not 2 <= len(roster) < 1 << 16:
        raise ValueError(f"a secure roster lists 2 to 65535 parties, got {len(roster)}")
    bad = next((n for n in roster if not valid_name(n)), None)
    if bad is not None:
        raise ValueError(f"roster name {bad[:70]!r} is not a valid party name")
    if len(set(roster)) != len(roster):
        raise ValueError("a party is listed twice in the roster")


def secagg_config(spec: JobSpec, bits: int) -> sa.SecAggConfig:
    """The job's SecAgg parameters at ``bits`` bits: roster, P_min, threshold above the colluders
    (design dropout 1 - P_min / P), graph seed from the job id (public, fixed by the job)."""
    sp = secure_params(spec.params)
    check_roster(sp.roster)
    n = sp.parties
    return sa.SecAggConfig(spec.job_id, sp.roster, bits=int(bits), min_survivors=sp.min_survivors,
                           corrupt_fraction=sp.colluders / n, dropout_fraction=1.0 - sp.min_survivors / n,
                           graph_seed=hashlib.sha256(f"dpfed-secagg-graph\x00{spec.job_id}".encode()).digest())


# ------------------------------------------------------------------------------------ blobs

def pack_blobs(blobs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    data = np.frombuffer(b"".join(blobs), dtype=np.uint8).copy()
    return data, np.array([len(b) for b in blobs], dtype=np.int64)


def unpack_blobs(data: np.ndarray, lengths: np.ndarray) -> list[bytes]:
    data, lengths = np.asarray(data), np.asarray(lengths)
    if data.dtype != np.uint8 or data.ndim != 1 or lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError("blobs are a 1-d uint8 array and 1-d integer lengths")
    if (lengths < 0).any() or int(lengths.sum()) != data.size:
        raise ValueError("blob lengths do not add up")
    raw, out, at = data.tobytes(), [], 0
    for k in lengths.tolist():
        out.append(raw[at:at + k])
        at += k
    return out


def _names(idx: np.ndarray, roster: Sequence[str]) -> list[str]:
    idx = np.asarray(idx)
    if idx.ndim != 1 or idx.dtype.kind not in "iu" or (idx.size and (idx.min() < 0 or idx.max() >= len(roster))):
        raise ValueError("party indices outside the roster")
    return [roster[i] for i in idx.tolist()]


def _index(names: Sequence[str], roster: Sequence[str]) -> np.ndarray:
    pos = _positions(tuple(roster))
    return np.array([pos[n] for n in names], dtype=np.int64)


@functools.lru_cache(maxsize=16)
def _positions(roster: tuple[str, ...]) -> dict[str, int]:
    """name -> index in the roster (a job's roster is fixed: built once, not per message)."""
    return {n: i for i, n in enumerate(roster)}


# ------------------------------------------------------------------------------------ messages

def adverts_to_arrays(adverts: Sequence[sa.KeyAdvert], roster: Sequence[str], prefix: str = "") -> Answer:
    """Adverts (one party's answer to ``secagg/advertise``, or the adverts of a masked-input task)."""
    out: Answer = {prefix + "who": _index([a.name for a in adverts], roster)}
    for key, get in (("c_pk", lambda a: a.c_pk), ("s_pk", lambda a: a.s_pk), ("cert", lambda a: a.cert_pem),
                     ("sig", lambda a: a.signature)):
        out[prefix + key], out[prefix + key + "_len"] = pack_blobs([get(a) for a in adverts])
    return out


def adverts_from_arrays(arrays: Mapping[str, np.ndarray], job_id: str, roster: Sequence[str],
                        prefix: str = "") -> list[sa.KeyAdvert]:
    a = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
    who = _names(a["who"], roster)
    cols = [unpack_blobs(a[k], a[k + "_len"]) for k in ("c_pk", "s_pk", "cert", "sig")]
    if any(len(c) != len(who) for c in cols):
        raise ValueError("advert arrays disagree in length")
    return [sa.KeyAdvert(job_id, n, c, s, cert, sig) for n, c, s, cert, sig in zip(who, *cols, strict=True)]


def advert_refs_to_arrays(refs: Sequence[sa.AdvertRef], roster: Sequence[str], prefix: str = ADR) -> Answer:
    """References to verified adverts: roster indices and their 32-byte digests (n x 32 uint8)."""
    if any(len(a.digest) != _DIGEST for a in refs):
        raise ValueError("an advert digest is 32 bytes")
    digests = np.frombuffer(b"".join(a.digest for a in refs), dtype=np.uint8).reshape(len(refs), _DIGEST)
    return {prefix + "who": _index([a.name for a in refs], roster), prefix + "digest": digests.copy()}


def advert_refs_from_arrays(arrays: Mapping[str, np.ndarray], roster: Sequence[str],
                            prefix: str = ADR) -> list[sa.AdvertRef]:
    who = _names(arrays[prefix + "who"], roster)
    dig = np.asarray(arrays[prefix + "digest"])
    if dig.dtype != np.uint8 or dig.shape != (len(who), _DIGEST):
        raise ValueError(f"advert digests are {len(who)} x {_DIGEST} bytes")
    return [sa.AdvertRef(n, dig[i].tobytes()) for i, n in enumerate(who)]


def routed_adverts_to_arrays(adverts: Sequence[sa.KeyAdvert], delivered: Mapping[str, bytes],
                             roster: Sequence[str]) -> Answer:
    """The adverts of a masked-input task: by reference (``adr/*``) those whose digest ``delivered`` holds for
    their name (the party verified them in an earlier round), the others in full (``adv/*``)."""
    refs = [sa.AdvertRef(a.name, a.digest()) for a in adverts if delivered.get(a.name) == a.digest()]
    full = [a for a in adverts if delivered.get(a.name) != a.digest()]
    out: Answer = {}
    if full:
        out.update(adverts_to_arrays(full, roster, ADV))
    if refs:
        out.update(advert_refs_to_arrays(refs, roster, ADR))
    return out


def routed_adverts_from_arrays(arrays: Mapping[str, np.ndarray], job_id: str,
                               roster: Sequence[str]) -> list[sa.KeyAdvert | sa.AdvertRef]:
    """The adverts of a masked-input task, full ones and references (either part may be absent)."""
    out: list[sa.KeyAdvert | sa.AdvertRef] = []
    if ADV + "who" in arrays:
        out.extend(adverts_from_arrays(arrays, job_id, roster, prefix=ADV))
    if ADR + "who" in arrays:
        out.extend(advert_refs_from_arrays(arrays, roster, prefix=ADR))
    return out


def envelopes_to_arrays(envs: Sequence[sa.Envelope], roster: Sequence[str], prefix: str = "") -> Answer:
    out: Answer = {"from": _index([e.sender for e in envs], roster), "to": _index([e.receiver for e in envs], roster)}
    out["nonce"], out["nonce_len"] = pack_blobs([e.nonce for e in envs])
    out["ct"], out["ct_len"] = pack_blobs([e.ciphertext for e in envs])
    return {prefix + k: v for k, v in out.items()}


def envelopes_from_arrays(arrays: Mapping[str, np.ndarray], job_id: str, round_: int,
                          roster: Sequence[str], prefix: str = "") -> list[sa.Envelope]:
    a = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
    snd, rcv = _names(a["from"], roster), _names(a["to"], roster)
    nonces, cts = unpack_blobs(a["nonce"], a["nonce_len"]), unpack_blobs(a["ct"], a["ct_len"])
    if not len(snd) == len(rcv) == len(nonces) == len(cts):
        raise ValueError("envelope arrays disagree in length")
    return [sa.Envelope(job_id, round_, s, r, n, c) for s, r, n, c in zip(snd, rcv, nonces, cts, strict=True)]


def _word(bits: int) -> np.dtype:
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if bits <= 8 * np.dtype(dt).itemsize:
            return np.dtype(dt)
    raise ValueError("bits > 64")


def pack_masked(y: np.ndarray, bits: int) -> Answer:
    """The masked vector in the smallest unsigned words holding B bits."""
    return {"y": np.asarray(y, dtype=np.uint64).astype(_word(bits))}


def masked_to_arrays(m: sa.MaskedInput, bits: int, roster: Sequence[str]) -> Answer:
    """A party's answer to ``secagg/masked``: its packed masked vector and its envelopes."""
    return {**pack_masked(m.y, bits), **envelopes_to_arrays(m.envelopes, roster, ENV)}


def unpack_masked(arrays: Mapping[str, np.ndarray], bits: int, size: int) -> np.ndarray:
    y = np.asarray(arrays["y"])
    if y.dtype != _word(bits) or y.shape != (size,):
        raise ValueError(f"a masked input is {size} words of {_word(bits)}")
    return y.astype(np.uint64)


def masked_part(part: Aggregate, bits: int, length: int) -> np.ndarray | None:
    """The vector of step 3's ``part`` (one party's masked input, or a partial sum of several), as uint64.

    None for a part of one party that is not ``length`` words of B bits: that party dropped out, as
    when its answer is parsed alone. A malformed part of several parties, or one naming a party twice,
    is a ValueError: a partial sum cannot lose one party, so the round must not use it.
    """
    if len(set(part.parties)) != len(part.parties):
        raise ValueError("a partial sum names a party twice")
    try:
        return unpack_masked(part.arrays, bits, length)
    except (ValueError, KeyError, TypeError) as exc:
        if len(part.parties) == 1:
            return None
        raise ValueError(f"a partial sum of {len(part.parties)} masked inputs is malformed: {exc}") from None


def merge_masked(task: Task, parts: Sequence[Aggregate], *, bits: int, length: int) -> Aggregate:
    """Step 3 merged on its way (an ingress shard, a Ray worker): the parts' masked vectors summed mod
    2^B, for the union of their parties; the ``combine`` of a masked-input task, picklable as
    ``functools.partial(merge_masked, bits=B, length=d)``, associative and commutative (a tree).

    Malformed parts as in :func:`masked_part` (a party's own is left out, a partial sum's is a
    ValueError); a party in two parts is a ValueError; parts of no party are skipped; with nothing
    left the result is ``Aggregate({}, ())``.
    """
    total = np.zeros(int(length), dtype=np.uint64)
    names: set[str] = set()
    envs: list[dict[str, np.ndarray]] = []
    for part in parts:
        y = masked_part(part, bits, length) if part.parties else None
        if y is None:
            continue
        if not names.isdisjoint(part.parties):
            raise ValueError("a party's masked input would be counted twice")
        names.update(part.parties)
        total += y
        envs.append({k: np.asarray(part.arrays[ENV + k]) for k in _ENV_KEYS if ENV + k in part.arrays})
    if not names:
        return Aggregate({}, ())
    total &= np.uint64((1 << bits) - 1)
    return Aggregate({**pack_masked(total, bits), **_concat_envelopes(envs)}, tuple(sorted(names)))


def _concat_envelopes(parts: Sequence[Mapping[str, np.ndarray]]) -> Answer:
    """The envelope arrays of several masked answers as one (ValueError if a part holds some of them
    but not all)."""
    full = [p for p in parts if p]
    if any(set(p) != set(_ENV_KEYS) for p in full):
        raise ValueError("a masked answer holds a partial set of envelope arrays")
    out: Answer = {}
    for k in _ENV_KEYS:
        cols = [np.asarray(p[k]) for p in full]
        out[ENV + k] = np.concatenate(cols) if cols else np.zeros(0, np.uint8 if k in ("nonce", "ct") else np.int64)
    return out


def unmask_to_arrays(resp: sa.UnmaskResponse, roster: Sequence[str]) -> Answer:
    """Shares of b (``b_who``/``b``) and pairwise seeds with dropped neighbours (``s_who``/``s``)."""
    bw, sw = sorted(resp.self_mask_shares), sorted(resp.pairwise_seeds)
    out: Answer = {"b_who": _index(bw, roster), "s_who": _index(sw, roster)}
    out["b"], out["b_len"] = pack_blobs([resp.self_mask_shares[v] for v in bw])
    out["s"], out["s_len"] = pack_blobs([resp.pairwise_seeds[v] for v in sw])
    return out


def unmask_from_arrays(arrays: Mapping[str, np.ndarray], job_id: str, round_: int, name: str,
                       roster: Sequence[str]) -> sa.UnmaskResponse:
    bw, sw = _names(arrays["b_who"], roster), _names(arrays["s_who"], roster)
    b, s = unpack_blobs(arrays["b"], arrays["b_len"]), unpack_blobs(arrays["s"], arrays["s_len"])
    if len(b) != len(bw) or len(s) != len(sw):
        raise ValueError("unmask arrays disagree in length")
    return sa.UnmaskResponse(job_id, round_, name, dict(zip(bw, b, strict=True)), dict(zip(sw, s, strict=True)))


def inner_task(task: Task) -> Task:
    """The algorithm's task carried by a masked-input task (kind and params in ``task.params``)."""
    kind, params = task.params.get("kind"), task.params.get("params", {})
    if not isinstance(kind, str) or not isinstance(params, dict):
        raise ValueError("a masked-input task names the algorithm task's kind and params")
    return Task(task.job_id, task.round, kind, params,
                {k[len(INNER):]: v for k, v in task.arrays.items() if k.startswith(INNER)})



CD = "cd/"  # prefix of the advert digests of a consistency task
SG = "sg/"  # prefix of the signatures of an unmask task


def consistency_to_arrays(req: sa.ConsistencyRequest, roster: Sequence[str]) -> Answer:
    """The survivors' advert digests of a consistency task (n x 32 uint8; the set itself is in params)."""
    refs = [sa.AdvertRef(u, req.advert_digests[u]) for u in req.survivors]
    return advert_refs_to_arrays(refs, roster, CD)


def consistency_from_arrays(arrays: Mapping[str, np.ndarray], survivors: object, job_id: str, round_: int,
                            roster: Sequence[str]) -> sa.ConsistencyRequest:
    if not isinstance(survivors, list) or not all(isinstance(u, str) for u in survivors):
        raise ValueError("a consistency task lists its survivors by name")
    refs = advert_refs_from_arrays(arrays, roster, CD)
    digests = {a.name: a.digest for a in refs}
    if len(digests) != len(refs):
        raise ValueError("a consistency task lists an advert digest twice")
    return sa.ConsistencyRequest(job_id, round_, tuple(survivors), digests)


def signatures_to_arrays(sigs: Sequence[tuple[str, bytes]], roster: Sequence[str], prefix: str = SG) -> Answer:
    """Signers (roster indices, duplicates kept as sent) and their signatures."""
    data, lengths = pack_blobs([s for _, s in sigs])
    return {prefix + "who": _index([n for n, _ in sigs], roster), prefix + "sig": data, prefix + "sig_len": lengths}


def signatures_from_arrays(arrays: Mapping[str, np.ndarray], roster: Sequence[str],
                           prefix: str = SG) -> list[tuple[str, bytes]]:
    if prefix + "who" not in arrays:
        return []
    who = _names(arrays[prefix + "who"], roster)
    sigs = unpack_blobs(arrays[prefix + "sig"], arrays[prefix + "sig_len"])
    if len(sigs) != len(who) or any(len(s) > 256 for s in sigs):
        raise ValueError("signature arrays disagree in length, or a signature is too long")
    return list(zip(who, sigs, strict=True))
