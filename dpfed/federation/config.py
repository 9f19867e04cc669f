"""Configuration helpers shared by the party and coordinator daemons: TOML reading, ``[tls]`` tables."""
from __future__ import annotations

import os

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib
from pathlib import Path
from typing import Any

from dpfed.core.errors import DpfedError
from dpfed.federation.tls import TlsFiles

__all__ = ["ConfigError", "read_toml", "tls_from"]


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
