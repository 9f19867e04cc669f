"""``party.toml``: one data owner's daemon (who it is, where its data and ledger are, its limits).

Example (relative paths are relative to the config file)::

    name = "hospital-a"               # the party's name; must equal the CN of its certificate
    coordinator = "coord.example.org:50051"   # host:port the party dials (it opens no port itself)
    data = "records.csv"              # .csv (header row: feature names, then the label column)
                                      # or .npz (arrays X and y, or X_train and y_train)
    ledger = "state/ledger.sqlite"    # this party's durable privacy ledger (created if missing)
    epsilon_limit = 10.0              # total epsilon this party will ever release (all jobs)
    delta_limit = 1e-5                # the delta at which the ledger measures epsilon
    accountant = "pld"                # "pld" (tight) or "rdp"; fixed when the ledger is created
    insecure = false                  # true = plain text without TLS (debugging only; warns loudly)
    reconnect_seconds = 2.0           # wait between attempts when the coordinator is unreachable
    max_auth_failures = 10            # stop (exit 1, the cause in this party's log) after this many refused TLS
                                      # handshakes in a row (0 = retry forever)
    max_message_bytes = 4194304       # gRPC message limit, enforced on send and receive
    max_rows = 100000000              # refuse a data file with more records than this
    max_bytes = 536870912             # refuse a data file larger than this (.csv: on disk; .npz: its arrays
                                      # decompressed, checked before anything is decompressed)
    chunk_bytes = 1048576             # array payload per message
    max_buffered_bytes = 1073741824   # incomplete task parts held at once, all jobs (one per job; more: refused)
    plugins = []                      # extra modules defining ALGORITHMS (must match the coordinator)
    # public_records = 20000          # PUBLIC: a bound on this party's record count that the data owner agrees
                                      # to publish (sent with the registration; `dpfed job submit --noise
                                      # distributed` without --records sums the roster's bounds); the daemon
                                      # refuses to start when its data hold more records, and refuses secure
                                      # jobs whose total bound `records` is below it
    # seed = 0                        # TESTS/SIMULATIONS ONLY: reproducible noise (no privacy)
    # exit_with_parent = false        # simulations: quit when the process that started the daemon dies
    # simulation = false              # SIMULATIONS ONLY: accept distributed noise WITHOUT secure aggregation
    secure_aggregation = true         # take part in secure aggregation (distributed-noise jobs; keys signed
                                      # with the [tls] certificate key)
    min_survivors = 2                 # refuse secure jobs whose minimum number of survivors is lower
    colluders = 0                     # parties this party assumes collude with the coordinator: a secure job
                                      # declaring fewer is refused (so every party plans with the job's value)
    min_honest_shares = 1             # refuse secure jobs whose noise counts on fewer than this many honest
                                      # shares (P_min - colluders)
    peers = []                        # if not empty: the only parties to aggregate with, by name or by
                                      # certificate fingerprint "sha256:HEX" (a roster naming anyone else is
                                      # refused before any charge)
    # dropout = 0.0                   # SIMULATIONS ONLY: miss each secure round with this probability
    console_port = -1                 # the data owner's ledger report on http://127.0.0.1:PORT/ (loopback only,
                                      # read-only; -1 = off, 0 = a free port): see 'dpfed party ledger'

    [tls]
    ca = "certs/ca.crt"               # the deployment CA (verifies the coordinator)
    cert = "certs/hospital-a.crt"     # this party's certificate, issued by 'dpfed certs issue'
    key = "certs/hospital-a.key"

    [schema]                          # PUBLIC description of the data, declared, never derived from it
    n_classes = 2                     # labels are 0..n_classes-1 (0 = unlabelled data)
    label = "income"                  # name of the label column in a CSV file
    class_names = ["<=50K", ">50K"]   # optional
    [[schema.features]]
    name = "age"
    kind = "numeric"                  # numeric: public bounds lower/upper
    lower = 16
    upper = 100
    [[schema.features]]
    name = "workclass"
    kind = "categorical"              # categorical: integer codes 0..categories-1
    categories = 9

Instead of ``[schema]`` a file may be named: ``schema_file = "schema.json"`` (the JSON form of
:meth:`dpfed.data.schema.Schema.to_dict`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dpfed.data.files import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, load_and_validate
from dpfed.data.schema import DataValidationError, Schema
from dpfed.federation.config import ConfigError, check_address, check_types, read_toml, tls_from
from dpfed.federation.tls import TlsFiles
from protos.codec import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_ARRAY_BYTES, DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["PartyConfig", "ConfigError", "set_accountant"]

_KEYS = {"name", "coordinator", "data", "ledger", "epsilon_limit", "delta_limit", "accountant", "insecure",
         "reconnect_seconds", "max_message_bytes", "chunk_bytes", "plugins", "seed", "tls", "schema",
         "schema_file", "exit_with_parent", "simulation", "secure_aggregation", "min_survivors", "dropout",
         "max_rows", "max_bytes", "max_buffered_bytes", "colluders", "min_honest_shares", "peers",
         "max_auth_failures", "console_port", "public_records"}


@dataclass(frozen=True)
class PartyConfig:
    name: str
    coordinator: str
    data: Path
    ledger: Path
    schema: Schema
    epsilon_limit: float
    delta_limit: float
    tls: TlsFiles | None = None
    insecure: bool = False
    accountant: str = "pld"
    reconnect_seconds: float = 2.0
    max_auth_failures: int = 10       # refused TLS handshakes in a row before the daemon stops (0 = never)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    plugins: tuple[str, ...] = field(default=())
    seed: int | str | None = None
    exit_with_parent: bool = False    # simulation: quit when the process that started us is gone
    simulation: bool = False          # accept distributed noise without secure aggregation (simulations only)
    secure_aggregation: bool = True   # take part in secure aggregation
    min_survivors: int = 2            # the fewest survivors a secure job may plan for
    dropout: float = 0.0              # SIMULATIONS ONLY: probability of missing each secure round
    colluders: int = 0                # the party's own assumption on parties colluding with the coordinator
    min_honest_shares: int = 1        # floor on P_min - colluders of a secure job
    peers: tuple[str, ...] = ()       # allowlist of party names or "sha256:HEX" certificate fingerprints
    max_rows: int = DEFAULT_MAX_ROWS  # caps on the data file (dpfed.data.files.load_table)
    max_bytes: int = DEFAULT_MAX_BYTES
    max_buffered_bytes: int = DEFAULT_MAX_ARRAY_BYTES  # incomplete task parts held at once (party/inbox.py)
    console_port: int = -1            # the ledger report on http://127.0.0.1:PORT/ (party/ledger_page.py); -1 = off
    public_records: int | None = None  # PUBLIC bound on the record count, published with the registration

    def __post_init__(self) -> None:
        from dpfed.federation.certs import valid_name

        if not valid_name(self.name):
            raise ConfigError(f"party name {self.name!r}: use 1-64 letters, digits, '.', '_' or '-'")
        if not self.insecure and self.tls is None:
            raise ConfigError("the party needs [tls] files unless insecure = true")
        if not (self.epsilon_limit >= 0 and 0 < self.delta_limit < 1):
            raise ConfigError("need epsilon_limit >= 0 and 0 < delta_limit < 1")
        if self.min_survivors < 2 or not 0.0 <= self.dropout < 1.0:
            raise ConfigError("need min_survivors >= 2 and 0 <= dropout < 1")
        if not (self.max_rows >= 1 and self.max_bytes >= 1 and self.max_buffered_bytes >= 1):
            raise ConfigError("need max_rows >= 1 and max_bytes >= 1 (caps on the data file), max_buffered_bytes >= 1")
        if self.max_auth_failures < 0 or not self.reconnect_seconds > 0:
            raise ConfigError("need max_auth_failures >= 0 and reconnect_seconds > 0")
        if self.colluders < 0 or self.min_honest_shares < 1:
            raise ConfigError("need colluders >= 0 and min_honest_shares >= 1")
        if not all(isinstance(p, str) and p for p in self.peers):
            raise ConfigError("peers lists party names or 'sha256:HEX' certificate fingerprints")
        if not 0 < self.chunk_bytes <= self.max_message_bytes - 65536:
            raise ConfigError("chunk_bytes must be positive and at least 64 KiB below max_message_bytes")
        if not -1 <= self.console_port <= 65535:
            raise ConfigError("console_port must be -1 (off), 0 (a free port) or a port number")
        if self.public_records is not None and not 1 <= self.public_records <= 10**9:
            raise ConfigError("public_records must lie in [1, 1e9] (a public bound on this party's record count)")

    def load_data(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The party's records, validated against its schema, within the ``max_rows`` / ``max_bytes`` caps
        (:class:`dpfed.data.schema.DataValidationError`, one line naming the cap, otherwise), and no more of them
        than the ``public_records`` bound this party publishes (checked here, locally: a refusal sent out would
        tell the coordinator something about the count)."""
        X, y = load_and_validate(self.data, self.schema, max_bytes=self.max_bytes, max_rows=self.max_rows)
        if self.public_records is not None and len(X) > self.public_records:
            raise DataValidationError(f"{self.data}: {len(X)} records, more than public_records = "
                                      f"{self.public_records} (the bound this party publishes); raise the bound")
        return X, y

    @classmethod
    def load(cls, path: str | os.PathLike) -> PartyConfig:
        t, base = read_toml(path)
        unknown = sorted(set(t) - _KEYS)
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}")
        missing = [k for k in ("name", "coordinator", "data", "ledger", "epsilon_limit", "delta_limit") if k not in t]
        if missing:
            raise ConfigError(f"{path}: missing key(s) {', '.join(missing)}")
        check_types(t, cls, path, {"schema_file": str})
        check_address(t["coordinator"], "coordinator", path)
        try:
            if "schema_file" in t:
                schema = _schema_file(base / str(t["schema_file"]), path)
            elif isinstance(t.get("schema"), dict):
                schema = Schema.from_dict(t["schema"])
            else:
                raise ConfigError(f"{path}: a [schema] table or schema_file is required (the schema is "
                                  "declared by the data owner, never derived from the data)")
            insecure = bool(t.get("insecure", False))
            return cls(name=str(t["name"]), coordinator=str(t["coordinator"]), data=base / str(t["data"]),
                       ledger=base / str(t["ledger"]), schema=schema,
                       epsilon_limit=float(t["epsilon_limit"]), delta_limit=float(t["delta_limit"]),
                       tls=None if insecure and "tls" not in t else tls_from(t, base, str(path)),
                       insecure=insecure, accountant=str(t.get("accountant", "pld")),
                       reconnect_seconds=float(t.get("reconnect_seconds", 2.0)),
                       max_auth_failures=_int(t.get("max_auth_failures", 10), "max_auth_failures"),
                       max_message_bytes=int(t.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES)),
                       chunk_bytes=int(t.get("chunk_bytes", DEFAULT_CHUNK_BYTES)),
                       plugins=tuple(str(p) for p in t.get("plugins", ())), seed=t.get("seed"),
                       exit_with_parent=bool(t.get("exit_with_parent", False)),
                       simulation=bool(t.get("simulation", False)),
                       secure_aggregation=bool(t.get("secure_aggregation", True)),
                       min_survivors=int(t.get("min_survivors", 2)), dropout=float(t.get("dropout", 0.0)),
                       colluders=_int(t.get("colluders", 0), "colluders"),
                       min_honest_shares=_int(t.get("min_honest_shares", 1), "min_honest_shares"),
                       peers=_peers(t.get("peers", [])),
                       max_rows=_int(t.get("max_rows", DEFAULT_MAX_ROWS), "max_rows"),
                       max_bytes=_int(t.get("max_bytes", DEFAULT_MAX_BYTES), "max_bytes"),
                       max_buffered_bytes=_int(t.get("max_buffered_bytes", DEFAULT_MAX_ARRAY_BYTES),
                                               "max_buffered_bytes"),
                       console_port=_int(t.get("console_port", -1), "console_port"),
                       public_records=None if "public_records" not in t
                       else _int(t["public_records"], "public_records"))
        except ConfigError:
            raise
        except (TypeError, ValueError, OSError) as exc:
            raise ConfigError(f"{path}: {exc}") from None


def _schema_file(file: Path, path: object) -> Schema:
    """The schema in ``file``; an unreadable or malformed one is named (not only the party.toml that names it)."""
    try:
        return Schema.from_json(file.read_text())
    except (TypeError, ValueError, OSError) as exc:
        raise ConfigError(f"{path}: schema_file {file}: {' '.join(str(exc).split())[:300]}") from None


def _peers(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ConfigError("peers must be a list of party names or 'sha256:HEX' certificate fingerprints")
    return tuple(value)


def _int(value: object, key: str) -> int:
    """A whole-number config value (``1e6`` or ``"10"`` would be a silent guess): else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be a whole number, got {value!r}")
    return value


def set_accountant(path: str | os.PathLike, accountant: str) -> None:
    """Set the top-level ``accountant`` key of a party.toml in place (after ``dpfed party ledger migrate``),
    keeping every other line and comment; written to a temporary file and renamed (atomic)."""
    p = Path(path)
    lines = p.read_text().splitlines(keepends=True)
    new = f"accountant = {_toml_value(accountant)}\n"
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith("["):  # the top-level keys end at the first table
            lines.insert(i, new)
            break
        if stripped.split("=", 1)[0].strip() == "accountant" and "=" in stripped:
            lines[i] = new
            break
    else:
        lines.append(new)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("".join(lines))
    os.replace(tmp, p)


def write_config(path: str | os.PathLike, values: dict) -> None:
    """Write a party.toml from plain values (used by the simulation; strings, numbers, bools, tables)."""
    lines: list[str] = []
    tables = {k: v for k, v in values.items() if isinstance(v, dict)}
    for k, v in values.items():
        if not isinstance(v, dict):
            lines.append(f"{k} = {_toml_value(v)}")
    for name, table in tables.items():
        lines.append(f"[{name}]")
        for k, v in table.items():
            lines.append(f"{k} = {_toml_value(v)}")
    Path(path).write_text("\n".join(lines) + "\n")


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a valid TOML basic string
