"""A secure job is refused in ``decide``, before any charge, for everything that would stop it later
(issue 24, items 3 and 4): rosters SecAgg cannot run (fewer than 2 names, a name twice, invalid names,
70,001 names), and the party's own trust settings (min_survivors, colluders, min_honest_shares, peers).
Each refusal is asserted on the decision's code and on the ledger (no charge), with an accepted control.
And after a restart, a round whose masked input the ledger refused is never signed or unmasked (item 7)."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from dpfed.algorithms.contract import JobSpec
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Schema
from dpfed.federation.certs import init_ca, issue
from dpfed.federation.secure_session import SecAggParty
from dpfed.federation.session import PartyContext, decide

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
ROSTER = [f"party-{i}" for i in range(5)]


@pytest.fixture(scope="module")
def creds(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    crt, key = issue("party-0", d)
    other, _ = issue("party-1", d)
    return (crt.read_bytes(), key.read_bytes(), (d / "ca.crt").read_bytes(), other.read_bytes())


def _party(tmp_path, creds, **trust) -> PartyContext:
    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(50, 3)), rng.integers(0, 2, 50).astype(np.int64)
    ledger = BudgetLedger(tmp_path / "ledger.sqlite", epsilon_limit=10.0, delta_limit=1e-5, accountant="rdp")
    return PartyContext("party-0", X, y, SCHEMA, ledger, secagg=SecAggParty(*creds[:3], **trust))


def _spec(job: str, roster=ROSTER, **kw) -> JobSpec:
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": 3, "bits": 16, "records": 1000, "roster": list(roster), **kw}
    return JobSpec(job, "naive-bayes", params, SCHEMA)


@pytest.mark.parametrize("case,roster,code", [
    ("one", ["party-0"], "roster"),
    ("twice", ["party-0", "party-1", "party-1"], "roster"),
    ("invalid", ["party-0", "party-1", "bad\nname"], "roster"),
    ("huge", ["party-0"] + [f"p{i}" for i in range(70_000)], "roster"),
    ("two", ["party-0", "party-1"], "threshold"),
])
def test_a_roster_secagg_cannot_run_is_refused_before_any_charge(tmp_path, creds, case, roster, code):
    party = _party(tmp_path, creds)
    d = decide(party, _spec(f"job-{case}", roster, min_survivors=2))
    assert not d.accept and d.refusal == code, (d.refusal, d.reason)
    assert party.ledger.spent() == 0.0


@pytest.mark.parametrize("trust,job,code", [
    ({"min_survivors": 4}, {}, "min_survivors"),
    ({"colluders": 1}, {}, "colluders"),
    ({"min_honest_shares": 3}, {"colluders": 1}, "min_honest_shares"),
    ({"peers": ("party-0", "party-1", "party-2")}, {}, "peers"),
])
def test_the_partys_own_trust_settings_refuse_before_any_charge(tmp_path, creds, trust, job, code):
    party = _party(tmp_path, creds, **trust)
    d = decide(party, _spec("job-trust", **job))
    assert not d.accept and d.refusal == code, (d.refusal, d.reason)
    assert party.ledger.spent() == 0.0
    ok = {"min_survivors": {"min_survivors": 4}, "colluders": {"colluders": 1, "min_survivors": 4},
          "min_honest_shares": {"colluders": 1, "min_survivors": 4}, "peers": {"roster": ROSTER[:3]}}[code]
    roster = ok.pop("roster", ROSTER)
    control = decide(party, _spec("job-trust-ok", roster, **ok))  # the same party accepts a job that meets them
    assert control.accept and control.refusal == "" and party.ledger.spent() > 0.0, control.reason


def test_peers_by_certificate_fingerprint_pin_the_certificate_of_an_unnamed_party(creds):
    crt, key, ca, other = creds
    der = x509.load_pem_x509_certificate(other).public_bytes(serialization.Encoding.DER)
    setup = SecAggParty(crt, key, ca, peers=("party-0", "sha256:" + hashlib.sha256(der).hexdigest()))
    assert setup.accept_cert("party-1", der) is None
    assert setup.accept_cert("party-2", b"another certificate")
    with pytest.raises(ValueError, match="sha256"):
        SecAggParty(crt, key, ca, peers=("sha256:xyz",))


def test_a_round_whose_masked_input_the_ledger_refused_is_never_unmasked(tmp_path, creds_three):
    """A party restarted (a new session on the same ledger: new SecAgg keys) is sent round 0's masked
    task again, with its new advert: the ledger already holds round 0's masked input of the old session
    and refuses the new one, and the new session forgets the round: it signs no survivor set and answers
    no unmask request for it (its new keys' seeds would not match the masked input that left)."""
    from dpfed.algorithms import get_algorithm
    from dpfed.algorithms.contract import Task
    from dpfed.federation import secagg as sa
    from dpfed.federation import secure_wire as sw
    from dpfed.federation.session import TaskError

    ca, certs = creds_three
    roster = sorted(certs)
    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(50, 3)), rng.integers(0, 2, 50).astype(np.int64)
    ledger_path = tmp_path / "ledger.sqlite"
    spec = _spec("job-restart", roster, min_survivors=3)
    cfg = sw.secagg_config(spec, 16)
    others = {n: sa.SecAggClient(cfg, n, *certs[n], ca).advert() for n in roster[1:]}
    inner = get_algorithm("naive-bayes").coordinator(spec, roster).next_task()

    def session():
        ledger = BudgetLedger(ledger_path, epsilon_limit=10.0, delta_limit=1e-5, accountant="rdp")
        party = PartyContext(roster[0], X, y, SCHEMA, ledger, secagg=SecAggParty(*certs[roster[0]], ca))
        d = decide(party, spec)
        assert d.accept, d.reason
        return d.session

    def masked_task(s):
        mine = sw.adverts_from_arrays(s.answer(Task(spec.job_id, 0, sw.ADVERTISE, {"kind": inner.kind})),
                                      spec.job_id, roster)[0]
        arrays = {**{sw.INNER + k: v for k, v in inner.arrays.items()},
                  **sw.adverts_to_arrays([mine, *others.values()], roster, sw.ADV)}
        return Task(spec.job_id, 0, sw.MASKED, {"kind": inner.kind, "params": dict(inner.params)}, arrays), mine

    first = session()
    task, old = masked_task(first)
    assert "y" in first.answer(task)
    second = session()  # the restart: same ledger, new keys
    task2, new = masked_task(second)
    assert new.digest() != old.digest()
    with pytest.raises(TaskError):
        second.answer(task2)  # the ledger holds round 0's masked input already
    digests = {roster[0]: new.digest(), **{n: a.digest() for n, a in others.items()}}
    req = sa.ConsistencyRequest(spec.job_id, 0, tuple(roster), digests)
    consistency = Task(spec.job_id, 0, sw.CONSISTENCY, {"kind": inner.kind, "survivors": roster},
                       sw.consistency_to_arrays(req, roster))
    with pytest.raises(TaskError, match="no masked input"):
        second.answer(consistency)
    unmask = Task(spec.job_id, 0, sw.UNMASK, {"kind": inner.kind, "survivors": roster, "dropped": []},
                  sw.envelopes_to_arrays([], roster, sw.ENV))
    with pytest.raises(TaskError, match="no masked input"):
        second.answer(unmask)


@pytest.fixture(scope="module")
def creds_three(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki3")
    init_ca(d)
    certs = {}
    for n in ("party-0", "party-1", "party-2"):
        crt, key = issue(n, d)
        certs[n] = (crt.read_bytes(), key.read_bytes())
    return (d / "ca.crt").read_bytes(), certs


def test_the_revocation_list_is_read_again_for_each_job(creds):
    """The daemon's SecAggParty re-reads the CRL when a job's SecAgg client is made: a certificate revoked
    after the daemon started is refused by the next job's advert checks."""
    crt, key, ca, _ = creds
    listed: set[int] = set()
    setup = SecAggParty(crt, key, ca, revoked=frozenset({1}), revocation=lambda: set(listed))
    assert setup.revoked_now() == {1}
    listed.add(7)
    assert setup.revoked_now() == {1, 7}
