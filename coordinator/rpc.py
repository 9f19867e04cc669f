"""gRPC glue shared by the coordinator's services and its ingress shards: errors as statuses, the
caller's certificate checks, and reading one party result upload."""
from __future__ import annotations

import queue
from typing import Collection, Iterator

import grpc
import numpy as np

from dpfed.core.errors import DpfedError
from dpfed.core.names import printable
from dpfed.federation.tls import TlsFiles, peer_identity, peer_revoked
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION, SESSION_METADATA, ArrayAssembler, ProtocolError

__all__ = ["Abort", "guard", "guard_stream", "check_version", "caller", "outbox_stream", "check_session", "admit_result",
           "read_result", "SESSION_METADATA", "metadata_session", "first_part", "party_text"]


class Abort(DpfedError):
    """Raised by a handler: becomes the gRPC status ``code`` with ``message`` (see :func:`guard`)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def guard(fn):
    """Turn :class:`Abort` into a gRPC status (unary handlers)."""
    def wrapper(self, request, context):
        try:
            return fn(self, request, context)
        except Abort as exc:
            context.abort(exc.code, exc.message)
    wrapper.__name__ = fn.__name__
    return wrapper


def guard_stream(fn):
    """Turn :class:`Abort` into a gRPC status (streaming handlers)."""
    def wrapper(self, request, context):
        try:
            yield from fn(self, request, context)
        except Abort as exc:
            context.abort(exc.code, exc.message)
    wrapper.__name__ = fn.__name__
    return wrapper


def check_version(version: int) -> None:
    if version != PROTOCOL_VERSION:
        raise Abort(grpc.StatusCode.FAILED_PRECONDITION,
                    f"protocol version {version} not supported (this coordinator speaks {PROTOCOL_VERSION})")


def caller(context: grpc.ServicerContext, role: str, *, insecure: bool, tls: TlsFiles | None) -> str | None:
    """The caller's certificate name (None on plain text), refusing revoked certificates and the wrong role."""
    ident = peer_identity(context)
    if ident is None:
        if not insecure:
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, "a client certificate is required")
        return None
    name, cert_role = ident
    if peer_revoked(context, tls):
        raise Abort(grpc.StatusCode.PERMISSION_DENIED, f"certificate {name!r} is revoked")
    if cert_role != role:
        raise Abort(grpc.StatusCode.PERMISSION_DENIED,
                    f"certificate {name!r} has role {cert_role or 'none'!r}; this call needs a {role} certificate")
    return name


def outbox_stream(outbox: "queue.Queue", context: grpc.ServicerContext,
                  heartbeat_seconds: float) -> Iterator[pb.CoordinatorMessage]:
    """A party's task stream: the messages put on ``outbox`` until None, with a heartbeat whenever it
    stays idle for ``heartbeat_seconds`` (data on the stream keeps it alive through proxies)."""
    while True:
        try:
            msg = outbox.get(timeout=heartbeat_seconds)
        except queue.Empty:
            msg = pb.CoordinatorMessage(version=PROTOCOL_VERSION, round=-1, heartbeat=True)
        if msg is None or not context.is_active():
            return
        yield msg


def check_session(sess, cert_name: str | None):
    """``sess`` (a session looked up by its token) if it is open and belongs to the caller's certificate."""
    if sess is None or sess.closed:
        raise Abort(grpc.StatusCode.UNAUTHENTICATED, "unknown or expired session; register again")
    if cert_name is not None and sess.name != cert_name:
        raise Abort(grpc.StatusCode.PERMISSION_DENIED,
                    f"session belongs to {sess.name!r}, not to certificate {cert_name!r}")
    return sess


def metadata_session(context: grpc.ServicerContext) -> str:
    """The session token in the call's metadata; UNAUTHENTICATED without one."""
    for key, value in context.invocation_metadata() or ():
        if key == SESSION_METADATA:
            return value if isinstance(value, str) else value.decode("ascii", "replace")
    raise Abort(grpc.StatusCode.UNAUTHENTICATED,
                f"a result upload carries its session token in the call metadata {SESSION_METADATA!r}")


def first_part(parts: Iterator[pb.ResultPart], token: str) -> pb.ResultPart:
    """The first part of an upload whose call metadata named session ``token``; it must name it too."""
    first = next(parts, None)
    if first is None:
        raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "empty result stream")
    check_version(first.version)
    if first.session != token:
        raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "the result's session differs from the call metadata's")
    return first


def admit_result(first: pb.ResultPart, name: str, *, parties: Collection[str], ready: Collection[str], round_: int,
                 closed: bool, task_id: str, arrived: bool) -> None:
    """Refuse a result upload unless ``name`` takes part, has accepted the job, and answers the current,
    open round's task for the first time (a replayed, duplicated or out-of-order result changes nothing)."""
    job = first.job_id
    if name not in parties:
        raise Abort(grpc.StatusCode.PERMISSION_DENIED, f"{name!r} takes no part in job {job}")
    if name not in ready:
        raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"{name!r} has not accepted job {job}")
    if first.round != round_ or closed:
        raise Abort(grpc.StatusCode.FAILED_PRECONDITION,
                    f"result for round {first.round} but round {round_} is "
                    f"{'complete' if closed else 'current'} (replayed or out-of-order result rejected)")
    if first.task_id != task_id:
        raise Abort(grpc.StatusCode.NOT_FOUND, f"unknown task id {first.task_id!r} for round {round_}")
    if arrived:
        raise Abort(grpc.StatusCode.ALREADY_EXISTS,
                    f"{name!r} already sent its result for round {round_} (duplicate rejected)")


#: Characters of a party's free text (a refusal reason, a task error) the coordinator keeps and shows.
PARTY_TEXT_CHARS = 500


def party_text(text: str) -> str:
    """A party's free text as the coordinator keeps, logs and shows it to operators (:func:`printable`, at most
    :data:`PARTY_TEXT_CHARS` characters): it cannot forge a log line or reach an operator's terminal through
    ``dpfed status``."""
    return printable(text, PARTY_TEXT_CHARS)


def read_result(first: pb.ResultPart, parts: Iterator[pb.ResultPart]) -> tuple[dict[str, np.ndarray], str]:
    """The arrays and error of one result upload whose first part is ``first``; every part must carry the
    same version, session, job, round and task id. Raises :class:`ProtocolError` when malformed."""
    asm, part, error = ArrayAssembler(), first, ""
    key = (first.version, first.session, first.job_id, first.round, first.task_id)
    while True:
        if (part.version, part.session, part.job_id, part.round, part.task_id) != key:
            raise ProtocolError("result parts disagree on version, session, job, round or task id")
        error = error or part.error
        asm.add_all(part.chunks)
        if part.last:
            break
        part = next(parts, None)
        if part is None:
            raise ProtocolError("result stream ended before its last part")
    if next(parts, None) is not None:
        raise ProtocolError("parts after the last one")
    return asm.finish(), party_text(error)
