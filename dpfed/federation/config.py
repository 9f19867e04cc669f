"""Configuration helpers shared by the party and coordinator daemons: TOML reading, ``[tls]`` tables."""
from __future__ import annotations

import os
import types
import typing

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib
from pathlib import Path
from typing import Any

from dpfed.core.errors import DpfedError
from dpfed.federation.tls import TlsFiles

__all__ = ["ConfigError", "read_toml", "tls_from", "check_types", "check_address"]


class ConfigError(DpfedError, ValueError):
    """A configuration file is missing, malformed or inconsistent."""


def read_toml(path: str | os.PathLike) -> tuple[dict[str, Any], Path]:
    """Parse a TOML file; return (table, directory used to resolve relative paths)."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            return tomllib.load(fh), p.resolve().parent
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None


def tls_from(table: dict[str, Any], base: Path, where: str) -> TlsFiles:
    """The ``[tls]`` table (ca, cert, key) with paths resolved against ``base``."""
    tls = table.get("tls")
    if not isinstance(tls, dict):
        raise ConfigError(f"{where}: a [tls] table with ca, cert and key is required (or insecure = true)")
    missing = [k for k in ("ca", "cert", "key") if not isinstance(tls.get(k), str)]
    if missing:
        raise ConfigError(f"{where}: [tls] is missing {', '.join(missing)}")
    crl = tls.get("crl")
    if crl is not None and not isinstance(crl, str):
        raise ConfigError(f"{where}: [tls] crl must be a file name")
    return TlsFiles(*(base / tls[k] for k in ("ca", "cert", "key")), crl=None if crl is None else base / crl)


def _matches(value: Any, tp: Any) -> bool:
    """Whether a parsed TOML ``value`` has the type ``tp`` (a field annotation) without any conversion."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in typing.get_args(tp))
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp in (str, Path):
        return isinstance(value, str)
    if typing.get_origin(tp) in (tuple, list):
        inner = typing.get_args(tp)[0] if typing.get_args(tp) else Any
        return isinstance(value, list) and all(_matches(v, inner) for v in value)
    return True  # tables (tls, schema) are checked where they are read


def _describe(tp: Any) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp) if a is not type(None))
    names = {bool: "true or false (a TOML boolean, not quoted)", int: "a whole number (not quoted)",
             float: "a number (not quoted)", str: "a quoted string", Path: "a quoted file name"}
    if typing.get_origin(tp) in (tuple, list):
        return "a list of quoted strings"
    return names.get(tp, getattr(tp, "__name__", str(tp)))


_TOML_NAMES = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list", dict: "a table"}


def check_types(table: dict[str, Any], cls: type, where: object, extra: dict[str, Any] | None = None) -> None:
    """Strict types: every key of ``table`` that names a field of the dataclass ``cls`` (or a key of ``extra``,
    name -> type) must already have the field's type in TOML: ``insecure = "false"`` (a string) is not a boolean
    and ``epsilon_limit = "1"`` not a number. ConfigError in one line naming the key, the type and the value."""
    hints = {**typing.get_type_hints(cls), **(extra or {})}
    for key, value in table.items():
        tp = hints.get(key)
        if tp is not None and not _matches(value, tp):
            got = _TOML_NAMES.get(type(value), type(value).__name__)
            raise ConfigError(f"{where}: {key} must be {_describe(tp)}, got {got} {value!r}")


def check_address(value: str, key: str, where: object, *, allow_zero: bool = False) -> None:
    """``value`` is HOST:PORT with a port in 1..65535 (0 too with ``allow_zero``: a free port, for tests)."""
    host, sep, port = value.rpartition(":")
    low = 0 if allow_zero else 1
    if not sep or not host or not port.isdigit() or not low <= int(port) <= 65535:
        raise ConfigError(f"{where}: {key} must be HOST:PORT with a port in {low}..65535, got {value!r}")
