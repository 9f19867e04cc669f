"""An ingress shard: one of the coordinator's party-facing gRPC fronts on a Ray cluster (issue 12).

With ``dpfed coordinator serve --ray-address ADDR`` the coordinator keeps registration, job offers
and answers to them (``Register``, ``RespondJob``), the job drivers, checkpoints and the global
budget in its own process, central and durable as without Ray. The parties' data path runs through
``shards`` Ray actors of this class, spread over the cluster's nodes: each serves ``TaskStream`` and
``SubmitResult`` on its own port with the coordinator's certificate (mutual TLS, the same CA, the
same checks on every call: a party certificate, not revoked, the session issued to that name).

A party learns its shard in ``RegisterReply.shard`` and opens its task stream there. The central
process tells the shard, in order, which sessions exist, what to put on their streams and which
answers to expect (:meth:`IngressShard.apply`); the shard checks every result (job, round, task
id, one per party, a party that accepted the job) exactly as the single-process coordinator does,
and once all its parties have answered a round it merges their answers with the algorithm's
``combine`` (a sum for most releases) and hands the central driver **one partial aggregate per
shard**: the driver combines O(shards) arrays per round, not O(parties) (a two-level reduction
tree). Under secure aggregation the masked inputs are merged likewise, by the merge the central
process sends with the round (a sum mod 2^B naming its parties,
:func:`~dpfed.federation.secure_wire.merge_masked`): one masked partial sum per shard. The public
SecAgg steps (adverts, unmask answers), which the SecAgg half needs party by party, are passed
on per party.

Heartbeats keep idle streams alive; stream open/close events go back to the central process
through :meth:`IngressShard.events` (long-polled), so a party that drops is noticed as before.
"""
from __future__ import annotations

import logging
import queue
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import grpc
import numpy as np

from coordinator.gate import gated_server
from coordinator.rpc import (Abort, admit_result, caller, check_session, check_version, first_part, guard, guard_stream,
                             metadata_session, outbox_stream, read_result)
from dpfed.algorithms.contract import Aggregate, Task
from dpfed.federation.plugins import load_algorithm
from dpfed.federation.tls import TlsFiles, server_credentials
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos.codec import PROTOCOL_VERSION, ProtocolError

__all__ = ["IngressShard", "ShardSettings"]

log = logging.getLogger("dpfed.coordinator.ingress")


@dataclass(frozen=True)
class ShardSettings:
    """What a shard needs from the coordinator's config (picklable; PEM bytes, not paths, so a shard
    on another node needs no shared file system)."""

    index: int
    host: str                                   # interface to listen on
    port: int                                   # 0: a free port
    advertise: str                              # host parties dial ("" = this node's IP)
    tls_pem: tuple[bytes, bytes, bytes] | None  # (ca, cert, key); None = insecure
    crl_pem: bytes | None
    insecure: bool
    max_message_bytes: int
    min_ping_interval: float
    heartbeat_seconds: float
    plugins: tuple[str, ...] = ()
    max_calls_per_peer: int = 32                # the coordinator's limits (coordinator/config.py, issue 24)
    idle_timeout: float = 30.0
    handshake_timeout: float = 10.0
    max_connections: int = 0


@dataclass
class _Session:
    name: str
    token: str
    outbox: "queue.Queue[pb.CoordinatorMessage | None]" = field(default_factory=queue.Queue)
    streaming: bool = False
    closed: bool = False


@dataclass
class _Round:
    """The current task of one job, as far as this shard's parties are concerned."""

    round: int
    task_id: str
    task: Task
    algorithm: str
    parties: frozenset[str]         # this shard's parties that must answer
    per_party: bool                 # hand answers on one by one (public secure aggregation steps)
    tolerant: bool                  # a refusal is a dropout (secure aggregation), not a job failure
    merge: Any = None               # this round's combine instead of the algorithm's (masked inputs)
    answers: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    receiving: set[str] = field(default_factory=set)
    closed: bool = False


class IngressShard:
    """A Ray actor (created by :class:`coordinator.shards.ShardPool`); thread-safe."""

    def __init__(self, settings: ShardSettings) -> None:
        self.s = settings
        self._cond = threading.Condition()
        self._sessions: dict[str, _Session] = {}           # token -> session
        self._ready: dict[str, set[str]] = {}              # job id -> parties that accepted it
        self._rounds: dict[str, _Round] = {}               # job id -> current round
        self._events: list[tuple[str, str, str]] = []      # (kind, token, name) for the central process
        self._combine: dict[str, Any] = {}
        self._tls: TlsFiles | None = None
        if settings.tls_pem is not None:
            d = Path(tempfile.mkdtemp(prefix=f"dpfed-shard{settings.index}-"))
            for name, data in zip(("ca.crt", "shard.crt", "shard.key"), settings.tls_pem, strict=True):
                (d / name).write_bytes(data)
            (d / "shard.key").chmod(0o600)
            if settings.crl_pem:
                (d / "crl.pem").write_bytes(settings.crl_pem)
            self._tls = TlsFiles(d / "ca.crt", d / "shard.crt", d / "shard.key")
        self._server, gate = gated_server(
            max_workers=2048, max_message_bytes=settings.max_message_bytes, min_ping_interval=settings.min_ping_interval,
            max_calls_per_peer=settings.max_calls_per_peer, idle_timeout=settings.idle_timeout,
            handshake_timeout=settings.handshake_timeout, max_connections=settings.max_connections,
            name="dpfed-shard")
        gate.add_service(pbg.add_PartyServicer_to_server, _ShardService(self), self._server)
        listen = f"{settings.host}:{settings.port}"
        if settings.insecure or self._tls is None:
            port = self._server.add_insecure_port(listen)
        else:
            port = self._server.add_secure_port(listen, server_credentials(self._tls))
        if port == 0:
            raise OSError(f"ingress shard {settings.index} could not listen on {listen}")
        self._server.start()
        host = settings.advertise
        if not host:
            import ray

            host = ray.util.get_node_ip_address()
        self._address = f"{host}:{port}"
        log.info("ingress shard %d listening on %s", settings.index, self._address)

    # ------------------------------------------------------------------ from the central process
    def address(self) -> str:
        return self._address

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def apply(self, ops: list[tuple]) -> None:
        """Apply the central process's operations in order (one sender per shard keeps them ordered)."""
        with self._cond:
            for op in ops:
                getattr(self, f"_op_{op[0]}")(*op[1:])
            self._cond.notify_all()

    def _op_open(self, token: str, name: str) -> None:
        for old in [s for s in self._sessions.values() if s.name == name]:
            self._op_close(old.token)
        self._sessions[token] = _Session(name, token)

    def _op_close(self, token: str) -> None:
        sess = self._sessions.pop(token, None)
        if sess is not None and not sess.closed:
            sess.closed = True
            sess.outbox.put(None)

    def _op_send(self, tokens: list[str], msgs: list[pb.CoordinatorMessage]) -> None:
        for t in tokens:
            sess = self._sessions.get(t)
            if sess is not None and not sess.closed:
                for m in msgs:
                    sess.outbox.put(m)

    def _op_expect(self, job_id: str, round_: int, task_id: str, task: Task, algorithm: str,
                   parties: list[str], per_party: bool, tolerant: bool, merge: Any = None) -> None:
        self._rounds[job_id] = _Round(round_, task_id, task, algorithm, frozenset(parties), per_party, tolerant,
                                      merge)

    def _op_ready(self, job_id: str, name: str, ready: bool) -> None:
        (self._ready.setdefault(job_id, set()).add if ready else self._ready.setdefault(job_id, set()).discard)(name)

    def _op_resend(self, job_id: str, round_: int, task_id: str, token: str, msgs: list[pb.CoordinatorMessage],
                   expect: tuple | None = None) -> None:
        """The party came back: give its new session the round's task unless its answer is in or arriving.
        ``expect`` (the round's expectation, as in ``_op_expect``) re-creates the round on a shard that lost
        it (restarted by Ray after a crash): its parties come back and their sessions replay stored answers."""
        r = self._rounds.get(job_id)
        if expect is not None and (r is None or r.round < round_):
            self._op_expect(*expect)
        r, sess = self._rounds.get(job_id), self._sessions.get(token)
        if (r is None or sess is None or r.closed or r.round != round_ or r.task_id != task_id
                or sess.name in r.answers or sess.name in r.receiving or sess.name in r.errors):
            return
        for m in msgs:
            sess.outbox.put(m)

    def _op_crl(self, pem: bytes) -> None:
        """The deployment's revocation list changed at the coordinator: use the new one from now on."""
        if self._tls is None:
            return
        path = Path(self._tls.ca).parent / "crl.pem"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pem)
        tmp.replace(path)  # peer_revoked re-reads it (keyed by modification time and size)

    def _op_end(self, job_id: str) -> None:
        self._rounds.pop(job_id, None)
        self._ready.pop(job_id, None)

    def events(self, timeout: float = 1.0) -> list[tuple[str, str, str]]:
        """Stream opened/closed events since the last call (waits up to ``timeout`` s for one)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._events and time.monotonic() < deadline:
                self._cond.wait(max(deadline - time.monotonic(), 0.0))
            out, self._events = self._events, []
            return out

    def collect(self, job_id: str, round_: int, task_id: str, wait: float, final: bool = False) -> dict[str, Any]:
        """The round's answers from this shard's parties, waiting up to ``wait`` s for the last ones.

        Returns ``complete`` (every party answered or refused), ``errors`` (party -> reason),
        ``missing`` (parties not yet in) and, once complete (or ``final``: the central process gave
        up waiting), ``parts``: one combined :class:`Aggregate` (none if the merge left every answer
        out) or, per party, one each."""
        deadline = time.monotonic() + wait
        with self._cond:
            while True:  # the round's expectation may still be on its way (another call path)
                r = self._rounds.get(job_id)
                if r is not None and r.round == round_ and r.task_id == task_id:
                    break
                if (r is not None and r.round > round_) or time.monotonic() >= deadline:
                    return {"complete": False, "errors": {}, "missing": [], "parts": [],
                            "stale": r is not None and r.round > round_}
                self._cond.wait(max(deadline - time.monotonic(), 0.0))
            while not self._done(r) and time.monotonic() < deadline:
                self._cond.wait(max(deadline - time.monotonic(), 0.0))
            complete = self._done(r)
            out: dict[str, Any] = {"complete": complete, "errors": dict(r.errors), "stale": False,
                                   "missing": sorted(r.parties - set(r.answers) - set(r.errors)), "parts": []}
            if not (complete or final):
                return out
            r.closed = True
            answers = sorted(r.answers.items())
        if not answers:
            return out
        parts = [Aggregate(a, (name,)) for name, a in answers]
        if r.per_party:
            out["parts"] = parts
        else:
            combine = r.merge or self._combine.get(r.algorithm)
            if combine is None:
                combine = self._combine[r.algorithm] = load_algorithm(r.algorithm, self.s.plugins).combine
            merged = combine(r.task, parts)
            out["parts"] = [merged] if merged.parties else []
        return out

    @staticmethod
    def _done(r: _Round) -> bool:
        return not r.receiving and set(r.answers) | set(r.errors) >= r.parties

    def stop(self, grace: float = 1.0) -> None:
        with self._cond:
            for t in list(self._sessions):
                self._op_close(t)
        self._server.stop(grace).wait()

    # ------------------------------------------------------------------ gRPC (parties)
    def _session(self, context: grpc.ServicerContext, version: int, token: str) -> _Session:
        check_version(version)
        name = caller(context, "party", insecure=self.s.insecure, tls=self._tls)
        with self._cond:
            return check_session(self._sessions.get(token), name)

    def task_stream(self, req: pb.StreamRequest, context: grpc.ServicerContext) -> Iterator[pb.CoordinatorMessage]:
        sess = self._session(context, req.version, req.session)
        with self._cond:
            if sess.streaming:
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, "this session already has a task stream")
            sess.streaming = True
            self._events.append(("open", sess.token, sess.name))
            self._cond.notify_all()

        def gone() -> None:
            with self._cond:
                self._op_close(sess.token)
                self._events.append(("closed", sess.token, sess.name))
                self._cond.notify_all()

        context.add_callback(gone)
        yield from outbox_stream(sess.outbox, context, self.s.heartbeat_seconds)

    def submit_result(self, parts: Iterator[pb.ResultPart], context: grpc.ServicerContext) -> pb.ResultAck:
        sess = self._session(context, PROTOCOL_VERSION, metadata_session(context))  # before any part is read
        first = first_part(parts, sess.token)
        name = sess.name
        with self._cond:
            r = self._rounds.get(first.job_id)
            if r is None:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"unknown job id {first.job_id!r}")
            admit_result(first, name, parties=r.parties, ready=self._ready.get(first.job_id, ()), round_=r.round,
                         closed=r.closed, task_id=r.task_id,
                         arrived=name in r.answers or name in r.errors or name in r.receiving)
            r.receiving.add(name)
        try:
            arrays, error = read_result(first, parts)
        except ProtocolError as exc:
            with self._cond:
                r.receiving.discard(name)
                self._cond.notify_all()
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed result: {exc}") from None
        except BaseException:
            with self._cond:
                r.receiving.discard(name)
                self._cond.notify_all()
            raise
        with self._cond:
            r.receiving.discard(name)
            if self._rounds.get(first.job_id) is not r or r.closed:
                self._cond.notify_all()
                raise Abort(grpc.StatusCode.FAILED_PRECONDITION, "the task was closed while the result arrived")
            if error:
                r.errors[name] = error
            else:
                r.answers[name] = arrays
            self._cond.notify_all()
        return pb.ResultAck(version=PROTOCOL_VERSION)


class _ShardService(pbg.PartyServicer):
    def __init__(self, shard: IngressShard) -> None:
        self.s = shard

    def Register(self, request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      "this is an ingress shard of the coordinator: register with the coordinator itself")

    def RespondJob(self, request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      "this is an ingress shard of the coordinator: answer job offers to the coordinator itself")

    @guard_stream
    def TaskStream(self, request, context):
        yield from self.s.task_stream(request, context)

    @guard
    def SubmitResult(self, request_iterator, context):
        return self.s.submit_result(request_iterator, context)
