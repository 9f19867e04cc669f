"""A secure round against a plain round as a deployment sees it: real gRPC, mutual TLS, party daemons.

    python bench/bench_secure_grpc.py [--repeats 3] [--cells big,many] [--rounds-big 2] [--rounds-many 8]
                                      [--modes plain,record,party] [--hosts many:50]

The job is a real algorithm's, not a vector sum: DP-SGD on MNIST (70,000 records split i.i.d. over
the parties, Poisson sampling rate q = 0.01, so ~700 sampled records per round over all parties),
with the gradient computed by the parties in both modes:

* ``big``: 10 parties, full-Omega GMLVQ (one prototype per class, Omega 784 x 784: d = 784^2 + 7840
  = 622,496 coordinates per record's gradient), the issue's "d = 6.2e5" cell;
* ``many``: 100 parties, GLVQ with one prototype per class (d = 7,840, the prototype count closest to
  the issue's d = 1e4: the next, two per class, is 15,680).

Plain: ``noise = local`` (each party clips its per-record gradients, adds the whole Gaussian noise to
its sum and uploads float64). Secure: ``noise = distributed`` with secure aggregation (16 bits,
P_min = 0.7 P), in two encodings (``secure_rounding``): ``record`` encodes every sampled record's clipped
gradient on its own (rotation, conditional rounding), ``party`` sums the party's clipped gradients and
rotates and rounds the sum once; then one discrete Gaussian share, the mask, and the round's SecAgg steps.
A real algorithm was preferred to a vector sum because the per-record encoding is what a secure DP-SGD
round costs with ``record`` (a vector sum encodes one row per party).

Party daemons are real :class:`party.daemon.PartyDaemon` s (own records, durable SQLite ledger, RDP
accountant, certificate), ``P / hosts`` of them as threads in each host process; the coordinator is
real, in this process, behind mutual TLS on loopback. ``--hosts many:100`` runs each party in its own
process, as a deployment does, but needs more than this machine's 24 GB (the coordinator was killed
for memory); ``MALLOC_ARENA_MAX=2 ... --hosts many:50`` (two daemons per process) fits in ~19 GB.
Daemons sharing a host's interpreter pay for it: each GIL release inside NumPy or a cipher call hands
the GIL to another daemon's thread. In process (bench_cohosted.py, 100 parties), 25 threads answering
the tasks spent 3-4x the CPU of one thread answering them in turn, in both modes: about +6 ms per
party and round for a secure answer against +3 ms for a plain one. Over gRPC, 4 hosts of 25 daemons
measured 2.2x and 50 hosts of 2 1.5x on the same day (session 10); a second 50-host run gave 2.0x
(session 11; the eight repeats pooled 1.6x, inside the job 1.7x).

Seconds per round are measured at the operator (submit to done, streamed) from jobs of R and 2R
DP-SGD steps on the same connected parties: (t(2R) - t(R)) / R, so start-up, offer, charge,
initialisation and the model download cancel. The noise calibration depends on the number of rounds
and is cached per process (coordinator and party hosts), so one untimed warm-up pair per mode runs
first: otherwise t(2R) - t(R) would include a calibration. Both modes run in one run, alternating (the order of the modes reversed every other repeat), ``--repeats`` times;
the table gives medians (and the range). Upload per party and round = protobuf bytes of the party's
answers (ResultPart messages, counted in the host processes; TLS/HTTP2 framing excluded),
(bytes(2R) - bytes(R)) / R / P.

On this 2-core machine every party, the coordinator and the operator share the two cores, so a
round's wall time is the SUM of the parties' work divided by ~2: in a deployment the parties compute
in parallel on their own machines. bench/bench_secure.py gives the in-process CPU measurement (the
worst case: the gradient left out); both are reported. Writes bench/results/secure_grpc.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one BLAS thread per process: the cores are shared by every party

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "tests" / "support"
sys.path.insert(0, str(SUPPORT))  # the test PKI helpers
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench_coordinator_ray's party host
RESULTS = ROOT / "bench" / "results" / "secure_grpc.md"
Q = 0.01
CELLS = {  # name: (parties, algorithm, extra params, d per record, hosts)
    "big": (10, "gmlvq", {"omega_rank": 0, "lr": 0.05, "clip": 0.5}, 784 * 784 + 7840, 2),
    "many": (100, "glvq", {"lr": 0.2, "clip": 0.1}, 7840, 4),
}
MNIST_INIT = {"init": "gaussian", "init_center": "lower", "init_clip": 16.0}  # bench_lvq.py's


def _party_host(counts_file: str, configs: list[str]) -> int:
    """Run one counting PartyDaemon per config in threads until SIGTERM (bench_coordinator_ray's host);
    every 0.2 s, if they changed, write the protobuf bytes each party uploaded per job to ``counts_file``
    (atomically)."""
    from bench_coordinator_ray import _party_host as run_host

    from party.daemon import PartyDaemon

    sent: dict[str, dict[str, int]] = {}
    lock = threading.Lock()
    version = [0, -1]  # [changes counted, changes written]

    class CountingDaemon(PartyDaemon):
        def _result_parts(self, ids, answer, error):  # type: ignore[no-untyped-def]
            for part in super()._result_parts(ids, answer, error):
                with lock:
                    per = sent.setdefault(self.config.name, {})
                    per[ids["job_id"]] = per.get(ids["job_id"], 0) + part.ByteSize()
                    version[0] += 1
                yield part

    def dump() -> None:
        with lock:
            if version[0] == version[1]:
                return
            text, version[1] = json.dumps(sent), version[0]
        Path(counts_file + ".tmp").write_text(text)
        os.replace(counts_file + ".tmp", counts_file)

    return run_host(configs, CountingDaemon, dump)


def _write_config(root: Path, pki, name: str, port: int, X, y, schema) -> str:
    import numpy as np

    from party.config import write_config

    pdir = root / name
    pdir.mkdir(parents=True, exist_ok=True)
    np.savez(pdir / "data.npz", X=X, y=y)
    (pdir / "schema.json").write_text(schema.to_json())
    f = pki.files(name)
    write_config(pdir / "party.toml", {
        "name": name, "coordinator": f"127.0.0.1:{port}", "data": str(pdir / "data.npz"),
        "ledger": str(pdir / "ledger.sqlite"), "epsilon_limit": 1e9, "delta_limit": 1e-5, "accountant": "rdp",
        "reconnect_seconds": 0.2, "schema_file": str(pdir / "schema.json"), "exit_with_parent": True,
        "tls": {"ca": str(f.ca), "cert": str(f.cert), "key": str(f.key)}})
    return str(pdir / "party.toml")


MODES = ("plain", "record", "party")  # local noise; secure with each secure_rounding


def _params(cell: str, mode: str, steps: int, names: list[str], records: int) -> dict:
    p, _, extra, _, _ = CELLS[cell]
    params = {"epsilon": 1.5, "delta": 1e-5, "sampling_rate": Q, "epochs": steps * Q, "prototypes_per_class": 1,
              **MNIST_INIT, **extra}
    if mode != "plain":
        params.update(noise="distributed", secure_aggregation=True, bits=16, min_survivors=max(2, 7 * p // 10),
                      roster=list(names), records=records, secure_rounding=mode)
    return params


SKIP = 6  # in-job timing starts once the operator sees this many rounds (the initialisation and 5 steps)
STEADY: dict[str, float] = {}  # job id -> seconds per round inside the job (rounds SKIP .. last)


def _job(client, algo: str, params: dict, names: list[str], job_id: str) -> tuple[float, int]:
    """Run one job; return (seconds from submit to done, rounds). Also records in :data:`STEADY` the
    seconds per round inside the job, from the operator's watch stream: (t_last - t_first) / (rounds
    between), where t_first is when it first sees >= SKIP rounds and t_last when it sees the last
    round (the start-up, the initialisation and the model download are outside both)."""
    t0 = time.perf_counter()
    job = client.submit_job(algo, params, parties=names, job_id=job_id)
    rec: dict = {}
    first = last = None
    for rec in client.watch(job, timeout=7200):
        n, now = int(rec.get("rounds", 0)), time.perf_counter()
        if n >= SKIP and first is None:
            first = (now, n)
        if first is not None and rec.get("state") == "running" and (last is None or n > last[1]):
            last = (now, n)
    if rec.get("state") != "done":
        raise RuntimeError(f"job {job} {rec.get('state')}: {rec.get('reason') or rec.get('error')}")
    if first is not None and last is not None and last[1] > first[1]:
        STEADY[job_id] = (last[0] - first[0]) / (last[1] - first[1])
    return time.perf_counter() - t0, int(rec.get("rounds", 0))


def _uploaded(files: list[Path], job_id: str, names: list[str]) -> int:
    total = 0
    for f in files:
        counts = json.loads(f.read_text()) if f.exists() else {}
        total += sum(per.get(job_id, 0) for n, per in counts.items() if n in names)
    return total


def run_cell(cell: str, repeats: int, rounds: int, root: Path, log, modes: tuple[str, ...] = MODES) -> dict:
    import numpy as np

    from coordinator.client import AdminClient
    from dpfed.data.datasets import load_dataset, split_parties
    from net_helpers import make_pki, start_coordinator, wait_until

    p, algo, _, d, hosts = CELLS[cell]
    ds = load_dataset("mnist")
    data = split_parties(ds.X, ds.y, p, "iid", np.random.default_rng(0))
    pki = make_pki(root / "pki", parties=p)
    server = start_coordinator(pki, root / "state", offer_timeout=1800.0, task_timeout=1800.0)
    names = [f"party-{i}" for i in range(p)]
    tomls = [_write_config(root, pki, n, server.port, X, y, ds.schema) for n, (X, y) in zip(names, data)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUPPORT), str(ROOT)]),
               PYTHONWARNINGS="ignore::UserWarning")
    counts = [root / f"host-{h}.json" for h in range(hosts)]
    procs = [subprocess.Popen([sys.executable, __file__, "--party-host", str(counts[h]), *tomls[h::hosts]],
                              env=env, stdout=subprocess.DEVNULL, stderr=open(root / f"host-{h}.log", "wb"))
             for h in range(hosts)]
    per_round: dict[str, list[float]] = {m: [] for m in modes}
    upload: dict[str, list[float]] = {m: [] for m in modes}
    in_job: dict[str, list[float]] = {m: [] for m in modes}
    loads = [os.getloadavg()[0]]
    try:
        with AdminClient(f"127.0.0.1:{server.port}", tls=pki.files("operator"), timeout=120) as client:
            wait_until(lambda: sum(x["connected"] for x in client.status()["parties"]) == p, 600, f"{p} parties")
            for mode in modes:  # warm-up, untimed: fills the noise calibration caches (see above)
                for steps in (rounds, 2 * rounds):
                    _job(client, algo, _params(cell, mode, steps, names, len(ds.X)), names,
                         f"{cell}-warm-{mode}-{steps}")
            log(f"{cell}: warm-up done, load {os.getloadavg()[0]:.2f}")
            for rep in range(repeats):
                for mode in (modes if rep % 2 == 0 else modes[::-1]):
                    tag = f"{cell}-{mode}-{rep}"
                    t = {}
                    for steps in (rounds, 2 * rounds):
                        t[steps], n_rounds = _job(client, algo, _params(cell, mode, steps, names, len(ds.X)),
                                                  names, f"{tag}-{steps}")
                    per_round[mode].append((t[2 * rounds] - t[rounds]) / rounds)
                    in_job[mode].append(STEADY.get(f"{tag}-{2 * rounds}", float("nan")))
                    loads.append(os.getloadavg()[0])
                    log(f"{cell} repeat {rep} {mode:6s}: R = {rounds}: {t[rounds]:.1f} s, "
                        f"2R: {t[2 * rounds]:.1f} s ({n_rounds} rounds) -> {per_round[mode][-1]:.3f} s per round; "
                        f"inside the 2R job {in_job[mode][-1]:.3f} s per round, load {loads[-1]:.2f}")
            time.sleep(1.0)  # the host processes write their counts every 0.2 s
            for mode in modes:
                for rep in range(repeats):
                    tag = f"{cell}-{mode}-{rep}"
                    b1, b2 = (_uploaded(counts, f"{tag}-{s}", names) for s in (rounds, 2 * rounds))
                    upload[mode].append((b2 - b1) / rounds / p)
    finally:
        for pr in procs:
            pr.terminate()
        for pr in procs:
            try:
                pr.wait(30)
            except subprocess.TimeoutExpired:
                pr.kill()
        server.stop()
    return {"cell": cell, "parties": p, "algo": algo, "d": d, "hosts": hosts, "rounds": rounds,
            "per_round": per_round, "in_job": in_job, "upload": upload, "load": (min(loads), max(loads))}


def _fmt(xs: list[float], digits: int = 3) -> str:
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def table(rows: list[dict], repeats: int, commit: str) -> str:
    lines = [
        "# Secure vs plain DP-SGD round over real gRPC with mutual TLS and party daemons (MNIST)", "",
        f"`python bench/bench_secure_grpc.py --repeats {repeats}` at commit {commit}; {platform.machine()}, "
        f"{os.cpu_count()} cores shared by every party, the coordinator and other engineers' jobs. Seconds per "
        "round = (t(2R) - t(R)) / R at the operator, median over repeats (range); plain and secure "
        "alternate. Inside the job: seconds per round between the operator first seeing round "
        f"{SKIP} of the 2R job and seeing its last round (start-up, initialisation and download excluded). "
        "Upload: protobuf bytes of one party's answers per round (all four SecAgg steps for "
        "secure), median. The parties share 2 cores here: a deployment's parties compute in parallel.", "",
        "| cell | plain s/round | secure encoding | secure s/round | ratio (median) | target | inside the job: "
        "plain / secure s/round (ratio) | upload plain / secure bytes per party and round (ratio) | "
        "load average (min-max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = 1.5 if r["cell"] == "big" else 2.0
        plain, up_p = r["per_round"]["plain"], statistics.median(r["upload"]["plain"])
        for mode in (m for m in r["per_round"] if m != "plain"):
            sec = r["per_round"][mode]
            ratio = statistics.median(sec) / statistics.median(plain)
            up_s = statistics.median(r["upload"][mode])
            ip, isec = r["in_job"]["plain"], r["in_job"][mode]
            inside = (f"{_fmt(ip)} / {_fmt(isec)} ({statistics.median(isec) / statistics.median(ip):.1f}x)"
                      if ip and isec else "")
            lines.append(
                f"| P = {r['parties']}, {r['algo'].upper()} d = {r['d']:,} ({r['hosts']} host processes, R = "
                f"{r['rounds']}) | {_fmt(plain)} | {mode} | {_fmt(sec)} | {ratio:.1f}x | <= {target}x "
                f"{'met' if ratio <= target else 'MISSED'} | {inside} | {up_p:,.0f} / {up_s:,.0f} "
                f"({up_s / up_p:.2f}) | {r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cells", default="big,many", help="comma list of: " + ", ".join(CELLS))
    ap.add_argument("--rounds-big", type=int, default=2, help="R for the 10-party cell")
    ap.add_argument("--rounds-many", type=int, default=8, help="R for the 100-party cell")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--workdir", default=None, help="keep configs, ledgers and host logs here (default: a temporary folder)")
    ap.add_argument("--parties", type=int, default=None, help="override the cells' party counts (smoke tests)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma list of: plain (local noise), record / party (secure, each secure_rounding); plain "
                         "is always run (the ratios' denominator)")
    ap.add_argument("--hosts", default="",
                    help="party host processes per cell, e.g. many:100 (default: big:2, many:4; P / hosts daemons "
                         "share each host's interpreter as threads)")
    ap.add_argument("--party-host", nargs="+", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.party_host:
        return _party_host(args.party_host[0], args.party_host[1:])
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    if args.parties:
        for k, v in CELLS.items():
            CELLS[k] = (args.parties, *v[1:4], min(v[4], args.parties))
    for item in filter(None, args.hosts.split(",")):
        cell, _, count = item.partition(":")
        if cell not in CELLS or not count.isdigit() or not 1 <= int(count) <= CELLS[cell][0]:
            ap.error(f"--hosts {item!r}: expected CELL:N with CELL one of {', '.join(CELLS)} and 1 <= N <= parties")
        CELLS[cell] = (*CELLS[cell][:4], int(count))
    rows = []
    for cell in args.cells.split(","):
        rounds = args.rounds_big if cell == "big" else args.rounds_many
        with tempfile.TemporaryDirectory(prefix="dpfed-bench-secure-grpc-") as tmp:
            root = Path(args.workdir) / cell if args.workdir else Path(tmp)
            modes = ("plain", *(m for m in args.modes.split(",") if m in MODES and m != "plain"))
            rows.append(run_cell(cell, args.repeats, rounds, root, lambda s: print(s, flush=True), modes))
    text = table(rows, args.repeats, commit)
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
