"""Benchmark of DP linear regression on California housing: privacy-utility sweep, 1 party against 5 parties
with distributed noise, side by side with diffprivlib 0.6.6 and scikit-learn (non-private) in the same run.

    python bench/bench_linear_regression.py [--seeds 3] [--no-grpc]

* Data: ``california_housing`` (bundled; 207 missing total_bedrooms imputed by the schema's public constant, the
  block-group counts and income clamped at the schema's public bounds), the random 80/20 split with seed
  20180425 (``load_dataset``); R^2 and RMSE (dollars) on the 4,128 test records.
* dpfed: AdaSSP (``method = adassp``, delta = 1e-5) with 1 party holding all the training data (local noise =
  the central model) and with 5 parties (iid split with ``default_rng(seed)``) under distributed noise with
  secure aggregation (in process: the same party and coordinator halves the gRPC daemons run); the functional
  mechanism (1 party, pure epsilon). Seeds 0..S-1 (noise seed = party split seed).
* diffprivlib 0.6.6 ``LinearRegression`` (pure epsilon) and scikit-learn ``LinearRegression`` on the SAME encoded
  features (dpfed's encoding: numeric features clamped and rescaled to [-1, 1] by the public bounds, dummies for
  ocean_proximity) and rescaled target, ``bounds_X = (-1, 1)``, ``bounds_y = (-1, 1)``.
* Unless --no-grpc: the README command once over gRPC with mutual TLS (5 party processes, epsilon 1, seed 0).

Prints markdown tables and writes bench/results/linear_regression.md and linear_regression_privacy_utility.png.
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

warnings.simplefilter("ignore")  # seeded SecureRNGs and diffprivlib warn by design

from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.linear_regression import Layout, encode, encode_target, evaluate, regression_metrics  # noqa: E402
from dpfed.data.datasets import load_dataset, split_parties  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402

EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)
DELTA = 1e-5
CONFIGS = ("dpfed AdaSSP, 1 party", "dpfed AdaSSP, 5 parties distributed", "dpfed functional, 1 party",
           "diffprivlib 0.6.6")
RESULTS = Path(__file__).resolve().parent / "results"


def dpfed_run(ds, config: str, eps: float, seed: int) -> dict:
    parties = 5 if "5 parties" in config else 1
    params: dict = {"epsilon": eps, "delta": DELTA}
    if "functional" in config:
        params.update(method="functional", delta=0.0)
    if "distributed" in config:
        params.update(noise="distributed", secure_aggregation=True)
    spec = JobSpec(f"bench-lr-{seed}", "linear-regression", params, ds.schema)
    parts = split_parties(ds.X_train, ds.y_train, parties, rng=np.random.default_rng(seed))
    res = run_inprocess(spec, parts, seed=seed)
    return evaluate(res.model, ds.X_test, ds.y_test, ds.schema)


def encoded(ds) -> tuple[np.ndarray, np.ndarray, np.ndarray, Layout]:
    layout = Layout.from_schema(ds.schema)
    Xtr = encode(ds.X_train, layout)[:, :-1] * layout.scale  # no intercept column, each in [-1, 1]
    Xte = encode(ds.X_test, layout)[:, :-1] * layout.scale
    return Xtr, encode_target(ds.y_train, layout), Xte, layout


def back(yt: np.ndarray, layout: Layout) -> np.ndarray:
    return layout.y_lower + (yt + 1.0) * (layout.y_upper - layout.y_lower) / 2.0


def diffprivlib_run(ds, eps: float, seed: int) -> dict:
    from diffprivlib.models import LinearRegression

    Xtr, ytr, Xte, layout = encoded(ds)
    m = LinearRegression(epsilon=eps, bounds_X=(-1.0, 1.0), bounds_y=(-1.0, 1.0), random_state=seed).fit(Xtr, ytr)
    return regression_metrics(ds.y_test, back(m.predict(Xte), layout))


def sklearn_reference(ds) -> dict:
    from sklearn.linear_model import LinearRegression

    Xtr, ytr, Xte, layout = encoded(ds)
    return regression_metrics(ds.y_test, back(LinearRegression().fit(Xtr, ytr).predict(Xte), layout))


def sweep(ds, seeds: int) -> dict:
    cells: dict = {}
    for eps in EPSILONS:
        for config in CONFIGS:
            runs = [diffprivlib_run(ds, eps, s) if config.startswith("diffprivlib") else dpfed_run(ds, config, eps, s)
                    for s in range(seeds)]
            r2, rmse = np.array([r["r2"] for r in runs]), np.array([r["rmse"] for r in runs])
            cells[(config, eps)] = (r2.mean(), r2.std(), rmse.mean(), rmse.std())
            print(f"eps {eps:g} {config}: R^2 {r2.mean():.4f} ± {r2.std():.4f}", file=sys.stderr, flush=True)
    return cells


def grpc_run() -> dict:
    cmd = [sys.executable, "-m", "dpfed.cli", "simulate", "--algorithm", "linear-regression", "--dataset",
           "california_housing", "--parties", "5", "--epsilon", "1", "--noise", "distributed", "--seed", "0", "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    res["wall"] = time.perf_counter() - t0
    return res


def tables(cells: dict, ref: dict, seeds: int, grpc: dict | None) -> str:
    lines = [f"R^2 on the test set, mean ± std over {seeds} seeds (scikit-learn LinearRegression, non-private, same "
             f"encoding: R^2 {ref['r2']:.4f}, RMSE {ref['rmse']:,.0f}):", "",
             "| ε | " + " | ".join(CONFIGS) + " |", "|---|" + "---|" * len(CONFIGS)]
    for eps in EPSILONS:
        row = [f"{cells[(c, eps)][0]:.4f} ± {cells[(c, eps)][1]:.4f}" if cells[(c, eps)][0] > -1e3
               else f"{cells[(c, eps)][0]:.3g}" for c in CONFIGS]
        lines.append(f"| {eps:g} | " + " | ".join(row) + " |")
    lines += ["", "RMSE (dollars) at ε = 1: " + "; ".join(f"{c} {cells[(c, 1.0)][2]:,.0f} ± {cells[(c, 1.0)][3]:,.0f}"
                                                     for c in CONFIGS), ""]
    one, five = cells[(CONFIGS[0], 1.0)][0], cells[(CONFIGS[1], 1.0)][0]
    lines += ["Targets (issue 26) at ε = 1:", "",
              f"- R^2 >= 0.60 with 1 party: {one:.4f} ({'met' if one >= 0.60 else 'NOT met'})",
              f"- R^2 >= 0.60 with 5 parties, distributed noise: {five:.4f} ({'met' if five >= 0.60 else 'NOT met'})",
              f"- 5 parties within 0.02 R^2 of 1 party: difference {one - five:+.4f} "
              f"({'met' if abs(one - five) <= 0.02 else 'NOT met'})", ""]
    if grpc is not None:
        lines += [f"gRPC with mutual TLS, 5 party processes, distributed noise under SecAgg, ε = 1, seed 0: R^2 "
                  f"{grpc['r2']:.4f}, RMSE {grpc['rmse']:,.0f}, ridge λ {grpc['ridge_lambda']:.1f}, "
                  f"epsilon spent {grpc['epsilon_spent']:.6f}, wall {grpc['wall']:.1f} s.", ""]
    return "\n".join(lines)


def plot(cells: dict, ref: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for c in CONFIGS:
        m = np.array([cells[(c, e)][0] for e in EPSILONS])
        s = np.where(m < -1.0, 0.0, np.array([cells[(c, e)][1] for e in EPSILONS]))  # no bars off the chart
        ax.errorbar(EPSILONS, np.maximum(m, -1.0), yerr=s, marker="o", capsize=3,
                    label=c + (" (below -1: clipped)" if (m < -1.0).all() else ""))
    ax.axhline(ref["r2"], color="k", ls="--", lw=1, label="scikit-learn (non-private)")
    ax.set_xscale("log")
    ax.set_ylim(-1.05, 0.8)
    ax.set_xlabel("ε per party (δ = 1e-5 for AdaSSP; pure ε otherwise)")
    ax.set_ylabel("test R² (clipped at -1)")
    ax.set_title("California housing, linear regression")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--no-grpc", action="store_true", help="skip the one gRPC run")
    args = ap.parse_args()
    t0 = time.perf_counter()
    ds = load_dataset("california_housing")
    ref = sklearn_reference(ds)
    cells = sweep(ds, args.seeds)
    grpc = None if args.no_grpc else grpc_run()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    header = (f"# DP linear regression benchmark (California housing)\n\n`python bench/bench_linear_regression.py "
              f"--seeds {args.seeds}` ({time.perf_counter() - t0:.0f} s; 1-min load average {load:.1f} on "
              f"{os.cpu_count()} cores). Split: {ds.split}; {len(ds.X_train)} training and {len(ds.X_test)} test "
              "records.\n\n")
    text = header + tables(cells, ref, args.seeds, grpc)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "linear_regression.md").write_text(text + "\n![privacy-utility](linear_regression_privacy_utility.png)\n")
    plot(cells, ref, RESULTS / "linear_regression_privacy_utility.png")


if __name__ == "__main__":
    main()
