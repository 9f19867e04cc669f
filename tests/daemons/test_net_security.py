"""Mutual TLS over real sockets: unknown CAs, missing certificates, impersonation, wrong roles."""
from __future__ import annotations

import grpc
import pytest

from net_helpers import admin, make_pki, raw_stub, register, start_coordinator
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos.codec import PROTOCOL_VERSION


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    root = tmp_path_factory.mktemp("sec")
    pki = make_pki(root)
    server = start_coordinator(pki, root / "state")
    yield pki, server
    server.stop(0.5)


def _code(fn) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value


def test_valid_party_registers(net):
    pki, server = net
    ch, stub = raw_stub(pki, server.port, "party-0")
    with ch:
        assert len(register(stub, "party-0")) == 32


def test_certificate_from_another_ca_is_refused_and_server_keeps_serving(net):
    pki, server = net
    ch, stub = raw_stub(pki, server.port, "party-0", evil=True)
    with ch:
        err = _code(lambda: register(stub, "party-0"))
    assert err.code() == grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails
    with admin(pki, server.port, evil=True) as a:
        assert _code(a.status).code() == grpc.StatusCode.UNAVAILABLE
    ch, stub = raw_stub(pki, server.port, "party-1")
    with ch:
        assert register(stub, "party-1")


def test_client_without_certificate_is_refused(net):
    pki, server = net
    creds = grpc.ssl_channel_credentials(root_certificates=pki.files("party-0").ca.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{server.port}", creds) as ch:
        err = _code(lambda: register(pbg.PartyStub(ch), "party-0"))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:  # plain text to a TLS server
        err = _code(lambda: register(pbg.PartyStub(ch), "party-0"))
    assert err.code() == grpc.StatusCode.UNAVAILABLE


def test_party_claiming_another_name_is_refused(net):
    pki, server = net
    ch, stub = raw_stub(pki, server.port, "party-1")
    with ch:
        err = _code(lambda: register(stub, "party-2"))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "issued to 'party-1'" in err.details() and "'party-2'" in err.details()


def test_session_of_another_party_is_refused(net):
    pki, server = net
    ch0, stub0 = raw_stub(pki, server.port, "party-0")
    ch1, stub1 = raw_stub(pki, server.port, "party-1")
    with ch0, ch1:
        token = register(stub0, "party-0")
        resp = pb.JobResponse(version=PROTOCOL_VERSION, session=token, job_id="x", round=-1, accept=False)
        err = _code(lambda: stub1.RespondJob(resp, timeout=10))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "belongs to 'party-0'" in err.details()
        err = _code(lambda: stub0.RespondJob(pb.JobResponse(version=PROTOCOL_VERSION, session="forged", job_id="x",
                                                            round=-1), timeout=10))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED


def test_roles_are_enforced(net):
    pki, server = net
    with admin(pki, server.port, name="party-0") as a:  # a party may not operate the coordinator
        err = _code(a.status)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "operator" in err.details()
    ch, stub = raw_stub(pki, server.port, "operator")   # an operator may not pose as a party
    with ch:
        err = _code(lambda: register(stub, "operator"))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    with admin(pki, server.port) as a:
        assert "parties" in a.status()


def test_insecure_mode_works_and_warns_loudly(tmp_path, capsys):
    import dataclasses

    from coordinator.client import AdminClient
    from coordinator.config import CoordinatorConfig
    from coordinator.server import serve
    from net_helpers import PLUGINS, ThreadParty, party_config

    pki = make_pki(tmp_path, parties=1)
    server = serve(CoordinatorConfig(listen="127.0.0.1:0", state_dir=tmp_path / "state", insecure=True,
                                     plugins=PLUGINS))
    cfg = dataclasses.replace(party_config(pki, tmp_path, "party-0", server.port), insecure=True, tls=None)
    party = ThreadParty(cfg)
    try:
        assert server.coordinator.wait_for_parties(["party-0"], 20)
        with AdminClient(f"127.0.0.1:{server.port}", insecure=True) as adm:
            job = adm.submit_job("noisy-mean", {"rounds": 1}, epsilon=1.0, delta=0.0)
            assert adm.wait(job, timeout=30)["state"] == "done"
    finally:
        party.stop()
        server.stop(0.5)
    err = capsys.readouterr().err
    assert err.count("WITHOUT TLS") >= 3  # coordinator, party and operator client each warn
