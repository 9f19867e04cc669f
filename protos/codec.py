"""Arrays on the wire: raw little-endian bytes + dtype + shape, split into bounded chunks.

Shared by the party daemon and the coordinator. :func:`encode_arrays` yields
``ArrayChunk`` messages of at most ``chunk_bytes`` payload each; :class:`ArrayAssembler` checks
every chunk (allowed dtype, consistent shape and size, contiguous offsets, a total cap) and
rebuilds the arrays, raising :class:`ProtocolError` with a clear reason on anything malformed.
"""
from __future__ import annotations

from dpfed.core.errors import DpfedError

import math
from typing import Iterable, Iterator, Mapping

import numpy as np

from protos import dpfed_pb2 as pb

__all__ = ["PROTOCOL_VERSION", "ProtocolError", "DEFAULT_MAX_MESSAGE_BYTES", "DEFAULT_CHUNK_BYTES",
           "DEFAULT_MAX_ARRAY_BYTES", "KEEPALIVE_SECONDS", "MIN_PING_INTERVAL_SECONDS", "HANDSHAKE_TIMEOUT_SECONDS",
           "SESSION_METADATA", "encode_arrays",
           "ArrayAssembler", "channel_options", "server_options"]

# 2: secure aggregation's masked vectors have the plan's dimension (no power-of-two padding) and masks are
#    B-bit words; RegisterReply.shard (coordinator on Ray). A party and a coordinator of different
#    versions refuse each other with a one-line error instead of summing incompatible masks.
# 3: secure aggregation with keys per job: adverts without a round, envelopes with the masked input
#    and the unmask task, pairwise seeds (not key shares) for dropped neighbours; no secagg/share step.
# 4: a masked-input task names the adverts its party verified in an earlier round by digest (``adr/*``)
#    instead of sending them in full each round.
# 5: secure aggregation's consistency round (``secagg/consistency``: each survivor signs the survivor set; the
#    unmask task carries the signatures, ``sg/*``, and is answered only for the signed set).
PROTOCOL_VERSION = 5
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024     # gRPC send/receive limit, both sides
DEFAULT_CHUNK_BYTES = 1024 * 1024                # payload per chunk; leaves room for headers
DEFAULT_MAX_ARRAY_BYTES = 1024 * 1024 * 1024     # cap on one task/result/model after assembly

_KINDS = {"b", "i", "u", "f", "U"}               # bool, ints, floats, fixed-width unicode


class ProtocolError(DpfedError, ValueError):
    """A message breaks the protocol (bad version, ids, chunks, dtypes, sizes)."""


KEEPALIVE_SECONDS = 20.0                         # clients (parties, operators) ping an idle connection this often
MIN_PING_INTERVAL_SECONDS = 5.0                  # the server tolerates pings down to this interval
HANDSHAKE_TIMEOUT_SECONDS = 10.0                 # a new connection's TLS handshake must finish within this
#: Call metadata key carrying the party's session token on ``SubmitResult``: the coordinator checks the
#: session before it reads the upload (issue 24); the token in the first part must be the same.
SESSION_METADATA = "dpfed-session"


def channel_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                    keepalive_seconds: float = KEEPALIVE_SECONDS) -> list[tuple[str, int]]:
    """Client-side gRPC options: the maximum message size and keepalive pings every ``keepalive_seconds``
    (also without calls), so that a dead peer is noticed and idle NATs keep the connection."""
    return [("grpc.max_send_message_length", int(max_message_bytes)),
            ("grpc.max_receive_message_length", int(max_message_bytes)),
            ("grpc.keepalive_time_ms", int(keepalive_seconds * 1000)), ("grpc.keepalive_timeout_ms", 10000),
            ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0)]


def server_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                   min_ping_interval_seconds: float = MIN_PING_INTERVAL_SECONDS, *,
                   handshake_timeout_seconds: float = HANDSHAKE_TIMEOUT_SECONDS,
                   max_connections: int = 0) -> list[tuple[str, int]]:
    """Server-side gRPC options: the maximum message size, a ping policy that accepts the clients'
    keepalive pings (gRPC's default answers a ping more often than every 5 minutes without data with
    GOAWAY ``too_many_pings``, which broke ``dpfed job wait`` after a minute of silence), a deadline on
    the TLS handshake of a new connection (gRPC's default, 120 s, let half-open connections hold the
    descriptors that long) and, when ``max_connections`` > 0, a cap on open connections (more are closed
    at once instead of running the process out of descriptors)."""
    opts = [("grpc.max_send_message_length", int(max_message_bytes)),
            ("grpc.max_receive_message_length", int(max_message_bytes)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", int(min_ping_interval_seconds * 1000)),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.server_handshake_timeout_ms", max(int(handshake_timeout_seconds * 1000), 1)),
            # no port sharing: with SO_REUSEPORT (gRPC's default on Linux) a second server on a port in use
            # started and the kernel split the connections between the two (issue 29)
            ("grpc.so_reuseport", 0)]
    if max_connections > 0:
        opts.append(("grpc.max_allowed_incoming_connections", int(max_connections)))
    return opts


def _wire_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind not in _KINDS:
        raise ProtocolError(f"arrays of dtype {dtype} cannot be sent (allowed: bool, int, uint, float, str)")
    return dtype.newbyteorder("<") if dtype.byteorder != "|" else dtype


def encode_arrays(arrays: Mapping[str, np.ndarray], chunk_bytes: int = DEFAULT_CHUNK_BYTES
                  ) -> Iterator[pb.ArrayChunk]:
    """Yield chunks of every array in ``arrays`` (an empty array still yields one chunk)."""
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be positive")
    for name, value in arrays.items():
        arr = np.asarray(value)
        dt = _wire_dtype(arr.dtype)
        buf = np.ascontiguousarray(arr, dtype=dt).reshape(-1).view(np.uint8)
        total = int(buf.size)
        shape = list(arr.shape)
        offset = 0
        while True:
            piece = buf[offset:offset + chunk_bytes]
            yield pb.ArrayChunk(name=str(name), dtype=dt.str, shape=shape, total_bytes=total,
                                offset=offset, data=piece.tobytes())
            offset += len(piece)
            if offset >= total:
                break


def chunk_groups(chunks: Iterable[pb.ArrayChunk], chunk_bytes: int = DEFAULT_CHUNK_BYTES
                 ) -> Iterator[list[pb.ArrayChunk]]:
    """Group chunks so that each group carries at most about ``chunk_bytes`` of payload."""
    group: list[pb.ArrayChunk] = []
    size = 0
    for c in chunks:
        if group and size + len(c.data) > chunk_bytes:
            yield group
            group, size = [], 0
        group.append(c)
        size += len(c.data)
    yield group


class ArrayAssembler:
    """Rebuild named arrays from chunks, validating each one as it arrives."""

    def __init__(self, max_total_bytes: int = DEFAULT_MAX_ARRAY_BYTES) -> None:
        self.max_total_bytes = int(max_total_bytes)
        self._bufs: dict[str, np.ndarray] = {}      # preallocated little-endian buffers
        self._filled: dict[str, int] = {}
        self._meta: dict[str, tuple[np.dtype, tuple[int, ...], int]] = {}
        self._total = 0

    def add(self, chunk: pb.ArrayChunk) -> None:
        name = chunk.name
        if not name:
            raise ProtocolError("array chunk without a name")
        if name not in self._meta:
            try:
                dt = np.dtype(chunk.dtype)
            except TypeError:
                raise ProtocolError(f"array {name!r}: unknown dtype {chunk.dtype!r}") from None
            if dt.kind not in _KINDS or (dt.itemsize > 1 and dt.byteorder == ">"):
                raise ProtocolError(f"array {name!r}: dtype {chunk.dtype!r} not allowed")
            if dt.itemsize == 0 and dt.kind == "U":
                raise ProtocolError(f"array {name!r}: zero-width string dtype")
            shape = tuple(int(s) for s in chunk.shape)
            if any(s < 0 for s in shape):
                raise ProtocolError(f"array {name!r}: negative dimension in shape {shape}")
            expect = math.prod(shape) * dt.itemsize
            if chunk.total_bytes != expect:
                raise ProtocolError(f"array {name!r}: {chunk.total_bytes} bytes announced, shape {shape} "
                                    f"of {dt} needs {expect}")
            if self._total + expect > self.max_total_bytes:
                raise ProtocolError(f"arrays exceed the limit of {self.max_total_bytes} bytes")
            self._total += expect
            self._meta[name] = (dt, shape, expect)
            self._bufs[name] = np.empty(expect, dtype=np.uint8)
            self._filled[name] = 0
        dt, shape, expect = self._meta[name]
        filled = self._filled[name]
        if chunk.dtype != dt.str or tuple(chunk.shape) != shape or chunk.total_bytes != expect:
            raise ProtocolError(f"array {name!r}: chunks disagree on dtype, shape or size")
        if chunk.offset != filled:
            raise ProtocolError(f"array {name!r}: chunk at offset {chunk.offset}, expected {filled} "
                                "(duplicated, missing or out-of-order chunk)")
        n = len(chunk.data)
        if filled + n > expect:
            raise ProtocolError(f"array {name!r}: more bytes than announced")
        self._bufs[name][filled:filled + n] = np.frombuffer(chunk.data, dtype=np.uint8)
        self._filled[name] = filled + n

    @property
    def announced(self) -> int:
        """Bytes announced so far by the arrays' first chunks (what :meth:`finish` will hold at most)."""
        return self._total

    def add_all(self, chunks: Iterable[pb.ArrayChunk]) -> None:
        for c in chunks:
            self.add(c)

    def finish(self) -> dict[str, np.ndarray]:
        """The arrays; raises when one is incomplete."""
        out = {}
        for name, (dt, shape, expect) in self._meta.items():
            if self._filled[name] != expect:
                raise ProtocolError(f"array {name!r}: {self._filled[name]} of {expect} bytes received")
            arr = self._bufs[name].view(dt).reshape(shape) if expect else np.zeros(shape, dtype=dt)
            out[name] = arr.astype(dt.newbyteorder("="), copy=False)
        return out
