"""A coordinator that lies in secure aggregation learns nothing more (issue 24), over real gRPC with mutual
TLS and five real party daemons (threads of the test process) connected to a hostile coordinator
(:mod:`evil_coordinator`: the real protocol and stubs, a valid coordinator certificate). It runs a secure
naive Bayes job itself, stage by stage, with the parties' own SecAgg keys:

* the issue's attack, different survivor sets to different parties (5 parties, P_min 3, no colluder):
  every unmask request is refused, so no input can be unmasked;
* an unmask request whose set differs from the signed one, forged, missing or duplicated signatures
  are refused; the unaltered request is answered (control);
* a roster outside the party's ``peers``, or whose P_min - c is below its ``min_honest_shares``, is
  refused before any charge (the ledger holds no charge for the job);
* adverts and survivor-set signatures made with revoked certificates (key compromise: the coordinator holds
  the keys) are refused: nothing of the party's input leaves.
"""
from __future__ import annotations

import dataclasses
import shutil
from contextlib import contextmanager

import numpy as np
import pytest
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.secure_release import release_for
from dpfed.data.schema import Schema
from dpfed.federation import secagg as sa
from dpfed.federation import secure_wire as sw
from dpfed.federation.certs import revoke
from dpfed.federation.secagg_consistency import consistency_message, sign_message
from evil_coordinator import EvilCoordinator
from net_helpers import ThreadParty, make_pki, party_config, stop_parties

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
NAMES = [f"party-{i}" for i in range(5)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), parties=5)


@contextmanager
def _federation(pki, root, **trust):
    """The hostile coordinator and five real party daemons (``trust``: party-0's own settings)."""
    with EvilCoordinator(pki.files("coordinator")) as ev:
        parties = []
        try:
            for i, name in enumerate(NAMES):
                rng = np.random.default_rng(i)
                X, y = rng.uniform(size=(200, 3)), rng.integers(0, 2, 200).astype(np.int64)
                cfg = party_config(pki, root, name, ev.port, data=X, labels=y, schema=SCHEMA, seed=None,
                                   epsilon_limit=50.0)
                cfg = dataclasses.replace(cfg, accountant="rdp", **(trust if i == 0 else {}))
                parties.append(ThreadParty(cfg))
            assert sorted(ev.wait_registered(len(NAMES))) == NAMES
            yield ev, parties
        finally:
            stop_parties(parties)
            assert all(p.error is None for p in parties)


def _spec(job: str, **kw) -> JobSpec:
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": 3, "bits": 16, "records": 1000, "roster": NAMES, **kw}
    return JobSpec(job, "naive-bayes", params, SCHEMA)


def _through_masked(ev, spec):
    """Offer, advertise, masked input (complete graph: every party gets every advert). Returns the inner task
    and each party's advert digest."""
    for n in NAMES:
        assert ev.offer(spec, party=n).accept
    task = get_algorithm(spec.algorithm).coordinator(spec, NAMES).next_task()
    meta = {"kind": task.kind}
    adverts = {}
    for n in NAMES:
        res = ev.task(spec.job_id, 0, sw.ADVERTISE, meta, party=n)
        assert not res.error, res.error
        adverts[n] = sw.adverts_from_arrays(res.arrays, spec.job_id, NAMES)[0]
    inner = {sw.INNER + k: np.asarray(v) for k, v in task.arrays.items()}
    masked = {}
    for n in NAMES:
        arrays = {**inner, **sw.adverts_to_arrays([adverts[n]] + [adverts[v] for v in NAMES if v != n], NAMES, sw.ADV)}
        res = ev.task(spec.job_id, 0, sw.MASKED, {"kind": task.kind, "params": dict(task.params)}, arrays, party=n)
        assert not res.error, res.error
        masked[n] = res.arrays
    return task, {n: a.digest() for n, a in adverts.items()}, masked


def _sign(ev, spec, task, digests, n, survivors) -> bytes:
    import dpfed.federation.secagg as sa

    req = sa.ConsistencyRequest(spec.job_id, 0, tuple(survivors), {v: digests[v] for v in survivors})
    res = ev.task(spec.job_id, 0, sw.CONSISTENCY, {"kind": task.kind, "survivors": list(survivors)},
                  sw.consistency_to_arrays(req, NAMES), party=n)
    assert not res.error, res.error
    return np.asarray(res.arrays["sig"], dtype=np.uint8).tobytes()


def _unmask(ev, spec, task, masked, n, survivors, sigs):
    envs = [a for a in masked.values()]
    boxes = {k: v for k, v in _envelopes_to(envs, n).items()}
    dropped = [v for v in NAMES if v not in survivors]
    return ev.task(spec.job_id, 0, sw.UNMASK, {"kind": task.kind, "survivors": list(survivors), "dropped": dropped},
                   {**boxes, **sw.signatures_to_arrays(sigs, NAMES)}, party=n)


def _envelopes_to(answers, n):
    envs = [e for a in answers for e in sw.envelopes_from_arrays(a, "", 0, NAMES, prefix=sw.ENV) if e.receiver == n]
    return sw.envelopes_to_arrays(envs, NAMES, sw.ENV)


def test_different_survivor_sets_to_different_parties_unmask_nothing(pki, tmp_path):
    """The issue's attack over the wire: a is told b, c survived, b and c that a dropped, d and e that all
    survived; each signs its set; the coordinator relays to each party the signatures on its own set.
    Every unmask request is refused: the coordinator holds no share and no seed, no input is recovered."""
    with _federation(pki, tmp_path) as (ev, parties):
        spec = _spec("rogue-sets")
        task, digests, masked = _through_masked(ev, spec)
        a, b, c, d, e = NAMES
        told = {a: [a, b, c], b: [b, c, d, e], c: [b, c, d, e], d: NAMES, e: NAMES}
        sigs = {n: _sign(ev, spec, task, digests, n, s) for n, s in told.items()}
        for n, s in told.items():
            relay = [(v, sigs[v]) for v in s if told[v] == s]
            res = _unmask(ev, spec, task, masked, n, s, relay)
            assert res.error and not res.arrays, (n, res.arrays)
            assert "Consistency" in res.error or "signed" in res.error, res.error
        for p in parties:  # one charge per party, and its masked input the only answer it recorded
            assert p.daemon.ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"]


@pytest.mark.parametrize("variant", ["other-set", "forged", "missing", "duplicated"])
def test_an_unmask_request_off_the_signed_set_or_its_signatures_is_refused(pki, tmp_path, variant):
    with _federation(pki, tmp_path) as (ev, parties):
        spec = _spec(f"rogue-{variant}")
        task, digests, masked = _through_masked(ev, spec)
        sigs = [(n, _sign(ev, spec, task, digests, n, NAMES)) for n in NAMES]
        surv = list(NAMES)
        bad = list(sigs)
        if variant == "other-set":
            surv = NAMES[:4]
        elif variant == "forged":
            v, s = bad[1]
            bad[1] = (v, s[:-1] + bytes([s[-1] ^ 1]))
        elif variant == "missing":
            bad = [x for x in bad if x[0] == NAMES[0]]
        elif variant == "duplicated":
            bad = bad + bad[1:2]
        res = _unmask(ev, spec, task, masked, NAMES[0], surv, bad)
        assert res.error and not res.arrays, res.arrays
        ok = _unmask(ev, spec, task, masked, NAMES[1], NAMES, sigs)  # control: the request as it should be
        assert not ok.error and len(ok.arrays["b_who"]) == len(NAMES) - 1, ok.error


@pytest.mark.parametrize("trust,why", [({"peers": ("party-0", "party-1", "party-2")}, "peers"),
                                       ({"min_honest_shares": 3}, "honest shares")])
def test_a_roster_outside_peers_or_below_the_honest_share_floor_is_refused_before_any_charge(pki, tmp_path, trust, why):
    with _federation(pki, tmp_path, **trust) as (ev, parties):
        spec = _spec(f"rogue-trust-{why.split()[0]}", colluders=1)
        resp = ev.offer(spec, party=NAMES[0])
        assert not resp.accept and why in resp.reason, resp.reason
        ledger = parties[0].daemon.ledger
        assert ledger.charge_ids(spec.job_id) == [] and ledger.spent() == 0.0
        assert ev.offer(spec, party=NAMES[1]).accept  # another party without these settings accepts it


def test_adverts_and_signatures_made_with_revoked_certificates_are_refused(tmp_path):
    """Key compromise: party-3's and party-4's certificates are revoked (the CRL beside every party's CA
    certificate, read by the party for each job) and the coordinator holds their keys. It forges their
    adverts (X25519 keys it knows, signed with the revoked certificate keys) and routes party-0 only those:
    accepted, they would give it every pairwise seed of party-0 and both its self-mask shares (t = 2, in
    envelopes under keys it knows) without asking anyone (secagg_graph's tightness case). It then asks
    party-0 to sign and relays the two revoked parties' signatures on that set with an unmask request.
    Party-0 refuses all three steps (the masked task for the revoked certificate): nothing of its input
    leaves, and its ledger holds the plan's charge only."""
    pki = make_pki(tmp_path / "pki", parties=5)
    bad = NAMES[3:]
    for n in bad:
        crl = revoke(n, pki.root / "ca")
    with _federation(pki, tmp_path / "parties") as (ev, parties):
        # revoked after the daemons started (a daemon refuses to start with its own revoked certificate);
        # every party reads the list again for each job
        shutil.copy(crl, pki.root / "certs" / "crl.pem")
        spec, a = _spec("rogue-revoked"), NAMES[0]
        assert ev.offer(spec, party=a).accept
        algo = get_algorithm(spec.algorithm)
        task = algo.coordinator(spec, NAMES).next_task()
        bits = release_for(algo, spec).plan(spec, task).noise.bits
        res = ev.task(spec.job_id, 0, sw.ADVERTISE, {"kind": task.kind}, party=a)
        own = sw.adverts_from_arrays(res.arrays, spec.job_id, NAMES)[0]
        keys = {n: (pki.files(n).cert.read_bytes(), pki.files(n).key.read_bytes()) for n in bad}
        ca = pki.files(a).ca.read_bytes()
        forged = {n: sa.SecAggClient(sw.secagg_config(spec, bits), n, *keys[n], ca).advert() for n in bad}
        inner = {sw.INNER + k: np.asarray(v) for k, v in task.arrays.items()}
        adv = sw.adverts_to_arrays([own, *forged.values()], NAMES, sw.ADV)
        res = ev.task(spec.job_id, 0, sw.MASKED, {"kind": task.kind, "params": dict(task.params)},
                      {**inner, **adv}, party=a)
        assert res.error and not res.arrays, "party-0's masked input left for adverts of revoked certificates"
        assert "revoked" in res.error, res.error
        surv = [a, *bad]
        digests = {a: own.digest(), **{n: f.digest() for n, f in forged.items()}}
        req = sa.ConsistencyRequest(spec.job_id, 0, tuple(surv), digests)
        res = ev.task(spec.job_id, 0, sw.CONSISTENCY, {"kind": task.kind, "survivors": surv},
                      sw.consistency_to_arrays(req, NAMES), party=a)
        assert res.error and not res.arrays, res.arrays
        msg = consistency_message(spec.job_id, bits, 0, NAMES, surv, digests)
        sigs = [(n, sign_message(load_pem_private_key(keys[n][1], None), msg)) for n in bad]
        res = ev.task(spec.job_id, 0, sw.UNMASK, {"kind": task.kind, "survivors": surv, "dropped": NAMES[1:3]},
                      sw.signatures_to_arrays(sigs, NAMES), party=a)
        assert res.error and not res.arrays, res.arrays
        assert parties[0].daemon.ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"]
