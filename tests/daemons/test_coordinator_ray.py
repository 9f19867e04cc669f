"""The coordinator on a Ray cluster (issue 12): ingress shards as Ray actors, over real sockets with
mutual TLS and real party daemons.

Checked against what the test observes itself: parties are spread over the shards (the shards'
own view, via ``status``); every round the central driver receives one partial aggregate per shard,
never one per party (a spy on the collect step); the model is the parties' mean within the noise
(Laplace, bound far above 8 standard deviations); a party that leaves mid-job and comes back is
re-offered the job and resent its round through its shard; the shard refuses registration, job
answers, operator and foreign-CA certificates, and the central process refuses results and streams
of sharded sessions; a secure-aggregation job through the shards gives exactly the in-process model
(the masks cancel; same seeds) while the SecAgg server receives one masked partial sum per shard.
"""
from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytest.importorskip("ray")

from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.data.datasets import split_parties  # noqa: E402
from dpfed.federation.tls import channel_credentials  # noqa: E402
from dpfed.simulation.grpc_local import run_grpc_simulation  # noqa: E402
from dpfed.simulation.inprocess import run_inprocess  # noqa: E402
from masked_spy import spy_masked_parts  # noqa: E402
from net_helpers import (  # noqa: E402
    SCHEMA,
    ThreadParty,
    admin,
    make_pki,
    party_config,
    party_data,
    raw_stub,
    start_coordinator,
    wait_until,
)
from protos import dpfed_pb2 as pb  # noqa: E402
from protos import dpfed_pb2_grpc as pbg  # noqa: E402
from protos.codec import PROTOCOL_VERSION, SESSION_METADATA  # noqa: E402

SHARDS = {"ray_address": "auto", "shards": 2, "shard_host": "127.0.0.1", "shard_advertise": "127.0.0.1"}


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
        for p in parties:
            p.stop()
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
        for p in parties:
            p.stop()
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
