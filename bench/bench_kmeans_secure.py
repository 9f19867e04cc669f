"""Benchmark: k-means inertia ratio (to scikit-learn KMeans, n_init=10) with 5 parties, local noise
against distributed noise under secure aggregation.

    python bench/bench_kmeans_secure.py                 # blobs d=10 n=1e5 and d=2 n=1e4, eps 1, 5 seeds
    python bench/bench_kmeans_secure.py --cells adult --eps 0.5,1 --seeds 3

Placements (5 parties, iid split, delta 1e-6, in process): ``local`` = every party fits private centers on its
own rows with the whole (epsilon, delta) and the coordinator merges them (the deployable mode so far);
``distributed`` = the central algorithm over all rows, every release an integer vector plus one discrete
Gaussian share per party, masked by SecAgg (P_min = 5, c = 0: noise planned for 5 shares);
``distributed-drop`` = the same with P_min = 3 and each party missing each round with probability 0.3
(the noise is planned for 3 shares, so it is larger; a round with fewer than 3 survivors is skipped).
Methods: ``sa`` = sample-and-aggregate (clamped mean of the aligned block answers + 2 DP Lloyd steps),
``lloyd`` = DP Lloyd (5 iterations, random start). Rows go to ``bench/results/kmeans_secure_rows.jsonl``
(re-runs skip rows already there); the table to ``bench/results/kmeans_secure.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_kmeans import load_cell  # noqa: E402
from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.kmeans import inertia, nonprivate_inertia, numeric_part  # noqa: E402
from dpfed.data.datasets import split_parties  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402

warnings.filterwarnings("ignore", message="SecureRNG seeded explicitly")
RESULTS = ROOT / "bench" / "results"
ROWS = RESULTS / "kmeans_secure_rows.jsonl"
DELTA = 1e-6
PARTIES = 5
METHODS = {"sa": {"method": "sample-aggregate"}, "lloyd": {"method": "lloyd"}}
PLACEMENTS = {"local": ({}, 0.0),
              "distributed": ({"noise": "distributed", "secure_aggregation": True, "min_survivors": 5}, 0.0),
              "distributed-drop": ({"noise": "distributed", "secure_aggregation": True, "min_survivors": 3}, 0.3)}


def run_one(cell: str, X: np.ndarray, schema, k: int, method: str, placement: str, eps: float, seed: int) -> dict:
    extra, dropout = PLACEMENTS[placement]
    params = {"epsilon": eps, "delta": DELTA, "k": k, **METHODS[method], **extra}
    spec = JobSpec(f"bench-sec-{cell}-{method}-{placement}-{eps}-{seed}", "kmeans", params, schema)
    dummy = np.zeros(len(X), dtype=np.int64)
    parts = [(Xp, None) for Xp, _ in split_parties(X, dummy, PARTIES, "iid", np.random.default_rng(seed))]
    t0 = time.perf_counter()
    res = run_inprocess(spec, parts, seed=seed, dropout=dropout)
    secs = time.perf_counter() - t0
    return {"cell": cell, "method": method, "placement": placement, "epsilon": eps, "seed": seed,
            "inertia": inertia(numeric_part(X, schema)[0], res.model["cluster_centers"]), "seconds": secs,
            "epsilon_spent": res.epsilon_spent, "aborted_rounds": res.summary.get("aborted_rounds", 0),
            "rounds": res.rounds}


def report(rows: list[dict], ref: dict[str, dict], eps_list: list[float]) -> str:
    lines = ["| data | n | d | k | method | placement | seeds | " + " | ".join(f"eps={e:g}" for e in eps_list)
             + " | aborted rounds | s/job |", "|" + "---|" * (9 + len(eps_list))]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["cell"], r["method"], r["placement"]), []).append(r)
    for (cell, method, placement), rs in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1],
                                                                               list(PLACEMENTS).index(g[0][2]))):
        info = ref[cell]
        cols = []
        for e in eps_list:
            v = np.array([r["inertia"] for r in rs if r["epsilon"] == e]) / info["inertia_nonprivate"]
            cols.append(f"{np.median(v):.3f} [{v.min():.3f}, {v.max():.3f}]" if len(v) else "—")
        seeds = max(sum(1 for r in rs if r["epsilon"] == e) for e in eps_list)
        aborted = sum(r["aborted_rounds"] for r in rs)
        total = sum(r["rounds"] for r in rs)
        lines.append(f"| {cell} | {info['n']} | {info['d']} | {info['k']} | {method} | {placement} | {seeds} | "
                     + " | ".join(cols) + f" | {aborted} / {total} | {np.median([r['seconds'] for r in rs]):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="blobs-d10-n1e5,blobs-d2-n1e4")
    ap.add_argument("--methods", default="sa,lloyd")
    ap.add_argument("--placements", default=",".join(PLACEMENTS))
    ap.add_argument("--eps", default="1")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    ref_path = RESULTS / "kmeans_nonprivate.json"
    ref: dict[str, dict] = json.loads(ref_path.read_text()) if ref_path.exists() else {}
    eps_list = [float(e) for e in args.eps.split(",")]
    done = ({(r["cell"], r["method"], r["placement"], r["epsilon"], r["seed"])
             for r in map(json.loads, ROWS.read_text().splitlines())} if ROWS.exists() else set())
    loads = []
    for cell in args.cells.split(","):
        X, schema, k = load_cell(cell)
        if cell not in ref:
            Xn = numeric_part(X, schema)[0]
            value, impl = nonprivate_inertia(Xn, k)
            ref[cell] = {"inertia_nonprivate": value, "impl": impl, "n": len(Xn), "d": Xn.shape[1], "k": k}
            ref_path.write_text(json.dumps(ref, indent=1))
        for seed in range(args.seeds):
            for eps in eps_list:
                for method in args.methods.split(","):
                    for placement in args.placements.split(","):
                        if (cell, method, placement, eps, seed) in done:
                            continue
                        row = run_one(cell, X, schema, k, method, placement, eps, seed)
                        with ROWS.open("a") as f:
                            f.write(json.dumps(row) + "\n")
                        loads.append(os.getloadavg()[0])
                        print(f"{cell} {method} {placement} eps={eps:g} seed={seed}: ratio "
                              f"{row['inertia'] / ref[cell]['inertia_nonprivate']:.4f} ({row['seconds']:.1f}s)",
                              flush=True)
    rows = [r for r in map(json.loads, ROWS.read_text().splitlines()) if r["cell"] in ref and r["epsilon"] in eps_list]
    table = report(rows, ref, eps_list)
    load = f"{min(loads):.1f} to {max(loads):.1f}" if loads else "n/a (table rebuilt from saved rows)"
    (RESULTS / "kmeans_secure.md").write_text(
        "# k-means, 5 parties: local noise vs distributed noise under secure aggregation\n\n"
        "Inertia ratio (private / scikit-learn KMeans n_init=10), median [min, max] over seeds; delta = 1e-6; "
        "command: `python bench/bench_kmeans_secure.py`; in process (the same sessions, SecAgg and driver as over "
        f"gRPC); machine: 2 shared cores, load average (1 min) during the run {load}.\n\n"
        "local: each party fits on its own rows with the whole budget, the coordinator merges; distributed: the "
        "central algorithm over all rows under SecAgg, noise planned for P_min = 5 shares; distributed-drop: "
        "P_min = 3 and every party misses each round with probability 0.3. aborted rounds: rounds skipped "
        "(fewer than P_min survivors, nothing unmasked) / all rounds.\n\n" + table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
