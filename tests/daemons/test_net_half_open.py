"""Half-open connections do not lock a party out for longer than the handshake timeout (issue 24).

The coordinator runs as a real process with a low descriptor limit (``resource.setrlimit`` in the
child). Without any certificate, the test opens more TCP connections than that limit allows and never
starts a TLS handshake on them. gRPC's default let each hold its descriptor for 120 s, so the
coordinator could not accept anyone for two minutes per wave; now a connection has
``handshake_timeout`` seconds to finish its handshake and the number of open connections is capped
below the descriptor limit (``max_connections``, by default derived from that limit). A real party
registers within the handshake timeout plus a few seconds of its own reconnect backoff.
"""
from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from net_helpers import SCHEMA, free_port, make_pki, raw_stub, subprocess_env
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION

NOFILE = 160            # the coordinator process's descriptor limit in this test
HANDSHAKE = 2.0         # its handshake_timeout (seconds)
SOCKETS = 400           # half-open connections opened at once, more than NOFILE
SLACK = 6.0             # the party's own reconnect backoff and a loaded machine


def _low_nofile() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def _spawn(pki, root: Path, port: int, **extra) -> subprocess.Popen:
    f = pki.files("coordinator")
    lines = [f'listen = "127.0.0.1:{port}"', f'state_dir = "{root / "state"}"',
             *[f"{k} = {json.dumps(v)}" for k, v in extra.items()],
             "[tls]", f'ca = "{f.ca}"', f'cert = "{f.cert}"', f'key = "{f.key}"']
    (root / "coordinator.toml").write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "dpfed.cli", "coordinator", "serve", "--config",
                             str(root / "coordinator.toml")], env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=open(root / "coordinator.log", "wb"), text=True, preexec_fn=_low_nofile)
    line = proc.stdout.readline()
    assert "listening on port" in line, f"coordinator did not start: {line!r}"
    return proc


def _register_once(pki, port: int, timeout: float) -> bool:
    ch, stub = raw_stub(pki, port, "party-0")
    try:
        stub.Register(pb.RegisterRequest(version=PROTOCOL_VERSION, party="party-0", schema_json=SCHEMA.to_json(),
                                         epsilon_limit=1.0, delta_limit=1e-6), timeout=timeout)
        return True
    except grpc.RpcError:
        return False
    finally:
        ch.close()


@pytest.fixture()
def coordinator(tmp_path):
    pki = make_pki(tmp_path / "pki", parties=1)
    port = free_port()
    proc = _spawn(pki, tmp_path, port, handshake_timeout=HANDSHAKE)
    yield pki, port
    proc.kill()                                     # nothing of it is checked after the test
    proc.wait(timeout=10)


def test_half_open_connections_lock_a_party_out_no_longer_than_the_handshake_timeout(coordinator):
    pki, port = coordinator
    assert _register_once(pki, port, 10.0)          # served before the wave
    held = []
    try:
        for _ in range(SOCKETS):                    # one wave: connect, send nothing, keep the socket
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
        t0 = time.monotonic()
        time.sleep(0.5)
        while not _register_once(pki, port, 1.0):
            assert time.monotonic() - t0 < HANDSHAKE + SLACK, "the party is still locked out"
        took = time.monotonic() - t0
    finally:
        for s in held:
            s.close()
    assert took < HANDSHAKE + SLACK, took
