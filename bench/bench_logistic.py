"""Benchmark of DP logistic regression and linear SVM across parties (issue 26 item 2), one command:

    python bench/bench_logistic.py [--seeds 3] [--mnist-epochs 5]

* Adult (official split; the schema's one-hot / [0, 1] encoding, :mod:`dpfed.data.encoding`), epsilon 1,
  delta 1e-5: ``logistic-regression`` and ``linear-svm`` by DP-SGD with 1 party holding all the training
  data (local noise) and with 5 parties (iid split, ``split_parties`` with ``default_rng(seed)``) and
  distributed noise under secure aggregation (distributed discrete Gaussian, RDP), both in process
  (``run_inprocess``: the party sessions and coordinator half the gRPC daemons run); objective perturbation
  (one party, the estimators' ``method="objective"``, delta 1e-5 and delta 0); diffprivlib 0.6.6
  ``LogisticRegression`` (epsilon 1, ``data_norm`` the encoding's public bound) and scikit-learn
  ``LogisticRegression`` / ``LinearSVC`` (non-private) on the same encoded features, same split.
* MNIST (../shared/data/mnist.npz or $DPFED_DATA, not copied into the project; pixels / 255): multinomial
  logistic regression at epsilon 1 with all 60,000 training records, 1 party and 5 parties (secure aggregation,
  ``secure_rounding = "party"``); diffprivlib on the first 20,000 records (as the issue measured it);
  scikit-learn non-private.
* Seeds 0..S-1 (noise seed = split seed); mean ± std of test accuracy (MNIST: test error).
* Privacy-utility sweep on Adult, epsilon 0.1 .. 10 (seed 0): dpfed DP-SGD and objective perturbation, diffprivlib,
  scikit-learn's line: bench/results/logistic_privacy_utility.png.

Prints markdown tables and writes bench/results/logistic.md.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")  # seeded SecureRNGs warn by design; this is a simulation

from dpfed.algorithms import DPLinearSVM, DPLogisticRegression, get_algorithm  # noqa: E402
from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.linear_models import evaluate, prepare_params  # noqa: E402
from dpfed.algorithms.params import validate  # noqa: E402
from dpfed.data.datasets import default_data_dir, load_dataset, split_parties  # noqa: E402
from dpfed.data.encoding import encode, max_norm  # noqa: E402
from dpfed.data.schema import Schema  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
EPS, DELTA = 1.0, 1e-5
ADULT = {"epochs": 10, "sampling_rate": 0.05, "clip": 1.0, "optimizer": "adam", "lr": 0.1}
SWEEP = (0.1, 0.3, 1.0, 3.0, 10.0)
SECURE = {"noise": "distributed", "secure_aggregation": True}


def _ms(xs: list[float]) -> str:
    return f"{np.mean(xs):.4f} ± {np.std(xs):.4f}"


def dpfed_accuracy(X, y, Xte, yte, schema: Schema, algorithm: str, params: dict, parties: int, seed: int,
                   eps: float = EPS) -> tuple[float, float, float]:
    """(test accuracy, epsilon spent, noise multiplier) of one in-process job."""
    p = {"epsilon": eps, "delta": DELTA, **params, **(SECURE if parties > 1 else {"noise": "local"})}
    p = validate(get_algorithm(algorithm), p, schema)
    if parties == 1:
        p = prepare_params(p)
    data = [(X, y)] if parties == 1 else split_parties(X, y, parties, rng=np.random.default_rng(seed))
    res = run_inprocess(JobSpec(f"bench-{algorithm}-{parties}-{seed}-{eps:g}", algorithm, p, schema), data, seed=seed)
    acc = evaluate(res.model, Xte, yte, schema)["test_accuracy"]
    return acc, float(res.epsilon_spent), float(res.summary.get("noise_multiplier", math.nan))


def diffprivlib_accuracy(Z, y, Zte, yte, eps: float, norm: float, seed: int) -> float:
    from diffprivlib.models import LogisticRegression

    m = LogisticRegression(epsilon=eps, data_norm=norm, random_state=seed)
    return float(m.fit(Z, y).score(Zte, yte))


def sklearn_accuracy(Z, y, Zte, yte, svm: bool = False, max_iter: int = 300) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    m = LinearSVC(C=1.0, max_iter=5000) if svm else LogisticRegression(max_iter=max_iter)
    return float(m.fit(Z, y).score(Zte, yte))


def objective_accuracy(cls, d, eps: float, delta: float, seed: int) -> float:
    m = cls(epsilon=eps, delta=delta, schema=d.schema, method="objective", l2=1e-4, random_state=seed)
    return float(m.fit(d.X_train, d.y_train).score(d.X_test, d.y_test))


def adult_rows(seeds: int) -> tuple[list[tuple], dict]:
    d = load_dataset("adult")
    Z, Zte = encode(d.schema, d.X_train), encode(d.schema, d.X_test)
    rows, acc = [], {}
    t0 = time.perf_counter()
    for algorithm in ("logistic-regression", "linear-svm"):
        for parties in (1, 5):
            runs = [dpfed_accuracy(d.X_train, d.y_train, d.X_test, d.y_test, d.schema, algorithm, ADULT, parties, s)
                    for s in range(seeds)]
            acc[(algorithm, parties)] = [r[0] for r in runs]
            noise = "local" if parties == 1 else "distributed (SecAgg)"
            rows.append(("Adult", f"dpfed {algorithm} DP-SGD", parties, noise, _ms([r[0] for r in runs]),
                         f"z = {runs[0][2]:.2f}, spent {max(r[1] for r in runs):.4f}"))
            print(f"[bench] adult {algorithm} {parties} parties {_ms(acc[(algorithm, parties)])} "
                  f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
    for cls, name in ((DPLogisticRegression, "logistic-regression"), (DPLinearSVM, "linear-svm")):
        for delta in (DELTA, 0.0):
            a = [objective_accuracy(cls, d, EPS, delta, s) for s in range(seeds)]
            acc[(name, "objective", delta)] = a
            rows.append(("Adult", f"dpfed {name} objective perturbation", 1, f"local, δ={delta:g}", _ms(a), ""))
    dpl = [diffprivlib_accuracy(Z, d.y_train, Zte, d.y_test, EPS, max_norm(d.schema), s) for s in range(seeds)]
    acc["diffprivlib"] = dpl
    rows.append(("Adult", "diffprivlib LogisticRegression", 1, "local, δ=0", _ms(dpl), f"data_norm {max_norm(d.schema):.2f}"))
    acc["sklearn"] = sklearn_accuracy(Z, d.y_train, Zte, d.y_test)
    acc["sklearn-svm"] = sklearn_accuracy(Z, d.y_train, Zte, d.y_test, svm=True)
    rows.append(("Adult", "scikit-learn LogisticRegression", 1, "none", f"{acc['sklearn']:.4f}", "non-private"))
    rows.append(("Adult", "scikit-learn LinearSVC", 1, "none", f"{acc['sklearn-svm']:.4f}", "non-private"))
    print(f"[bench] adult done ({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
    return rows, acc


def mnist_rows(seeds: int, epochs: float) -> tuple[list[tuple], dict]:
    root = Path(os.environ.get("DPFED_DATA") or default_data_dir() or "../shared/data")
    z = np.load(root / "mnist.npz")
    X, y, Xte, yte = (z["X_train"].astype(np.float64), z["y_train"], z["X_test"].astype(np.float64), z["y_test"])
    schema = Schema.numeric_box(784, 0.0, 255.0, n_classes=10)
    params = {"epochs": epochs, "sampling_rate": 0.05, "clip": 1.0, "optimizer": "adam", "lr": 0.03,
              "secure_rounding": "party"}
    rows, err = [], {}
    t0 = time.perf_counter()
    for parties in (1, 5):
        p = {k: v for k, v in params.items() if parties > 1 or k != "secure_rounding"}
        runs = [dpfed_accuracy(X, y, Xte, yte, schema, "logistic-regression", p, parties, s) for s in range(seeds)]
        err[parties] = [1 - r[0] for r in runs]
        rows.append(("MNIST", "dpfed logistic-regression DP-SGD (60k)", parties,
                     "local" if parties == 1 else "distributed (SecAgg)", _ms(err[parties]),
                     f"z = {runs[0][2]:.2f}, spent {max(r[1] for r in runs):.4f}"))
        print(f"[bench] mnist {parties} parties {_ms(err[parties])} ({time.perf_counter() - t0:.0f}s)",
              file=sys.stderr, flush=True)
    Z, Zte = X / 255.0, Xte / 255.0
    for n in (20_000,):
        e = [1 - diffprivlib_accuracy(Z[:n], y[:n], Zte, yte, EPS, math.sqrt(784), s) for s in range(seeds)]
        err[f"diffprivlib-{n}"] = e
        rows.append(("MNIST", f"diffprivlib LogisticRegression ({n // 1000}k)", 1, "local, δ=0", _ms(e), "data_norm 28"))
    err["sklearn"] = 1 - sklearn_accuracy(Z, y, Zte, yte, max_iter=100)
    rows.append(("MNIST", "scikit-learn LogisticRegression (60k)", 1, "none", f"{err['sklearn']:.4f}",
                 "non-private, 100 L-BFGS iterations"))
    print(f"[bench] mnist done ({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
    return rows, err


def sweep(epsilons: tuple[float, ...]) -> dict:
    d = load_dataset("adult")
    Z, Zte = encode(d.schema, d.X_train), encode(d.schema, d.X_test)
    out: dict = {"dpfed": [], "objective": [], "diffprivlib": []}
    for eps in epsilons:
        out["dpfed"].append(dpfed_accuracy(d.X_train, d.y_train, d.X_test, d.y_test, d.schema, "logistic-regression",
                                           ADULT, 1, 0, eps=eps)[0])
        out["objective"].append(objective_accuracy(DPLogisticRegression, d, eps, DELTA, 0))
        out["diffprivlib"].append(diffprivlib_accuracy(Z, d.y_train, Zte, d.y_test, eps, max_norm(d.schema), 0))
        print(f"[bench] sweep eps {eps:g}: {out['dpfed'][-1]:.4f} / {out['objective'][-1]:.4f} / "
              f"{out['diffprivlib'][-1]:.4f}", file=sys.stderr, flush=True)
    return out


def plot(sw: dict, sk: float, epsilons: tuple[float, ...]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(epsilons, sw["dpfed"], "o-", label="dpfed DP-SGD (δ=1e-5)")
    ax.plot(epsilons, sw["objective"], "s-", label="dpfed objective perturbation (δ=1e-5)")
    ax.plot(epsilons, sw["diffprivlib"], "^-", label="diffprivlib 0.6.6 (δ=0)")
    ax.axhline(sk, color="gray", ls="--", label="scikit-learn (non-private)")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("test accuracy")
    ax.set_title("Adult, logistic regression, 1 party (seed 0)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = RESULTS / "logistic_privacy_utility.png"
    fig.savefig(path, dpi=120)
    return path


def targets(acc: dict, err: dict) -> list[str]:
    lr1, lr5 = np.mean(acc[("logistic-regression", 1)]), np.mean(acc[("logistic-regression", 5)])
    sv1, sv5 = np.mean(acc[("linear-svm", 1)]), np.mean(acc[("linear-svm", 5)])
    m1, m5 = np.mean(err[1]), np.mean(err[5])

    def ok(b: bool) -> str:
        return "met" if b else "**missed**"
    return [f"| Adult LR, epsilon 1, 1 party >= 0.83 | {lr1:.4f} | {ok(lr1 >= 0.83)} |",
            f"| Adult LR, epsilon 1, 5 parties distributed >= 0.83 | {lr5:.4f} | {ok(lr5 >= 0.83)} |",
            f"| MNIST multinomial LR, epsilon 1, 1 party: error <= 0.12 | {m1:.4f} | {ok(m1 <= 0.12)} |",
            f"| MNIST multinomial LR, epsilon 1, 5 parties distributed: error <= 0.12 | {m5:.4f} | {ok(m5 <= 0.12)} |",
            f"| Adult linear SVM within 0.01 of LR (1 party / 5 parties) | {sv1 - lr1:+.4f} / {sv5 - lr5:+.4f} | "
            f"{ok(sv1 >= lr1 - 0.01 and sv5 >= lr5 - 0.01)} |",
            f"| 5 parties within 0.01 of 1 party (LR / SVM / MNIST error) | {lr5 - lr1:+.4f} / {sv5 - sv1:+.4f} / "
            f"{m5 - m1:+.4f} | {ok(lr5 >= lr1 - 0.01 and sv5 >= sv1 - 0.01 and m5 <= m1 + 0.01)} |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--mnist-epochs", type=float, default=5.0)
    ap.add_argument("--sweep", type=float, nargs="*", default=list(SWEEP), help="epsilons of the Adult sweep")
    args = ap.parse_args()
    eps_list = tuple(args.sweep)
    t0 = time.perf_counter()
    arows, acc = adult_rows(args.seeds)
    mrows, err = mnist_rows(args.seeds, args.mnist_epochs)
    sw = sweep(eps_list)
    png = plot(sw, acc["sklearn"], eps_list)
    head = "| data | method | parties | noise | accuracy (MNIST: test error), mean ± std | notes |\n|---|---|---|---|---|---|"
    lines = [head] + [f"| {' | '.join(str(c) for c in r)} |" for r in arows + mrows]
    sweep_lines = ["| epsilon | dpfed DP-SGD | dpfed objective perturbation | diffprivlib |", "|---|---|---|---|"]
    sweep_lines += [f"| {e:g} | {a:.4f} | {o:.4f} | {b:.4f} |" for e, a, o, b in
                    zip(eps_list, sw["dpfed"], sw["objective"], sw["diffprivlib"])]
    tgt = ["| target | measured | |", "|---|---|---|"] + targets(acc, err)
    text = "\n".join([
        "# Logistic regression and linear SVM (bench/bench_logistic.py)", "",
        f"One run: `python bench/bench_logistic.py --seeds {args.seeds} --mnist-epochs {args.mnist_epochs:g}`, "
        f"{(time.perf_counter() - t0) / 60:.1f} min wall on the shared 2-core machine. epsilon 1, delta 1e-5 (dpfed), "
        f"seeds 0..{args.seeds - 1}. Adult DP-SGD: {ADULT}; MNIST: epochs {args.mnist_epochs:g}, q 0.05, C 1, Adam "
        "lr 0.03. 5 parties: iid split, distributed noise under secure aggregation (in process).", "",
        *lines, "", "## Targets (issue 26)", "", *tgt, "",
        "## Privacy-utility, Adult logistic regression, 1 party, seed 0", "", *sweep_lines, "",
        f"![privacy-utility]({png.name})", ""])
    (RESULTS / "logistic.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
