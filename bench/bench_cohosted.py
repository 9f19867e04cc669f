"""What sharing one interpreter costs party daemons: CPU per party and round of the 100-party DP-SGD cell
when the parties' answers are computed one after another, or by T threads at once, in one process.

    python bench/bench_cohosted.py [--threads 1,2,5,25] [--rounds 12] [--repeats 2] [--modes plain,record]

The job is bench_secure_grpc.py's ``many`` cell (100 parties, MNIST split i.i.d., GLVQ with one prototype
per class, d = 7,840, Poisson rate 0.01), in process: real party sessions (own records, ledgers, secure
aggregation keys), the real coordinator and, for ``record``, the real :class:`SecureGather`. No network:
the only difference between the rows is how many threads compute the parties' answers. Timed: the step
rounds after the first two (the initialisation excluded), process CPU time (user + system, every
thread) and wall time, per party and round; medians over ``--repeats`` runs of the whole job.

Why it matters: bench_secure_grpc.py hosts P / hosts party daemons as threads of each host process (4
hosts of 25 for the 100-party cell) because 100 one-party processes do not fit the machine's memory.
A deployment runs one party per process (per machine). Threads that compute at once hand the GIL back
and forth at every release inside NumPy or a cipher call, and a secure answer makes many more such calls
than a plain one; this table shows how much that inflates each mode. Writes bench/results/cohosted.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dpfed.algorithms.secure_release import release_for
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # as in the benchmark's host processes

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cohosted.md"
PARTIES = 100


def run(mode: str, rounds: int, threads: int) -> tuple[float, float]:
    """One job of ``rounds`` steps; (CPU ms, wall ms) per party and step round, medians over the steps."""
    from bench_secure_grpc import _params

    from dpfed.algorithms.contract import Aggregate, JobSpec
    from dpfed.algorithms.driver import drive
    from dpfed.algorithms.secure_noise import is_secure
    from dpfed.data.datasets import load_dataset, split_parties
    from dpfed.federation.plugins import load_algorithm
    from dpfed.federation.secure_gather import SecureGather
    from dpfed.federation.session import TaskError
    from dpfed.simulation import inprocess as ip

    ds = load_dataset("mnist")
    data = split_parties(ds.X, ds.y, PARTIES, "iid", np.random.default_rng(0))
    names = [f"party-{i}" for i in range(PARTIES)]
    spec = JobSpec(f"cohosted-{mode}-{threads}", "glvq", _params("many", mode, rounds, names, len(ds.X)), ds.schema)
    algo = load_algorithm(spec.algorithm, ())
    spec = ip.secure_spec(spec, names, len(ds.X))
    sessions = ip.open_sessions(spec, ip.make_parties(spec, data, party_names=names))
    by_name = {s.party.name: s for s in sessions}
    pool = ThreadPoolExecutor(threads) if threads > 1 else None

    def one(item):  # type: ignore[no-untyped-def]
        name, task = item
        try:
            return name, by_name[name].answer(task)
        except TaskError:
            return name, None

    def send(tasks):  # type: ignore[no-untyped-def]
        done = pool.map(one, tasks.items()) if pool else map(one, tasks.items())
        return {n: a for n, a in done if a is not None}

    secure = SecureGather(spec, release_for(algo, spec), send) if is_secure(spec.params) else None
    cpu: list[float] = []
    wall: list[float] = []
    steps = [0]

    def gather(task):  # type: ignore[no-untyped-def]
        steps[0] += task.kind == "step"
        timed = task.kind == "step" and steps[0] > 2
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            if secure is not None:
                return secure(task)
            got = send({n: task for n in names})
            return [Aggregate(got[n], (n,)) for n in names]
        finally:
            if timed:
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)

    try:
        drive(algo.coordinator(spec, names), gather, algo.combine)
    finally:
        if pool:
            pool.shutdown()
    return 1e3 * statistics.median(cpu) / PARTIES, 1e3 * statistics.median(wall) / PARTIES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2,5,25", help="comma list of thread counts (1: one after another)")
    ap.add_argument("--rounds", type=int, default=12, help="DP-SGD steps per job (the first two are not timed)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--modes", default="plain,record", help="plain (local noise) and/or record / party (secure)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    threads = [int(t) for t in args.threads.split(",")]
    modes = args.modes.split(",")
    res: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for rep in range(args.repeats):
        for mode in modes:
            for t in (threads if rep % 2 == 0 else threads[::-1]):
                res.setdefault((mode, t), []).append(run(mode, args.rounds, t))
                print(f"repeat {rep} {mode:6s} threads {t:3d}: CPU {res[mode, t][-1][0]:.2f} ms, wall "
                      f"{res[mode, t][-1][1]:.2f} ms per party and round", flush=True)
    load = os.getloadavg()[0]
    lines = ["# Party answers computed by threads of one process: CPU per party and round (100-party cell)", "",
             f"`python bench/bench_cohosted.py --threads {args.threads} --rounds {args.rounds} --repeats "
             f"{args.repeats} --modes {args.modes}`; {os.cpu_count()} cores, load average at the end {load:.1f}. "
             "Medians over repeats of the per-job median (range); CPU = process CPU time (all threads).", "",
             f"| mode | threads | CPU ms per party and round | wall ms per party and round | CPU / {threads[0]} thread(s) |",
             "|---|---|---|---|---|"]
    for mode in modes:
        base = statistics.median(c for c, _ in res[mode, threads[0]])
        for t in threads:
            c = [x for x, _ in res[mode, t]]
            w = [y for _, y in res[mode, t]]
            lines.append(f"| {mode} | {t} | {statistics.median(c):.2f} ({min(c):.2f}-{max(c):.2f}) | "
                         f"{statistics.median(w):.2f} ({min(w):.2f}-{max(w):.2f}) | "
                         f"{statistics.median(c) / base:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
