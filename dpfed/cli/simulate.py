"""``dpfed simulate``: a whole multi-party job on one machine, evaluated on held-out data.

By default (``--transport grpc``) it starts a coordinator and one process per party on loopback with
mutual TLS and a temporary certificate authority (``dpfed.simulation.grpc_local``); ``--transport inproc``
runs the same party and coordinator halves in this process, for quick research sweeps. Training data
are split across the parties (``--split``); ``--cv K`` runs K-fold cross-validation over the whole
data set. The result is a table, or with ``--json`` exactly one JSON object on stdout.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import uuid
from typing import Any

import numpy as np

from dpfed.algorithms import add_algorithm_arguments, algorithm_names, get_algorithm
from dpfed.data.datasets import Dataset, kfold_indices, load_dataset, split_parties
from dpfed.data.schema import Schema
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.params import validate
from dpfed.cli.progress import FractionBar, wants_bar
from dpfed.cli.schema import parse_bounds

__all__ = ["add_commands", "run_simulation"]


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run a local multi-party simulation and evaluate the model",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                       conflict_handler="resolve")
    p.add_argument("--algorithm", required=True, choices=algorithm_names())
    p.add_argument("--dataset", required=True,
                   help="bundled or --data-dir name (adult, nursery, mushroom, segmentation, satimage, california_housing, mnist), "
                        "a .npz path, or blobs:n=100000,d=10,k=5,seed=0")
    p.add_argument("--parties", type=int, default=5, help="number of party processes (default 5)")
    p.add_argument("--epsilon", type=float, required=True, help="per-party privacy budget of the job")
    p.add_argument("--delta", type=float, default=None, help="per-party delta (default: the algorithm's)")
    p.add_argument("--seed", type=int, default=None,
                   help="makes data splits and noise reproducible (simulation only: a seeded generator "
                        "offers no privacy against whoever knows the seed)")
    p.add_argument("--split", default="iid", help="iid | dirichlet:ALPHA (label skew across parties)")
    p.add_argument("--data-dir", default=None,
                   help="folder searched first for DATASET.npz / DATASET.csv; then $DPFED_DATA_DIR, the current "
                        "directory, ../shared/data and the bundled folder")
    p.add_argument("--schema", default=None, metavar="FILE",
                   help="the data's public schema (JSON; README 'Bring your own data'); default: the .npz's own, "
                        "DATASET.schema.json beside the data, or the bundled one")
    p.add_argument("--bounds", type=parse_bounds, default=None, metavar="LOW:HIGH",
                   help="public bounds for every numeric column (instead of a schema file)")
    p.add_argument("--test-fraction", type=float, default=None, metavar="F",
                   help="for a file without a test split: hold out this public random fraction (default 1/3)")
    p.add_argument("--test-data", default=None, metavar="FILE", help="a given test set (.npz or .csv)")
    p.add_argument("--split-seed", type=int, default=None,
                   help="seed of the random train/test split (default 20180425; public, not privacy noise)")
    p.add_argument("--transport", choices=("grpc", "inproc", "ray"), default="grpc",
                   help="grpc: real processes over loopback mutual TLS (default); inproc: same halves, one "
                        "process; ray: the parties multiplexed over a pool of Ray worker actors, one per CPU "
                        "(local, or --ray-address of a cluster)")
    p.add_argument("--ray-address", default=None, help="with --transport ray: join this Ray cluster")
    p.add_argument("--ray-workers", type=int, default=None,
                   help="with --transport ray: number of worker actors (default: one per CPU of the cluster)")
    p.add_argument("--ledger-dir", default=None,
                   help="with --transport ray: one durable ledger file per party in this folder, so that a "
                        "failed worker is restarted without charging anything twice (default: in memory)")
    p.add_argument("--insecure", action="store_true", help="grpc without TLS (loudly warned; testing only)")
    p.add_argument("--cv", type=int, default=None, metavar="K", help="K-fold cross-validation over the whole data")
    p.add_argument("--cv-train-on-one", action="store_true",
                   help="with --cv: train on one fold and test on the other K-1 (as Brinkrolf et al. do for MNIST)")
    p.add_argument("--json", action="store_true", help="print only one JSON object")
    g = p.add_argument_group("secure aggregation (jobs with --noise distributed)")
    g.add_argument("--secure-aggregation", choices=("on", "off"), default="on",
                   help="on: distributed noise runs under SecAgg with discrete noise shares (default); off: the "
                        "float shares of the simulation-only mode")
    g.add_argument("--dropout", type=_probability_below_one, default=0.0, metavar="F",
                   help="each party misses each secure round with probability F (simulated in the party session)")
    g.add_argument("--min-survivors", type=int, default=None, metavar="P_MIN",
                   help="noise planned for P_MIN survivors; rounds with fewer abort (default: all parties)")
    g.add_argument("--colluders", type=int, default=0, help="parties that may collude with the coordinator")
    g.add_argument("--bits", type=int, default=16, metavar="B", help="SecAgg arithmetic mod 2^B (default 16)")
    g.add_argument("--secure-rounding", choices=("auto", "record", "party"), default=None,
                   help="GLVQ/GMLVQ: record rounds every sampled record's row on its own; party sums a party's "
                        "clipped rows and rounds the sum once (one rotation per party and round); auto (default) "
                        "is party for a DP-SGD release of >= 65,536 coordinates, else record")
    add_algorithm_arguments(p)
    p.set_defaults(func=_main)


def _probability_below_one(text: str) -> float:
    """argparse type of ``--dropout``: a number in [0, 1), refused at parse time (not when a party dies)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


class _Progress:
    """Progress on stderr: one line per 2% of the job (per epoch for 50-epoch DP-SGD)."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label, self.enabled, self.last, self.t0 = label, enabled, -1, time.perf_counter()

    def __call__(self, fraction: float) -> None:
        step = int(math.floor(min(max(fraction, 0.0), 1.0) * 50))
        if self.enabled and step > self.last:
            self.last = step
            print(f"[{self.label}] {100 * step / 50:5.1f}%  {time.perf_counter() - self.t0:7.1f}s",
                  file=sys.stderr, flush=True)


def _folds(ds: Dataset, args: argparse.Namespace, labelled: bool) -> list[tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]]:
    if args.cv:
        X, y = ds.X, ds.y
        out = []
        for tr, te in kfold_indices(len(X), args.cv, seed=0 if args.seed is None else args.seed):
            if args.cv_train_on_one:
                tr, te = te, tr
            out.append((X[tr], y[tr], X[te], y[te]))
        return out
    if not labelled:  # unsupervised: fit and evaluate on all records
        return [(ds.X, ds.y, ds.X, ds.y)]
    return [(ds.X_train, ds.y_train, ds.X_test, ds.y_test)]


def _preflight(algo: Any, spec: JobSpec, parties: int, records: int) -> None:
    """The job's privacy plan as a party computes it (``job_event``), so parameters no party would accept
    fail here in one line before any process starts."""
    from dpfed.algorithms.contract import TaskRejected
    from dpfed.simulation.inprocess import secure_spec

    try:
        full = secure_spec(spec, [f"party-{i}" for i in range(parties)], records)
        algo.party_for(full.params).job_event(full)
    except TaskRejected as exc:
        raise ValueError(f"the parties would refuse this job: {exc}") from None


def _job_params(args: argparse.Namespace, algo: Any, ds: Dataset) -> tuple[dict[str, Any], float]:
    """The job's parameters from the command line, validated as every party will (ranges and caps), and delta."""
    delta = algo.default_delta if args.delta is None else args.delta
    params: dict[str, Any] = {"epsilon": args.epsilon, "delta": delta}
    secure = getattr(args, "noise", None) == "distributed" and args.secure_aggregation == "on"
    if secure:  # before the algorithm's options: a secure job needs no Gaussian calibration
        params.update(noise="distributed", secure_aggregation=True, bits=args.bits, colluders=args.colluders,
                      min_survivors=args.parties if args.min_survivors is None else args.min_survivors)
        if args.secure_rounding is not None:
            params["secure_rounding"] = args.secure_rounding
    if algo.params_from_args is not None:
        params.update(algo.params_from_args(args))
    params = validate(algo, params, ds.schema)  # the ranges and caps every party checks, before any spend
    if not secure and args.dropout:
        raise ValueError("--dropout applies to secure aggregation (--noise distributed)")
    if not secure and args.secure_rounding is not None:
        raise ValueError("--secure-rounding applies to secure aggregation (--noise distributed)")
    if "k" in params and params["k"] > len(ds.X_train) // max(args.parties, 1):
        raise ValueError(f"--k {params['k']} exceeds the {len(ds.X_train) // max(args.parties, 1)} training records "
                         "per party; use a smaller k")
    return params, delta


def _run_job(args: argparse.Namespace, spec: JobSpec, party_data: list, progress: Any) -> Any:
    """One job on the chosen transport (``--transport inproc|ray|grpc``): its ``SimulationResult``."""
    if args.transport == "inproc":
        from dpfed.simulation import run_inprocess

        return run_inprocess(spec, party_data, seed=args.seed, progress=progress, dropout=args.dropout)
    if args.transport == "ray":
        from dpfed.simulation.ray_runner import run_ray_simulation

        return run_ray_simulation(spec, party_data, seed=args.seed, address=args.ray_address, progress=progress,
                                  workers=args.ray_workers, dropout=args.dropout,
                                  ledger_dir=None if args.ledger_dir is None else f"{args.ledger_dir}/{spec.job_id}")
    from dpfed.simulation.grpc_local import run_grpc_simulation

    return run_grpc_simulation(spec, party_data, seed=args.seed, insecure=args.insecure, progress=progress,
                               dropout=args.dropout)


def _result(args: argparse.Namespace, algo: Any, ds: Dataset, delta: float, runs: list[Any],
            metrics: list[dict[str, float]]) -> dict[str, Any]:
    """The JSON-able result of every fold's run (``runs``) and metrics (keys in their documented order)."""
    last = runs[-1]
    out: dict[str, Any] = {
        "algorithm": args.algorithm, "dataset": args.dataset, "parties": args.parties,
        "epsilon": args.epsilon, "delta": delta, "epsilon_spent": max([0.0, *(r.epsilon_spent for r in runs)]),
        "split": args.split, "transport": args.transport, "seed": args.seed, "rounds": last.rounds,
    }
    if args.transport == "ray":
        out["ray_workers"] = last.info.get("workers")
        out["ray_nodes"] = len(last.info.get("nodes", ()))
    if args.cv:
        out.update(split_source="cross-validation", cv_seed=0 if args.seed is None else args.seed)
    elif not algo.needs_labels:
        out.update(split_source="all records (unsupervised: fit and evaluated on every record)")
    else:
        out.update(ds.split)
    out.update({k: v for k, v in last.summary.items() if k not in out})
    out.setdefault("secure_aggregation", False)
    for key in metrics[0]:
        vals = [m[key] for m in metrics]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[key] = float(np.mean(vals))
            if len(metrics) > 1:
                out[f"{key}_std"] = float(np.std(vals))
        else:
            out[key] = vals[0]
    if len(metrics) > 1:
        out["folds"] = len(metrics)
        out["cv_train_on_one"] = bool(args.cv_train_on_one)
    return out


def run_simulation(args: argparse.Namespace) -> dict[str, Any]:
    """Run the simulation the parsed ``args`` describe and return the JSON-able result."""
    t0 = time.perf_counter()
    from dpfed.algorithms.pca.options import pipeline_name

    args.algorithm = pipeline_name(args.algorithm, args)  # --pca K with another learner: PCA first, one plan
    algo = get_algorithm(args.algorithm)
    if args.parties < 1:
        raise ValueError("--parties must be >= 1")
    if args.cv is not None and args.cv < 2:
        raise ValueError("--cv needs K >= 2")
    if args.test_fraction is not None and not 0 < args.test_fraction < 1:
        raise ValueError(f"--test-fraction must lie in (0, 1), got {args.test_fraction:g}")
    ds = load_dataset(args.dataset, args.data_dir, schema=Schema.from_file(args.schema) if args.schema else None,
                      bounds=args.bounds, test_fraction=args.test_fraction, test_data=args.test_data,
                      split_seed=args.split_seed)
    if ds.schema.task == "regression" and args.split.startswith("dirichlet"):
        raise ValueError("--split dirichlet:ALPHA skews class labels; a regression target has none (use iid)")
    params, delta = _job_params(args, algo, ds)
    split_rng = np.random.default_rng(args.seed)  # public randomness: which party holds which rows
    folds = _folds(ds, args, algo.needs_labels)
    metrics: list[dict[str, float]] = []
    runs: list[Any] = []
    for i, (Xtr, ytr, Xte, yte) in enumerate(folds):
        party_data = [(Xp, yp if algo.needs_labels else None)
                      for Xp, yp in split_parties(Xtr, ytr, args.parties, args.split, split_rng)]
        # a seeded run names its jobs from the seed: party noise is keyed by (seed, job id, party)
        job_id = f"sim-seed{args.seed}-fold{i}" if args.seed is not None else f"sim-{uuid.uuid4().hex[:12]}"
        spec = JobSpec(job_id, args.algorithm, params, ds.schema)
        if i == 0:  # the plan every party will check, checked here first: a refusal is one line, nothing started
            _preflight(algo, spec, args.parties, sum(len(Xp) for Xp, _ in party_data))
        label = f"{args.algorithm} fold {i + 1}/{len(folds)}" if len(folds) > 1 else args.algorithm
        progress = FractionBar(label) if wants_bar(json_output=args.json) else _Progress(label, enabled=True)
        runs.append(_run_job(args, spec, party_data, progress))
        metrics.append(algo.evaluate(runs[-1].model, Xte, yte, ds.schema))
    out = _result(args, algo, ds, delta, runs, metrics)
    out["wall_seconds"] = time.perf_counter() - t0
    return out


def _table(result: dict[str, Any]) -> str:
    width = max(len(k) for k in result)
    lines = [f"{'key':<{width}}  value", f"{'-' * width}  -----"]
    for k, v in result.items():
        lines.append(f"{k:<{width}}  {v:.4g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    return "\n".join(lines)


def _main(args: argparse.Namespace) -> int:
    try:
        result = run_simulation(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"dpfed simulate: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(json.dumps(result, sort_keys=False) if args.json else _table(result))
    return 0
