"""Configs refuse mistakes in one line (issue 29 item 2): one test per finding of the operator's first day, each
failing on the code before (a quoted boolean turned TLS off, port 99999 listened on a random port, a second
coordinator shared the port, a garbage certificate died with "Failed to bind", a party with a bad certificate
retried forever, a missing ledger folder, a ledger path naming another file or a folder, a malformed schema_file
blamed on party.toml, a damaged file in the coordinator's state folder, a second daemon on one ledger, a ledger
page port in use, a missing certificate file, ``dpfed status | head``, ``--dropout 1.5`` ended in tracebacks or
late failures, and every failed job suggested ``dpfed job resume``)."""
from __future__ import annotations

import datetime as dt
import io
import os
import subprocess
import sys
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from coordinator.config import CoordinatorConfig
from coordinator.runner import HOPELESS, resume_hint
from coordinator.server import serve
from dpfed.cli import main
from dpfed.federation.config import ConfigError
from dpfed.federation.own_cert import CertificateProblem, check_own_certificate
from net_helpers import make_pki, subprocess_env
from party.config import PartyConfig

PARTY = ('name = "party-0"\ncoordinator = "127.0.0.1:{port}"\ndata = "d.csv"\nledger = "{ledger}"\n'
         'epsilon_limit = 5.0\ndelta_limit = 1e-5\nreconnect_seconds = 0.1\nmax_auth_failures = 2\n{extra}\n'
         '[tls]\nca = "{ca}"\ncert = "{cert}"\nkey = "{key}"\n'
         '[schema]\nn_classes = 2\n[[schema.features]]\nname = "x"\nkind = "numeric"\nlower = 0\nupper = 1\n')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), parties=1)


def _party_toml(tmp_path, pki, *, port=50051, ledger="ledger.sqlite", extra="", files=None):
    f = files or pki.files("party-0")
    (tmp_path / "d.csv").write_text("x,label\n0.5,1\n0.2,0\n")
    toml = tmp_path / "party.toml"
    toml.write_text(PARTY.format(port=port, ledger=ledger, extra=extra, ca=f.ca, cert=f.cert, key=f.key))
    return toml


def _coord_toml(tmp_path, pki, listen="127.0.0.1:0", extra=""):
    f = pki.files("coordinator")
    toml = tmp_path / "coordinator.toml"
    toml.write_text(f'listen = "{listen}"\nstate_dir = "{tmp_path / "state"}"\n{extra}\n'
                    f'[tls]\nca = "{f.ca}"\ncert = "{f.cert}"\nkey = "{f.key}"\n')
    return toml


@pytest.mark.parametrize("line,key", [('insecure = "false"', "insecure"), ('epsilon_limit = "5"', "epsilon_limit"),
                                      ("secure_aggregation = 1", "secure_aggregation"), ("plugins = \"x\"", "plugins")])
def test_party_keys_have_strict_types(tmp_path, pki, line, key):
    toml = _party_toml(tmp_path, pki, extra=line)
    text = toml.read_text().replace("epsilon_limit = 5.0\n", "") if key == "epsilon_limit" else toml.read_text()
    toml.write_text(text)
    with pytest.raises(ConfigError, match=rf"{key} must be") as err:
        PartyConfig.load(toml)
    assert "\n" not in str(err.value)


def test_coordinator_keys_have_strict_types_and_ports_are_checked(tmp_path, pki):
    with pytest.raises(ConfigError, match="insecure must be true or false"):
        CoordinatorConfig.load(_coord_toml(tmp_path, pki, extra='insecure = "false"'))
    with pytest.raises(ConfigError, match=r"listen must be HOST:PORT with a port in 0\.\.65535"):
        CoordinatorConfig.load(_coord_toml(tmp_path, pki, listen="127.0.0.1:99999"))
    with pytest.raises(ConfigError, match="coordinator must be HOST:PORT"):
        PartyConfig.load(_party_toml(tmp_path, pki, port=99999))
    with pytest.raises(ConfigError, match="answer_timeout must be a number"):
        CoordinatorConfig.load(_coord_toml(tmp_path, pki, extra='answer_timeout = "300"'))


def test_a_second_coordinator_on_a_port_in_use_fails(tmp_path, pki):
    first = serve(CoordinatorConfig(listen="127.0.0.1:0", state_dir=tmp_path / "a", tls=pki.files("coordinator")))
    try:
        with pytest.raises(OSError, match="port in use"):
            serve(CoordinatorConfig(listen=f"127.0.0.1:{first.port}", state_dir=tmp_path / "b",
                                    tls=pki.files("coordinator")))
    finally:
        first.stop(0.2)


def _expired_cert(pki, tmp_path):
    ca_key = serialization.load_pem_private_key((pki.root / "ca" / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((pki.root / "ca" / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "party-0"),
                                     x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "party")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=30)).not_valid_after(now - dt.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))
    (tmp_path / "old.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "old.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    f = pki.files("party-0")
    return type(f)(f.ca, tmp_path / "old.crt", tmp_path / "old.key")


def test_own_certificate_is_checked_with_its_cause(tmp_path, pki):
    good = pki.files("party-0")
    check_own_certificate(good, "party", "party-0")
    cases = {
        "expired": _expired_cert(pki, tmp_path),
        "another deployment": type(good)(good.ca, pki.files("party-0", evil=True).cert,
                                          pki.files("party-0", evil=True).key),
        "not a PEM certificate": type(good)(good.ca, tmp_path / "garbage.crt", good.key),
        "does not belong": type(good)(good.ca, good.cert, pki.files("coordinator").key),
        "not found": type(good)(good.ca, tmp_path / "missing.crt", good.key),
    }
    (tmp_path / "garbage.crt").write_text("not a certificate\n")
    for cause, files in cases.items():
        with pytest.raises(CertificateProblem, match=cause):
            check_own_certificate(files, "party", "party-0")
    with pytest.raises(CertificateProblem, match="role 'party', not 'coordinator'"):
        check_own_certificate(good, "coordinator")


def test_coordinator_with_a_garbage_certificate_says_so_in_one_line(tmp_path, pki, capsys):
    toml = _coord_toml(tmp_path, pki)
    (tmp_path / "garbage.crt").write_text("garbage")
    toml.write_text(toml.read_text().replace(str(pki.files("coordinator").cert), str(tmp_path / "garbage.crt")))
    assert main(["coordinator", "serve", "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "is not a PEM certificate" in err and "Failed to bind" not in err and "Traceback" not in err


def _run_party(toml, timeout=60):
    return subprocess.run([sys.executable, "-m", "party.daemon", "--config", str(toml), "--log-level", "INFO"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


def _refused_in_one_line(toml) -> str:
    """The party daemon process's one error line (exit 2, no traceback)."""
    res = _run_party(toml)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("dpfed party: error:")]
    assert len(lines) == 1, res.stderr[-2000:]
    return lines[0]


def test_party_with_an_expired_certificate_stops_with_the_cause_in_its_log(tmp_path, pki):
    toml = _party_toml(tmp_path, pki, files=_expired_cert(pki, tmp_path))
    res = _run_party(toml)
    assert res.returncode == 2 and "expired on" in res.stderr and "Traceback" not in res.stderr


def test_party_that_cannot_authenticate_stops_after_max_auth_failures(tmp_path, pki):
    """A coordinator (a real certificate of our CA) that trusts another CA for its clients refuses this party's
    certificate: the party used to retry forever, the cause only in the coordinator's log; now it stops after
    max_auth_failures = 2 refused handshakes, exit 1, the cause in its own log. (A server whose certificate the
    party refuses, an impostor, is still refused for ever: tests/daemons/test_net_malicious_coordinator.py.)"""
    from evil_coordinator import EvilCoordinator

    good = pki.files("coordinator")
    with EvilCoordinator(type(good)(pki.root / "evil-ca" / "ca.crt", good.cert, good.key)) as other:
        t0 = time.monotonic()
        res = _run_party(_party_toml(tmp_path, pki, port=other.port))
        assert res.returncode == 1, res.stderr[-2000:]
        assert "giving up after 2 refused TLS handshakes" in res.stderr and "does not accept this party's certificate" \
            in res.stderr and "Traceback" not in res.stderr
        assert time.monotonic() - t0 < 60


def test_missing_ledger_folder_and_certificate_file_are_one_line(tmp_path, pki, capsys):
    toml = _party_toml(tmp_path, pki, ledger="no/such/folder/ledger.sqlite")
    assert main(["party", "check", "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "folder" in err and "does not exist" in err and len(err.strip().splitlines()) == 1
    res = _run_party(toml)
    assert res.returncode == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr
    code = main(["status", "--coordinator", "127.0.0.1:1", "--cert", str(tmp_path / "missing.crt")])
    err = capsys.readouterr().err
    assert code == 2 and "TLS file missing" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["another file", "a folder"])
def test_a_ledger_path_that_is_not_a_ledger_is_one_line_and_left_as_it_is(tmp_path, pki, capsys, kind):
    """Before: ``sqlite3.DatabaseError: file is not a database`` (or "unable to open database file") as a
    traceback from the daemon, ``dpfed party check`` and ``dpfed party ledger``."""
    ledger = tmp_path / "ledger.sqlite"
    if kind == "a folder":
        ledger.mkdir()
        (ledger / "keep").write_text("x")
    else:
        ledger.write_bytes(b"records,of,something,else\n" * 400)
    before = sorted(ledger.iterdir()) if ledger.is_dir() else ledger.read_bytes()
    toml = _party_toml(tmp_path, pki)
    why = "is a folder, not a ledger file" if kind == "a folder" else "is not a usable dpfed ledger"
    for argv in (["party", "check", "--config", str(toml)], ["party", "ledger", "--config", str(toml)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert why in err and "left as it is" in err and len(err.strip().splitlines()) == 1, err
    res = _run_party(toml)
    assert res.returncode == 2 and why in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert (sorted(ledger.iterdir()) if ledger.is_dir() else ledger.read_bytes()) == before  # nothing written
    assert not (tmp_path / "ledger.sqlite-wal").exists()


@pytest.mark.parametrize("broken", ["jobs/b-broken.json", "parties.json", "jobs/c-not-a-record.json"])
def test_a_damaged_state_file_stops_the_coordinator_in_one_line_and_changes_nothing(tmp_path, pki, capsys, broken):
    """Before: a JSONDecodeError or TypeError traceback, after the records read before it were already rewritten
    (a running job marked queued for its resume)."""
    from coordinator.state import JobRecord

    state = tmp_path / "state"
    (state / "jobs").mkdir(parents=True)
    running = JobRecord("a-running", "noisy-mean", {"rounds": 3}, None, ["party-0"], state="running", rounds=1)
    (state / "jobs" / "a-running.json").write_text(running.to_json())
    (state / "parties.json").write_text('{"party-0": {"epsilon_limit": 5.0}}')
    (state / broken).write_text({"parties.json": "[1, 2", "jobs/b-broken.json": '{"job_id": "b-bro'}.get(
        broken, '{"job_id": "c", "colour": "blue"}'))
    before = {f: f.read_bytes() for f in state.rglob("*") if f.is_file()}
    assert main(["coordinator", "serve", "--config", str(_coord_toml(tmp_path, pki))]) == 2
    err = capsys.readouterr().err
    assert str(state / broken) in err and "nothing was changed" in err and len(err.strip().splitlines()) == 1, err
    assert {f: f.read_bytes() for f in state.rglob("*") if f.is_file()} == before


def test_a_malformed_schema_file_is_named(tmp_path, pki, capsys):
    """Before: "party.toml: Expecting property name enclosed in double quotes: line 1 column 2", the party.toml
    blamed for its schema file's JSON."""
    toml = _party_toml(tmp_path, pki, extra='schema_file = "s.json"')
    toml.write_text(toml.read_text().split("[schema]")[0])  # the schema from the file only
    (tmp_path / "s.json").write_text("{not json")
    assert main(["party", "check", "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert f"schema_file {tmp_path / 's.json'}: Expecting property name" in err and len(err.strip().splitlines()) == 1


def test_a_second_daemon_on_the_same_ledger_stops_in_one_line(tmp_path, pki):
    """Before: both ran, each registration closing the other's session at the coordinator, for ever. A daemon
    (a thread here, dialling a coordinator that is not there: it keeps retrying) holds the ledger; a second one,
    as a process and in this process, stops at once naming the first's process id, and the first runs on; once
    it has stopped, its ledger takes a new daemon."""
    from dpfed.core.ledger import LedgerError
    from net_helpers import ThreadParty, party_config, stop_parties

    toml = party_config(pki, tmp_path, "party-0", 1, write_toml=True)
    first = ThreadParty(PartyConfig.load(toml))
    try:
        assert f"another party daemon (pid {os.getpid()}) is running" in _refused_in_one_line(toml)
        with pytest.raises(LedgerError, match=rf"another party daemon \(pid {os.getpid()}\)"):
            ThreadParty(PartyConfig.load(toml))
        assert first.thread.is_alive() and first.error is None
    finally:
        stop_parties([first])
    stop_parties([ThreadParty(PartyConfig.load(toml))])


def test_a_ledger_page_port_in_use_is_one_line_and_lets_the_ledger_go(tmp_path, pki):
    """Before: "OSError: [Errno 98] Address already in use" as a traceback from the party daemon."""
    import socket

    from net_helpers import ThreadParty, party_config, stop_parties

    toml = party_config(pki, tmp_path, "party-0", 1, write_toml=True)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        toml.write_text(toml.read_text().replace('name = "party-0"', f'name = "party-0"\nconsole_port = {port}'))
        assert f"console_port {port}: the ledger page cannot listen" in _refused_in_one_line(toml)
        with pytest.raises(ConfigError, match=f"console_port {port}"):
            ThreadParty(PartyConfig.load(toml))
    toml.write_text(toml.read_text().replace(f"console_port = {port}", "console_port = -1"))
    stop_parties([ThreadParty(PartyConfig.load(toml))])  # the failed start let go of the ledger and its lock


def test_status_into_a_closed_pipe_is_quiet(tmp_path, pki, monkeypatch, capsys):
    running = serve(CoordinatorConfig(listen="127.0.0.1:0", state_dir=tmp_path / "st", tls=pki.files("coordinator")))
    r, w = os.pipe()
    os.close(r)  # the reader (head) is gone
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(os.fdopen(w, "wb"), write_through=True))
    try:
        code = main(["status", "--coordinator", f"127.0.0.1:{running.port}", "--cert",
                     str(pki.files("operator").cert)])
    finally:
        running.stop(0.2)
    assert code == 141
    assert "Traceback" not in capsys.readouterr().err


def test_dropout_out_of_range_is_refused_at_parse_time(capsys):
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as ex:
        main(["simulate", "--algorithm", "naive-bayes", "--dataset", "nursery", "--parties", "3", "--epsilon", "1",
              "--noise", "distributed", "--dropout", "1.5"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and "--dropout" in err and "[0, 1)" in err and len(err.strip().splitlines()) == 1
    assert time.monotonic() - t0 < 10  # no party was started


def test_resume_is_suggested_only_where_it_can_succeed():
    assert any(m in "bad job: ValueError: k exceeds the records" for m in HOPELESS)
    assert any(m in "its reported privacy event differs from the job's plan (recomputed by the coordinator)"
               for m in HOPELESS)
    assert not any(m in "timed out after 300 s waiting for answers from party-1" for m in HOPELESS)
    assert resume_hint("timed out", "j") == "continue it with: dpfed job resume j"
    assert "raise their limits" in resume_hint("p refused: privacy budget exceeded for job 'j'", "j")
