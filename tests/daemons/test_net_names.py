"""Job ids are valid names and JSON on the wire is bounded, at both ends (issue 24).

A job id with a newline forged lines in the party's log (``re.match`` with ``$`` let a trailing
newline through) and deeply nested JSON raised an unhandled RecursionError at the coordinator.
Now one rule (:mod:`dpfed.core.names`) refuses such ids at ``SubmitJob`` and at the party, and
JSON texts are measured before they are parsed (:mod:`protos.wire_json`).
"""
from __future__ import annotations

import json
import logging
import queue

import grpc
import pytest

from dpfed.algorithms.contract import JobSpec
from evil_coordinator import EvilCoordinator
from net_helpers import SCHEMA, ThreadParty, admin, make_pki, party_config, raw_stub, start_coordinator
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION

BAD_IDS = ["job\nINFO dpfed.party forged line", "job\n", "job\x00x", "job\r", "a" * 65, "../etc", "-job", ""]
DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), parties=1)


def _code(fn) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value


def test_the_coordinator_refuses_bad_job_ids_and_deep_json(pki, tmp_path):
    server = start_coordinator(pki, tmp_path / "state")
    try:
        with admin(pki, server.port) as adm:
            for bad in BAD_IDS[:-1]:  # "" means: the coordinator picks an id
                err = _code(lambda bad=bad: adm.submit_job("noisy-mean", {"rounds": 1}, epsilon=1.0, job_id=bad))
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "job id" in err.details(), bad
            stub = adm._stub
            req = pb.SubmitJobRequest(version=PROTOCOL_VERSION, algorithm="noisy-mean",
                                      params_json='{"epsilon": 1, "x": ' + DEEP + "}")
            err = _code(lambda: stub.SubmitJob(req, timeout=10))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "nested" in err.details()
            req = pb.SubmitJobRequest(version=PROTOCOL_VERSION, algorithm="noisy-mean", params_json='{"epsilon": 1}',
                                      schema_json=DEEP)
            err = _code(lambda: stub.SubmitJob(req, timeout=10))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "nested" in err.details()
            assert adm.status()["jobs"] == []          # nothing was queued, and the server still serves
        ch, party = raw_stub(pki, server.port, "party-0")
        with ch:
            req = pb.RegisterRequest(version=PROTOCOL_VERSION, party="party-0", schema_json=DEEP,
                                     epsilon_limit=1.0, delta_limit=1e-6)
            err = _code(lambda: party.Register(req, timeout=10))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "nested" in err.details()
            req = pb.RegisterRequest(version=PROTOCOL_VERSION, party="party-0\n", schema_json=SCHEMA.to_json(),
                                     epsilon_limit=1.0, delta_limit=1e-6)
            assert _code(lambda: party.Register(req, timeout=10)).code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        server.stop(0.5)


def test_the_party_refuses_bad_job_ids_and_deep_task_json(pki, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with EvilCoordinator(pki.files("coordinator")) as ev:
        party = ThreadParty(party_config(pki, tmp_path, "party-0", ev.port, seed=None))
        try:
            ev.wait_registered()
            good = JobSpec("good", "noisy-mean", {"epsilon": 1.0, "delta": 0.0, "rounds": 1}, SCHEMA)
            for bad in BAD_IDS:
                text = json.dumps({**json.loads(good.to_json()), "job_id": bad})
                # the spec names a bad id: refused with a reason, nothing charged
                ev._send([pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id="good", round=-1,
                                                offer=pb.JobOffer(spec_json=text))], None)
                resp = ev.responses.get(timeout=30)
                assert not resp.accept and "invalid job id" in resp.reason, (bad, resp.reason)
                # the message itself names a bad id: ignored (no answer, no log line of its own)
                ev._send([pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id=bad, round=-1,
                                                offer=pb.JobOffer(spec_json=text)),
                          pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id=bad, round=-1, job_end="x")], None)
                with pytest.raises(queue.Empty):
                    ev.responses.get(timeout=0.5)
            assert party.daemon.ledger.charge_ids() == []
            assert ev.offer(good).accept                  # the daemon still serves
            ev._send([pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id="good", round=0, task_id="e" * 32,
                                            last=True, task=pb.TaskHeader(kind="mean", params_json=DEEP))], None)
            res = ev.results.get(timeout=30)
            assert res.error and "nested" in res.error, res.error
            assert party.thread.is_alive()
        finally:
            party.stop()
            assert party.error is None
    forged = [r for r in caplog.records if "forged line" in r.getMessage() and "\n" in r.getMessage()]
    assert not forged, [r.getMessage() for r in forged]


def _depth(v) -> int:
    """Nesting depth of a parsed JSON value, by recursion (the reference for :func:`json_depth`)."""
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    return 0


def test_json_depth_matches_the_parsed_structure_whatever_the_strings_hold():
    import numpy as np

    from protos.wire_json import json_depth

    rng = np.random.default_rng(7)
    tricky = ['[', ']', '{', '}', '"', '\\', '\\"', '[{"', '\\\\', 'a\nb', '\u00e9']

    def value(d: int):
        k = int(rng.integers(4)) if d < 12 else 3
        if k == 0:
            return [value(d + 1) for _ in range(int(rng.integers(3)))]
        if k == 1:
            return {"".join(rng.choice(tricky, 2)): value(d + 1) for _ in range(int(rng.integers(3)))}
        return "".join(rng.choice(tricky, int(rng.integers(4)))) if k == 2 else int(rng.integers(9))

    for _ in range(300):
        v = value(0)
        text = json.dumps(v, ensure_ascii=bool(rng.integers(2)))
        assert json_depth(text) == _depth(json.loads(text)), text
