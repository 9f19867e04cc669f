"""Table 1 of Brinkrolf, Berger & Hammer (ESANN 2018) with DP-GLVQ / DP-GMLVQ across parties.

Protocol (the paper's): 5-fold cross-validation over the whole data set; MNIST trains on one fold
and tests on the other four, the others the reverse; delta 1e-5, q 0.01, E 50, epsilon_1 = 0.2
epsilon, epsilon in {0.75, 1.5, 2.5}. Settings: (a) 1 party, (b) 5 parties with local noise,
(c) 5 parties with distributed noise (simulation only), plus the non-private SGD baseline (same
code, no clipping, no noise). Learning rate / clip are tuned on a validation split (80/20) of the
*training* part of fold 1 only (setting (a), epsilon 1.5), never on test folds.

    python bench/bench_lvq.py table --datasets segmentation --models glvq gmlvq   # runs + table
    python bench/bench_lvq.py speed                                                # speed table
    python bench/bench_lvq.py baseline                                             # non-private, own lr
    python bench/bench_lvq.py grpc                                                 # one 5-party MNIST job over gRPC
    python bench/bench_lvq.py report                                               # table + plot only

Every finished run is appended to bench/results/lvq_runs.jsonl (so partial runs still report).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # measure per core; the machine is shared
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from dpfed.data.datasets import kfold_indices, load_dataset, split_parties  # noqa: E402
from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.lvq import DEFAULTS, evaluate, prepare_params, run_local  # noqa: E402
from dpfed.core.rng import ReproducibleSeedWarning, SecureRNG  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402
from dpfed.core.errors import DpfedError  # noqa: E402

warnings.simplefilter("ignore", ReproducibleSeedWarning)
RESULTS = Path(__file__).resolve().parent / "results"
RUNS = RESULTS / "lvq_runs.jsonl"
EPSILONS = (0.75, 1.5, 2.5)
SETTINGS = {"a": (1, "local"), "b": (5, "local"), "c": (5, "distributed")}
# Secure aggregation (issue 11): 5 parties, noise "distributed" as discrete Gaussian shares under SecAgg, B bits,
# P_min survivors planned for, each party missing each round with probability `dropout` (simulated in its session).
SECURE = {"s16": {"bits": 16, "min_survivors": 5, "dropout": 0.0},
          "s14": {"bits": 14, "min_survivors": 5, "dropout": 0.0},
          "s12": {"bits": 12, "min_survivors": 5, "dropout": 0.0},
          "s16d30": {"bits": 16, "min_survivors": 3, "dropout": 0.3},
          "s16p": {"bits": 16, "min_survivors": 5, "dropout": 0.0, "secure_rounding": "party"},
          # s16 over real gRPC with mutual TLS and 5 party daemon processes; the same job (id and seeds) also
          # runs in process, and the row records whether the two models are equal array for array
          "s16g": {"bits": 16, "min_survivors": 5, "dropout": 0.0, "transport": "grpc"}}
SETTINGS.update({k: (5, "distributed") for k in SECURE})
PAPER = {  # test errors, Table 1 of the paper: (GLVQ, GMLVQ) per epsilon, and non-private SGD
    "segmentation": {0.75: (0.479, 0.264), 1.5: (0.179, 0.175), 2.5: (0.164, 0.170), "np": (0.146, 0.093)},
    "mnist": {0.75: (0.189, 0.219), 1.5: (0.187, 0.172), 2.5: (0.187, 0.167), "np": (0.186, 0.158)},
}
# Hyperparameters chosen by `tune` (validation split of fold 1's training part) are kept here.
TUNING = RESULTS / "lvq_tuning.json"
KEEP_MARK = "<!-- report() keeps everything below this line (hand-written notes) -->"
# Public initialisation choices per data set (centre of the sums, L2 clip of a centred record; the
# clips are the ~median norm of training records of fold 1, i.e. chosen on training data only).
BASE = {
    "segmentation": {"init": "gaussian"},
    "satimage": {"init": "gaussian", "init_clip": 3.0},
    "mnist": {"init": "gaussian", "init_center": "lower", "init_clip": 16.0},
}
GRIDS_BY_DATASET = {
    "mnist": {"glvq": [{"lr": lr, "clip": c} for lr in (0.2, 0.8) for c in (0.1, 0.03)],
              "gmlvq": [{"lr": lr, "clip": c} for lr in (0.05, 0.2) for c in (0.5, 0.1)]},
}
GRIDS = {
    "glvq": [{"lr": lr, "clip": c} for lr in (0.05, 0.2, 0.8) for c in (0.5, 0.1)],
    "gmlvq": [{"lr": lr, "clip": c} for lr in (0.02, 0.05, 0.2) for c in (0.5, 0.1)],
}


def folds(dataset: str, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) indices; MNIST reverses the folds (train on one, test on four)."""
    fs = kfold_indices(n, 5, seed=0)
    return [(te, tr) for tr, te in fs] if dataset == "mnist" else fs


def job_params(hp: dict, eps: float | None, parties: int, noise: str, secure: dict | None = None) -> dict:
    """A Table-1 run's job parameters: defaults, tuned ``hp``, epsilon, and a :data:`SECURE` setting's."""
    params = {**DEFAULTS, **hp, "epsilon": eps if eps is not None else 1.0, "delta": 1e-5,
              "parties": parties, "noise": noise, "private": eps is not None}
    if secure is not None:
        params.update(secure_aggregation=True, bits=secure["bits"], min_survivors=secure["min_survivors"],
                      secure_rounding=secure.get("secure_rounding", "record"))
    return params


def run_seed(fold: int, seed_index: int) -> int:
    """The seed of a run (noise, sampling, party split) from its fold and seed index."""
    return 1000 + fold + 100 * seed_index


def run_one(ds, Xtr, ytr, Xte, yte, model: str, eps: float | None, parties: int, noise: str,
            hp: dict, seed: int, secure: dict | None = None) -> dict:
    """One training run; returns test error, sigma and wall time. ``secure`` (one of :data:`SECURE`) runs
    the job under secure aggregation in process: the same party sessions, SecAgg steps and decoding as
    over gRPC (tests/daemons/test_net_secure_lvq.py checks the two give the same model); with
    ``transport = grpc`` over real gRPC with mutual TLS and party daemon processes, after the same job (id
    and seeds) in process: ``inproc_test_error`` and ``same_model`` say whether the two agree."""
    params = job_params(hp, eps, parties, noise, secure)
    dropout = 0.0 if secure is None else secure["dropout"]
    extra: dict = {}
    t0 = time.perf_counter()
    if eps is None:
        spec = JobSpec(f"np-{uuid.uuid4().hex[:8]}", model, params, ds.schema)
        coord = run_local(spec, Xtr, ytr, SecureRNG.from_seed(seed))
        modelarr, summary, spent = coord.model(), coord.summary(), float("inf")
    else:
        params = prepare_params(params)
        spec = JobSpec(f"b-{uuid.uuid4().hex[:8]}", model, params, ds.schema)
        data = split_parties(Xtr, ytr, parties, "iid", np.random.default_rng(seed))
        res = run_inprocess(spec, data, seed=seed, dropout=dropout)
        if secure is not None and secure.get("transport") == "grpc":
            from dpfed.simulation.grpc_local import run_grpc_simulation

            extra = {"inproc_test_error": evaluate(res.model, Xte, yte, ds.schema)["test_error"],
                     "inproc_wall_seconds": time.perf_counter() - t0, "transport": "grpc"}
            inproc = res.model
            t0 = time.perf_counter()
            res = run_grpc_simulation(spec, data, seed=seed, dropout=dropout, timeout=6 * 3600)
            extra["same_model"] = sorted(inproc) == sorted(res.model) and all(
                np.array_equal(inproc[k], res.model[k]) for k in inproc)
        modelarr, summary, spent = res.model, res.summary, res.epsilon_spent
    wall = time.perf_counter() - t0
    err = evaluate(modelarr, Xte, yte, ds.schema)["test_error"]
    if secure is not None:
        extra.update({k: summary.get(k) for k in ("secure_aggregation", "bits", "survivors_min", "dropped_rounds",
                                                  "aborted_rounds", "dropouts", "bits_per_round", "init_aborted")})
    return {"test_error": err, "noise_multiplier": summary.get("noise_multiplier", 0.0),
            "epsilon_spent": spent, "wall_seconds": wall, **extra}


def load_tuning() -> dict:
    return json.loads(TUNING.read_text()) if TUNING.exists() else {}


def tune(dataset: str, model: str, base: dict, eps: float = 1.5, grid: list[dict] | None = None,
         key: str | None = None) -> dict:
    """Grid search on a validation split (80/20) of fold 1's training part, setting (a), epsilon 1.5
    (or ``eps``, stored under ``key``, e.g. ``mnist/glvq@0.75`` for a per-epsilon choice)."""
    ds = load_dataset(dataset)
    X, y = ds.X, ds.y
    tr, _ = folds(dataset, len(X))[0]
    perm = np.random.default_rng(1).permutation(tr)
    cut = int(0.8 * len(perm))
    fit_idx, val_idx = perm[:cut], perm[cut:]
    rows = []
    for hp in grid if grid is not None else GRIDS_BY_DATASET.get(dataset, GRIDS)[model]:
        r = run_one(ds, X[fit_idx], y[fit_idx], X[val_idx], y[val_idx], model, eps, 1, "local", {**base, **hp}, 7)
        rows.append({**hp, "val_error": r["test_error"], "wall_seconds": r["wall_seconds"]})
        print(f"tune {dataset} {model} {hp} val_error {r['test_error']:.3f} ({r['wall_seconds']:.0f}s)", flush=True)
    best = min(rows, key=lambda r: r["val_error"])
    chosen = ({**base, "lr": best["lr"], "clip": best["clip"]} if grid is None
              else {**base, **{k: v for k, v in best.items() if k not in ("val_error", "wall_seconds")}})
    allt = load_tuning()
    allt[key or f"{dataset}/{model}"] = {"grid": rows, "chosen": chosen, "epsilon": eps}
    RESULTS.mkdir(parents=True, exist_ok=True)
    TUNING.write_text(json.dumps(allt, indent=1))
    return chosen


def baseline_runs(args: argparse.Namespace) -> None:
    """Non-private SGD with its own learning rate (tuned like the private runs, on validation)."""
    for dataset in args.datasets:
        ds = load_dataset(dataset)
        X, y = ds.X, ds.y
        fl = folds(dataset, len(X))
        tr0, _ = fl[0]
        perm = np.random.default_rng(1).permutation(tr0)
        cut = int(0.8 * len(perm))
        for model in args.models:
            base = dict(BASE.get(dataset, {"init": "gaussian"}))
            key = f"{dataset}/{model}/nonprivate"
            tun = load_tuning()
            if key not in tun:
                rows = []
                for lr in (0.05, 0.2, 0.8):
                    r = run_one(ds, X[perm[:cut]], y[perm[:cut]], X[perm[cut:]], y[perm[cut:]], model, None, 1,
                                "local", {**base, "lr": lr}, 7)
                    rows.append({"lr": lr, "val_error": r["test_error"]})
                    print(f"tune non-private {dataset} {model} lr={lr}: val_error {r['test_error']:.3f}", flush=True)
                best = min(rows, key=lambda r: r["val_error"])
                tun[key] = {"grid": rows, "chosen": {**base, "lr": best["lr"]}}
                TUNING.write_text(json.dumps(tun, indent=1))
            hp = tun[key]["chosen"]
            done = {r["fold"] for r in _rows() if r["dataset"] == dataset and r["model"] == model
                    and r["setting"] == "np-tuned"}
            for fi, (tr, te) in enumerate(fl[: args.folds]):
                if fi in done:
                    continue
                r = run_one(ds, X[tr], y[tr], X[te], y[te], model, None, 1, "local", hp, seed=1000 + fi)
                with RUNS.open("a") as f:
                    f.write(json.dumps({"dataset": dataset, "model": model, "setting": "np-tuned", "epsilon": None,
                                        "fold": fi, "hp": hp, **r}) + "\n")
                print(f"{dataset} {model} non-private (tuned) fold {fi}: error {r['test_error']:.3f}", flush=True)


def table_runs(args: argparse.Namespace) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    for dataset in args.datasets:
        ds = load_dataset(dataset)
        X, y = ds.X, ds.y
        fl = folds(dataset, len(X))[: args.folds]
        for model in args.models:
            base = dict(BASE.get(dataset, {"init": "gaussian"}))
            if model == "gmlvq" and args.omega_rank:
                base["omega_rank"] = args.omega_rank
            key = f"{dataset}/{model}"
            tun = load_tuning()
            hp = tun[key]["chosen"] if key in tun else (tune(dataset, model, base) if args.tune else base)
            jobs = []
            for si in range(args.seeds):  # all folds with one seed before the next seed
                for fi, (tr, te) in enumerate(fl):
                    if args.baseline and si == 0:
                        jobs.append((fi, si, tr, te, None, "np"))
                    for s in args.settings:
                        for eps in args.eps:
                            jobs.append((fi, si, tr, te, eps, s))
            done = {(r["setting"], r["epsilon"], r["fold"], r.get("seed_index", 0)) for r in _rows()
                    if r["dataset"] == dataset and r["model"] == model and _current(r, tun)}
            for fi, si, tr, te, eps, s in jobs:
                if (s, eps, fi, si) in done:  # resume: each run is recorded once
                    continue
                parties, noise = SETTINGS.get(s, (1, "local"))
                hp_e = tun.get(f"{key}@{eps}", {}).get("chosen", hp) if eps is not None else hp
                row = {"dataset": dataset, "model": model, "setting": s, "epsilon": eps, "fold": fi,
                       "seed_index": si, "hp": hp_e, "omega_rank": hp_e.get("omega_rank", 0)}
                try:
                    r = run_one(ds, X[tr], y[tr], X[te], y[te], model, eps, parties, noise, hp_e,
                                seed=run_seed(fi, si), secure=SECURE.get(s))
                except DpfedError as exc:  # e.g. a secure plan the parties refuse: recorded, never retried
                    if s not in SECURE:
                        raise
                    row["refused"] = str(exc)
                    with RUNS.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(f"{dataset} {model} {s} eps={eps} fold {fi} seed {si}: refused: {exc}", flush=True)
                    continue
                row.update(load_avg_1min=round(os.getloadavg()[0], 2), **r)
                with RUNS.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{dataset} {model} {s} eps={eps} fold {fi} seed {si}: error {r['test_error']:.3f} "
                      f"sigma {r['noise_multiplier']:.3f} ({r['wall_seconds']:.0f}s)", flush=True)
    report()


def _current(r: dict, tun: dict) -> bool:
    """False for a private run superseded by a per-epsilon tuning (``dataset/model@eps``) with other hp."""
    t = tun.get(f"{r['dataset']}/{r['model']}@{r['epsilon']}") if r["epsilon"] is not None else None
    return t is None or r["hp"] == t["chosen"]


def _rows() -> list[dict]:
    return [json.loads(line) for line in RUNS.read_text().splitlines() if line.strip()] if RUNS.exists() else []


def report() -> None:
    """Markdown table (mean +- std over folds) next to the paper, and the privacy-utility plot."""
    if not RUNS.exists():
        print("no runs yet")
        return
    tun = load_tuning()
    all_rows = [json.loads(line) for line in RUNS.read_text().splitlines() if line.strip()]
    refused = [r for r in all_rows if "refused" in r]
    all_rows = [r for r in all_rows if "refused" not in r]
    rows = [r for r in all_rows if _current(r, tun)]
    retuned = [r for r in all_rows if not _current(r, tun)]
    by_fold: dict[tuple, dict[int, list[float]]] = {}
    for r in rows:
        by_fold.setdefault((r["dataset"], r["model"], r["setting"], r["epsilon"]), {}).setdefault(
            r["fold"], []).append(r["test_error"])
    # one number per fold (the mean over its seeds); cells are mean +- std of these over folds
    groups = {k: [float(np.mean(v[f])) for f in sorted(v)] for k, v in by_fold.items()}
    seeds = {k: sorted({len(v[f]) for f in v}) for k, v in by_fold.items()}
    sig: dict[tuple, float] = {(r["dataset"], r["model"], r["setting"], r["epsilon"]): r["noise_multiplier"] for r in rows}
    loads = [r["load_avg_1min"] for r in rows if "load_avg_1min" in r]
    load_txt = (f"1-min load average at the end of each run (2 cores, shared with other engineers' benchmarks): "
                f"median {np.median(loads):.1f}, range {min(loads):.1f}-{max(loads):.1f} over the {len(loads)} runs "
                f"that recorded it (earlier runs: ~10)." if loads else "")

    def cell(k: tuple) -> str:
        return _cell_text(by_fold.get(k, {}))

    lines = ["# DP-GLVQ / DP-GMLVQ: Table 1 protocol (test error, mean ± std over folds)", "",
             "(a) 1 party, (b) 5 parties local noise, (c) 5 parties distributed noise (simulation only). "
             "q=0.01, E=50, delta=1e-5, epsilon_1=0.2 epsilon, Gaussian initialisation, PLD-calibrated sigma. "
             "[n] = n folds with one training seed each; [n×m] = n folds with m seeds each (noise, Poisson "
             "sampling and party split differ per seed): the cell is the mean ± std over folds of the per-fold "
             "seed means. MNIST GMLVQ uses a rank-50 Omega (a full 784x784 Omega is ~6x slower per fit). "
             "Runs: bench/results/lvq_runs.jsonl; grids: lvq_tuning.json. Runs before commit ea69e9d drew the "
             "noise by Box-Muller, later ones by the ziggurat sampler (both exact Gaussian).", "", load_txt, ""]
    for dataset in sorted({k[0] for k in groups}):
        lines += [f"## {dataset}", "", "| model | epsilon | sigma | (a) 1 party | (b) 5 local | (c) 5 distributed | paper |",
                  "|---|---|---|---|---|---|---|"]
        for model in ("glvq", "gmlvq"):
            for eps in (*EPSILONS, None):
                cells = [cell((dataset, model, s, eps)) for s in (("a", "b", "c") if eps is not None
                                                                   else ("np", "np-tuned"))]
                if eps is None:
                    cells = [f"{cells[0]} (DP's lr)", f"{cells[1]} (own lr)", ""]
                if all(c == "not run" for c in cells):
                    continue
                pap = PAPER.get(dataset, {}).get(eps if eps is not None else "np")
                pcell = f"{pap[0 if model == 'glvq' else 1]:.3f}" if pap else "n/a"
                sg = sig.get((dataset, model, "a", eps))
                lines.append(f"| {model} | {eps if eps is not None else 'non-private'} | "
                             f"{'' if sg is None else f'{sg:.3f}'} | " + " | ".join(cells) + f" | {pcell} |")
        for model in ("glvq", "gmlvq"):
            t = tun.get(f"{dataset}/{model}")
            if t:
                lines.append(f"\nTuned on validation ({dataset}/{model}): {json.dumps(t['chosen'])}")
            for eps in EPSILONS:
                t = tun.get(f"{dataset}/{model}@{eps}")
                if t:
                    lines.append(f"\nTuned on validation for epsilon {eps} only ({dataset}/{model}, grid "
                                 f"{len(t['grid'])} settings): {json.dumps(t['chosen'])}")
        lines += ["", "(c) − (a), paired by fold: mean over folds of the difference of the per-fold seed means, ± its "
                  "standard error (from the seed-to-seed variance within each fold when there are several seeds, "
                  "else from the spread of the per-fold differences):", "",
                  "| model | epsilon | (c) − (a) | folds | seeds per fold (a / c) |", "|---|---|---|---|---|"]
        for model in ("glvq", "gmlvq"):
            for eps in EPSILONS:
                a, c = by_fold.get((dataset, model, "a", eps), {}), by_fold.get((dataset, model, "c", eps), {})
                got = _paired_diff(a, c)
                if got is None:
                    continue
                m, se, n = got
                se_txt = f"{se:.3f}" if np.isfinite(se) else "n/a"
                lines.append(f"| {model} | {eps} | {m:+.3f} ± {se_txt} | {n} | "
                             f"{'/'.join(str(x) for x in seeds[(dataset, model, 'a', eps)])} / "
                             f"{'/'.join(str(x) for x in seeds[(dataset, model, 'c', eps)])} |")
        lines.append("")
    sup = RESULTS / "lvq_runs_superseded.jsonl"
    if sup.exists() or retuned:
        old: dict[tuple, list[float]] = {}
        sup_rows = [json.loads(x) for x in sup.read_text().splitlines() if x.strip()] if sup.exists() else []
        for r in sup_rows + retuned:
            if "test_error" not in r:  # a superseded refusal
                continue
            old.setdefault((r["dataset"], r["model"], r["setting"], r["epsilon"]), []).append(r["test_error"])
        lines += ["## Superseded runs (before the wider tuning grid, before a per-epsilon tuning, or secure runs "
                  "accounted with Zhu & Wang's general subsampling bound before 1da3440), kept for the record", "",
                  "| dataset | model | setting | epsilon | test error |", "|---|---|---|---|---|"]
        lines += [f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {np.mean(v):.3f} ± {np.std(v):.3f} [{len(v)}] |"
                  for k, v in sorted(old.items(), key=str)]
        lines.append("")
    grpc = RESULTS / "lvq_grpc_mnist.json"
    if grpc.exists():
        g = json.loads(grpc.read_text())
        lines += ["## One full 5-party job over gRPC with mutual TLS (dpfed.simulation.grpc_local.run_grpc_simulation)", "",
                  f"{g['algorithm']} on {g['dataset']}, {g['parties']} parties, local noise, epsilon 1.5, "
                  f"{g['rounds']} rounds: wall {g['wall_seconds']:.0f} s (machine load ~10 on 2 cores), "
                  f"test error {g['test_error']:.3f}.", ""]
    out = RESULTS / "lvq_table1.md"
    kept = out.read_text().split(KEEP_MARK, 1) if out.exists() else []
    if len(kept) == 2:  # hand-written notes after the marker survive a re-render
        lines += [KEEP_MARK + kept[1].rstrip("\n")]
    out.write_text("\n".join(lines) + "\n")
    secure_report(rows, by_fold, refused)
    print("\n".join(lines))
    _plot(groups)


def _cell_text(v: dict[int, list[float]]) -> str:
    """mean ± std over folds of the per-fold seed means, tagged [folds] or [folds×seeds]."""
    if not v:
        return "not run"
    means = [float(np.mean(v[f])) for f in sorted(v)]
    sd = sorted({len(v[f]) for f in v})
    tag = f"{len(means)}" if sd == [1] else f"{len(means)}×{sd[0]}" if len(sd) == 1 else f"{len(means)}×{sd[0]}-{sd[-1]}"
    return f"{np.mean(means):.3f} ± {np.std(means):.3f} [{tag}]"


def _paired_diff(a: dict[int, list[float]], c: dict[int, list[float]]) -> tuple[float, float, int] | None:
    """(mean over common folds of mean c - mean a, its standard error, folds), or None without common folds.
    With several seeds per fold the fold effects cancel in the pairing and the error left is the seed noise
    of the fold means; with one seed, the spread of the per-fold differences."""
    common = sorted(set(a) & set(c))
    if not common:
        return None
    diff = np.array([np.mean(c[f]) - np.mean(a[f]) for f in common])
    if all(len(a[f]) > 1 and len(c[f]) > 1 for f in common):
        se = np.sqrt(sum(np.var(a[f], ddof=1) / len(a[f]) + np.var(c[f], ddof=1) / len(c[f]) for f in common)) / len(common)
    else:
        se = np.std(diff, ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
    return float(diff.mean()), float(se), len(common)


def _paired(a: dict[int, list[float]], c: dict[int, list[float]]) -> str:
    """:func:`_paired_diff` as a table cell."""
    got = _paired_diff(a, c)
    if got is None:
        return ""
    m, se, n = got
    return f"{m:+.3f} ± {se:.3f} [{n}]" if np.isfinite(se) else f"{m:+.3f} [{n}]"


def secure_report(rows: list[dict], by: dict[tuple, dict[int, list[float]]], refused: list[dict]) -> None:
    """bench/results/secure_table1.md: the Table-1 cells under secure aggregation (settings of :data:`SECURE`)
    next to one party (a) and float distributed noise without SecAgg (c), same folds and seeds."""
    srows = [r for r in rows if r["setting"] in SECURE]
    if not srows and not refused:
        return
    why = {(r["dataset"], r["model"], r["setting"], r["epsilon"]): r["refused"] for r in refused}
    lines = ["# Table 1 under secure aggregation (issue 11)", "",
             "5 parties; noise `distributed`: each party adds a discrete Gaussian share to its encoded sum (rotation, "
             "scale, conditional rounding, mod 2^B) under SecAgg; accounting DDGauss RDP (KLS21 Prop. 14) with "
             "Poisson subsampling by the binomial expansion (both directions), planned for P_min honest shares. sNN = B bits, P_min 5, no dropout; "
             "s16d30 = B 16, P_min 3, each party misses each round with probability 0.3 (a round with fewer than 3 "
             "survivors is aborted, nothing unmasked); every sNN but s16p sets `secure_rounding = record` (each "
             "record's row rounded on its own), which is what the default `auto` uses for these cells (d <= 7,840 < "
             "2^16); s16p = s16 with `secure_rounding = party` (each party's "
             "clipped sum rotated and rounded once, instead of each record's row). Same protocol, folds, seeds and tuned hyperparameters as "
             "lvq_table1.md ((a) one party, (c) float distributed noise without SecAgg). Measured in process: the "
             "same party sessions, SecAgg steps and decoding as over gRPC with mutual TLS and party daemons "
             "(tests/daemons/test_net_secure_lvq.py: the same model with the same seeds). "
             "Command: `python bench/bench_lvq.py table --settings s16 ... --no-tune --no-baseline` "
             "(runs in lvq_runs.jsonl).", "",
             "s16g = s16 over real gRPC with mutual TLS and 5 party daemon processes (one seed per fold; each job "
             "also run in process with the same job id and seeds, see below).", "",
             "| dataset | model | epsilon | (a) 1 party | (c) float distributed | s16 | s16g (gRPC) | s14 | s12 | s16d30 "
             "| s16p | s16 − (a) paired | s16g − (a) paired | s16d30 − (a) paired | s16p − (a) paired | "
             "target: within 0.01 of (a) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for dataset, model, eps in sorted({(r["dataset"], r["model"], r["epsilon"]) for r in srows + refused}):
        k = (dataset, model)
        a = by.get((*k, "a", eps), {})
        verdict = []
        for s in ("s16", "s16g", "s16d30", "s16p"):
            got = _paired_diff(a, by.get((*k, s, eps), {}))
            if got is not None:
                d = got[0]
                verdict.append(f"{s}: {'met' if d <= 0.01 else 'missed'} ({d:+.3f})")
        lines.append(f"| {dataset} | {model} | {eps} | " + " | ".join(
            "refused (see below)" if (*k, s, eps) in why and not by.get((*k, s, eps)) else _cell_text(by.get((*k, s, eps), {}))
            for s in ("a", "c", "s16", "s16g", "s14", "s12", "s16d30", "s16p")) + " | "
            + f"{_paired(a, by.get((*k, 's16', eps), {}))} | {_paired(a, by.get((*k, 's16g', eps), {}))} | "
            + f"{_paired(a, by.get((*k, 's16d30', eps), {}))} | "
            + f"{_paired(a, by.get((*k, 's16p', eps), {}))} | "
            + ("; ".join(verdict) or "n/a") + " |")
    for reason in sorted(set(why.values())):
        cells = sorted(f"{k[0]} {k[1]} {k[2]} eps {k[3]}" for k, v in why.items() if v == reason)
        lines += ["", f"Refused ({', '.join(cells)}): {reason}"]
    eps_spent = [r["epsilon_spent"] / r["epsilon"] for r in srows] or [float("nan")]
    drops = [r for r in srows if r["setting"] == "s16d30" and r.get("dropped_rounds") is not None]
    lines += ["", f"Epsilon spent / target over the {len(srows)} secure runs: {min(eps_spent):.5f} to {max(eps_spent):.5f}."]
    if drops:
        ab = [r["aborted_rounds"] for r in drops if r.get("aborted_rounds") is not None]
        lines.append(f"s16d30: rounds in which at least one party dropped, per run {min(r['dropped_rounds'] for r in drops)} "
                     f"to {max(r['dropped_rounds'] for r in drops)} of 5001"
                     + (f"; rounds aborted (fewer than 3 survivors, nothing unmasked) {min(ab)} to {max(ab)}" if ab else
                        " (aborted rounds not recorded by these runs: expected 16 % of rounds, P[Bin(5, 0.7) < 3])")
                     + "; every job completed (that every unmasked sum is exact under 0/10/30 % dropout is tested: "
                     "tests/federation/test_secagg.py::test_sum_exact_with_dropouts_over_many_rounds_with_the_same_keys).")
    grpc = [r for r in srows if r.get("transport") == "grpc"]
    if grpc:
        same = sum(bool(r.get("same_model")) for r in grpc)
        lines.append(f"s16g over gRPC: {same} of {len(grpc)} jobs gave the same model, array for array, as the same "
                     f"job in process (test errors equal in {sum(r['inproc_test_error'] == r['test_error'] for r in grpc)}); "
                     f"wall {min(r['wall_seconds'] for r in grpc):.0f}-{max(r['wall_seconds'] for r in grpc):.0f} s per "
                     f"job over gRPC, {min(r['inproc_wall_seconds'] for r in grpc):.0f}-"
                     f"{max(r['inproc_wall_seconds'] for r in grpc):.0f} s in process.")
    loads = [r["load_avg_1min"] for r in srows if "load_avg_1min" in r]
    if loads:
        lines.append(f"1-min load average at the end of the runs: median {np.median(loads):.1f}, range "
                     f"{min(loads):.1f}-{max(loads):.1f}.")
    if GRPC_CELLS.exists():
        cells = [json.loads(x) for x in GRPC_CELLS.read_text().splitlines() if x.strip()]
        lines += ["", "## Cells run over gRPC with mutual TLS and 5 party daemon processes", "",
                  "`python bench/bench_lvq.py grpc-cell --dataset D --model M --eps E --setting S --fold F`: the same job "
                  "(job id, seeds, folds, hyperparameters) in process and over real gRPC.", "",
                  "| dataset | model | setting | epsilon | fold | test error in process | test error over gRPC | "
                  "same model | wall in process / gRPC | epsilon spent |", "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {c['dataset']} | {c['model']} | {c['setting']} | {c['epsilon']} | {c['fold']} | "
                  f"{c['inproc_test_error']:.4f} | {c['grpc_test_error']:.4f} | {'yes' if c['same_model'] else 'NO'} | "
                  f"{c['inproc_wall_seconds']:.0f} s / {c['grpc_wall_seconds']:.0f} s | {c['grpc_epsilon_spent']:.4f} |"
                  for c in cells]
    (RESULTS / "secure_table1.md").write_text("\n".join(lines) + "\n")


def _plot(groups: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({k[0] for k in groups})
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for model, color in (("glvq", "tab:blue"), ("gmlvq", "tab:red")):
            for s, ls in (("a", "-"), ("b", ":"), ("c", "--")):
                pts = [(e, np.mean(groups[(dataset, model, s, e)])) for e in EPSILONS if (dataset, model, s, e) in groups]
                if pts:
                    ax.plot(*zip(*pts), ls, marker="o", color=color, label=f"{model} ({s})")
            if (dataset, model, "np", None) in groups:
                ax.axhline(np.mean(groups[(dataset, model, "np", None)]), color=color, lw=0.8, alpha=0.6)
            pap = PAPER.get(dataset)
            if pap:
                ax.plot(EPSILONS, [pap[e][0 if model == "glvq" else 1] for e in EPSILONS], "x", color=color,
                        ms=8, label=f"{model} paper")
        ax.set_title(f"{dataset} (lines: non-private)")
        ax.set_xlabel("epsilon (delta = 1e-5)")
        ax.set_ylabel("test error")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "lvq_privacy_utility.png", dpi=110)


def speed(args: argparse.Namespace) -> None:
    """DP-SGD samples/s per core for GMLVQ on MNIST (d=784, 10 prototypes, full Omega), DP step vs non-private.

    Each repeat times the non-private batch gradient, the clipped sum alone and the full DP release
    (:func:`dpfed.algorithms.lvq.noisy_gradient_sum`, the party's code: clipped sum + SecureRNG noise) back to back
    on the same batch, so a load change hits all three; the table gives medians over the repeats and
    the median of the per-repeat ratios.
    """
    from dpfed.algorithms.lvq import noisy_gradient_sum
    from dpfed.algorithms.lvq.gradient import clipped_gradient_sum
    from dpfed.algorithms.lvq.model import rescale

    ds = load_dataset("mnist")
    rng = np.random.default_rng(0)
    Z = rescale(ds.X_train[:20000], ds.schema.lower, ds.schema.upper)
    y = ds.y_train[:20000]
    d = Z.shape[1]
    W = rng.normal(0, 0.1, (10, d))
    wl = np.arange(10)
    omega = np.eye(d) / np.sqrt(d)
    srng = SecureRNG.from_seed(0)
    load0 = os.getloadavg()
    lines = ["| batch | non-private grad (CPU ms) | DP clipped sum (CPU ms) | DP step: clip + noise (CPU ms) | "
             "DP step / non-private (CPU, median of per-repeat ratios) | clip only / non-private (CPU) | "
             "DP step / non-private (wall) | DP samples/s/core |", "|---|---|---|---|---|---|---|---|"]

    def timed(f) -> tuple[float, float]:
        """(CPU seconds of this process, wall seconds): CPU time is not inflated by waiting for a core."""
        c, t = time.process_time(), time.perf_counter()
        f()
        return time.process_time() - c, time.perf_counter() - t

    for B in args.batches:
        idx = rng.choice(len(Z), B, replace=False)
        Xb, yb = Z[idx], y[idx]
        fns = (lambda: clipped_gradient_sum(Xb, yb, W, wl, omega, None),
               lambda: clipped_gradient_sum(Xb, yb, W, wl, omega, 0.5),
               lambda: noisy_gradient_sum(Xb, yb, W, wl, omega, 0.5, 0.5, srng))
        for f in fns:  # warm-up
            f()
        both = np.array([[timed(f) for f in fns] for _ in range(args.repeats)])  # (repeats, 3, cpu/wall)
        ts, wall = both[..., 0], both[..., 1]
        t_np, t_clip, t_dp = np.median(ts, axis=0)
        ratio = ts[:, 2] / ts[:, 0]
        lines.append(f"| {B} | {1e3 * t_np:.1f} | {1e3 * t_clip:.1f} | {1e3 * t_dp:.1f} | {np.median(ratio):.2f}x "
                     f"(quartiles {np.quantile(ratio, 0.25):.2f}-{np.quantile(ratio, 0.75):.2f}) | "
                     f"{np.median(ts[:, 1] / ts[:, 0]):.2f}x | {np.median(wall[:, 2] / wall[:, 0]):.2f}x | "
                     f"{B / t_dp:.0f} |")
    n_noise = W.size + omega.size
    samplers = (("Box-Muller `SecureRNG.normal`", lambda: srng.normal(n_noise, 0.5)),
                ("ziggurat `SecureRNG.normal_ziggurat` (used by the party)", lambda: srng.normal_ziggurat(n_noise, 0.5)))
    st = np.array([[timed(f)[0] for _, f in samplers] for _ in range(args.repeats)])
    lines += ["", f"Noise for one step ({n_noise} Gaussian draws from the ChaCha20 keystream), CPU ms, median:", "",
              "| sampler | CPU ms |", "|---|---|"]
    lines += [f"| {name} | {1e3 * t:.1f} |" for (name, _), t in zip(samplers, np.median(st, axis=0))]
    load1 = os.getloadavg()
    text = ("# GMLVQ on MNIST, one DP-SGD step (d=784, 10 prototypes, full 784x784 Omega)\n\n"
            f"Command: `OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python bench/bench_lvq.py speed "
            f"--repeats {args.repeats}`; {args.repeats} interleaved repeats per batch size, medians of the "
            "process CPU time (single-threaded BLAS, so CPU time = cost on one core; wall time is inflated by "
            "whatever else runs on the shared cores and is given for reference). "
            f"Machine: {os.cpu_count()} cores shared with other engineers; 1-min load average "
            f"{load0[0]:.2f} before, {load1[0]:.2f} after.\n\n" + "\n".join(lines) + "\n")
    if args.write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "lvq_speed.md").write_text(text)
    print(text)


def grpc_run(args: argparse.Namespace) -> None:
    """Wall time of one full 5-party MNIST GLVQ job over gRPC + mutual TLS (fold 1, epsilon 1.5, local)."""
    from dpfed.simulation.grpc_local import run_grpc_simulation

    ds = load_dataset("mnist")
    tr, te = folds("mnist", len(ds.X))[0]
    hp = load_tuning().get("mnist/glvq", {}).get("chosen", BASE["mnist"])
    params = prepare_params({**DEFAULTS, **hp, "epsilon": 1.5, "delta": 1e-5, "parties": 5, "epochs": args.epochs})
    spec = JobSpec(f"grpc-mnist-{uuid.uuid4().hex[:8]}", "glvq", params, ds.schema)
    data = split_parties(ds.X[tr], ds.y[tr], 5, "iid", np.random.default_rng(0))
    t0 = time.perf_counter()
    res = run_grpc_simulation(spec, data, seed=0)
    wall = time.perf_counter() - t0
    ev = evaluate(res.model, ds.X[te], ds.y[te], ds.schema)
    out = {"dataset": "mnist", "algorithm": "glvq", "epochs": args.epochs, "parties": 5, "rounds": res.rounds,
           "wall_seconds": wall, "epsilon_spent": res.epsilon_spent, **ev,
           "noise_multiplier": res.summary["noise_multiplier"]}
    (RESULTS / "lvq_grpc_mnist.json").write_text(json.dumps(out) + "\n")
    print(json.dumps(out))


GRPC_CELLS = RESULTS / "secure_grpc_cells.jsonl"


def grpc_cell(args: argparse.Namespace) -> None:
    """One secure Table-1 cell (dataset, model, setting, epsilon, fold, seed index) run twice with the same job id
    and seeds: in process and over gRPC with mutual TLS and 5 party daemon processes. Records both test errors and
    whether the two models are equal array for array (bench/results/secure_grpc_cells.jsonl)."""
    from dpfed.simulation.grpc_local import run_grpc_simulation

    ds = load_dataset(args.dataset)
    tr, te = folds(args.dataset, len(ds.X))[args.fold]
    key = f"{args.dataset}/{args.model}"
    tun = load_tuning()
    hp = tun.get(f"{key}@{args.eps}", {}).get("chosen", tun[key]["chosen"] if key in tun else BASE[args.dataset])
    sec = SECURE[args.setting]
    params = prepare_params(job_params(hp, args.eps, 5, "distributed", sec))
    seed = run_seed(args.fold, args.seed_index)
    job = f"cell-{args.dataset}-{args.model}-{args.setting}-{args.eps}-f{args.fold}-s{args.seed_index}"
    spec = JobSpec(job, args.model, params, ds.schema)
    data = split_parties(ds.X[tr], ds.y[tr], 5, "iid", np.random.default_rng(seed))
    out = {"dataset": args.dataset, "model": args.model, "setting": args.setting, "epsilon": args.eps,
           "fold": args.fold, "seed_index": args.seed_index, "hp": hp}
    runs = {}
    for name, run in (("inproc", lambda: run_inprocess(spec, data, seed=seed, dropout=sec["dropout"])),
                      ("grpc", lambda: run_grpc_simulation(spec, data, seed=seed, dropout=sec["dropout"],
                                                           timeout=6 * 3600))):
        t0 = time.perf_counter()
        res = run()
        out[f"{name}_wall_seconds"] = time.perf_counter() - t0
        out[f"{name}_test_error"] = evaluate(res.model, ds.X[te], ds.y[te], ds.schema)["test_error"]
        out[f"{name}_epsilon_spent"] = res.epsilon_spent
        runs[name] = res.model
        print(name, json.dumps({k: v for k, v in out.items() if k.startswith(name)}), flush=True)
    a, b = runs["inproc"], runs["grpc"]
    out["same_model"] = sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    out["load_avg_1min"] = round(os.getloadavg()[0], 2)
    with GRPC_CELLS.open("a") as f:
        f.write(json.dumps(out) + "\n")
    print(json.dumps(out))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("--datasets", nargs="+", default=["segmentation", "satimage", "mnist"])
    t.add_argument("--models", nargs="+", default=["glvq", "gmlvq"])
    t.add_argument("--settings", nargs="+", default=["a", "b", "c"])
    t.add_argument("--eps", nargs="+", type=float, default=list(EPSILONS))
    t.add_argument("--folds", type=int, default=5)
    t.add_argument("--seeds", type=int, default=1, help="training seeds per fold (noise, sampling, party split)")
    t.add_argument("--omega-rank", type=int, default=0)
    t.add_argument("--no-tune", dest="tune", action="store_false")
    t.add_argument("--no-baseline", dest="baseline", action="store_false")
    s = sub.add_parser("speed")
    s.add_argument("--batches", nargs="+", type=int, default=[140, 600])
    s.add_argument("--repeats", type=int, default=15)
    s.add_argument("--no-write", dest="write", action="store_false", help="print only, keep lvq_speed.md")
    b = sub.add_parser("baseline")
    b.add_argument("--datasets", nargs="+", default=["segmentation", "satimage", "mnist"])
    b.add_argument("--models", nargs="+", default=["glvq", "gmlvq"])
    b.add_argument("--folds", type=int, default=5)
    g = sub.add_parser("grpc")
    g.add_argument("--epochs", type=float, default=50)
    gc = sub.add_parser("grpc-cell", help="one secure cell in process and over gRPC + mutual TLS, same seeds")
    gc.add_argument("--dataset", required=True)
    gc.add_argument("--model", required=True)
    gc.add_argument("--eps", type=float, required=True)
    gc.add_argument("--setting", default="s16", choices=sorted(SECURE))
    gc.add_argument("--fold", type=int, default=0)
    gc.add_argument("--seed-index", type=int, default=0)
    sub.add_parser("report")
    te = sub.add_parser("tune-eps", help="tune hp for one epsilon on the validation split (training data only)")
    te.add_argument("--dataset", required=True)
    te.add_argument("--model", required=True)
    te.add_argument("--eps", type=float, required=True)
    te.add_argument("--grid", required=True, help='JSON list of hp overrides, e.g. \'[{"lr": 1.6}]\'')
    args = p.parse_args(argv)
    if args.cmd == "table":
        table_runs(args)
    elif args.cmd == "baseline":
        baseline_runs(args)
        report()
    elif args.cmd == "grpc":
        grpc_run(args)
    elif args.cmd == "grpc-cell":
        grpc_cell(args)
    elif args.cmd == "speed":
        speed(args)
    elif args.cmd == "tune-eps":
        base = load_tuning()[f"{args.dataset}/{args.model}"]["chosen"]
        grid = [base] + [{**base, **g} for g in json.loads(args.grid)]  # the current choice competes too
        print(json.dumps(tune(args.dataset, args.model, base, args.eps, grid, f"{args.dataset}/{args.model}@{args.eps}")))
    else:
        report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
