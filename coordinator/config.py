"""``coordinator.toml``: where the coordinator listens, its certificates and its state directory.

Example (relative paths are relative to the config file)::

    listen = "0.0.0.0:50051"       # host:port to serve on (parties and operators dial in)
    state_dir = "state"            # jobs, models and the global budget (per-party ledgers) live here
    insecure = false               # true = plain text, no TLS (debugging only; warns loudly)
    accept_timeout = 120.0         # seconds a party has to accept or refuse a job offer (old name: offer_timeout)
    answer_timeout = 300.0         # seconds every party has to answer one task (old name: task_timeout);
                                   # a silent party ends the job as failed, resumable ('dpfed job resume')
    min_ping_interval = 5.0        # shortest keepalive ping interval tolerated from a client (they ping every 20 s)
    heartbeat_seconds = 10.0       # idle task streams and job watches carry a message this often
    max_message_bytes = 4194304    # gRPC message limit, enforced on send and receive
    chunk_bytes = 1048576          # array payload per message (must be below max_message_bytes)
    plugins = []                   # extra modules defining ALGORITHMS (must match the parties')
    max_concurrent_jobs = 4        # jobs that run at once (each its own driver); the rest wait in the queue

    # Limits that keep one peer from stalling everyone (issue 24; deploy/README.md "Exposing the coordinator"):
    max_calls_per_peer = 32        # gRPC calls open at once per client certificate (more: RESOURCE_EXHAUSTED)
    idle_timeout = 30.0            # seconds a call may wait for its request (or an upload for its next part)
    handshake_timeout = 10.0       # seconds a new connection has to finish its TLS handshake
    max_connections = 0            # open connections at once (never more than 3/4 of the descriptor limit; 0 = that)

    # On a Ray cluster (`dpfed coordinator serve --ray-address ADDR`, or ray_address here): parties
    # register here and then stream tasks and results through `shards` ingress actors spread over the
    # cluster, which merge each round's answers before the central driver sees them.
    ray_address = ""               # "" = one process, no Ray; "auto", "local" or "HOST:PORT" of a Ray head
    shards = 2                     # ingress shards (Ray actors, each a gRPC server with this certificate)
    shard_host = ""                # interface the shards listen on (default: the host of `listen`)
    shard_port = 0                 # first shard port (shard i listens on shard_port + i); 0 = free ports
    shard_advertise = ""           # host the parties dial for a shard (default: the IP of the shard's node)
    shard_cpus = 0.5               # Ray CPUs reserved per shard

    # Read-only HTTPS for operators (coordinator/web.py): the coordinator's certificate; an operator certificate
    # (not revoked) or an operator token ('dpfed certs token NAME --ca DIR') gets in; anything else gets 403.
    console_port = -1              # the web console (coordinator/console.py) on the host of `listen`; -1 = off
    metrics_port = -1              # Prometheus metrics at /metrics (coordinator/metrics.py); -1 = off, 0 = a free port

    [tls]                          # mutual TLS (required unless insecure = true)
    ca = "certs/ca.crt"            # the deployment CA: parties and operators must be signed by it
    cert = "certs/coordinator.crt" # the coordinator's certificate (SAN must include its host name)
    key = "certs/coordinator.key"
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from protos.codec import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_MESSAGE_BYTES, MIN_PING_INTERVAL_SECONDS
from dpfed.federation.config import ConfigError, check_address, check_types, read_toml, tls_from
from dpfed.federation.tls import TlsFiles

__all__ = ["CoordinatorConfig", "ConfigError", "read_toml", "tls_from"]


@dataclass(frozen=True)
class CoordinatorConfig:
    listen: str = "127.0.0.1:50051"
    state_dir: Path = Path("state")
    tls: TlsFiles | None = None
    insecure: bool = False
    offer_timeout: float = 120.0        # TOML: accept_timeout (or offer_timeout)
    task_timeout: float = 300.0         # TOML: answer_timeout (or task_timeout)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    plugins: tuple[str, ...] = field(default=())
    min_ping_interval: float = MIN_PING_INTERVAL_SECONDS
    heartbeat_seconds: float = 10.0
    max_concurrent_jobs: int = 4
    ray_address: str = ""
    shards: int = 2
    shard_host: str = ""
    shard_port: int = 0
    shard_advertise: str = ""
    shard_cpus: float = 0.5
    max_calls_per_peer: int = 32
    idle_timeout: float = 30.0
    handshake_timeout: float = 10.0
    max_connections: int = 0
    console_port: int = -1
    metrics_port: int = -1

    def __post_init__(self) -> None:
        if not self.insecure and self.tls is None:
            raise ConfigError("the coordinator needs [tls] files unless insecure = true")
        check_address(self.listen, "listen", "coordinator config", allow_zero=True)
        if not 0 < self.chunk_bytes <= self.max_message_bytes - 65536:
            raise ConfigError("chunk_bytes must be positive and at least 64 KiB below max_message_bytes")
        if not (self.offer_timeout > 0 and self.task_timeout > 0):
            raise ConfigError("accept_timeout (offer_timeout) and answer_timeout (task_timeout) must be positive")
        if not (self.min_ping_interval > 0 and self.heartbeat_seconds > 0):
            raise ConfigError("min_ping_interval and heartbeat_seconds must be positive")
        if not 1 <= self.max_concurrent_jobs <= 256:
            raise ConfigError("max_concurrent_jobs must be between 1 and 256")
        if not 1 <= self.shards <= 256:
            raise ConfigError("shards must be between 1 and 256")
        if not (0 <= self.shard_port <= 65535 - self.shards and 0 <= self.shard_cpus <= 64):
            raise ConfigError("shard_port must leave room for every shard's port below 65536; shard_cpus in [0, 64]")
        if not (1 <= self.max_calls_per_peer <= 1024 and self.idle_timeout > 0 and self.handshake_timeout > 0
                and self.max_connections >= 0):
            raise ConfigError("max_calls_per_peer must be in [1, 1024], idle_timeout and handshake_timeout "
                              "positive, max_connections >= 0")
        if not (-1 <= self.console_port <= 65535 and -1 <= self.metrics_port <= 65535):
            raise ConfigError("console_port and metrics_port must be -1 (off), 0 (a free port) or a port number")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CoordinatorConfig":
        t, base = read_toml(path)
        known = {"listen", "state_dir", "insecure", "offer_timeout", "task_timeout", "accept_timeout",
                 "answer_timeout", "min_ping_interval", "heartbeat_seconds", "max_message_bytes", "chunk_bytes",
                 "plugins", "tls", "max_concurrent_jobs", "ray_address", "shards", "shard_host", "shard_port",
                 "shard_advertise", "shard_cpus", "max_calls_per_peer", "idle_timeout", "handshake_timeout",
                 "max_connections", "console_port", "metrics_port"}
        unknown = sorted(set(t) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}")
        check_types(t, cls, path, {"accept_timeout": float, "answer_timeout": float})
        check_address(t.get("listen", cls.listen), "listen", path, allow_zero=True)  # 0: a free port, printed
        insecure = bool(t.get("insecure", False))
        try:
            return cls(listen=str(t.get("listen", cls.listen)), state_dir=base / str(t.get("state_dir", "state")),
                       tls=None if insecure and "tls" not in t else tls_from(t, base, str(path)),
                       insecure=insecure,
                       offer_timeout=_alias(t, "accept_timeout", "offer_timeout", cls.offer_timeout, path),
                       task_timeout=_alias(t, "answer_timeout", "task_timeout", cls.task_timeout, path),
                       min_ping_interval=float(t.get("min_ping_interval", cls.min_ping_interval)),
                       heartbeat_seconds=float(t.get("heartbeat_seconds", cls.heartbeat_seconds)),
                       max_message_bytes=int(t.get("max_message_bytes", cls.max_message_bytes)),
                       chunk_bytes=int(t.get("chunk_bytes", cls.chunk_bytes)),
                       plugins=tuple(str(p) for p in t.get("plugins", ())),
                       max_concurrent_jobs=int(t.get("max_concurrent_jobs", cls.max_concurrent_jobs)),
                       ray_address=str(t.get("ray_address", "")), shards=int(t.get("shards", cls.shards)),
                       shard_host=str(t.get("shard_host", "")), shard_port=int(t.get("shard_port", 0)),
                       shard_advertise=str(t.get("shard_advertise", "")),
                       shard_cpus=float(t.get("shard_cpus", cls.shard_cpus)),
                       max_calls_per_peer=int(t.get("max_calls_per_peer", cls.max_calls_per_peer)),
                       idle_timeout=float(t.get("idle_timeout", cls.idle_timeout)),
                       handshake_timeout=float(t.get("handshake_timeout", cls.handshake_timeout)),
                       max_connections=int(t.get("max_connections", cls.max_connections)),
                       console_port=int(t.get("console_port", cls.console_port)),
                       metrics_port=int(t.get("metrics_port", cls.metrics_port)))
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"{path}: {exc}") from None


def _alias(t: dict, key: str, old: str, default: float, path: object) -> float:
    """A setting spelled ``key`` or by its older name ``old`` (both accepted; they must agree)."""
    if key in t and old in t and float(t[key]) != float(t[old]):
        raise ConfigError(f"{path}: {key} and its old name {old} disagree; give one")
    return float(t.get(key, t.get(old, default)))
