"""JSON texts on the wire, bounded before they are parsed (issue 24).

Specs, parameters, schemas and privacy events travel as JSON strings inside protobuf messages. A
peer controls them, so before ``json.loads`` sees a text its size is capped and its nesting depth is
measured without recursion: the string literals are blanked out (a regular expression that honours
escapes) and the running sum of ``[{`` minus ``]}`` gives the depth (NumPy, linear in the length).
A text nested deeper than :data:`MAX_JSON_DEPTH` is refused with :class:`ProtocolError` instead of
reaching the recursive parser (and every recursive walker after it) as a ``RecursionError``.
"""
from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from protos.codec import DEFAULT_MAX_MESSAGE_BYTES, ProtocolError

__all__ = ["MAX_JSON_DEPTH", "json_depth", "check_json", "loads"]

MAX_JSON_DEPTH = 64                              # far above any spec, schema or event dpfed writes
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in ``text`` (0 for a scalar)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    b = np.frombuffer(_STRING.sub(b'""', raw), np.uint8)
    if b.size == 0:
        return 0
    steps = np.isin(b, _OPEN).astype(np.int64) - np.isin(b, _CLOSE).astype(np.int64)
    return int(max(np.cumsum(steps).max(), 0))


def check_json(text: str | bytes, what: str, *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
               max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`ProtocolError` naming ``what`` when ``text`` is too long or nested too deeply."""
    if len(text) > max_bytes:
        raise ProtocolError(f"{what}: {len(text)} bytes of JSON, more than the limit of {max_bytes}")
    depth = json_depth(text)
    if depth > max_depth:
        raise ProtocolError(f"{what}: JSON nested {depth} levels deep, more than the limit of {max_depth}")


def loads(text: str | bytes, what: str, *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
          max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)`` after :func:`check_json`; malformed JSON is a :class:`ProtocolError` too."""
    check_json(text, what, max_bytes=max_bytes, max_depth=max_depth)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"{what}: malformed JSON: {exc}") from None
