"""Coordinator checkpoint benchmark: ``python bench/bench_checkpoint.py``.

The coordinator durably rewrites a job's checkpoint (pickle of the coordinator half plus the task
about to be sent; temporary file, fsync, rename, fsync of the directory) before every round, so
that a crashed job resumes at no extra privacy cost. This prints a markdown table (and writes
``bench/results/checkpoint.md``) of the checkpoint's size and the median wall time of one write,
per algorithm and model size, on the state directory's file system (here: a temporary directory).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from coordinator.state import StateStore
from dpfed.algorithms import add_algorithm_arguments, get_algorithm
from dpfed.algorithms.contract import JobSpec
from dpfed.data.schema import Schema

REPEAT = 20
CASES = [  # (label, algorithm, features, classes, options)
    ("naive Bayes, d=14 numeric, 2 classes", "naive-bayes", 14, 2, []),
    ("k-means, d=10, k=5", "kmeans", 10, 0, ["--k", "5"]),
    ("GLVQ, MNIST size (d=784, 10 classes)", "glvq", 784, 10, []),
    ("GMLVQ, MNIST size, Omega rank 50", "gmlvq", 784, 10, ["--omega-rank", "50"]),
    ("GMLVQ, MNIST size, full Omega (784 x 784)", "gmlvq", 784, 10, []),
]


def _coordinator(name: str, d: int, classes: int, options: list[str]):
    algo = get_algorithm(name)
    ap = argparse.ArgumentParser(conflict_handler="resolve")
    add_algorithm_arguments(ap)
    args = ap.parse_args(options)
    args.epsilon, args.delta, args.parties = 1.0, 1e-5, 1
    params = {"epsilon": 1.0, "delta": 1e-5, **(algo.params_from_args(args) if algo.params_from_args else {})}
    spec = JobSpec("bench", name, params, Schema.numeric_box(d, 0.0, 1.0, n_classes=classes))
    coord = algo.coordinator(spec, ["p0", "p1", "p2"])
    return spec, coord, coord.next_task()


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(tmp)
        for label, name, d, classes, options in CASES:
            spec, coord, task = _coordinator(name, d, classes, options)
            state = {"spec_json": spec.to_json(), "parties": ["p0", "p1", "p2"], "rounds": 0,
                     "coordinator": coord, "task": task}
            times = []
            for _ in range(REPEAT):
                t0 = time.perf_counter()
                store.save_checkpoint("bench", state)
                times.append(time.perf_counter() - t0)
            size = (Path(tmp) / "checkpoints" / "bench.pkl").stat().st_size
            rows.append(f"| {label} | {size / 1e6:.3f} | {1e3 * statistics.median(times):.1f} |")
        store.close()
    table = "\n".join([
        f"Checkpoint per round ({platform.node()}, Python {sys.version.split()[0]}, median of {REPEAT} writes)", "",
        "| job | checkpoint (MB) | write incl. fsync (ms) |", "|---|---|---|", *rows])
    print(table)
    out = Path(__file__).resolve().parent / "results" / "checkpoint.md"
    out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
