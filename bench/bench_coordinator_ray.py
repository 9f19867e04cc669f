"""The coordinator on Ray with 100 party daemons over real gRPC and mutual TLS (issue 12).

    python bench/bench_coordinator_ray.py [--parties 100] [--hosts 4] [--shards 0,1,2,4] [--rounds 20]

Party daemons are real :class:`party.daemon.PartyDaemon` s, ``--parties / --hosts`` of them per party
host process (threads), each with its own records, durable SQLite ledger and certificate. The job is
the ``noisy-mean`` plugin of tests/support/net_noisy_mean.py with answers of d = 10^4 float64s (Laplace
noise from the ChaCha20 keystream; the coordinator also broadcasts a 10^4-vector every round). For
each shard count (0 = the coordinator in one process, no Ray; k > 0 = ``ray_address`` set, k ingress
shards on a local Ray instance), the seconds per round are measured from two jobs on the same
connected parties, of R and 2R rounds: (t(2R) - t(R)) / R, so connecting, offering and charging
cancel out. Aggregation throughput = bytes of answers summed per second (parties x d x 8 / round).

Prints a markdown table and writes bench/results/coordinator_ray.md; the load average is reported
(2 shared cores: every party, shard and the coordinator share them).
"""
from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "tests" / "support"
sys.path.insert(0, str(SUPPORT))  # the noisy-mean plugin and the test PKI helpers
sys.path.insert(0, str(ROOT))
D = 10_000


def _party_host(configs: list[str], daemon_class: type | None = None, tick=None) -> int:
    """Run one PartyDaemon (or ``daemon_class``) per config in threads of this process until SIGTERM,
    calling ``tick()`` every 0.2 s meanwhile if given."""
    from party.config import PartyConfig
    from party.daemon import PartyDaemon

    cls = daemon_class or PartyDaemon
    daemons = [cls.from_config(PartyConfig.load(c)) for c in configs]
    threads = [threading.Thread(target=d.run, daemon=True) for d in daemons]
    for t in threads:
        t.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(0.2 if tick else None):
        tick()
    for d in daemons:
        d.stop()
    for t in threads:
        t.join(5)
    return 0


def _job_seconds(client, parties: list[str], rounds: int, tag: str) -> float:
    t0 = time.perf_counter()
    job = client.submit_job("noisy-mean", {"rounds": rounds, "width": D, "broadcast": D, "epsilon": 5.0},
                            parties=parties, job_id=f"{tag}-{rounds}")
    rec = client.wait(job, timeout=3600)
    if rec["state"] != "done":
        raise RuntimeError(f"job {job} {rec['state']}: {rec.get('reason')}")
    return time.perf_counter() - t0


def _cell(shards: int, n: int, hosts: int, rounds: int, root: Path) -> dict:
    from coordinator.client import AdminClient
    from net_helpers import make_pki, party_config, start_coordinator, wait_until

    root.mkdir(parents=True, exist_ok=True)
    pki = make_pki(root / "pki", parties=n)
    kw = {} if shards == 0 else {"ray_address": "auto", "shards": shards, "shard_host": "127.0.0.1",
                                 "shard_advertise": "127.0.0.1", "shard_cpus": 0}
    server = start_coordinator(pki, root / "state", **kw)
    names = [f"party-{i}" for i in range(n)]
    tomls = [str(party_config(pki, root, nm, server.port, epsilon_limit=1e4, write_toml=True)) for nm in names]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUPPORT), str(ROOT)]))
    procs = [subprocess.Popen([sys.executable, __file__, "--party-host", *tomls[h::hosts]], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for h in range(hosts)]
    try:
        with AdminClient(f"127.0.0.1:{server.port}", tls=pki.files("operator"), timeout=60) as client:
            wait_until(lambda: sum(p["connected"] for p in client.status()["parties"]) == n, 300, f"{n} parties")
            t1 = _job_seconds(client, names, rounds, "short")
            t2 = _job_seconds(client, names, 2 * rounds, "long")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        server.stop()
    per_round = (t2 - t1) / rounds
    return {"shards": shards, "parties": n, "round_s": per_round, "gb_s": n * D * 8 / per_round / 1e9,
            "short_job_s": t1, "long_job_s": t2}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parties", type=int, default=100)
    ap.add_argument("--hosts", type=int, default=4, help="party host processes (each runs parties/hosts daemons)")
    ap.add_argument("--shards", default="0,1,2,4", help="comma list; 0 = no Ray (one process)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "coordinator_ray.md"))
    ap.add_argument("--party-host", nargs="+", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.party_host:
        return _party_host(args.party_host)
    import tempfile

    import ray

    from dpfed.simulation.ray_runner import init_local_ray

    counts = [int(s) for s in args.shards.split(",")]
    rows = []
    if any(counts):
        init_local_ray(num_cpus=os.cpu_count() or 2)
    try:
        for k in counts:
            with tempfile.TemporaryDirectory(prefix="dpfed-bench-coord-") as tmp:
                row = _cell(k, args.parties, args.hosts, args.rounds, Path(tmp))
            rows.append(row)
            print(f"shards={k}: {row['round_s']:.3f} s/round, {row['gb_s']:.3f} GB/s", flush=True)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    load = os.getloadavg()
    lines = [f"# Coordinator on Ray: {args.parties} party daemons over gRPC + mutual TLS, d = {D}",
             "", f"`python bench/bench_coordinator_ray.py --parties {args.parties} --hosts {args.hosts} "
             f"--shards {args.shards} --rounds {args.rounds}`; {platform.node()}, {os.cpu_count()} cores, "
             f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end.", "",
             "| coordinator | parties | s per round | answers summed (GB/s) | target |", "|---|---|---|---|---|"]
    for r in rows:
        who = "one process (no Ray)" if r["shards"] == 0 else f"Ray, {r['shards']} ingress shard(s)"
        lines.append(f"| {who} | {r['parties']} | {r['round_s']:.3f} | {r['gb_s']:.3f} | "
                     f"{'<= 0.5 s' if r['shards'] else ''} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
