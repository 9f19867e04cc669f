"""Benchmark of DP naive Bayes: privacy-utility sweep, statistics speed, simulation wall time.

    python bench/bench_naive_bayes.py [--seeds 10] [--rows 1000000] [--no-grpc]

* Accuracy: adult, nursery, mushroom; iid split over 5 parties (``split_parties`` with
  ``default_rng(seed)``) and the same job centrally (1 party); epsilon in {0.1, 0.5, 1, 2}, with
  delta = 1e-6 (the default; ``auto`` picks the discrete Gaussian) and delta = 0 (pure DP, discrete
  Laplace); mean ± std of test accuracy over seeds 0..S-1 (noise seed = split seed). Runs the
  party and coordinator halves in process (``run_inprocess``), exactly what the gRPC daemons run.
  References: the same model without noise (epsilon 1e6) and scikit-learn's CategoricalNB(+GaussianNB).
* Speed: ``NaiveBayesParty.answer`` (statistics + exact discrete noise) on synthetic rows with
  the adult schema; rows per second of process CPU time (one core: these numpy kernels are
  single-threaded) and of wall time, best of 5.
* Wall time of the whole 5-party simulation: in process, and (unless --no-grpc) ``dpfed simulate``
  over loopback mutual TLS.

Prints markdown tables and writes bench/results/naive_bayes.md and naive_bayes_privacy_utility.png.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")  # seeded SecureRNGs warn by design; this is a simulation

from dpfed.data.datasets import load_dataset, split_parties  # noqa: E402
from dpfed.algorithms.contract import JobSpec, Task  # noqa: E402
from dpfed.algorithms.naive_bayes import NaiveBayesParty, evaluate, plan_release  # noqa: E402
from dpfed.core.rng import SecureRNG  # noqa: E402
from dpfed.data.schema import Schema  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402

EPSILONS = (0.1, 0.5, 1.0, 2.0)
DATASETS = ("adult", "nursery", "mushroom")
CONFIGS = (("5 parties, δ=1e-6", 5, 1e-6), ("5 parties, δ=0", 5, 0.0),
           ("central, δ=1e-6", 1, 1e-6), ("central, δ=0", 1, 0.0))
RESULTS = Path(__file__).resolve().parent / "results"


def accuracy(d, eps: float, delta: float, parties: int, seed: int) -> float:
    spec = JobSpec(f"bench-{seed}", "naive-bayes", {"epsilon": eps, "delta": delta}, d.schema)
    parts = split_parties(d.X_train, d.y_train, parties, rng=np.random.default_rng(seed))
    res = run_inprocess(spec, parts, seed=seed)
    return evaluate(res.model, d.X_test, d.y_test, d.schema)["test_accuracy"]


def sklearn_reference(d) -> float:
    from sklearn.naive_bayes import CategoricalNB, GaussianNB

    cat, jll = d.schema.categorical, 0.0
    if cat.any():
        c = CategoricalNB(alpha=1.0, min_categories=d.schema.domain_sizes).fit(d.X_train[:, cat].astype(int), d.y_train)
        jll = c.predict_joint_log_proba(d.X_test[:, cat].astype(int))
    if (~cat).any():
        g = GaussianNB().fit(d.X_train[:, ~cat], d.y_train)
        jll = jll + g.predict_joint_log_proba(d.X_test[:, ~cat]) - (np.log(g.class_prior_) if cat.any() else 0)
    return float(np.mean(np.argmax(jll, axis=1) == d.y_test))


def sweep(seeds: int) -> dict:
    out = {}
    for name in DATASETS:
        d = load_dataset(name)
        out[name] = {"nonprivate": accuracy(d, 1e6, 0.0, 1, 0), "sklearn": sklearn_reference(d),
                     "mechanism": {eps: plan_release(JobSpec("m", "naive-bayes", {"epsilon": eps, "delta": 1e-6},
                                                             d.schema)).mechanism for eps in EPSILONS},
                     "cells": {}}
        for label, parties, delta in CONFIGS:
            for eps in EPSILONS:
                accs = [accuracy(d, eps, delta, parties, s) for s in range(seeds)]
                out[name]["cells"][(label, eps)] = (float(np.mean(accs)), float(np.std(accs)))
        print(f"[bench] {name} done", file=sys.stderr, flush=True)
    return out


def synthetic_adult(n: int, seed: int = 0) -> tuple[Schema, np.ndarray, np.ndarray]:
    schema = load_dataset("adult").schema
    r = np.random.default_rng(seed)
    X = np.empty((n, schema.n_features))
    for j, f in enumerate(schema.features):
        X[:, j] = r.integers(0, f.categories, n) if f.kind == "categorical" else r.uniform(f.lower, f.upper, n)
    return schema, X, r.integers(0, schema.n_classes, n)


def speed(rows: int) -> list[tuple[str, float, float]]:
    schema, X, y = synthetic_adult(rows)
    out = []
    for delta in (1e-6, 0.0):
        spec = JobSpec("speed", "naive-bayes", {"epsilon": 1.0, "delta": delta}, schema)
        party, task, rng = NaiveBayesParty(), Task("speed", 0, "nb-statistics"), SecureRNG.from_seed(0)
        party.answer(spec, task, X, y, rng)  # warm-up (plan calibration is cached)
        cpu, wall = [], []
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            party.answer(spec, task, X, y, rng)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - t0)
        out.append((f"answer, {plan_release(spec).mechanism} (δ={delta:g})", rows / min(cpu), rows / min(wall)))
    return out


def simulation_wall(no_grpc: bool) -> list[tuple[str, float, float]]:
    d = load_dataset("adult")
    spec = JobSpec("wall", "naive-bayes", {"epsilon": 1.0, "delta": 1e-6}, d.schema)
    t0 = time.perf_counter()
    res = run_inprocess(spec, split_parties(d.X_train, d.y_train, 5, rng=np.random.default_rng(0)), seed=0)
    acc = evaluate(res.model, d.X_test, d.y_test, d.schema)["test_accuracy"]
    rows = [("in process (run_inprocess)", time.perf_counter() - t0, acc)]
    if not no_grpc:
        cmd = [sys.executable, "-m", "dpfed.cli", "simulate", "--algorithm", "naive-bayes", "--dataset", "adult",
               "--parties", "5", "--epsilon", "1", "--seed", "0", "--json"]
        try:
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"})
            wall = time.perf_counter() - t0
            if p.returncode == 0:
                j = json.loads(p.stdout.strip().splitlines()[-1])
                rows.append(("`dpfed simulate` gRPC + mTLS, 5 processes (command wall)", wall, j["test_accuracy"]))
                rows.append(("  ... its reported wall_seconds", float(j["wall_seconds"]), j["test_accuracy"]))
            else:
                rows.append((f"`dpfed simulate` failed (exit {p.returncode}): {p.stderr.strip()[-120:]}", wall, float("nan")))
        except (subprocess.TimeoutExpired, OSError, ValueError, KeyError) as exc:
            rows.append((f"`dpfed simulate` not measured: {type(exc).__name__}", float("nan"), float("nan")))
    return rows


def tables(res: dict, seeds: int, spd, wall) -> str:
    lines = []
    for name in DATASETS:
        r = res[name]
        lines.append(f"### {name}: test accuracy, mean ± std over {seeds} seeds\n")
        lines.append(f"Non-private references: same model without noise (ε=10^6) {r['nonprivate']:.4f}; "
                     f"scikit-learn CategoricalNB(+GaussianNB) {r['sklearn']:.4f}. "
                     f"`auto` with δ=1e-6 picks: " + ", ".join(f"ε={e:g} {m}" for e, m in r["mechanism"].items()) + ".\n")
        lines.append("| ε | " + " | ".join(label for label, _, _ in CONFIGS) + " |")
        lines.append("|---|" + "---|" * len(CONFIGS))
        for eps in EPSILONS:
            cells = [f"{r['cells'][(label, eps)][0]:.4f} ± {r['cells'][(label, eps)][1]:.4f}" for label, _, _ in CONFIGS]
            lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("### Party statistics speed (synthetic rows, adult schema: 8 categorical + 6 numeric)\n")
    lines.append("| what | rows/s per core (CPU time) | rows/s (wall) |")
    lines.append("|---|---|---|")
    for label, cpu, w in spd:
        lines.append(f"| {label} | {cpu / 1e6:.1f} M | {w / 1e6:.1f} M |")
    lines.append("")
    lines.append("### Whole 5-party job on adult (ε=1, δ=1e-6, seed 0)\n")
    lines.append("| run | wall seconds | test accuracy |")
    lines.append("|---|---|---|")
    for label, secs, acc in wall:
        lines.append(f"| {label} | {secs:.2f} | {acc:.4f} |")
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DATASETS), figsize=(4.2 * len(DATASETS), 3.6))
    for ax, name in zip(axes, DATASETS):
        r = res[name]
        for label, _, _ in CONFIGS:
            m = [r["cells"][(label, e)][0] for e in EPSILONS]
            s = [r["cells"][(label, e)][1] for e in EPSILONS]
            ax.errorbar(EPSILONS, m, yerr=s, marker="o", capsize=3, label=label)
        ax.axhline(r["nonprivate"], color="k", ls="--", lw=1, label="no noise")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("ε per party")
        ax.set_ylabel("test accuracy")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--no-grpc", action="store_true", help="skip the gRPC simulation wall time")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = sweep(args.seeds)
    spd = speed(args.rows)
    wall = simulation_wall(args.no_grpc)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = tables(res, args.seeds, spd, wall)
    header = (f"# DP naive Bayes benchmark\n\n`python bench/bench_naive_bayes.py --seeds {args.seeds}` "
              f"({time.perf_counter() - t0:.0f} s; machine shared, 1-min load average {load:.1f} on "
              f"{os.cpu_count()} cores at the end, so timings are pessimistic).\n\n")
    print(header + text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "naive_bayes.md").write_text(header + text + "\n![privacy-utility](naive_bayes_privacy_utility.png)\n")
    plot(res, RESULTS / "naive_bayes_privacy_utility.png")


if __name__ == "__main__":
    main()
