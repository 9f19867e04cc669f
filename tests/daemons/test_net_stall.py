"""One peer cannot stall the coordinator (issue 24): real gRPC, real mutual TLS, loopback only.

A party certificate with a valid session opens more idle ``SubmitResult`` calls than the coordinator
has handler threads (none sends a first message). Today's coordinator parks one thread per call until
every thread is taken; now each call is admitted against a per-certificate cap before it waits for a
message, the excess is refused at once with RESOURCE_EXHAUSTED, and the admitted ones are dropped when
they send nothing within ``idle_timeout``. Meanwhile another party registers and the operator reads
the status as usual. Other calls that never send their request (a unary ``Register`` opened as a
stream) get the same treatment.
"""
from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from coordinator.server import MAX_HANDLER_THREADS
from dpfed.federation.tls import channel_credentials
from net_helpers import SCHEMA, admin, make_pki, raw_stub, register, start_coordinator
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos.codec import PROTOCOL_VERSION, SESSION_METADATA, channel_options

IDLE = 2.0              # the coordinator's idle_timeout in this test (seconds)
PER_PEER = 16           # its max_calls_per_peer
FLOOD = MAX_HANDLER_THREADS + 52   # more idle calls than handler threads


class _Flood:
    """``n`` idle calls of ``method`` (never a first message) from one certificate, on one channel."""

    def __init__(self, pki, port: int, name: str, n: int, metadata=()) -> None:
        self.codes: list[grpc.StatusCode] = []
        self.opened = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._args = (pki, port, name, n, tuple(metadata))
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.thread.start()
        assert self.opened.wait(60), "the flood did not start"

    async def _main(self) -> None:
        pki, port, name, n, metadata = self._args
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()

        async def never():
            await self._stop.wait()
            return
            yield  # an async generator that yields nothing until the end of the test

        async def one(stub) -> None:
            try:
                await stub.SubmitResult(never(), metadata=metadata)
                self.codes.append(grpc.StatusCode.OK)
            except grpc.aio.AioRpcError as exc:
                self.codes.append(exc.code())

        creds = channel_credentials(pki.files(name))
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds, options=channel_options()) as ch:
            stub = pbg.PartyStub(ch)
            tasks = [asyncio.ensure_future(one(stub)) for _ in range(n)]
            await asyncio.sleep(1.0)
            self.opened.set()
            await self._stop.wait()
            await asyncio.wait(tasks, timeout=10)

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(timeout=30)


def _served_within(fn, seconds: float) -> float:
    t0 = time.monotonic()
    fn(seconds)
    took = time.monotonic() - t0
    assert took < seconds
    return took


@pytest.fixture()
def net(tmp_path):
    pki = make_pki(tmp_path / "pki", parties=2)
    server = start_coordinator(pki, tmp_path / "state", idle_timeout=IDLE, max_calls_per_peer=PER_PEER)
    yield pki, server
    server.stop(0.5)


def test_idle_result_streams_of_one_party_stall_no_one(net):
    pki, server = net
    ch0, stub0 = raw_stub(pki, server.port, "party-0")
    token = register(stub0, "party-0")
    flood = _Flood(pki, server.port, "party-0", FLOOD, metadata=[(SESSION_METADATA, token)])
    try:
        t_flooded = time.monotonic()
        ch1, stub1 = raw_stub(pki, server.port, "party-1")
        with ch1, admin(pki, server.port) as adm:
            _served_within(lambda s: stub1.Register(pb.RegisterRequest(
                version=PROTOCOL_VERSION, party="party-1", schema_json=SCHEMA.to_json(), epsilon_limit=10.0,
                delta_limit=1e-6),
                timeout=s), 5.0)
            _served_within(lambda s: adm.status(), 5.0)
        # the excess is refused at once, the admitted idle calls are dropped after IDLE seconds of silence
        deadline = t_flooded + IDLE + 20
        while len(flood.codes) < FLOOD and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(flood.codes) == FLOOD, f"{FLOOD - len(flood.codes)} idle calls still open after {IDLE + 20} s"
        # most are refused outright (the admitted ones, PER_PEER at a time, end CANCELLED)
        assert sum(c == grpc.StatusCode.RESOURCE_EXHAUSTED for c in flood.codes) >= FLOOD // 2
        assert set(flood.codes) <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED}, set(flood.codes)

    finally:
        flood.close()
        ch0.close()
    # the same certificate is served again once its calls are gone
    assert server.coordinator.status()["parties"]


def test_a_call_that_never_sends_its_request_is_dropped(net):
    """``Register`` opened as a stream that sends nothing: today it parks a handler thread forever."""
    pki, server = net
    ch, _ = raw_stub(pki, server.port, "party-0")
    with ch:
        call = ch.stream_unary("/dpfed.v1.Party/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                               response_deserializer=pb.RegisterReply.FromString)
        gate = threading.Event()

        def nothing():
            gate.wait(IDLE + 20)
            return
            yield

        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            call(nothing(), timeout=IDLE + 20)
        gate.set()
        assert err.value.code() == grpc.StatusCode.CANCELLED, err.value
        assert time.monotonic() - t0 < IDLE + 5
