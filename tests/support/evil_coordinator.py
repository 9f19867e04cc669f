"""A hostile coordinator for the party's tests: it speaks the real protocol (the generated gRPC stubs,
mutual TLS, a valid certificate of the deployment's CA) but sends whatever the test asks for --
repeated rounds, re-offered jobs, poisoned broadcasts, absurd parameters -- and records every
byte the party sends back. Real party daemons (threads or processes) connect to it as they would
to the real coordinator."""
from __future__ import annotations

import itertools
import json
import queue
import secrets
import threading
from collections.abc import Mapping
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.federation.tls import TlsFiles, server_credentials
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos.codec import PROTOCOL_VERSION, ArrayAssembler, channel_options, chunk_groups, encode_arrays


@dataclass
class Result:
    """One ``SubmitResult`` of a party: its error, or its arrays (and the raw chunk bytes)."""

    party: str
    job_id: str
    round: int
    task_id: str
    error: str
    arrays: dict[str, np.ndarray]
    raw: bytes


@dataclass
class _Conn:
    name: str
    outbox: queue.Queue[pb.CoordinatorMessage | None] = field(default_factory=queue.Queue)


class EvilCoordinator(pbg.PartyServicer):
    """``with EvilCoordinator(tls) as evil:`` serves on a free loopback port (``evil.port``)."""

    def __init__(self, tls: TlsFiles | None, *, chunk_bytes: int = 1 << 20, max_workers: int = 16) -> None:
        self.tls, self.chunk_bytes = tls, chunk_bytes
        self._conns: dict[str, _Conn] = {}        # session token -> connection
        self._lock = threading.Lock()
        self.registered: queue.Queue[str] = queue.Queue()
        self.responses: queue.Queue[pb.JobResponse] = queue.Queue()
        self.results: queue.Queue[Result] = queue.Queue()
        self.reject_with: str | None = None       # RespondJob aborts with these details when set
        self._ids = itertools.count()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), options=channel_options())
        pbg.add_PartyServicer_to_server(self, self.server)
        addr = "127.0.0.1:0"
        self.port = (self.server.add_secure_port(addr, server_credentials(tls)) if tls is not None
                     else self.server.add_insecure_port(addr))

    def __enter__(self) -> EvilCoordinator:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        with self._lock:
            for c in self._conns.values():
                c.outbox.put(None)
        self.server.stop(0.2).wait(5)

    # ------------------------------------------------------------------ the Party service
    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.RegisterReply:
        token = secrets.token_hex(16)
        with self._lock:
            self._conns[token] = _Conn(request.party)
        self.registered.put(request.party)
        return pb.RegisterReply(version=PROTOCOL_VERSION, session=token)

    def TaskStream(self, request: pb.StreamRequest, context: grpc.ServicerContext):
        conn = self._conns.get(request.session)
        if conn is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown session")
        while context.is_active():
            try:
                msg = conn.outbox.get(timeout=0.5)
            except queue.Empty:
                continue
            if msg is None:
                return
            yield msg

    def RespondJob(self, request: pb.JobResponse, context: grpc.ServicerContext) -> pb.JobResponseAck:
        self.responses.put(request)
        if self.reject_with is not None:  # rejected with these details (the party's log must not trust them)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.reject_with)
        return pb.JobResponseAck(version=PROTOCOL_VERSION)

    def SubmitResult(self, request_iterator, context: grpc.ServicerContext) -> pb.ResultAck:
        asm, first, raw = ArrayAssembler(), None, bytearray()
        for part in request_iterator:
            first = first or part
            asm.add_all(part.chunks)
            for c in part.chunks:
                raw += c.data
        conn = self._conns.get(first.session)
        self.results.put(Result(conn.name if conn else "?", first.job_id, int(first.round), first.task_id,
                                first.error, {} if first.error else asm.finish(), bytes(raw)))
        return pb.ResultAck(version=PROTOCOL_VERSION)

    # ------------------------------------------------------------------ what the test drives
    def wait_registered(self, n: int = 1, timeout: float = 30.0) -> list[str]:
        return [self.registered.get(timeout=timeout) for _ in range(n)]

    def _send(self, msgs: list[pb.CoordinatorMessage], party: str | None) -> None:
        with self._lock:
            conns = [c for c in self._conns.values() if party is None or c.name == party]
            # the latest connection of each party (a reconnect registers again)
            latest = {c.name: c for c in conns}
        for c in latest.values():
            for m in msgs:
                c.outbox.put(m)

    def offer(self, spec: JobSpec | str, party: str | None = None, timeout: float = 60.0) -> pb.JobResponse:
        text = spec if isinstance(spec, str) else spec.to_json()
        job_id = json.loads(text).get("job_id", "") if text.startswith("{") else ""
        self._send([pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id=str(job_id), round=-1,
                                          offer=pb.JobOffer(spec_json=text))], party)
        return self.responses.get(timeout=timeout)

    def _task_messages(self, job_id: str, rnd: int, kind: str, params: Mapping[str, Any],
                       arrays: Mapping[str, np.ndarray]) -> tuple[str, list[pb.CoordinatorMessage]]:
        task_id = f"{next(self._ids):032x}"
        ids = dict(version=PROTOCOL_VERSION, job_id=job_id, round=rnd, task_id=task_id)
        groups = list(chunk_groups(encode_arrays(dict(arrays), self.chunk_bytes), self.chunk_bytes)) or [[]]
        msgs = []
        for i, g in enumerate(groups):
            m = pb.CoordinatorMessage(**ids, chunks=g, last=i == len(groups) - 1)
            if i == 0:
                m.task.CopyFrom(pb.TaskHeader(kind=kind, params_json=json.dumps(dict(params))))
            msgs.append(m)
        return task_id, msgs

    def task(self, job_id: str, rnd: int, kind: str, params: Mapping[str, Any] | None = None,
             arrays: Mapping[str, np.ndarray] | None = None, party: str | None = None,
             timeout: float = 120.0) -> Result:
        task_id, msgs = self._task_messages(job_id, rnd, kind, params or {}, arrays or {})
        self._send(msgs, party)
        res = self.results.get(timeout=timeout)
        assert res.task_id == task_id, "results arrived out of order"
        return res

    def offer_all(self, spec: JobSpec, parties: int, timeout: float = 120.0) -> list[pb.JobResponse]:
        """Offer ``spec`` to every connected party at once; the ``parties`` responses, in arrival order."""
        first = self.offer(spec, timeout=timeout)
        return [first] + [self.responses.get(timeout=timeout) for _ in range(parties - 1)]

    def scatter(self, job_id: str, rnd: int, kind: str,
                tasks: Mapping[str, tuple[Mapping[str, Any], Mapping[str, np.ndarray]]],
                timeout: float = 120.0) -> dict[str, Result]:
        """Send each named party its own task (params, arrays) at once; each party's result."""
        sent: dict[str, str] = {}
        for party, (params, arrays) in tasks.items():
            task_id, msgs = self._task_messages(job_id, rnd, kind, params, arrays)
            sent[task_id] = party
            self._send(msgs, party)
        out: dict[str, Result] = {}
        while len(out) < len(sent):
            res = self.results.get(timeout=timeout)
            assert res.task_id in sent and sent[res.task_id] == res.party, "a result of another task"
            out[res.party] = res
        return out

    def end(self, job_id: str, reason: str = "done", party: str | None = None) -> None:
        self._send([pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id=job_id, round=-1, job_end=reason)], party)
