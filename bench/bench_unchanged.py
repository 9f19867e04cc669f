"""Did a refactoring move any result? Re-runs three reference cells next to their recorded numbers.

    python bench/bench_unchanged.py [--seeds 10] [--folds 5] [--cells nb,kmeans,lvq]

* naive Bayes, Adult, 5 parties (iid split), delta 1e-6, epsilon 1 and 0.1: test accuracy, mean ± std
  over seeds 0..S-1 (recorded: 0.838 ± 0.005 and 0.813 ± 0.009, bench/results/naive_bayes.md);
* k-means target cell: blobs d = 10, n = 1e5, k = 5, one party, sample-and-aggregate, epsilon 1,
  delta 1e-6: median [min, max] inertia ratio to scikit-learn's KMeans(n_init=10) over S seeds
  (recorded 1.001 [1.001, 1.001], bench/results/kmeans.md);
* LVQ, Table 1 cell: Segmentation GMLVQ, one party, epsilon 1.5, 5-fold CV with the tuned
  hyperparameters of bench/results/lvq_tuning.json, one seed per fold as in `bench_lvq.py table`
  (recorded 0.154, mean over 5 folds x 10 seeds; the 1-seed-per-fold rows of lvq_runs.jsonl are
  printed beside it).

All runs go through the in-process runner: the same party sessions and driver loop as the daemons.
Prints a markdown table and writes bench/results/unchanged.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

warnings.simplefilter("ignore")  # seeded generators warn by design

from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.kmeans import evaluate as kmeans_evaluate  # noqa: E402
from dpfed.algorithms.naive_bayes import evaluate as nb_evaluate  # noqa: E402
from dpfed.data.datasets import load_dataset, make_blobs, split_parties  # noqa: E402
from dpfed.data.schema import Schema  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _bench_lvq():
    spec = importlib.util.spec_from_file_location("bench_lvq", HERE / "bench_lvq.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_lvq"] = mod
    spec.loader.exec_module(mod)
    return mod


def _mean_std(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.3f}"


def naive_bayes_rows(seeds: int) -> list[tuple[str, str, str, str]]:
    d = load_dataset("adult")
    rows = []
    for eps, recorded in ((1.0, "0.838 ± 0.005"), (0.1, "0.813 ± 0.009")):
        accs = []
        for seed in range(seeds):
            spec = JobSpec(f"bench-{seed}", "naive-bayes", {"epsilon": eps, "delta": 1e-6}, d.schema)
            parts = split_parties(d.X_train, d.y_train, 5, rng=np.random.default_rng(seed))
            res = run_inprocess(spec, parts, seed=seed)
            accs.append(nb_evaluate(res.model, d.X_test, d.y_test, d.schema)["test_accuracy"])
        rows.append((f"naive Bayes, Adult, 5 parties, eps {eps:g}", "test accuracy", recorded,
                     f"{_mean_std(accs)} [{seeds} seeds]"))
    return rows


def kmeans_rows(seeds: int) -> list[tuple[str, str, str, str]]:
    X, _, _ = make_blobs(100_000, 10, 5, seed=0)
    schema = Schema.numeric_box(10, -15.0, 15.0)  # the public box of bench_kmeans.py
    ratios = []
    for seed in range(seeds):
        spec = JobSpec(f"km-{seed}", "kmeans", {"epsilon": 1.0, "delta": 1e-6, "k": 5, "method": "sample-aggregate"},
                       schema)
        res = run_inprocess(spec, [(X, None)], seed=seed)
        ratios.append(kmeans_evaluate(res.model, X, None, schema)["inertia_ratio"])
    med = statistics.median(ratios)
    return [("k-means blobs d=10 n=1e5, 1 party, sa, eps 1", "inertia / sklearn", "1.001 [1.001, 1.001]",
             f"{med:.3f} [{min(ratios):.3f}, {max(ratios):.3f}] [{seeds} seeds]")]


def lvq_rows(folds: int, seeds: int = 1) -> list[tuple[str, str, str, str]]:
    bl = _bench_lvq()
    ds = load_dataset("segmentation")
    hp = bl.load_tuning()["segmentation/gmlvq"]["chosen"]
    errs = []
    for si in range(seeds):  # seed numbering of `bench_lvq.py table`: 1000 + fold + 100 * seed index
        for fi, (tr, te) in enumerate(bl.folds("segmentation", len(ds.X))[:folds]):
            r = bl.run_one(ds, ds.X[tr], ds.y[tr], ds.X[te], ds.y[te], "gmlvq", 1.5, 1, "local", hp,
                           seed=1000 + fi + 100 * si)
            errs.append(r["test_error"])
    old = [json.loads(line) for line in (RESULTS / "lvq_runs.jsonl").read_text().splitlines() if line.strip()]
    same = [r["test_error"] for r in old if r["dataset"] == "segmentation" and r["model"] == "gmlvq"
            and r["setting"] == "a" and r["epsilon"] == 1.5 and r.get("seed_index", 0) == 0 and r["hp"] == hp]
    rec = f"0.154 [5x10]; seed 0 per fold: {_mean_std(same)} [{len(same)}]" if same else "0.154 [5x10]"
    return [("Segmentation GMLVQ, 1 party, eps 1.5, 5-fold CV", "test error", rec,
             f"{_mean_std(errs)} [{folds} folds x {seeds} seed(s)]")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--cells", default="nb,kmeans,lvq")
    ap.add_argument("--lvq-seeds", type=int, default=1, help="seeds per fold of the LVQ cell (recorded: 10)")
    args = ap.parse_args()
    cells = args.cells.split(",")
    t0 = time.perf_counter()
    rows = []
    if "nb" in cells:
        rows += naive_bayes_rows(args.seeds)
    if "kmeans" in cells:
        rows += kmeans_rows(args.seeds)
    if "lvq" in cells:
        rows += lvq_rows(args.folds, args.lvq_seeds)
    lines = ["| cell | metric | recorded | now |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    text = "\n".join(lines) + (f"\n\n{time.perf_counter() - t0:.0f} s wall, load average "
                               f"{os.getloadavg()[0]:.1f} at the end.\n")
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "unchanged.md").write_text("# Re-run of the reference cells (bench/bench_unchanged.py)\n\n" + text)


if __name__ == "__main__":
    main()
