"""Protocol checks over real sockets: malformed and oversized messages, wrong versions, unknown
job/round/task ids, replayed and duplicated results. One real party daemon and one hand-driven
party (a raw stub answering with the real algorithm) take part in the same job."""
from __future__ import annotations

import json

import grpc
import numpy as np
import pytest

from dpfed.algorithms.contract import JobSpec, Task
from dpfed.core.accounting import event_to_json
from dpfed.core.rng import SecureRNG
from net_helpers import SCHEMA, admin, party_data, raw_stub, register
from net_noisy_mean import NoisyMeanParty
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION, SESSION_METADATA, ArrayAssembler, encode_arrays


@pytest.fixture()
def net(pki, coordinator, thread_party, tmp_path):
    thread_party("party-0", coordinator.port)
    return pki, coordinator, tmp_path


def _err(fn) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value


def test_malformed_bytes_and_wrong_version_keep_the_server_up(net):
    pki, server, _ = net
    ch, stub = raw_stub(pki, server.port, "party-1")
    with ch:
        raw = ch.unary_unary("/dpfed.v1.Party/Register")  # no serializer: send raw bytes
        err = _err(lambda: raw(b"\xff\xff\xff\x0f garbage", timeout=10))
        assert err.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
        req = pb.RegisterRequest(version=99, party="party-1", schema_json=SCHEMA.to_json(), epsilon_limit=1,
                                 delta_limit=1e-6)
        err = _err(lambda: stub.Register(req, timeout=10))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "version 99" in err.details()
        req.version, req.schema_json = PROTOCOL_VERSION, "{not json"
        assert _err(lambda: stub.Register(req, timeout=10)).code() == grpc.StatusCode.INVALID_ARGUMENT
        req.schema_json = SCHEMA.to_json()
        for field, value, why in (("epsilon_spent", float("nan"), "epsilon_spent must be finite"),
                                  ("epsilon_spent", -1.0, "epsilon_spent must be finite"),
                                  ("algorithms", ["a" * 100] * 10_000, "algorithms: at most 256 names"),
                                  ("algorithms", ["naive-bayes", "x\nforged log line"], "printable")):
            bad = pb.RegisterRequest()
            bad.CopyFrom(req)
            if field == "algorithms":
                bad.algorithms.extend(value)
            else:
                setattr(bad, field, value)
            err = _err(lambda bad=bad: stub.Register(bad, timeout=10))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and why in err.details(), err.details()
        assert "party-1" not in server.coordinator.store.parties  # nothing of the refused registrations kept
        assert register(stub, "party-1")


def test_oversized_message_is_refused(net):
    pki, server, _ = net
    ch, stub = raw_stub(pki, server.port, "party-1", max_bytes=64 * 1024 * 1024)
    with ch:
        big = pb.RegisterRequest(version=PROTOCOL_VERSION, party="party-1", schema_json="x" * (5 * 1024 * 1024))
        assert _err(lambda: stub.Register(big, timeout=20)).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert register(stub, "party-1")


def _ids(token, job, rnd, task):
    return dict(version=PROTOCOL_VERSION, session=token, job_id=job, round=rnd, task_id=task)


def _answer_parts(token, msg, spec, half, rng, X, **override):
    asm = ArrayAssembler()
    asm.add_all(msg.chunks)
    task = Task(msg.job_id, msg.round, msg.task.kind, json.loads(msg.task.params_json), asm.finish())
    half.check_task(spec, task)
    ids = _ids(token, msg.job_id, msg.round, msg.task_id)
    ids.update(override)
    out = half.answer(spec, task, X, None, rng)
    arrays = getattr(out, "arrays", out)  # built-ins return Released(arrays, events)
    return [pb.ResultPart(**ids, chunks=list(encode_arrays(arrays)), last=True)]


def test_ids_replays_and_duplicates(net):
    pki, server, _ = net
    ch, stub = raw_stub(pki, server.port, "party-1")
    with ch, admin(pki, server.port) as adm:
        token = register(stub, "party-1")
        md = ((SESSION_METADATA, token),)  # an upload names its session before its first part is read
        stream = stub.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=token))
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 20)
        job = adm.submit_job("noisy-mean", {"rounds": 3}, epsilon=1.0, delta=0.0, job_id="job-ids")
        msgs = (m for m in stream if m.WhichOneof("body") != "heartbeat")
        offer = next(msgs)
        assert offer.WhichOneof("body") == "offer" and offer.job_id == job
        spec = JobSpec.from_json(offer.offer.spec_json)
        half, rng, X = NoisyMeanParty(), SecureRNG.from_seed(1), party_data(seed=1)
        event = half.job_event(spec)
        accept = pb.JobResponse(**_ids(token, job, -1, ""), accept=True, event_json=event_to_json(event),
                                epsilon_job=1.0)
        bad = pb.JobResponse(**_ids(token, "job-nope", -1, ""), accept=True, event_json=event_to_json(event))
        assert _err(lambda: stub.RespondJob(bad, timeout=10)).code() == grpc.StatusCode.NOT_FOUND
        malformed = pb.JobResponse(**_ids(token, job, -1, ""), accept=True, event_json='{"class_name": "os"}')
        assert _err(lambda: stub.RespondJob(malformed, timeout=10)).code() == grpc.StatusCode.INVALID_ARGUMENT
        stub.RespondJob(accept, timeout=10)
        assert _err(lambda: stub.RespondJob(accept, timeout=10)).code() == grpc.StatusCode.ALREADY_EXISTS

        task0 = next(msgs)
        assert task0.WhichOneof("body") == "task" and task0.round == 0 and task0.last
        good = _answer_parts(token, task0, spec, half, rng, X)
        for override, code in [(dict(job_id="job-nope"), grpc.StatusCode.NOT_FOUND),
                               (dict(task_id="f" * 32), grpc.StatusCode.NOT_FOUND),
                               (dict(round=1), grpc.StatusCode.FAILED_PRECONDITION),
                               (dict(version=PROTOCOL_VERSION + 1), grpc.StatusCode.FAILED_PRECONDITION)]:
            parts = _answer_parts(token, task0, spec, half, rng, X, **override)
            err = _err(lambda parts=parts: stub.SubmitResult(iter(parts), timeout=10, metadata=md))
            assert err.code() == code, override
        err = _err(lambda: stub.SubmitResult(iter(good), timeout=10))  # no session in the call metadata
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED and SESSION_METADATA in err.details()
        forged = (("dpfed-session", "f" * 32),)
        assert _err(lambda: stub.SubmitResult(iter(good), timeout=10, metadata=forged)).code() == \
            grpc.StatusCode.UNAUTHENTICATED
        # malformed chunks (wrong size) and a stream that never sends its last part
        broken = pb.ResultPart(**_ids(token, job, 0, task0.task_id), last=True,
                               chunks=[pb.ArrayChunk(name="sum", dtype="<f8", shape=[4], total_bytes=32, data=b"1")])
        err = _err(lambda: stub.SubmitResult(iter([broken]), timeout=10, metadata=md))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed result" in err.details()
        unfinished = pb.ResultPart(**_ids(token, job, 0, task0.task_id), last=False)
        assert _err(lambda: stub.SubmitResult(iter([unfinished]), timeout=10, metadata=md)).code() == \
            grpc.StatusCode.INVALID_ARGUMENT
        stub.SubmitResult(iter(good), timeout=10, metadata=md)                       # accepted once
        err = _err(lambda: stub.SubmitResult(iter(good), timeout=10, metadata=md))   # replayed in the same round
        assert err.code() in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION)

        task1 = next(msgs)
        assert task1.round == 1
        err = _err(lambda: stub.SubmitResult(iter(good), timeout=10, metadata=md))   # replayed in a later round
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "replayed or out-of-order" in err.details()
        stub.SubmitResult(iter(_answer_parts(token, task1, spec, half, rng, X)), timeout=10, metadata=md)
        task2 = next(msgs)
        stub.SubmitResult(iter(_answer_parts(token, task2, spec, half, rng, X)), timeout=10, metadata=md)
        record = adm.wait(job, timeout=30)
        assert record["state"] == "done" and record["rounds"] == 3
        assert next(msgs).WhichOneof("body") == "job_end"
        model, _ = adm.get_model(job)
        assert np.all(np.abs(model["mean"] - 0.5) < 0.3)
        # the hand-driven party's accepted plan is in the global budget exactly once
        assert server.coordinator.store.spent("party-1") == pytest.approx(1.0, rel=1e-3)
        stream.cancel()


def test_a_party_refusal_reason_cannot_forge_log_lines_or_reach_the_terminal(net, caplog):
    """Before: a party's refusal reason was kept, logged and shown by ``dpfed status`` as it came: a newline
    forged coordinator log lines, an escape sequence reached the operator's terminal, any length was kept."""
    from dpfed.cli.coordinator import format_status

    pki, server, _ = net
    evil = "budget\x1b[2J\x1b]0;owned\x07\n2026-11-27 12:00:00 dpfed.coordinator INFO job x done FORGED" + "z" * 5000
    ch, stub = raw_stub(pki, server.port, "party-1")
    with ch, admin(pki, server.port) as adm, caplog.at_level("INFO", logger="dpfed"):
        token = register(stub, "party-1")
        stream = stub.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=token))
        assert server.coordinator.wait_for_parties(["party-1"], 20)
        job = adm.submit_job("noisy-mean", {"rounds": 2}, epsilon=1.0, delta=0.0, parties=["party-1"],
                             job_id="job-evil-reason")
        offer = next(m for m in stream if m.WhichOneof("body") != "heartbeat")
        assert offer.WhichOneof("body") == "offer"
        stub.RespondJob(pb.JobResponse(**_ids(token, job, -1, ""), accept=False, reason=evil), timeout=10)
        rec = adm.wait(job, timeout=30, raise_on_failure=False)
        table = format_status(adm.status())
        stream.cancel()
    kept = rec["refusals"]["party-1"]
    assert rec["state"] == "refused" and kept.startswith("budget\\x1b[2J") and "\\n2026" in kept
    assert kept.isprintable() and len(kept) <= 520 and rec["reason"].isprintable(), rec
    assert "\x1b" not in table and "\x07" not in table
    assert not [r for r in caplog.records if "FORGED" in r.getMessage() and "\n" in r.getMessage()]
