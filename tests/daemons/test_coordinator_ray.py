"""The coordinator on a Ray cluster (issue 12): ingress shards as Ray actors, over real sockets with
mutual TLS and real party daemons.

Checked against what the test observes itself: parties are spread over the shards (the shards'
own view, via ``status``); every round the central driver receives one partial aggregate per shard,
never one per party (a spy on the collect step); the model is the parties' mean within the noise
(Laplace, bound far above 8 standard deviations); a party that leaves mid-job and comes back is
re-offered the job and resent its round through its shard; the shard refuses registration, job
answers, operator and foreign-CA certificates, and the central process refuses results and streams
of sharded sessions; a secure-aggregation job through the shards gives exactly the in-process model
(the masks cancel; same seeds) while the SecAgg server receives one masked partial sum per shard; SIGTERM to a
coordinator process takes its shards down within the grace and the job resumes (the last test).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytest.importorskip("ray")

from coordinator.config import CoordinatorConfig  # noqa: E402
from coordinator.server import serve  # noqa: E402
from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.data.datasets import split_parties  # noqa: E402
from dpfed.federation.shutdown import STOP_SECONDS  # noqa: E402
from dpfed.federation.tls import channel_credentials  # noqa: E402
from dpfed.simulation.grpc_local import run_grpc_simulation  # noqa: E402
from dpfed.simulation.inprocess import run_inprocess  # noqa: E402
from masked_spy import spy_masked_parts  # noqa: E402
from net_helpers import (  # noqa: E402
    PLUGINS,
    SCHEMA,
    ThreadParty,
    admin,
    free_port,
    ledger_charges,
    make_pki,
    party_config,
    party_data,
    raw_stub,
    sigterm,
    spawn_coordinator,
    start_coordinator,
    stop_parties,
    wait_until,
)
from protos import dpfed_pb2 as pb  # noqa: E402
from protos import dpfed_pb2_grpc as pbg  # noqa: E402
from protos.codec import PROTOCOL_VERSION, SESSION_METADATA  # noqa: E402

SHARDS = {"ray_address": "auto", "shards": 2, "shard_host": "127.0.0.1", "shard_advertise": "127.0.0.1"}
STOP_ROUNDS, STOP_STALL, STALL_SECONDS, GRACE = 8, 3, 3.0, 2.0   # the SIGTERM test's job; the daemons' grace


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    from dpfed.simulation.ray_runner import init_local_ray

    init_local_ray(num_cpus=2)
    yield
    ray.shutdown()


def _connected(client, n: int) -> bool:
    return sum(p["connected"] for p in client.status()["parties"]) >= n


def _register(stub, name: str) -> pb.RegisterReply:
    """Register ``name`` at the coordinator; the reply names the session and its ingress shard."""
    return stub.Register(pb.RegisterRequest(version=PROTOCOL_VERSION, party=name, schema_json=SCHEMA.to_json(),
                                            epsilon_limit=10.0, delta_limit=1e-6), timeout=20)


def _shard_stub(pki, address: str, name: str, evil: bool = False):
    ch = grpc.secure_channel(address, channel_credentials(pki.files(name, evil)))
    return ch, pbg.PartyStub(ch)


def test_a_job_runs_through_ingress_shards(ray_cluster, tmp_path):
    pki = make_pki(tmp_path / "pki", parties=6)
    server = start_coordinator(pki, tmp_path / "state", **SHARDS)
    coord = server.coordinator
    parts_per_round: list[int] = []
    collect = coord._collect

    def spy(act, parties, tolerant):
        parts = collect(act, parties, tolerant)
        parts_per_round.append(len(parts))
        return parts

    coord._collect = spy
    configs = [party_config(pki, tmp_path, f"party-{i}", server.port) for i in range(6)]
    parties = [ThreadParty(c) for c in configs]
    try:
        with admin(pki, server.port) as client:
            wait_until(lambda: _connected(client, 6), 60, "six parties connected through the shards")
            shards = client.status()["shards"]
            assert len(shards) == 2 and len({s["address"] for s in shards}) == 2
            assert sorted(len(s["parties"]) for s in shards) == [3, 3], shards
            job = client.submit_job("noisy-mean", {"rounds": 30, "width": 3, "epsilon": 8.0},
                                    parties=[f"party-{i}" for i in range(6)], job_id="sharded")
            # a party leaves mid-job and comes back: re-offered, resent its round through its shard
            wait_until(lambda: client.status()["jobs"][0]["rounds"] >= 5, 60, "round 5")
            parties[4].stop()
            parties[4] = ThreadParty(configs[4])
            rec = client.wait(job, timeout=180)
            assert rec["state"] == "done" and rec["rounds"] == 30, rec
            model, _ = client.get_model(job)
            wait_until(lambda: _connected(client, 6), 60, "party-4 back")
            text = coord.metrics.exposition().decode()  # the shards in the metrics (issue 28)
            metrics = {(m.name, tuple(sorted(m.labels.items()))): m.value
                       for fam in text_string_to_metric_families(text) for m in fam.samples}
    finally:
        stop_parties(parties)
        server.stop()
    assert parts_per_round and set(parts_per_round) == {2}, parts_per_round  # one part per shard, not per party
    assert metrics[("dpfed_rounds_total", (("algorithm", "noisy-mean"),))] == 30
    for i in ("0", "1"):
        assert metrics[("dpfed_shard_partial_aggregates_total", (("shard", i),))] == 30  # one part per round
        assert metrics[("dpfed_shard_connected_parties", (("shard", i),))] == 3
        assert metrics[("dpfed_shard_task_bytes_sent_total", (("shard", i),))] > 0
        assert metrics[("dpfed_shard_result_bytes_received_total", (("shard", i),))] > 0
    X = np.concatenate([party_data(seed=sum(map(ord, f"party-{i}"))) for i in range(6)])
    assert np.allclose(model["mean"], X.mean(axis=0), atol=0.1), (model["mean"], X.mean(axis=0))


def test_shards_and_the_centre_refuse_the_wrong_calls(ray_cluster, tmp_path):
    pki = make_pki(tmp_path / "pki", parties=2)
    server = start_coordinator(pki, tmp_path / "state", **SHARDS)
    ch, stub = raw_stub(pki, server.port, "party-0")
    try:
        reg = _register(stub, "party-0")
        assert reg.shard.startswith("127.0.0.1:") and reg.shard != f"127.0.0.1:{server.port}"
        with pytest.raises(grpc.RpcError) as exc:  # streams and results go to the shard
            next(stub.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=reg.session), timeout=10))
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION and reg.shard in exc.value.details()
        sch, shard = _shard_stub(pki, reg.shard, "party-0")
        with pytest.raises(grpc.RpcError) as exc:
            shard.Register(pb.RegisterRequest(version=PROTOCOL_VERSION, party="party-0"), timeout=10)
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as exc:
            next(shard.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session="forged"), timeout=10))
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        och, op = _shard_stub(pki, reg.shard, "operator")
        with pytest.raises(grpc.RpcError) as exc:
            next(op.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=reg.session), timeout=10))
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
        pch, other = _shard_stub(pki, reg.shard, "party-1")  # another party's certificate, party-0's session
        with pytest.raises(grpc.RpcError) as exc:
            next(other.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=reg.session), timeout=10))
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED and "belongs to 'party-0'" in exc.value.details()
        ech, evil = _shard_stub(pki, reg.shard, "party-0", evil=True)
        with pytest.raises(grpc.RpcError) as exc:
            next(evil.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=reg.session), timeout=10))
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake fails: foreign CA
        # the real session streams at the shard: the first message is a heartbeat or nothing
        stream = shard.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=reg.session))
        with admin(pki, server.port) as client:
            wait_until(lambda: _connected(client, 1), 30, "the stream at the shard to count as connected")
        stream.cancel()
        for c in (sch, och, pch, ech):
            c.close()
    finally:
        ch.close()
        server.stop()


def test_secure_aggregation_through_shards_matches_in_process(ray_cluster, adult, tmp_path, monkeypatch):
    """Each shard merges its parties' masked inputs: the SecAgg server (in this process, spied on)
    receives one masked partial sum per shard, of two parties each, never a party's own vector."""
    data = split_parties(adult.X_train, adult.y_train, 4, "iid", np.random.default_rng(0))
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": 3, "bits": 16}
    spec = JobSpec("secure-nb-shards", "naive-bayes", params, adult.schema)
    masked_parts = spy_masked_parts(monkeypatch)
    t0 = time.monotonic()
    net = run_grpc_simulation(spec, data, seed=5, workdir=tmp_path / "sim", timeout=600, coordinator=SHARDS)
    assert time.monotonic() - t0 < 600
    monkeypatch.undo()
    local = run_inprocess(spec, data, seed=5)
    assert net.summary["secure_aggregation"] is True and net.summary["dropped_rounds"] == 0
    assert masked_parts and all(sorted(map(len, parts)) == [2, 2] for parts in masked_parts), masked_parts
    assert all(sorted(n for p in parts for n in p) == [f"party-{i}" for i in range(4)] for parts in masked_parts)
    for k in ("class_count", "cat_log_prob", "num_mean", "num_var"):
        np.testing.assert_array_equal(net.model[k], local.model[k])


def test_a_certificate_revoked_at_the_coordinator_is_refused_by_its_shard(ray_cluster, tmp_path):
    import shutil

    from dpfed.federation import certs

    pki = make_pki(tmp_path / "pki", parties=2)
    server = start_coordinator(pki, tmp_path / "state", **SHARDS)
    ch, stub = raw_stub(pki, server.port, "party-1")
    try:
        reg = _register(stub, "party-1")
        sch, shard = _shard_stub(pki, reg.shard, "party-1")
        crl = certs.revoke("party-1", pki.root / "ca")
        shutil.copyfile(crl, pki.files("coordinator").ca.parent / "crl.pem")  # at the coordinator only

        def refused() -> bool:
            try:
                next(shard.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=reg.session), timeout=5))
            except grpc.RpcError as exc:
                return exc.code() == grpc.StatusCode.PERMISSION_DENIED and "revoked" in exc.details()
            return False

        wait_until(refused, 30, "the shard to refuse the revoked certificate")
        sch.close()
    finally:
        ch.close()
        server.stop()


def test_a_job_survives_a_crashed_shard(ray_cluster, tmp_path):
    """A shard actor killed mid-job is restarted by Ray; its parties register again, are re-offered the
    job (a resume: no second charge) and replay or answer the round; the job ends with every round."""
    import ray

    from dpfed.core.ledger import BudgetLedger

    pki = make_pki(tmp_path / "pki", parties=4)
    server = start_coordinator(pki, tmp_path / "state", **SHARDS)
    parties = [ThreadParty(party_config(pki, tmp_path, f"party-{i}", server.port)) for i in range(4)]
    try:
        with admin(pki, server.port) as client:
            wait_until(lambda: _connected(client, 4), 60, "four parties")
            job = client.submit_job("noisy-mean", {"rounds": 40, "width": 3, "epsilon": 8.0},
                                    parties=[f"party-{i}" for i in range(4)], job_id="crash")
            wait_until(lambda: client.status()["jobs"][0]["rounds"] >= 5, 60, "round 5")
            ray.kill(server.coordinator.pool.actors[0], no_restart=False)
            rec = client.wait(job, timeout=240)
            assert rec["state"] == "done" and rec["rounds"] == 40, rec
    finally:
        stop_parties(parties)
        server.stop()
    for i in range(4):
        with BudgetLedger(tmp_path / f"party-{i}" / "ledger.sqlite", epsilon_limit=10.0, delta_limit=1e-6) as led:
            assert led.charge_ids() == ["crash:plan"]


def test_an_ingress_shard_admits_calls_as_the_coordinator_does(ray_cluster, tmp_path):
    """Issue 24 at a shard: an upload without its session in the metadata is refused before it is read;
    idle uploads of one certificate beyond ``max_calls_per_peer`` are refused at once, the admitted ones
    dropped after ``idle_timeout``."""
    import threading

    pki = make_pki(tmp_path / "pki", parties=1)
    server = start_coordinator(pki, tmp_path / "state", **SHARDS, idle_timeout=2.0, max_calls_per_peer=4)
    ch, stub = raw_stub(pki, server.port, "party-0")
    release = threading.Event()

    def nothing():
        release.wait(30)
        return
        yield

    try:
        reg = _register(stub, "party-0")
        sch, shard = _shard_stub(pki, reg.shard, "party-0")
        with pytest.raises(grpc.RpcError) as exc:
            shard.SubmitResult(nothing(), timeout=10)
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED and SESSION_METADATA in exc.value.details()
        t0 = time.monotonic()
        calls = [shard.SubmitResult.future(nothing(), metadata=((SESSION_METADATA, reg.session),), timeout=30)
                 for _ in range(8)]
        codes = [c.exception().code() for c in calls]
        took = time.monotonic() - t0
        release.set()
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) >= 4, codes
        assert set(codes) == {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED}, codes
        assert took < 10, took
        sch.close()
    finally:
        release.set()
        ch.close()
        server.stop()


def _proc(pid: int, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_text(errors="replace")
    except OSError:
        return ""


def _shard_processes() -> list[int]:
    """The ingress shard actors' live worker processes of this test's Ray cluster (its raylet is a descendant of
    this process; the actors' workers are named ``ray::IngressShard``), from /proc."""
    parent = {}
    for entry in os.listdir("/proc"):
        stat = _proc(int(entry), "stat") if entry.isdigit() else ""
        if stat:
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parent[int(entry)] = int(fields[1])
    ours = {os.getpid()}
    for _ in range(6):  # the raylet's workers are a few generations below this process
        ours |= {pid for pid, pp in parent.items() if pp in ours}
    return sorted(pid for pid in ours if _proc(pid, "cmdline").startswith("ray::IngressShard"))


def _serving(addresses: list[str]) -> list[int]:
    """The shard worker processes listening on ``addresses`` (their socket inodes matched in /proc/net/tcp{,6})."""
    ports = {int(a.rpartition(":")[2]) for a in addresses}
    out = []
    for pid in _shard_processes():
        try:
            inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:  # it exited meanwhile
            continue
        for table in ("tcp", "tcp6"):
            for line in _proc(pid, f"net/{table}").splitlines()[1:]:
                f = line.split()
                if f[3] == "0A" and f[9] in inodes and int(f[1].rsplit(":", 1)[1], 16) in ports:  # LISTEN
                    out.append(pid)
    return sorted(set(out))


def _accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def test_sigterm_takes_the_ingress_shards_down_within_the_grace_and_the_job_resumes(ray_cluster, pki, tmp_path):
    """SIGTERM to a coordinator whose ingress shards are live (issue 29, the shards' part): ``dpfed coordinator
    serve`` (a real process) joins this module's Ray cluster, its two ingress shards (Ray actors, each a gRPC
    server with mutual TLS) serving two real party daemons. A multi-round job (the noisy-mean test plugin) keeps the
    coordinator's job runner busy 3 s absorbing round 3; SIGTERM lands in the middle of it, while the shards hold
    the parties' streams.

    Checked against what the test sees itself, not what the coordinator reports: the coordinator exits with status 0
    within the 2 s grace; both shard worker processes (found before the signal as this test's descendants running
    ``ray::IngressShard`` and listening on the shard addresses) are gone and nothing accepts a TCP connection on
    their ports within 1 s of the signal, before the coordinator's job-runner budget ends (before: 1.1 s, after the
    busy runner's join; and with a coordinator-started Ray instance, ``--ray-address local``, the shards outlived
    the coordinator's exit by 1-2 s). A coordinator restarted on the same state starts two fresh shards (two new
    addresses, two new shard processes serving them), the parties find them through registration, and the job
    ends with every planned round; every party's ledger, and the coordinator's mirror, hold exactly one charge.
    """
    import ray

    port = free_port()
    cluster = {**SHARDS, "ray_address": ray.get_runtime_context().gcs_address}  # the process joins this cluster
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in cluster.items())
    coord = spawn_coordinator(pki, tmp_path, port, extra)
    parties = [ThreadParty(party_config(pki, tmp_path, f"party-{i}", port, epsilon_limit=1e5)) for i in range(2)]
    try:
        with admin(pki, port) as adm:
            wait_until(lambda: sum(p["connected"] for p in adm.status()["parties"]) == 2, 60, "two parties")
            addresses = [s["address"] for s in adm.status()["shards"]]
            adm.submit_job("noisy-mean", {"rounds": STOP_ROUNDS, "width": 3, "absorb_stall_rounds": [STOP_STALL],
                                          "stall_seconds": STALL_SECONDS}, epsilon=100.0, delta=0.0, job_id="sigterm")
            wait_until(lambda: adm.status()["jobs"][0]["rounds"] >= STOP_STALL, 60, f"round {STOP_STALL}")
        time.sleep(1.0)  # round 3 answered, its absorb under way: the runner busy 2 s more at least
        shards = _serving(addresses)
        assert len(shards) == 2, (addresses, shards)  # one process serves each shard address
        t0 = time.monotonic()
        os.kill(coord.pid, signal.SIGTERM)
        while time.monotonic() - t0 < GRACE and (set(_shard_processes()) & set(shards)
                                                 or any(map(_accepts, addresses))):
            time.sleep(0.02)
        gone_after = time.monotonic() - t0
        rc, took = coord.wait(timeout=30), time.monotonic() - t0
        log = (tmp_path / "coordinator.log").read_text(errors="replace")
        assert rc == 0 and took < GRACE, (rc, took, log[-3000:])
        assert not set(_shard_processes()) & set(shards), f"shard processes still running {gone_after:.2f} s later"
        assert not any(map(_accepts, addresses)), f"a shard port still accepts {gone_after:.2f} s after SIGTERM"
        # taken down by the coordinator itself, first: not held up by its busy job runner (1 s) nor left to the
        # hard stop and Ray's cleanup after the process is gone
        assert gone_after < STOP_SECONDS < took, (gone_after, took)
        # the job resumes by itself; the coordinator restarted in this process (a Ray driver already: faster)
        again = serve(CoordinatorConfig(listen=f"127.0.0.1:{port}", state_dir=tmp_path / "state",
                                        tls=pki.files("coordinator"), plugins=PLUGINS, **SHARDS))
        try:
            with admin(pki, port) as adm:
                rec = adm.wait("sigterm", timeout=120)
                fresh = [s["address"] for s in adm.status()["shards"]]
            assert len(set(fresh) - set(addresses)) == 2 and len(_serving(fresh)) == 2, (fresh, addresses)
        finally:
            again.stop(0.5)
    finally:
        stop_parties(parties)
        if coord.poll() is None:
            sigterm(coord)
    assert rec["state"] == "done" and rec["rounds"] == STOP_ROUNDS and rec["resumes"] >= 1, json.dumps(rec)[:2000]
    for i in range(2):
        assert ledger_charges(tmp_path / f"party-{i}" / "ledger.sqlite") == ["sigterm:plan"]
        assert ledger_charges(tmp_path / "state" / "budget" / f"party-{i}.sqlite") == ["sigterm:plan"]
    print(f"\nSIGTERM: coordinator exit {took:.2f} s, shards and ports gone {gone_after:.2f} s")
