"""Benchmark of DP PCA on MNIST: captured variance of the top-k subspace on the test set against the
non-private PCA, diffprivlib 0.6.6's PCA, one party and five parties with distributed noise.

    python bench/bench_pca.py [--seeds 3] [--k 50] [--clip 6]

* Data: MNIST (``mnist.npz`` from $DPFED_DATA, ../shared/data or the repository's parent's shared/data;
  never copied into the project), 60,000 training and 10,000 test images, pixels 0..255, public bounds
  [0, 255] per pixel.
* Metric: the variance of the (own-mean-centred) test set inside the released k-dimensional subspace,
  divided by that of scikit-learn's non-private PCA fitted on the training set (target >= 0.95 at epsilon 1).
* dpfed: ``pca`` through the party and coordinator halves in process (``run_inprocess``, what the gRPC
  daemons run), origin at the lower bounds, mean clip = the box (no clipping), clip C = ``--clip`` (in units
  of 255) around the noisy mean, delta = 1e-5; 1 party (local noise) and 5 parties (iid split, distributed
  discrete Gaussian shares under secure aggregation, B >= 16), seeds 0..S-1.
* diffprivlib: ``diffprivlib.models.PCA(k, epsilon, data_norm = C * 255, bounds = (0, 255))`` (pure epsilon-DP;
  it also spends part of epsilon on a noisy mean), seeds 0..S-1.
* Sweep: epsilon 0.1, 0.3, 1, 3, 10 (seed 0), dpfed 1 party and diffprivlib: bench/results/pca_privacy_utility.png.

Prints markdown tables and writes bench/results/pca.md and the PNG.
"""
from __future__ import annotations

import argparse
import os
import resource
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

warnings.simplefilter("ignore")  # seeded SecureRNGs warn by design; this is a simulation

from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.pca import captured_variance  # noqa: E402
from dpfed.data.schema import Schema  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
nan = float("nan")
EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)
DELTA = 1e-5
#: Wall-clock cap on one diffprivlib fit (it runs in a child process that is killed after it).
DIFFPRIVLIB_SECONDS = 240.0


def mnist() -> tuple[np.ndarray, np.ndarray]:
    here = Path(__file__).resolve().parent.parent
    for folder in (os.environ.get("DPFED_DATA"), os.environ.get("DPFED_DATA_DIR"), here.parent / "shared" / "data",
                   "../shared/data", "/work/shared/data"):
        if folder and (Path(folder) / "mnist.npz").exists():
            d = np.load(Path(folder) / "mnist.npz")
            return d["X_train"].astype(np.float64), d["X_test"].astype(np.float64)
    raise SystemExit("mnist.npz not found: set DPFED_DATA to the folder holding it")


def dpfed_pca(Xtr: np.ndarray, k: int, eps: float, clip: float, parties: int, seed: int) -> tuple[np.ndarray, float]:
    """(components, wall seconds) of a dpfed PCA job over ``parties`` parties (distributed noise when > 1)."""
    params = {"epsilon": eps, "delta": DELTA, "k": k, "clip": clip, "origin": "lower"}
    if parties > 1:
        params.update(noise="distributed", secure_aggregation=True, bits=16)
    spec = JobSpec(f"bench-pca-{parties}-{eps:g}-{seed}", "pca", params, Schema.numeric_box(Xtr.shape[1], 0.0, 255.0))
    order = np.random.default_rng(seed).permutation(len(Xtr))
    parts = [(Xtr[order[i::parties]], None) for i in range(parties)]
    t0 = time.perf_counter()
    res = run_inprocess(spec, parts, seed=seed)
    return res.model["components"], time.perf_counter() - t0


def _diffprivlib_fit(Xtr: np.ndarray, k: int, eps: float, clip: float, seed: int, out: Any) -> None:
    from diffprivlib.models import PCA

    warnings.simplefilter("ignore")
    m = PCA(n_components=k, epsilon=eps, data_norm=clip * 255.0, bounds=(0.0, 255.0), random_state=seed)
    out.put(m.fit(Xtr).components_)


def diffprivlib_pca(Xtr: np.ndarray, k: int, eps: float, clip: float, seed: int) -> np.ndarray | None:
    """diffprivlib's components, or None when the fit takes longer than DIFFPRIVLIB_SECONDS (its exponential
    mechanism samples each of the k components from a Bingham distribution by rejection, which at d = 784 and
    epsilon / (2 (k + 1)) per component can run for hours)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_diffprivlib_fit, args=(Xtr, k, eps, clip, seed, q))
    proc.start()
    try:
        return q.get(timeout=DIFFPRIVLIB_SECONDS)
    except Exception:  # noqa: BLE001 - queue.Empty: it did not finish in time
        return None
    finally:
        proc.kill()
        proc.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--clip", type=float, default=6.0)
    args = ap.parse_args()
    from sklearn.decomposition import PCA

    Xtr, Xte = mnist()
    k, clip = args.k, args.clip
    base = captured_variance(PCA(n_components=k).fit(Xtr).components_, Xte)
    total = float(np.sum(np.var(Xte, axis=0)))
    rows: dict[str, list[float]] = {"dpfed, 1 party (local noise)": [], "dpfed, 5 parties (distributed, SecAgg)": [],
                                    "diffprivlib 0.6.6": []}
    times: dict[str, list[float]] = {key: [] for key in rows}
    for seed in range(args.seeds):
        for key, parties in (("dpfed, 1 party (local noise)", 1), ("dpfed, 5 parties (distributed, SecAgg)", 5)):
            comps, wall = dpfed_pca(Xtr, k, 1.0, clip, parties, seed)
            rows[key].append(captured_variance(comps, Xte) / base)
            times[key].append(wall)
            print(f"seed {seed} {key}: {rows[key][-1]:.4f} ({wall:.1f} s)", flush=True)
        if seed == 0 or rows["diffprivlib 0.6.6"][-1] == rows["diffprivlib 0.6.6"][-1]:  # not after a timeout
            t0 = time.perf_counter()
            comps = diffprivlib_pca(Xtr, k, 1.0, clip, seed)
            rows["diffprivlib 0.6.6"].append(nan if comps is None else captured_variance(comps, Xte) / base)
            times["diffprivlib 0.6.6"].append(time.perf_counter() - t0)
            print(f"seed {seed} diffprivlib: {rows['diffprivlib 0.6.6'][-1]:.4f}", flush=True)
    sweep: dict[str, list[float]] = {"dpfed, 1 party": [], "diffprivlib 0.6.6": []}
    for eps in EPSILONS:
        sweep["dpfed, 1 party"].append(rows["dpfed, 1 party (local noise)"][0] if eps == 1.0 else
                                      captured_variance(dpfed_pca(Xtr, k, eps, clip, 1, 0)[0], Xte) / base)
        comps = None if eps == 1.0 or eps < 1.0 and rows["diffprivlib 0.6.6"][0] != rows["diffprivlib 0.6.6"][0] \
            else diffprivlib_pca(Xtr, k, eps, clip, 0)  # smaller epsilon: slower still, skipped after a timeout
        sweep["diffprivlib 0.6.6"].append(rows["diffprivlib 0.6.6"][0] if eps == 1.0 else
                                         nan if comps is None else captured_variance(comps, Xte) / base)
        print(f"epsilon {eps:g}: dpfed {sweep['dpfed, 1 party'][-1]:.4f}, diffprivlib {sweep['diffprivlib 0.6.6'][-1]:.4f}",
              flush=True)
    write(args, base, total, rows, times, sweep)


def write(args: argparse.Namespace, base: float, total: float, rows: dict[str, list[float]],
          times: dict[str, list[float]], sweep: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [f"# PCA on MNIST (`python bench/bench_pca.py`), k = {args.k}, epsilon 1, delta {DELTA:g}", "",
             f"Non-private PCA (scikit-learn) captures {base:.4g} of the test set's variance {total:.4g} "
             f"({base / total:.3f}). Ratio = captured variance / the non-private PCA's (target >= 0.95). "
             f"dpfed clip C = {args.clip:g} x 255 around the noisy mean, {args.seeds} seeds; peak RSS "
             f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB. nan: diffprivlib did not finish "
             f"within {DIFFPRIVLIB_SECONDS:.0f} s (killed).", "",
             "| method | captured variance ratio (mean ± std) | per seed | seconds per job |", "|---|---|---|---|"]
    for key, vals in rows.items():
        lines.append(f"| {key} | {np.mean(vals):.4f} ± {np.std(vals):.4f} | {', '.join(f'{v:.4f}' for v in vals)} | "
                     f"{np.mean(times[key]):.1f} |")
    one, five = rows["dpfed, 1 party (local noise)"], rows["dpfed, 5 parties (distributed, SecAgg)"]
    lines += ["", f"1 party vs 5 parties: mean difference {np.mean(five) - np.mean(one):+.4f} (target within 0.02).", "",
              "| epsilon | " + " | ".join(EPSILONS_STR) + " |", "|---|" + "---|" * len(EPSILONS)]
    for key, vals in sweep.items():
        lines.append(f"| {key} | " + " | ".join(f"{v:.4f}" for v in vals) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pca.md").write_text(text)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for key, vals in sweep.items():
        ax.plot(EPSILONS, vals, marker="o", label=key)
    ax.axhline(1.0, color="grey", lw=0.8, label="non-private PCA")
    ax.axhline(0.95, color="grey", lw=0.8, ls="--", label="target 0.95")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon (delta 1e-5 for dpfed; diffprivlib pure)")
    ax.set_ylabel(f"captured test variance / non-private (k={args.k})")
    ax.set_title("DP PCA on MNIST")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "pca_privacy_utility.png", dpi=120)


EPSILONS_STR = tuple(f"{e:g}" for e in EPSILONS)

if __name__ == "__main__":
    main()
