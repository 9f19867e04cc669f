"""Benchmark: private k-means inertia ratio (to scikit-learn KMeans, n_init=10) against epsilon.

    python bench/bench_kmeans.py                      # the whole grid (hours on a shared 2-core box)
    python bench/bench_kmeans.py --cells blobs-d10-n1e5 --seeds 10
    python bench/bench_kmeans.py --report-only        # rebuild table + plot from the saved rows
    python bench/bench_kmeans.py --cells blobs-d10-n1e5 --methods sa --parties 1 --eps 1 \
        --rows bench/results/kmeans_recheck.jsonl    # a re-measurement kept apart (table: .md beside it)
    taskset -c 1 python bench/bench_kmeans.py --speed # one fit at n=1e6, d=10 (issue: < 1 min, one core)

Methods: ``sa`` = our sample-and-aggregate default (GUPT clamped mean of the aligned block
answers + 2 DP Lloyd steps), ``sa-coa`` = the paper's center of attention with smooth-sensitivity
noise and nothing else (NRS07), ``lloyd`` = our DP Lloyd (5 iterations, random start),
``diffprivlib`` = diffprivlib.models.KMeans (single party only). Parties: 1 or 5 (iid split; each
party spends the whole (epsilon, delta) on its own rows, the coordinator merges). Each (cell,
method, parties, epsilon, seed) row is appended to ``bench/results/kmeans_rows.jsonl`` as soon as it
is measured (re-runs skip rows already there), then the markdown table and the PNG plot are
rebuilt. Data: blobs are generated once per cell (data seed 0); the 10 seeds vary the noise,
the block assignment and the party split.
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

from dpfed.data.datasets import load_dataset, make_blobs, split_parties  # noqa: E402
from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.kmeans import inertia, nonprivate_inertia, numeric_part  # noqa: E402
from dpfed.data.schema import Schema  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402

warnings.filterwarnings("ignore", message="SecureRNG seeded explicitly")
RESULTS = ROOT / "bench" / "results"
ROWS = RESULTS / "kmeans_rows.jsonl"
EPS = (0.1, 0.5, 1.0, 2.0)
DELTA = 1e-6
CELLS = ["blobs-d10-n1e5", "blobs-d2-n1e5", "blobs-d10-n1e4", "blobs-d2-n1e4", "adult", "satimage",
         "blobs-d10-n1e6", "blobs-d2-n1e6", "mnist"]
REAL_K = {"satimage": 6, "mnist": 10, "adult": 5}
METHODS = {"sa": {"method": "sample-aggregate"},
           "sa-coa": {"method": "sample-aggregate", "aggregator": "coa", "refine_steps": 0},
           "lloyd": {"method": "lloyd"}}
ANCHORS = {"diffprivlib": 8.26, "google-lsh": 1.25}  # issue 5, blobs d=10 n=1e5 eps=1 (d=2: 2.12, 1.67)


def load_cell(name: str) -> tuple[np.ndarray, Schema, int]:
    """(numeric records, schema, k) of a benchmark cell."""
    if name.startswith("blobs"):
        _, d, n = name.split("-")
        d_, n_ = int(d[1:]), int(float(n[1:]))
        X, _, _ = make_blobs(n_, d_, 5, seed=0)
        return X, Schema.numeric_box(d_, -15.0, 15.0), 5
    ds = load_dataset(name)
    return ds.X, ds.schema, REAL_K[name]


def run_one(cell: str, X: np.ndarray, schema: Schema, k: int, method: str, parties: int, eps: float,
            seed: int) -> dict:
    Xn, lo, hi = numeric_part(X, schema)
    t0 = time.perf_counter()
    if method == "diffprivlib":
        from diffprivlib.models import KMeans as DPLKMeans

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            C = DPLKMeans(n_clusters=k, epsilon=eps, bounds=(lo, hi), random_state=seed).fit(Xn).cluster_centers_
        spent = eps
    else:
        params = {"epsilon": eps, "delta": DELTA, "k": k, **METHODS[method]}
        spec = JobSpec(f"bench-{cell}-{method}-{parties}-{eps}-{seed}", "kmeans", params, schema)
        dummy = np.zeros(len(X), dtype=np.int64)
        parts = [(Xp, None) for Xp, _ in split_parties(X, dummy, parties, "iid", np.random.default_rng(seed))]
        res = run_inprocess(spec, parts, seed=seed)
        C, spent = res.model["cluster_centers"], res.epsilon_spent
    secs = time.perf_counter() - t0
    return {"cell": cell, "method": method, "parties": parties, "epsilon": eps, "seed": seed,
            "inertia": inertia(Xn, C), "seconds": secs, "epsilon_spent": spent}


def load_rows(path: Path = ROWS) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(rows: list[dict], ref: dict[str, dict]) -> str:
    """Markdown table: median [min, max] of the inertia ratio over seeds, per epsilon."""
    lines = ["| data | n | d | k | parties | method | seeds | " + " | ".join(f"eps={e:g}" for e in EPS) + " | s/fit |",
             "|" + "---|" * (8 + len(EPS))]
    key = lambda r: (CELLS.index(r["cell"]) if r["cell"] in CELLS else 99, r["parties"], r["method"])  # noqa: E731
    groups: dict[tuple, list[dict]] = {}
    for r in sorted(rows, key=key):
        groups.setdefault((r["cell"], r["parties"], r["method"]), []).append(r)
    for (cell, parties, method), rs in groups.items():
        info = ref[cell]
        cols = []
        for e in EPS:
            v = np.array([r["inertia"] for r in rs if r["epsilon"] == e]) / info["inertia_nonprivate"]
            fails = int(np.isnan(v).sum())
            v = v[~np.isnan(v)]
            cell_txt = f"{np.median(v):.3f} [{v.min():.3f}, {v.max():.3f}]" if len(v) else "—"
            cols.append(cell_txt + (f" ({fails} failed)" if fails else ""))
        nseeds = max(sum(1 for r in rs if r["epsilon"] == e) for e in EPS)
        secs = np.median([r["seconds"] for r in rs])
        lines.append(f"| {cell} | {info['n']} | {info['d']} | {info['k']} | {parties} | {method} | {nseeds} | "
                     + " | ".join(cols) + f" | {secs:.2f} |")
    return "\n".join(lines)


def plot(rows: list[dict], ref: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in CELLS if any(r["cell"] == c for r in rows)]
    cols = min(3, len(cells))
    nrow = -(-len(cells) // cols)
    fig, axes = plt.subplots(nrow, cols, figsize=(5 * cols, 3.6 * nrow), squeeze=False)
    colour = {"sa": "tab:blue", "sa-coa": "tab:green", "lloyd": "tab:purple", "diffprivlib": "tab:pink"}
    for ax, cell in zip(axes.flat, cells):
        for method in ("sa", "sa-coa", "lloyd", "diffprivlib"):
            for parties, style in ((1, "-"), (5, "--")):
                rs = [r for r in rows if r["cell"] == cell and r["method"] == method and r["parties"] == parties]
                if not rs:
                    continue
                es = [e for e in EPS if any(r["epsilon"] == e for r in rs)]
                v = [np.array([r["inertia"] for r in rs if r["epsilon"] == e]) / ref[cell]["inertia_nonprivate"]
                     for e in es]
                v = [x[~np.isnan(x)] if (~np.isnan(x)).any() else np.array([np.nan]) for x in v]
                med = [np.median(x) for x in v]
                ax.plot(es, med, style, marker="o", color=colour[method], label=f"{method} P={parties}")
                ax.fill_between(es, [x.min() for x in v], [x.max() for x in v], color=colour[method], alpha=0.10)
        if cell == "blobs-d10-n1e5":
            ax.axhline(ANCHORS["diffprivlib"], color="grey", ls=":", lw=1)
            ax.axhline(ANCHORS["google-lsh"], color="black", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(cell)
        ax.set_xlabel("epsilon (delta=1e-6)")
        ax.set_ylabel("inertia / non-private")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(cells):]:
        ax.axis("off")
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="upper center", fontsize=8, ncol=7)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)


def speed(n: int = 1_000_000, d: int = 10, k: int = 5, eps: float = 1.0) -> str:
    """Time one DPKMeans fit (one party) on blobs n x d: the data-free budget calibration
    (make_plan, cached per job parameters) apart from the fit itself; CPU and wall seconds."""
    from dpfed.algorithms.kmeans import DPKMeans, make_plan

    X, _, _ = make_blobs(n, d, k, seed=0)
    lines = ["| method | n | d | k | calibration CPU s | fit CPU s | fit wall s | blocks |",
             "|---|---|---|---|---|---|---|---|"]
    for method, steps in (("sample-aggregate", 2), ("lloyd", 5)):
        make_plan.cache_clear()
        c0 = time.process_time()
        make_plan(method, k, "mean", steps, eps, DELTA)
        cal = time.process_time() - c0
        c0, w0 = time.process_time(), time.perf_counter()
        est = DPKMeans(k, epsilon=eps, delta=DELTA, bounds=(-15.0, 15.0), method=method, random_state=0).fit(X)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        lines.append(f"| {method} | {n} | {d} | {k} | {cal:.2f} | {cpu:.2f} | {wall:.2f} | {est.n_blocks_} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--methods", default="sa,sa-coa,lloyd,diffprivlib")
    ap.add_argument("--parties", default="1,5")
    ap.add_argument("--eps", default=",".join(str(e) for e in EPS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--speed", action="store_true", help="only time one fit at n=1e6, d=10 and print it")
    ap.add_argument("--rows", type=Path, default=ROWS,
                    help="rows file; other than the default, the table goes to <rows>.md and no plot is drawn")
    args = ap.parse_args(argv)
    if args.speed:
        table = speed()
        (RESULTS / "kmeans_speed.md").write_text(
            "# k-means speed: one fit, one party, eps 1, delta 1e-6\n\ncommand: `taskset -c 1 python "
            f"bench/bench_kmeans.py --speed` (BLAS threads 1); cpus allowed: {len(os.sched_getaffinity(0))}; "
            f"load average (1 min) when done: {os.getloadavg()[0]:.1f}\n\n{table}\n")
        print(table)
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    ref_path = RESULTS / "kmeans_nonprivate.json"
    ref: dict[str, dict] = json.loads(ref_path.read_text()) if ref_path.exists() else {}
    if not args.report_only:
        done = {(r["cell"], r["method"], r["parties"], r["epsilon"], r["seed"]) for r in load_rows(args.rows)}
        for cell in args.cells.split(","):
            X, schema, k = load_cell(cell)
            if cell not in ref:
                Xn = numeric_part(X, schema)[0]
                t = time.perf_counter()
                value, impl = nonprivate_inertia(Xn, k)
                ref[cell] = {"inertia_nonprivate": value, "impl": impl, "n": len(Xn), "d": Xn.shape[1], "k": k,
                             "seconds": time.perf_counter() - t}
                ref_path.write_text(json.dumps(ref, indent=1))
            for seed in range(args.seeds):
                for eps in (float(e) for e in args.eps.split(",")):
                    for method in args.methods.split(","):
                        for parties in (int(p) for p in args.parties.split(",")):
                            if method == "diffprivlib" and parties != 1:
                                continue
                            if (cell, method, parties, eps, seed) in done:
                                continue
                            try:
                                row = run_one(cell, X, schema, k, method, parties, eps, seed)
                            except ValueError as exc:  # e.g. too few records per block: a failed fit
                                row = {"cell": cell, "method": method, "parties": parties, "epsilon": eps,
                                       "seed": seed, "inertia": float("nan"), "seconds": 0.0, "error": str(exc)}
                            with args.rows.open("a") as f:
                                f.write(json.dumps(row) + "\n")
                            print(f"{cell} {method} P={parties} eps={eps:g} seed={seed}: ratio "
                                  f"{row['inertia'] / ref[cell]['inertia_nonprivate']:.4f} ({row['seconds']:.1f}s)",
                                  flush=True)
    rows = [r for r in load_rows(args.rows) if r["cell"] in ref]
    table = report(rows, ref)
    main_rows = args.rows.resolve() == ROWS.resolve()
    (RESULTS / "kmeans.md" if main_rows else args.rows.with_suffix(".md")).write_text(
        "# k-means inertia ratio (private / scikit-learn KMeans n_init=10), median [min, max] over seeds\n\n"
        f"delta = {DELTA:g}; command: `python bench/bench_kmeans.py`; machine: 2 shared cores (loaded).\n\n"
        + table + "\n")
    if rows and main_rows:
        plot(rows, ref, RESULTS / "kmeans_ratio_vs_epsilon.png")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
