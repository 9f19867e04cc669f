"""Benchmark of the gRPC simulation (coordinator + party processes over loopback mutual TLS).

    python bench/bench_simulation.py [--parties 5] [--rounds 200] [--big-rounds 10] [--seed 0]

Measures (1) wall time of the whole 5-party simulation of naive Bayes on adult (process start,
TLS, offer/charge, rounds, model fetch, shutdown), next to the same job in one process; (2) round
latency: rounds per second of a small multi-round job (``noisy-mean``, a Laplace mean, see
tests/support/net_noisy_mean.py); (3) throughput for large arrays: every round broadcasts a 5 MiB array
to each party and each party answers 5 MiB (the size of an MNIST GMLVQ answer); the parties' own
work (655k Laplace draws each per round) is included, so (4) times the codec alone. Prints a markdown
table and writes bench/results/simulation.md. Timings depend on the machine's load; say so.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the noisy-mean plugin lives in the tests' support modules

from dpfed.simulation.grpc_local import run_grpc_simulation  # noqa: E402
from dpfed.data.datasets import load_dataset, split_parties  # noqa: E402
from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.data.schema import Schema  # noqa: E402

PLUGINS = ("net_noisy_mean",)


class _Clock:
    """Progress callback: rounds per second between the first and the last progress report."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.marks: list[tuple[float, float]] = []

    def __call__(self, fraction: float) -> None:
        self.marks.append((time.perf_counter(), fraction))

    def rate(self) -> float:
        (t0, f0), (t1, f1) = self.marks[0], self.marks[-1]
        return (f1 - f0) * self.rounds / (t1 - t0) if t1 > t0 else float("nan")


def bench_wall(parties: int, seed: int) -> list[tuple[str, str]]:
    ds = load_dataset("adult")
    data = split_parties(ds.X_train, ds.y_train, parties, "iid", np.random.default_rng(seed))
    try:
        from dpfed.algorithms import get_algorithm

        algo = get_algorithm("naive-bayes")
        import dpfed.core.mechanisms  # noqa: F401  (naive Bayes needs it to answer)
        spec = JobSpec("bench-nb", "naive-bayes", {"epsilon": 1.0, "delta": algo.default_delta}, ds.schema)
        label, plugins = "naive-bayes, adult", ()
    except ImportError:
        spec = JobSpec("bench-nm", "noisy-mean", {"epsilon": 1.0, "delta": 0.0}, ds.schema)
        data = [(X, None) for X, _ in data]
        label, plugins = "noisy-mean (naive Bayes not available), adult", PLUGINS
    t0 = time.perf_counter()
    res = run_grpc_simulation(spec, data, seed=seed, plugins=plugins)
    wall = time.perf_counter() - t0
    rows = [(f"wall time, {parties}-party gRPC simulation ({label}, {len(ds.X_train)} rows)", f"{wall:.2f} s")]
    if not plugins:
        from dpfed.simulation import run_inprocess

        t0 = time.perf_counter()
        run_inprocess(spec, data, seed=seed)
        rows.append(("same job in one process (dpfed.simulation.run_inprocess)", f"{time.perf_counter() - t0:.2f} s"))
    rows.append(("epsilon spent (max over parties)", f"{res.epsilon_spent:.4f}"))
    return rows


def bench_rounds(parties: int, rounds: int, seed: int) -> list[tuple[str, str]]:
    schema = Schema.numeric_box(10, 0.0, 1.0)
    rng = np.random.default_rng(seed)
    data = [(rng.uniform(size=(1000, 10)), None) for _ in range(parties)]
    spec = JobSpec("bench-rounds", "noisy-mean", {"epsilon": 1.0, "delta": 0.0, "rounds": rounds}, schema)
    clock = _Clock(rounds)
    run_grpc_simulation(spec, data, seed=seed, plugins=PLUGINS, progress=clock)
    r = clock.rate()
    return [(f"round rate, {parties} parties, small answers ({rounds} rounds)", f"{r:.0f} rounds/s "
             f"({1000 / r:.1f} ms/round)")]


def bench_bytes(parties: int, rounds: int, seed: int) -> list[tuple[str, str]]:
    width = 5 * 1024 * 1024 // 8 - 1  # the answer vector has 1 + width float64s = 5 MiB
    schema = Schema.numeric_box(4, 0.0, 1.0)
    rng = np.random.default_rng(seed)
    data = [(rng.uniform(size=(1000, 4)), None) for _ in range(parties)]
    spec = JobSpec("bench-bytes", "noisy-mean", {"epsilon": 1.0, "delta": 0.0, "rounds": rounds, "width": width,
                                                 "broadcast": width + 1}, schema)
    clock = _Clock(rounds)
    run_grpc_simulation(spec, data, seed=seed, plugins=PLUGINS, progress=clock)
    r = clock.rate()
    per_round = 2 * parties * (width + 1) * 8  # broadcast down + answer up, every party
    return [(f"large arrays: 5 MiB down + 5 MiB up per party per round, {parties} parties",
             f"{r:.2f} rounds/s = {r * per_round / 2**20:.0f} MiB/s through the coordinator")]


def bench_codec(reps: int = 10) -> list[tuple[str, str]]:
    """Encode + serialise + parse + assemble one 5 MiB float64 array (one process, no sockets)."""
    from protos import dpfed_pb2 as pb
    from protos.codec import ArrayAssembler, chunk_groups, encode_arrays

    x = np.random.default_rng(0).normal(size=5 * 2**20 // 8)
    t0 = time.perf_counter()
    for _ in range(reps):
        wire = [pb.ResultPart(chunks=g).SerializeToString() for g in chunk_groups(encode_arrays({"a": x}))]
        asm = ArrayAssembler()
        for w in wire:
            asm.add_all(pb.ResultPart.FromString(w).chunks)
        asm.finish()
    dt = (time.perf_counter() - t0) / reps
    return [("codec only: chunk + serialise + parse + assemble 5 MiB", f"{dt * 1000:.1f} ms ({5 / dt:.0f} MiB/s)")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--big-rounds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows = bench_wall(args.parties, args.seed) + bench_rounds(args.parties, args.rounds, args.seed) + \
        bench_bytes(args.parties, args.big_rounds, args.seed) + bench_codec()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = ["| measurement | result |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    note = (f"\nMachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
            f"{load:.1f} when measured (shared with other jobs); Python {platform.python_version()}; "
            f"command: python bench/bench_simulation.py --parties {args.parties} --rounds {args.rounds} "
            f"--big-rounds {args.big_rounds}\n")
    text = "\n".join(lines) + "\n" + note
    print(text)
    out = ROOT / "bench" / "results" / "simulation.md"
    out.write_text("# gRPC simulation benchmark\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
