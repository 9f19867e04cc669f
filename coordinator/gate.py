"""Admission for every gRPC call of the coordinator and of its ingress shards (issue 24).

gRPC's synchronous server runs each call on a thread of one pool, and it reads a call's request on
that thread: a peer that opens calls and never sends a message holds one thread per call for as long
as it likes, until ``Register`` and ``Status`` of everyone else wait for a free thread. So every
method is served as a request-streaming method (the wire is the same for the clients), and before a
call waits for any message:

- the caller is identified by its TLS certificate (on plain text: its address), and a call beyond
  ``per_peer`` calls open at once for that certificate, or beyond ``total`` for everyone (the pool
  minus a reserve for short calls), is refused with ``RESOURCE_EXHAUSTED``;
- every wait for a request message (the first, and each next part of an upload) is bounded by
  ``idle_seconds``: a call that sends nothing in time is cancelled and its thread freed.

The handlers then check the session (for uploads: in the call metadata, see
:data:`coordinator.rpc.SESSION_METADATA`), the role and the revocation list as before. The deadlines are kept by one
watchdog thread, not a timer per call.
"""
from __future__ import annotations

import hashlib
import heapq
import itertools
import resource
import threading
import time
from concurrent import futures
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import grpc

from coordinator.rpc import Abort
from protos.codec import server_options

__all__ = ["Gate", "RESERVED_THREADS", "connection_limit", "gated_server"]

#: Handler threads kept free of long calls (streams), for ``Register``, ``RespondJob``, ``Status``...
RESERVED_THREADS = 64


def connection_limit(configured: int) -> int:
    """The cap on open connections: the process's descriptor limit less a quarter of it (at least 64 left
    for files, the state store and Ray), or ``configured`` when that is lower; 0 (no cap) when neither
    bounds it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    derived = 0 if soft == resource.RLIM_INFINITY else max(soft - max(64, soft // 4), 8)
    if configured > 0:
        return min(configured, derived) if derived else configured
    return derived


def gated_server(*, max_workers: int, max_message_bytes: int, min_ping_interval: float, max_calls_per_peer: int,
                 idle_timeout: float, handshake_timeout: float, max_connections: int,
                 name: str) -> tuple[grpc.Server, "Gate"]:
    """A gRPC server with its handler pool, options and limits, and the :class:`Gate` to add services with."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name),
                         options=server_options(max_message_bytes, min_ping_interval,
                                                handshake_timeout_seconds=handshake_timeout,
                                                max_connections=connection_limit(max_connections)))
    gate = Gate(per_peer=max_calls_per_peer, total=max(max_workers - RESERVED_THREADS, 1), idle_seconds=idle_timeout)
    return server, gate


def _peer_key(context: grpc.ServicerContext) -> str:
    """The caller's certificate (its digest), or on plain text its network address without the port."""
    pem = context.auth_context().get("x509_pem_cert")
    if pem:
        return "cert:" + hashlib.sha256(pem[0]).hexdigest()
    return "addr:" + context.peer().rpartition(":")[0]


class _Watchdog:
    """Cancels calls whose armed deadline passes: one thread for all calls, started on demand and gone
    after a few idle seconds (a stopped server leaves no thread behind)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, grpc.ServicerContext] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._running = False

    def arm(self, context: grpc.ServicerContext, seconds: float) -> int:
        with self._cond:
            key = next(self._ids)
            self._armed[key] = context
            heapq.heappush(self._heap, (time.monotonic() + seconds, key))
            if not self._running:
                self._running = True
                threading.Thread(target=self._loop, name="dpfed-call-watchdog", daemon=True).start()
            self._cond.notify()
            return key

    def disarm(self, key: int) -> None:
        with self._cond:
            self._armed.pop(key, None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    if self._heap:
                        self._cond.wait(self._heap[0][0] - time.monotonic())
                        continue
                    self._cond.wait(5.0)
                    if not self._heap:
                        self._running = False
                        return
                _, key = heapq.heappop(self._heap)
                context = self._armed.pop(key, None)
            if context is not None:
                context.cancel()


class Gate:
    """Caps per peer and in total, and deadlines on every wait for a request message."""

    def __init__(self, *, per_peer: int, total: int, idle_seconds: float) -> None:
        self.per_peer, self.total, self.idle_seconds = int(per_peer), int(total), float(idle_seconds)
        self._open: dict[str, int] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._watchdog = _Watchdog()

    def open_calls(self) -> int:
        with self._lock:
            return self._count

    @contextmanager
    def admit(self, context: grpc.ServicerContext) -> Iterator[None]:
        """Hold one call slot of the caller for the duration (refused with RESOURCE_EXHAUSTED when full)."""
        key = _peer_key(context)
        with self._lock:
            if self._open.get(key, 0) >= self.per_peer:
                raise Abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"too many calls open at once from this peer (limit {self.per_peer}); "
                            "close some and retry")
            if self._count >= self.total:
                raise Abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"the server has {self._count} calls open, its limit; retry later")
            self._open[key] = self._open.get(key, 0) + 1
            self._count += 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if released.is_set():
                    return
                released.set()
                self._count -= 1
                left = self._open[key] - 1
                if left:
                    self._open[key] = left
                else:
                    del self._open[key]

        context.add_callback(release)   # also when a streaming response is abandoned, not closed
        try:
            yield
        finally:
            release()

    def messages(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        """The call's request messages; a wait longer than ``idle_seconds`` for any of them cancels it."""
        while True:
            key = self._watchdog.arm(context, self.idle_seconds)
            try:
                msg = next(requests, None)
            except grpc.RpcError:
                raise Abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"no request message within {self.idle_seconds:g} s; call dropped") from None
            finally:
                self._watchdog.disarm(key)
            if msg is None:
                return
            yield msg

    def first(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        msg = next(self.messages(requests, context), None)
        if msg is None:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "the call carries no request message")
        return msg

    # ------------------------------------------------------------------ serving a generated service
    def add_service(self, add_to_server: Callable[[Any, Any], None], servicer: Any, server: grpc.Server) -> None:
        """Register ``servicer`` (a generated ``add_XServicer_to_server``) with every method gated."""
        capture = _Capture()
        add_to_server(servicer, capture)
        gated = {name: self._gated(h) for name, h in capture.handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(capture.service, gated),))
        server.add_registered_method_handlers(capture.service, gated)

    def _gated(self, h: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        kw = dict(request_deserializer=h.request_deserializer, response_serializer=h.response_serializer)
        if h.response_streaming:
            def streaming(requests, context):
                try:
                    with self.admit(context):
                        if h.request_streaming:
                            yield from h.stream_stream(self.messages(requests, context), context)
                        else:
                            yield from h.unary_stream(self.first(requests, context), context)
                except Abort as exc:
                    context.abort(exc.code, exc.message)
            return grpc.stream_stream_rpc_method_handler(streaming, **kw)

        def unary(requests, context):
            try:
                with self.admit(context):
                    if h.request_streaming:
                        return h.stream_unary(self.messages(requests, context), context)
                    return h.unary_unary(self.first(requests, context), context)
            except Abort as exc:
                context.abort(exc.code, exc.message)
        return grpc.stream_unary_rpc_method_handler(unary, **kw)


class _Capture:
    """Stands in for a server to catch the method handlers a generated ``add_*_to_server`` registers."""

    service: str = ""
    handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.service, self.handlers = service, dict(handlers)
