"""The coordinator's side of its ingress shards on a Ray cluster (issue 12; see :mod:`coordinator.ingress`).

:class:`ShardPool` starts ``shards`` :class:`~coordinator.ingress.IngressShard` actors (spread over the
cluster's nodes), assigns each registering party a shard (round robin, and the same shard again when
it comes back), keeps every shard's operations in order (one sender thread per shard batches them
into one actor call), long-polls the shards for stream open/close events and collects each round's
partial aggregates. Without ``--ray-address`` none of this exists and the coordinator runs in one
process, as before.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable

from coordinator.config import CoordinatorConfig
from coordinator.ingress import IngressShard, ShardSettings

__all__ = ["ShardPool", "ShardOutbox"]

log = logging.getLogger("dpfed.coordinator.shards")


class ShardOutbox:
    """Stands in for a session's outbox queue: ``put(msg)`` puts it on the party's stream at its shard,
    ``put(None)`` closes the session there."""

    def __init__(self, pool: "ShardPool", index: int, token: str) -> None:
        self.pool, self.index, self.token = pool, index, token

    def put(self, msg) -> None:
        if msg is None:
            self.pool.submit(self.index, ("close", self.token))
        else:
            self.pool.submit(self.index, ("send", [self.token], [msg]))


class _Sender(threading.Thread):
    """Sends one shard's operations in order, batching whatever queued up during the previous call."""

    def __init__(self, actor, index: int) -> None:
        super().__init__(name=f"dpfed-shard-sender-{index}", daemon=True)
        self.actor, self.index = actor, index
        self.cond = threading.Condition()
        self.ops: list[tuple] = []
        self.waiters: list[threading.Event] = []
        self.stopping = False

    def submit(self, op: tuple, done: threading.Event | None = None) -> None:
        with self.cond:
            self.ops.append(op)
            if done is not None:
                self.waiters.append(done)
            self.cond.notify()

    def run(self) -> None:
        import ray

        while True:
            with self.cond:
                while not self.ops and not self.stopping:
                    self.cond.wait()
                if not self.ops and self.stopping:
                    return
                ops, self.ops = self.ops, []
                waiters, self.waiters = self.waiters, []
            try:
                ray.get(self.actor.apply.remote(ops))
            except Exception as exc:  # noqa: BLE001 - a dead shard: its parties' streams broke, they re-register
                log.error("ingress shard %d did not take %d operation(s): %s", self.index, len(ops), exc)
            for w in waiters:
                w.set()


class ShardPool:
    """``shards`` ingress actors on the Ray cluster at ``address`` (``ray.init`` is called here)."""

    def __init__(self, config: CoordinatorConfig, on_event: Callable[[str, str, str], None]) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(address=config.ray_address or None, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        tls_pem = crl = None
        if config.tls is not None and not config.insecure:
            tls_pem = config.tls.read()
            crl_path = config.tls.crl_path()
            crl = Path(crl_path).read_bytes() if crl_path is not None else None
        host, _, _ = config.listen.rpartition(":")
        # a shard that dies is restarted by Ray (with a new port: parties learn it when they register again)
        Actor = ray.remote(IngressShard).options(num_cpus=config.shard_cpus, max_concurrency=512,
                                                 scheduling_strategy="SPREAD", max_restarts=-1)
        self.actors = [Actor.remote(ShardSettings(
            index=i, host=config.shard_host or host or "0.0.0.0", port=config.shard_port + i if config.shard_port else 0,
            advertise=config.shard_advertise, tls_pem=tls_pem, crl_pem=crl, insecure=config.insecure,
            max_message_bytes=config.max_message_bytes, min_ping_interval=config.min_ping_interval,
            heartbeat_seconds=config.heartbeat_seconds, plugins=config.plugins,
            max_calls_per_peer=config.max_calls_per_peer, idle_timeout=config.idle_timeout,
            handshake_timeout=config.handshake_timeout, max_connections=config.max_connections))
            for i in range(config.shards)]
        self.addresses: list[str] = ray.get([a.address.remote() for a in self.actors])
        self.nodes: list[str] = ray.get([a.node.remote() for a in self.actors])
        self._senders = [_Sender(a, i) for i, a in enumerate(self.actors)]
        for s in self._senders:
            s.start()
        self._assigned: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._on_event = on_event
        self._pollers = [threading.Thread(target=self._poll, args=(i,), name=f"dpfed-shard-events-{i}", daemon=True)
                         for i in range(len(self.actors))]
        self._crl = None
        if config.tls is not None and not config.insecure:
            self._crl = Path(config.tls.crl) if config.tls.crl is not None else Path(config.tls.ca).parent / "crl.pem"
            self._pollers.append(threading.Thread(target=self._watch_crl, name="dpfed-shard-crl", daemon=True))
        for t in self._pollers:
            t.start()
        log.info("%d ingress shard(s) on %d node(s): %s", len(self.actors), len(set(self.nodes)),
                 ", ".join(self.addresses))

    def assign(self, party: str) -> int:
        """The party's shard: round robin over new parties, the same one when a party comes back."""
        with self._lock:
            if party not in self._assigned:
                self._assigned[party] = len(self._assigned) % len(self.actors)
            return self._assigned[party]

    def submit(self, index: int, op: tuple, wait: bool = False) -> None:
        done = threading.Event() if wait else None
        self._senders[index].submit(op, done)
        if done is not None:
            done.wait(timeout=60)

    def open(self, index: int, token: str, party: str) -> ShardOutbox:
        """Tell the shard about a new session (before the party can dial it) and return its outbox."""
        import ray

        self.submit(index, ("open", token, party), wait=True)
        try:  # a restarted shard listens on a new port
            self.addresses[index] = str(ray.get(self.actors[index].address.remote(), timeout=30))
        except Exception as exc:  # noqa: BLE001 - keep the last known address; the party retries
            log.warning("ingress shard %d unreachable: %s", index, exc)
        return ShardOutbox(self, index, token)

    def _poll(self, index: int) -> None:
        import ray

        while not self._stop.is_set():
            try:
                events = ray.get(self.actors[index].events.remote(1.0), timeout=30)
            except Exception as exc:  # noqa: BLE001 - keep polling (a restarted actor comes back)
                if self._stop.is_set():
                    return
                log.warning("ingress shard %d events: %s", index, exc)
                self._stop.wait(1.0)
                continue
            for kind, token, name in events:
                self._on_event(kind, token, name)

    def _watch_crl(self) -> None:
        """Forward every new revocation list to the shards (checked each second), so a certificate revoked
        at the coordinator is refused by the shards too, on the next call."""
        seen = None
        while not self._stop.wait(1.0):
            try:
                st = self._crl.stat()
                key = (st.st_mtime_ns, st.st_size)
                if key == seen:
                    continue
                pem = self._crl.read_bytes()
            except OSError:
                continue
            seen = key
            for i in range(len(self.actors)):
                self.submit(i, ("crl", pem))

    def collect(self, calls: dict[int, tuple], wait: float, final: bool = False) -> dict[int, dict[str, Any]]:
        """``calls``: shard index -> (job id, round, task id); one collect per shard, in parallel."""
        import ray

        refs = {i: self.actors[i].collect.remote(*args, wait, final) for i, args in calls.items()}
        out = {}
        for i, ref in refs.items():
            try:
                out[i] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a shard died (Ray restarts it): its parties come back
                if not self._stop.is_set():  # (not: the coordinator stopped its shards)
                    log.warning("ingress shard %d lost (%s); waiting for its parties to come back", i,
                                type(exc).__name__)
                self._stop.wait(min(wait, 1.0))
                out[i] = {"complete": False, "errors": {}, "missing": [], "parts": [], "stale": False}
        return out

    def stop(self, seconds: float = 10.0) -> None:
        """Close the shards' streams and servers (calls in flight get 1 s, or half of ``seconds`` if less), waiting
        ``seconds`` at most, then end the actors (``ray.kill``: their ports close with their processes)."""
        import ray

        self._stop.set()
        for s in self._senders:
            with s.cond:
                s.stopping = True
                s.cond.notify()
        try:
            ray.get([a.stop.remote(min(1.0, seconds / 2)) for a in self.actors], timeout=seconds)
        except Exception:  # noqa: BLE001 - shutting down anyway
            pass
        for a in self.actors:
            ray.kill(a)
