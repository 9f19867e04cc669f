"""A job's parameters on the command line: ``--param KEY=VALUE`` overrides on top of an algorithm's options."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

__all__ = ["parse_param_overrides", "with_overrides", "secure_defaults", "registered_record_bound"]


def parse_param_overrides(items: list[str]) -> dict[str, Any] | str:
    """``--param KEY=VALUE`` items as a dict (VALUE read as JSON when it parses), or the one-line error."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            return f"--param needs KEY=VALUE, got {item!r}"
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def with_overrides(params: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``params`` with ``--param`` overrides applied. A noise multiplier calibrated from the options is dropped
    when an override changes any other parameter (e.g. ``epochs``): it was calibrated for the old ones, and the
    job would carry more noise than its epsilon needs (the plan then calibrates it from the final params)."""
    out = {**params, **overrides}
    changed = any(k != "noise_multiplier" and params.get(k, object()) != v for k, v in overrides.items())
    if changed and "noise_multiplier" in params and "noise_multiplier" not in overrides:
        del out["noise_multiplier"]
    return out


def needs_registered_bound(params: dict[str, Any], args: argparse.Namespace) -> bool:
    """Whether :func:`secure_defaults` must ask the coordinator for the parties' registered record bounds: a
    ``--noise distributed`` job under secure aggregation with no ``--records`` and no ``--param records``."""
    return (params.get("noise") == "distributed" and params.get("records") is None
            and getattr(args, "records", None) is None
            and params.get("secure_aggregation", args.secure_aggregation != "off") is True)


def secure_defaults(params: dict[str, Any], args: argparse.Namespace,
                    parties: Callable[[], list[dict[str, Any]]] | None = None) -> str | None:
    """Fill in what a ``--noise distributed`` job needs in a deployment (secure aggregation on, the public record
    bound and the SecAgg options given as flags; ``--param`` wins); without ``--records``, the sum of the bounds
    the roster's parties published with their registrations (``parties()``: the coordinator's status, asked only
    then; ``args.parties`` is set to the roster summed over). Returns the one-line refusal when something is
    missing."""
    if params.get("noise") != "distributed":
        return None
    params.setdefault("secure_aggregation", args.secure_aggregation != "off")
    for key in ("records", "min_survivors", "colluders", "bits"):
        if getattr(args, key, None) is not None:
            params.setdefault(key, getattr(args, key))
    if params["secure_aggregation"] is not True or params.get("records") is not None:
        return None
    bound = registered_record_bound(parties() if parties is not None else None, list(args.parties))
    if isinstance(bound, str):
        return bound
    params["records"], args.parties = bound
    return None


def registered_record_bound(status: list[dict[str, Any]] | None, roster: list[str]) -> tuple[int, list[str]] | str:
    """The sum of the public record bounds (party.toml ``public_records``) the parties of ``roster`` registered
    with (the coordinator's status entries; an empty roster: the connected parties), with the roster; or the
    one-line refusal naming the parties that declared none."""
    head = "--noise distributed needs a public bound on the total number of records: --records N"
    if status is None:
        return (f"{head} (it sets the secure-aggregation modulus; take it from the parties' documentation, not "
                "their data)")
    known = {p.get("name"): p for p in status}
    names = roster or sorted(n for n, p in known.items() if p.get("connected"))
    if not names:
        return f"{head}, or connected parties that declare public_records in their party.toml (none is connected)"
    missing = [n for n in names if not isinstance((known.get(n) or {}).get("public_records"), int)]
    if missing:
        return (f"{head}, or public_records in the party.toml of every party of the roster (declared by none of: "
                f"{', '.join(missing)})")
    return sum(int(known[n]["public_records"]) for n in names), names
