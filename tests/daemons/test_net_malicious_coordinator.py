"""A party cannot be tricked by its coordinator (issue 10, findings 1-8).

A real party daemon connects over mutual TLS to a coordinator of the test's own
(:mod:`evil_coordinator`: the real protocol and stubs, a valid coordinator certificate) that repeats
rounds, offers finished jobs again, poisons broadcasts and sends absurd parameters. Every check is on
the bytes the party actually sent and on its ledger.
"""
from __future__ import annotations

import queue
import shutil

import numpy as np
import pytest

from dpfed.algorithms import get_algorithm, lvq
from dpfed.algorithms.contract import JobSpec
from dpfed.data.schema import Schema
from dpfed.federation.tls import TlsFiles
from evil_coordinator import EvilCoordinator
from net_helpers import ThreadParty, make_pki, party_config

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)


def _records(n: int = 300, seed: int = 0, classes: tuple[int, ...] = (0, 1)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 3))
    return X, np.asarray(classes)[rng.integers(0, len(classes), n)].astype(np.int64)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), parties=2)


@pytest.fixture()
def evil(pki, tmp_path):
    """(coordinator, party thread, ledger): one real party daemon connected to the hostile coordinator."""
    with EvilCoordinator(pki.files("coordinator")) as ev:
        X, y = _records()
        cfg = party_config(pki, tmp_path, "party-0", ev.port, data=X, labels=y, schema=SCHEMA, seed=None,
                           epsilon_limit=50.0)
        party = ThreadParty(cfg)
        try:
            ev.wait_registered()
            yield ev, party, party.daemon.ledger
        finally:
            party.stop()
            assert party.error is None


def _spec(job: str, algorithm: str, **params) -> JobSpec:
    params = {"epsilon": 1.0, "delta": 1e-6, **params}
    if algorithm in ("glvq", "gmlvq"):
        params = lvq.prepare_params(params)
    return JobSpec(job, algorithm, params, SCHEMA)


def _first_task(spec: JobSpec):
    return get_algorithm(spec.algorithm).coordinator(spec, ["party-0"]).next_task()


# ------------------------------------------------------------------------------------- finding 1

@pytest.mark.parametrize("algorithm,repeats", [("naive-bayes", 8), ("kmeans", 4), ("glvq", 3)])
def test_a_repeated_round_is_answered_with_the_identical_bytes(evil, algorithm, repeats):
    ev, _, ledger = evil
    spec = _spec(f"rep-{algorithm}", algorithm)
    assert ev.offer(spec).accept
    t = _first_task(spec)
    results = [ev.task(spec.job_id, t.round, t.kind, t.params, t.arrays) for _ in range(repeats)]
    assert not results[0].error and results[0].raw
    assert all(r.raw == results[0].raw and not r.error for r in results)  # one draw, sent `repeats` times
    assert ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"]
    assert [r for r, _, _ in ledger.answered_rounds(spec.job_id)] == [0]


def test_an_answered_round_with_another_task_and_older_rounds_are_refused(evil):
    ev, _, ledger = evil
    spec = _spec("lvq-rounds", "glvq", epochs=1, sampling_rate=0.25)
    assert ev.offer(spec).accept
    coord = lvq.LVQCoordinator(spec, ["party-0"])
    init = ev.task(spec.job_id, 0, "init")
    W = coord.W
    step1 = ev.task(spec.job_id, 1, "step", arrays={"prototypes": W})
    assert not init.error and not step1.error
    again = ev.task(spec.job_id, 1, "step", arrays={"prototypes": W + 0.25})  # same round, other model
    assert "already answered for a different task" in again.error and not again.raw
    older = ev.task(spec.job_id, 0, "init")
    assert "older than the last answered round 1" in older.error
    beyond = ev.task(spec.job_id, 10**9, "step", arrays={"prototypes": W})
    assert "beyond the charged plan" in beyond.error
    assert ev.task(spec.job_id, 1, "step", arrays={"prototypes": W}).raw == step1.raw
    assert ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"]


# ------------------------------------------------------------------------------------- finding 2

@pytest.mark.parametrize("algorithm", ["naive-bayes", "glvq"])
def test_a_job_offered_again_after_its_end_costs_nothing_and_replays(evil, algorithm):
    ev, _, ledger = evil
    spec = _spec(f"again-{algorithm}", algorithm, epochs=1, sampling_rate=0.5) if algorithm == "glvq" \
        else _spec("again-nb", algorithm)
    first = ev.offer(spec)
    assert first.accept
    t = _first_task(spec)
    answers = [ev.task(spec.job_id, t.round, t.kind, t.params, t.arrays)]
    if algorithm == "glvq":
        coord = lvq.LVQCoordinator(spec, ["party-0"])
        for r in (1, 2):
            answers.append(ev.task(spec.job_id, r, "step", arrays={"prototypes": coord.W}))
    assert not any(a.error for a in answers)
    ev.end(spec.job_id)
    total = ledger.spent()

    again = ev.offer(spec)  # the same id and parameters: a resume, charged once only
    assert again.accept and again.epsilon_total == pytest.approx(total)
    assert ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"] and ledger.spent() == total
    last = len(answers) - 1
    replay = ev.task(spec.job_id, last, t.kind if last == 0 else "step", t.params if last == 0 else {},
                     t.arrays if last == 0 else {"prototypes": lvq.LVQCoordinator(spec, ["party-0"]).W})
    assert replay.raw == answers[-1].raw and not replay.error
    if last:
        assert "older" in ev.task(spec.job_id, 0, "init").error
    other = ev.offer(_spec(spec.job_id, algorithm, epsilon=0.5, **({"epochs": 1, "sampling_rate": 0.5}
                                                                    if algorithm == "glvq" else {})))
    assert not other.accept and "already used with other parameters" in other.reason
    assert ledger.charge_ids() == [f"{spec.job_id}:plan"]


# ------------------------------------------------------------------------------------- findings 3 and 4

TARGET = np.array([0.5, 0.8, 0.3])  # its first coordinate is the box centre: exactly 0 once rescaled


def _poisoned_broadcast() -> dict[str, np.ndarray]:
    """Finding 3's broadcast: prototypes near 1e-90 and a rank-one Omega projecting TARGET to 0, so
    S*S underflows for it and its gradient was 0 * inf = NaN (``tests/federation/test_side_channels.py``)."""
    omega = np.zeros((3, 3))
    omega[0, 0] = 1.0
    return {"prototypes": np.array([[1e-90, 0.0, 0.0], [-2e-90, 0.0, 0.0]]), "omega": omega}


@pytest.mark.parametrize("with_target", [False, True])
def test_a_poisoned_broadcast_gets_finite_answers_whether_or_not_a_record_is_present(pki, tmp_path, with_target):
    """Over gRPC, 15 poisoned GMLVQ steps at a party with and without the target record: every step is
    answered, finite, without an error. Before the fix the rounds that sampled the target failed; the
    chance it is never sampled at q = 0.3 in 15 rounds (so this cannot fail on the old code) is 5e-3."""
    X, y = _records(seed=3)
    X[:, 0] = np.where(np.abs(X[:, 0] - 0.5) < 0.05, 0.9, X[:, 0])  # nobody else on the centre
    if with_target:
        X, y = np.vstack([X, TARGET]), np.append(y, 0)
    with EvilCoordinator(pki.files("coordinator")) as ev:
        party = ThreadParty(party_config(pki, tmp_path, "party-0", ev.port, data=X, labels=y, schema=SCHEMA,
                                         seed=None, epsilon_limit=50.0))
        try:
            ev.wait_registered()
            spec = _spec(f"poison-{with_target}", "gmlvq", epsilon=5.0, epochs=4.5, sampling_rate=0.3)
            assert ev.offer(spec).accept
            answers = [ev.task(spec.job_id, 0, "init")]
            answers += [ev.task(spec.job_id, r, "step", arrays=_poisoned_broadcast()) for r in range(1, 16)]
            assert [a.error for a in answers] == [""] * 16
            assert all(np.all(np.isfinite(v)) for a in answers for v in a.arrays.values())
        finally:
            party.stop()
            assert party.error is None


def test_a_party_lacking_a_class_answers_like_a_party_that_has_it(evil, pki, tmp_path):
    """Finding 4 over gRPC: a party whose records lack class 1 (the job needs both) accepts and answers
    the initialisation and a step like any other party, with the same arrays and shapes."""
    ev, _, _ = evil  # party-0 holds both classes
    X, y = _records(seed=4, classes=(0,))
    lacking = ThreadParty(party_config(pki, tmp_path, "party-1", ev.port, data=X, labels=y, schema=SCHEMA,
                                       seed=None, epsilon_limit=50.0))
    try:
        assert ev.wait_registered() == ["party-1"]
        spec = _spec("no-class-1", "glvq", epochs=1, sampling_rate=0.5, allow_missing_classes=False)
        shapes = {}
        for name in ("party-0", "party-1"):
            assert ev.offer(spec, party=name).accept
            init = ev.task(spec.job_id, 0, "init", party=name)
            step = ev.task(spec.job_id, 1, "step", party=name,
                           arrays={"prototypes": lvq.LVQCoordinator(spec, ["party-0"]).W})
            assert not init.error and not step.error
            shapes[name] = {k: v.shape for a in (init, step) for k, v in a.arrays.items()}
        assert shapes["party-0"] == shapes["party-1"]
    finally:
        lacking.stop()
        assert lacking.error is None


# ------------------------------------------------------------------------------------- finding 5

def _legacy_party_cert(pki, name: str) -> TlsFiles:
    """A party certificate as the CA issued them before the fix: serverAuth and localhost SANs for every role."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_dir = pki.root / "ca"
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                                     x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "party")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           False)
            .sign(ca_key, hashes.SHA256()))
    d = pki.root / "legacy"
    d.mkdir(exist_ok=True)
    (d / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
    return TlsFiles(pki.files("coordinator").ca, d / f"{name}.crt", d / f"{name}.key")


def _never_registers(server_tls: TlsFiles, pki, root) -> None:
    with EvilCoordinator(server_tls) as ev:
        cfg = party_config(pki, root, "party-0", ev.port, data=_records()[0], labels=_records()[1], schema=SCHEMA)
        party = ThreadParty(cfg)
        try:
            with pytest.raises(queue.Empty):
                ev.registered.get(timeout=3.0)
            assert party.thread.is_alive() and party.error is None   # it keeps trying, it does not die
        finally:
            party.stop()


@pytest.mark.parametrize("server", ["party-1", "operator", "legacy-party"])
def test_a_party_registers_only_with_a_coordinator_certificate(pki, tmp_path, server):
    tls = _legacy_party_cert(pki, "party-1") if server == "legacy-party" else pki.files(server)
    _never_registers(tls, pki, tmp_path)


def test_revoked_certificates_are_refused_by_both_ends(tmp_path):
    import grpc

    from dpfed.federation import certs
    from net_helpers import raw_stub, register, start_coordinator

    pki = make_pki(tmp_path / "pki", parties=2)
    server = start_coordinator(pki, tmp_path / "state")
    try:
        ch, stub = raw_stub(pki, server.port, "party-1")
        with ch:
            assert register(stub, "party-1")
            crl = certs.revoke("party-1", pki.root / "ca")
            shutil.copyfile(crl, pki.files("party-1").ca.parent / "crl.pem")  # beside every ca.crt
            with pytest.raises(grpc.RpcError) as info:
                register(stub, "party-1")
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "revoked" in info.value.details()
    finally:
        server.stop(0.5)
    crl = certs.revoke("coordinator", pki.root / "ca")
    shutil.copyfile(crl, pki.files("coordinator").ca.parent / "crl.pem")
    _never_registers(pki.files("coordinator"), pki, tmp_path)


# ------------------------------------------------------------------------------------- findings 7 and 8

KILLERS = [  # parameters that used to raise out of the daemon (ZeroDivision, Overflow, MemoryError) or hang it
    ("naive-bayes", {"epsilon": 1e-20}),
    ("glvq", {"sampling_rate": 0, "noise_multiplier": 1.0}),
    ("glvq", {"epochs": float("inf"), "noise_multiplier": 1.0}),
    ("glvq", {"noise_multiplier": 1e-6}),
    ("kmeans", {"epsilon": 1e-12}),
    ("kmeans", {"method": "lloyd", "lloyd_iters": 1_000_000}),
    ("kmeans", {"refine_steps": 100_000}),
    ("glvq", {"epochs": 1e7, "sampling_rate": 0.01, "noise_multiplier": 1.0}),
    ("glvq", {"prototypes_per_class": 10**9, "noise_multiplier": 1.0}),
]


def test_parameters_that_killed_or_hung_the_daemon_are_refused_with_a_reason(evil):
    ev, party, ledger = evil
    for i, (algorithm, params) in enumerate(KILLERS):
        spec = JobSpec(f"kill-{i}", algorithm, {"epsilon": 1.0, "delta": 1e-6, **params}, SCHEMA)
        resp = ev.offer(spec, timeout=30)   # the old party never answered the unbounded plans
        assert not resp.accept and resp.reason, (algorithm, params)
        assert party.thread.is_alive(), (algorithm, params)
    assert ledger.charge_ids() == []
    spec = _spec("after", "naive-bayes")    # and the daemon still serves
    assert ev.offer(spec).accept
    t = _first_task(spec)
    assert not ev.task(spec.job_id, t.round, t.kind, t.params, t.arrays).error


# ------------------------------------------------------------------------------------- finding 6

def test_a_record_value_never_reaches_a_traceback_or_log(pki, tmp_path):
    import subprocess
    import sys

    from net_helpers import spawn_party

    X, _ = _records(20)
    toml = party_config(pki, tmp_path, "party-0", 1, data=X, labels=np.array(["SECRET-LABEL-42"] * 20),
                        schema=SCHEMA, write_toml=True)
    check = subprocess.run([sys.executable, "-m", "dpfed.cli", "party", "check", "--config", str(toml)],
                           capture_output=True, text=True, timeout=120)
    serve = spawn_party(toml)
    out, _ = serve.communicate(timeout=120)
    for code, text in ((check.returncode, check.stdout + check.stderr), (serve.returncode, out.decode())):
        assert code == 2 and "SECRET-LABEL" not in text and "Traceback" not in text, text
        assert "label" in text


def test_the_coordinators_text_cannot_forge_the_partys_log_lines(evil, caplog):
    """A rejection's details (and a job end) are logged cut and escaped: before, a newline in them wrote a line of
    the coordinator's choosing into the party's log, an escape sequence reached the owner's terminal."""
    import time

    ev, party, ledger = evil
    forged = "no\x1b[2J\n2026-11-27 12:00:00 dpfed.party INFO party party-0: FORGED"
    ev.reject_with = forged + "x" * 2000
    with caplog.at_level("INFO", logger="dpfed.party"):
        assert ev.offer(_spec("rejected", "naive-bayes")).accept
        ev.end("rejected", reason=forged)
        deadline = time.monotonic() + 30
        while not [r for r in caplog.records if "ended" in r.getMessage()] and time.monotonic() < deadline:
            time.sleep(0.05)
    logged = [r.getMessage() for r in caplog.records if "FORGED" in r.getMessage()]
    assert len(logged) == 2 and all("\\n2026" in m and "\\x1b[2J" in m for m in logged), logged
    assert not [m for m in logged if "\n" in m or "\x1b" in m or len(m) > 600], logged
    assert party.thread.is_alive() and ledger.charge_ids() == ["rejected:plan"]


# ------------------------------------------------------------------------------------- kill -9 and resume

def test_a_party_killed_mid_job_resumes_without_a_new_charge(pki, tmp_path):
    import signal

    from dpfed.core.ledger import BudgetLedger
    from net_helpers import spawn_party

    X, y = _records()
    spec = _spec("killed", "glvq", epochs=1, sampling_rate=0.25)
    W = {"prototypes": lvq.LVQCoordinator(spec, ["party-0"]).W}
    with EvilCoordinator(pki.files("coordinator")) as ev:
        toml = party_config(pki, tmp_path, "party-0", ev.port, data=X, labels=y, schema=SCHEMA, seed=None,
                            write_toml=True)
        proc = spawn_party(toml)
        try:
            ev.wait_registered()
            assert ev.offer(spec).accept
            assert not ev.task(spec.job_id, 0, "init").error
            before = ev.task(spec.job_id, 1, "step", arrays=W)
            assert not before.error
            proc.send_signal(signal.SIGKILL)          # mid-job, after round 1 left the party
            proc.wait(timeout=30)
            proc = spawn_party(toml)                  # it comes back ...
            ev.wait_registered()
            again = ev.offer(spec)                    # ... and the job is offered again (a resume)
            assert again.accept
            assert ev.task(spec.job_id, 1, "step", arrays=W).raw == before.raw   # the stored bytes
            assert "older" in ev.task(spec.job_id, 0, "init").error
            after = ev.task(spec.job_id, 2, "step", arrays=W)                    # the rest is computed
            assert not after.error and after.raw != before.raw
        finally:
            proc.kill()
            proc.wait(timeout=30)
    with BudgetLedger(tmp_path / "party-0" / "ledger.sqlite", epsilon_limit=10.0, delta_limit=1e-6) as led:
        assert led.charge_ids() == [f"{spec.job_id}:plan"]   # exactly one charge
        assert [r for r, _, _ in led.answered_rounds(spec.job_id)] == [0, 1, 2]
