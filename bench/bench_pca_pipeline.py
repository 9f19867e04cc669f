"""Benchmark of PCA as the first step of a job (``pca+LEARNER``) on the bundled numeric sets, before and after
the PCA step's default clip (the box's diameter -> a quarter of it) and the projected features' bounds
(the box [-C, C] -> pca_bound released standard deviations per component).

    python bench/bench_pca_pipeline.py [--seeds 3] [--gmlvq-seeds 1]

Test accuracy, mean ± std over seeds (3 parties, iid split ``default_rng(seed)``, noise seed = split seed,
``run_inprocess``: exactly the halves the daemons run), k = 5 components, delta 1e-5, pca_share 0.25:
* dpfed naive-bayes on the raw features; pca+naive-bayes with the old defaults (``pca_clip`` = the diameter,
  ``pca_bound`` = 1e6, i.e. none: exactly the old projection) and with the new ones; pca+gmlvq old and new.
* References in the same run: scikit-learn PCA(5) + GaussianNB (non-private) and diffprivlib 0.6.6 PCA +
  GaussianNB with the same budget split (PCA 0.25 epsilon, naive Bayes 0.75 epsilon, pure DP; public bounds
  from the schema, the PCA's data_norm the diameter of the box around its centre).

Prints a markdown table; writes bench/results/pca_pipeline.md and pca_pipeline_privacy_utility.png.
"""
from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")  # seeded SecureRNGs warn by design; diffprivlib warns about its own bounds

from dpfed.algorithms import get_algorithm  # noqa: E402
from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.data.datasets import load_dataset, split_parties  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = ("satimage", "segmentation")
EPSILONS = (1.0, 4.0)
K, DELTA = 5, 1e-5


def _diameter(schema) -> float:
    r = schema.upper - schema.lower
    return float(np.linalg.norm(r / r.max()))


def dpfed_accuracy(ds, algorithm: str, eps: float, seed: int, old: bool) -> float:
    params = {"epsilon": eps, "delta": DELTA}
    if algorithm.startswith("pca+"):
        params["pca_k"] = K
        if old:
            params.update(pca_clip=_diameter(ds.schema), pca_bound=1e6)
    parts = split_parties(ds.X_train, ds.y_train, 3, "iid", np.random.default_rng(seed))
    model = run_inprocess(JobSpec(f"b{seed}", algorithm, params, ds.schema), parts, seed=seed).model
    return get_algorithm(algorithm).evaluate(model, ds.X_test, ds.y_test, ds.schema)["test_accuracy"]


def sklearn_accuracy(ds) -> float:
    from sklearn.decomposition import PCA
    from sklearn.naive_bayes import GaussianNB

    X, Xt = ds.schema.validate(ds.X_train, clip_numeric=True), ds.schema.validate(ds.X_test, clip_numeric=True)
    p = PCA(K).fit(X)
    return float(GaussianNB().fit(p.transform(X), ds.y_train).score(p.transform(Xt), ds.y_test))


def diffprivlib_accuracy(ds, eps: float, seed: int) -> float:
    from diffprivlib.models import PCA, GaussianNB

    X, Xt = ds.schema.validate(ds.X_train, clip_numeric=True), ds.schema.validate(ds.X_test, clip_numeric=True)
    lo, hi = ds.schema.lower, ds.schema.upper
    p = PCA(K, epsilon=0.25 * eps, bounds=(lo, hi), data_norm=float(np.linalg.norm(hi - lo)), random_state=seed)
    Z = p.fit(X).transform(X)
    r = float(np.linalg.norm(hi - lo))  # |projection| <= ||x - mean|| <= the box's diameter
    nb = GaussianNB(epsilon=0.75 * eps, bounds=(np.full(K, -r), np.full(K, r)), random_state=seed)
    return float(nb.fit(Z, ds.y_train).score(p.transform(Xt), ds.y_test))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--gmlvq-seeds", type=int, default=1)
    args = ap.parse_args()
    methods = [("naive-bayes (raw features)", lambda d, e, s: dpfed_accuracy(d, "naive-bayes", e, s, False), args.seeds),
               ("pca+naive-bayes, old defaults", lambda d, e, s: dpfed_accuracy(d, "pca+naive-bayes", e, s, True),
                args.seeds),
               ("pca+naive-bayes, new defaults", lambda d, e, s: dpfed_accuracy(d, "pca+naive-bayes", e, s, False),
                args.seeds),
               ("pca+gmlvq, old defaults", lambda d, e, s: dpfed_accuracy(d, "pca+gmlvq", e, s, True), args.gmlvq_seeds),
               ("pca+gmlvq, new defaults", lambda d, e, s: dpfed_accuracy(d, "pca+gmlvq", e, s, False), args.gmlvq_seeds),
               ("diffprivlib 0.6.6 PCA + GaussianNB", diffprivlib_accuracy, args.seeds)]
    rows, curves, t0 = [], {}, time.time()
    for name in DATASETS:
        ds = load_dataset(name)
        ref = sklearn_accuracy(ds)
        for label, fn, seeds in methods:
            cells = []
            for eps in EPSILONS:
                acc = [fn(ds, eps, s) for s in range(seeds)]
                cells.append(f"{np.mean(acc):.3f} ± {np.std(acc):.3f}")
                curves.setdefault((name, label), []).append(float(np.mean(acc)))
                print(name, label, eps, np.round(acc, 3), f"{time.time() - t0:.0f}s", flush=True)
            rows.append(f"| {name} | {label} | {seeds} | " + " | ".join(cells) + " |")
        rows.append(f"| {name} | scikit-learn PCA(5) + GaussianNB, non-private | - | "
                    + " | ".join(f"{ref:.3f}" for _ in EPSILONS) + " |")
    head = ("| dataset | method | seeds | " + " | ".join(f"ε = {e:g}" for e in EPSILONS) + " |\n|---|---|---|"
            + "---|" * len(EPSILONS))
    table = head + "\n" + "\n".join(rows)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pca_pipeline.md").write_text(
        f"# PCA pipeline (`python bench/bench_pca_pipeline.py --seeds {args.seeds} --gmlvq-seeds "
        f"{args.gmlvq_seeds}`)\n\nTest accuracy, k = {K}, delta {DELTA:g}, 3 parties, pca_share 0.25 "
        f"({time.time() - t0:.0f} s in all).\n\n{table}\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DATASETS), figsize=(6 * len(DATASETS), 4))
    for ax, name in zip(np.atleast_1d(axes), DATASETS):
        for (dname, label), ys in curves.items():
            if dname == name:
                ax.plot(EPSILONS, ys, marker="o", label=label)
        ax.set(title=name, xlabel="epsilon", ylabel="test accuracy", xscale="log")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "pca_pipeline_privacy_utility.png", dpi=100)


if __name__ == "__main__":
    main()
