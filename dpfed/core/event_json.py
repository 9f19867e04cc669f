"""Canonical, exact JSON of privacy events (what a ledger stores, what plans are compared by).

dp-accounting's ``dp_event`` classes and dpfed's (:mod:`dpfed.core.events`) serialise with their
field names; floats by ``repr`` (shortest exact round trip), keys sorted, so equal events give equal
strings. Reading accepts only those classes (never imports a module by name) and the names dpfed's
events were stored under before they were renamed (:data:`dpfed.core.events.LEGACY_EVENT_NAMES`).
"""
from __future__ import annotations

import json
from typing import Any

import attr
from dp_accounting import dp_event as _dp_event_module
from dp_accounting.dp_event import DpEvent

from dpfed.core.events import DPFED_EVENTS, LEGACY_EVENT_NAMES

__all__ = ["event_to_json", "event_from_json"]


def _field_types(cls: type) -> dict[str, Any]:
    return {f.name: f.type for f in attr.fields(cls)}


def _to_jsonable(value: Any, declared: Any = None) -> Any:
    if isinstance(value, DpEvent):
        cls = type(value)
        if getattr(_dp_event_module, cls.__name__, None) is not cls and DPFED_EVENTS.get(cls.__name__) is not cls:
            raise ValueError(f"only dp_accounting.dp_event classes serialise, got {cls.__qualname__}")
        types = _field_types(cls)
        out: dict[str, Any] = {"class_name": cls.__name__}
        for name, v in attr.asdict(value, recurse=False).items():
            out[name] = _to_jsonable(v, types.get(name))
        return out
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and declared in (float, "float"):
        return float(value)  # canonical: 1 and 1.0 are the same noise multiplier
    if isinstance(value, (int, float, str)) or value is None:
        return value
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return _to_jsonable(value.item(), declared)
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    raise ValueError(f"cannot serialise a value of type {type(value).__name__} in a DpEvent")


def event_to_json(event: DpEvent) -> str:
    """Canonical, exact JSON of a DpEvent (field names as in ``to_named_tuple``).

    Floats are written with ``repr`` (shortest exact round-trip); keys are sorted so equal
    events give equal strings (used to group identical charges).
    """
    if not isinstance(event, DpEvent):
        raise TypeError(f"expected a dp_accounting DpEvent, got {type(event).__name__}")
    return json.dumps(_to_jsonable(event), sort_keys=True, separators=(",", ":"), allow_nan=True)


def _event_class(name: str) -> Any:
    """The class stored as ``name``: dpfed's (current or legacy name) first, else dp-accounting's."""
    return DPFED_EVENTS.get(name) or LEGACY_EVENT_NAMES.get(name) or getattr(_dp_event_module, name, None)


def _from_jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        name = value.get("class_name")
        cls = _event_class(name) if isinstance(name, str) else None
        if not (isinstance(cls, type) and issubclass(cls, DpEvent)):
            raise ValueError(f"unknown DpEvent class {name!r}")  # never import arbitrary modules
        types = _field_types(cls)
        kwargs = {k: _from_jsonable(v) for k, v in value.items() if k not in ("class_name", "module_name")}
        unknown = set(kwargs) - set(types)
        if unknown:
            raise ValueError(f"unknown fields for {name}: {sorted(unknown)}")
        for k, v in kwargs.items():
            if types[k] in (float, "float") and isinstance(v, int) and not isinstance(v, bool):
                kwargs[k] = float(v)
        return cls(**kwargs)
    if isinstance(value, list):
        return [_from_jsonable(v) for v in value]
    return value


def event_from_json(text: str) -> DpEvent:
    """Inverse of :func:`event_to_json`; only dp-accounting's and dpfed's event classes are accepted."""
    try:
        obj = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a DpEvent JSON document: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a DpEvent JSON document: expected an object")
    try:
        event = _from_jsonable(obj)
    except TypeError as exc:
        raise ValueError(f"malformed DpEvent JSON: {exc}") from None
    return event
