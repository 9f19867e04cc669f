"""Shared set-up for the networking tests: a real CA, a coordinator on a free loopback port,
party daemons (threads or processes) and raw gRPC stubs for protocol-level attacks."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np

from coordinator.client import AdminClient
from coordinator.config import CoordinatorConfig
from coordinator.server import RunningServer, serve
from dpfed.data.schema import Schema
from dpfed.federation import certs
from dpfed.federation.tls import TlsFiles, channel_credentials
from party.config import PartyConfig, write_config
from party.daemon import PartyDaemon
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos.codec import PROTOCOL_VERSION, channel_options

SUPPORT = Path(__file__).resolve().parent  # on sys.path: the plugin below is imported by name
PLUGINS = ("net_noisy_mean",)
SCHEMA = Schema.numeric_box(3, 0.0, 1.0)


@dataclass
class Pki:
    root: Path

    def files(self, name: str, evil: bool = False) -> TlsFiles:
        d = self.root / ("evil" if evil else "certs")
        return TlsFiles(d / "ca.crt", d / f"{name}.crt", d / f"{name}.key")


def make_pki(root: Path, parties: int = 3) -> Pki:
    certs.init_ca(root / "ca")
    for n in ["coordinator", "operator", *[f"party-{i}" for i in range(parties)]]:
        certs.issue(n, root / "ca", root / "certs")
    certs.init_ca(root / "evil-ca")  # another CA: its certificates must be refused
    for n in ("party-0", "operator"):
        certs.issue(n, root / "evil-ca", root / "evil")
    return Pki(root)


def start_coordinator(pki: Pki, state: Path, **kw) -> RunningServer:
    cfg = CoordinatorConfig(listen="127.0.0.1:0", state_dir=state, tls=pki.files("coordinator"),
                            plugins=PLUGINS, **kw)
    return serve(cfg)


def party_data(n: int = 200, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=(n, 3))


def party_config(pki: Pki, root: Path, name: str, port: int, *, epsilon_limit: float = 10.0,
                 data: np.ndarray | None = None, seed: int | None = 0, write_toml: bool = False,
                 labels: np.ndarray | None = None, schema: Schema = SCHEMA) -> PartyConfig | Path:
    pdir = root / name
    pdir.mkdir(parents=True, exist_ok=True)
    arrays = {"X": party_data(seed=sum(map(ord, name))) if data is None else data}
    if labels is not None:
        arrays["y"] = labels
    np.savez(pdir / "data.npz", **arrays)
    (pdir / "schema.json").write_text(schema.to_json())
    f = pki.files(name)
    values = {"name": name, "coordinator": f"127.0.0.1:{port}", "data": str(pdir / "data.npz"),
              "ledger": str(pdir / "ledger.sqlite"), "epsilon_limit": epsilon_limit, "delta_limit": 1e-6,
              "reconnect_seconds": 0.2, "plugins": list(PLUGINS), "schema_file": str(pdir / "schema.json"),
              "exit_with_parent": True, "tls": {"ca": str(f.ca), "cert": str(f.cert), "key": str(f.key)}}
    if seed is not None:
        values["seed"] = seed
    write_config(pdir / "party.toml", values)
    return pdir / "party.toml" if write_toml else PartyConfig.load(pdir / "party.toml")


class PartyDidNotStop(RuntimeError):
    """A party daemon's thread still ran after ``stop()`` had waited its join timeout (a hung daemon: the test
    must not go on as if it had stopped, with its thread still talking to the coordinator and its ledger)."""


class ThreadParty:
    """A real PartyDaemon running in a thread of the test process."""

    def __init__(self, config: PartyConfig) -> None:
        self.daemon = PartyDaemon.from_config(config)
        self.error: BaseException | None = None
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name=f"party-{config.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.daemon.run()
        except BaseException as exc:  # noqa: BLE001 -- reported to the test
            self.error = exc

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the daemon and wait up to ``timeout`` s for its thread, then close its ledger; a second call does
        nothing. Raises :class:`PartyDidNotStop` (naming the party and where its thread is) if the thread runs on."""
        stop_parties([self], timeout)

    def _signal(self) -> bool:
        if self.stopped:
            return False
        self.stopped = True
        self.daemon.stop()
        return True

    def _stuck(self) -> str:
        """Where the thread is (the innermost frames of its stack), for the error."""
        frame = sys._current_frames().get(self.thread.ident or -1)
        where = "".join(traceback.format_stack(frame)[-4:]) if frame is not None else "(no stack)\n"
        return f"party {self.daemon.config.name!r}, at:\n{where}"


def stop_parties(parties: list[ThreadParty], timeout: float = 10.0) -> None:
    """Stop every party (all signalled first, then joined, ``timeout`` s in all) and close every one's ledger, even
    when some thread does not stop; then raise one :class:`PartyDidNotStop` naming each that did not."""
    signalled = [p for p in parties if p._signal()]
    end = time.monotonic() + timeout
    for p in signalled:
        p.thread.join(timeout=max(end - time.monotonic(), 0.0))
    stuck = [p._stuck() for p in signalled if p.thread.is_alive()]
    for p in signalled:
        p.daemon.close()
    if stuck:
        raise PartyDidNotStop(f"{len(stuck)} party thread(s) still running {timeout:g} s after stop(): "
                              + "\n".join(stuck))


def free_port() -> int:
    """A TCP port free on loopback right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def subprocess_env() -> dict:
    """The environment for a daemon process: this process's import path plus the test plugins."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUPPORT), *[p for p in sys.path if p]]))


def spawn_party(toml: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUPPORT), *[p for p in sys.path if p]]))
    return subprocess.Popen([sys.executable, "-m", "party.daemon", "--config", str(toml), "--log-level", "WARNING"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def spawn_coordinator(pki: Pki, root: Path, port: int, extra_toml: str = "") -> subprocess.Popen:
    """``dpfed coordinator serve`` as a process on ``port`` (state in ``root/state``, log in ``root/coordinator.log``,
    ``extra_toml``: more top-level config lines), returned once it listens."""
    f = pki.files("coordinator")
    toml = root / "coordinator.toml"
    toml.write_text(f'listen = "127.0.0.1:{port}"\nstate_dir = "{root / "state"}"\nplugins = ["net_noisy_mean"]\n'
                    f'{extra_toml}[tls]\nca = "{f.ca}"\ncert = "{f.cert}"\nkey = "{f.key}"\n')
    with open(root / "coordinator.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "dpfed.cli", "coordinator", "serve", "--config", str(toml)],
                                env=subprocess_env(), stdout=subprocess.PIPE, stderr=log, text=True)
    assert "listening on port" in proc.stdout.readline(), f"the coordinator did not start; see {root}/coordinator.log"
    return proc


def sigterm(proc: subprocess.Popen) -> tuple[int, float]:
    """Send SIGTERM; the exit status and the seconds until the process is gone (killed after 30 s)."""
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    return rc, time.monotonic() - t0


def ledger_charges(path: Path) -> list[str]:
    """The charge ids in the ledger (a party's, or the coordinator's mirror of one) at ``path``."""
    from dpfed.core.ledger import BudgetLedger

    with BudgetLedger(path, epsilon_limit=1e6, delta_limit=1e-6) as led:
        return led.charge_ids()


def admin(pki: Pki, port: int, name: str = "operator", evil: bool = False) -> AdminClient:
    return AdminClient(f"127.0.0.1:{port}", tls=pki.files(name, evil), timeout=20)


def raw_stub(pki: Pki, port: int, name: str, evil: bool = False, max_bytes: int | None = None):
    opts = channel_options(max_bytes) if max_bytes else channel_options()
    ch = grpc.secure_channel(f"127.0.0.1:{port}", channel_credentials(pki.files(name, evil)), options=opts)
    return ch, pbg.PartyStub(ch)


def register(stub, name: str) -> str:
    return stub.Register(pb.RegisterRequest(version=PROTOCOL_VERSION, party=name, schema_json=SCHEMA.to_json(),
                                            epsilon_limit=10.0, delta_limit=1e-6), timeout=10).session


def wait_until(pred, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
