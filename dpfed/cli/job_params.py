"""A job's parameters on the command line: ``--param KEY=VALUE`` overrides on top of an algorithm's options."""
from __future__ import annotations

import json
from typing import Any

__all__ = ["parse_param_overrides", "with_overrides"]


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
