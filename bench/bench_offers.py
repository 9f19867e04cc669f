"""Every offer is cheap to decide (issue 24, item 5): time and memory of a party's decision on offers at the
corners of every algorithm's declared parameter ranges.

For each registered algorithm and each parameter of its table (dpfed/algorithms/params.py): the offer with
that parameter at the low and at the high end of its range (its cap, for a capped one; each choice, for a
choice: noise modes included), every other parameter at its default, epsilon 1 and delta 1e-5. Each offer is
decided by :func:`dpfed.federation.session.decide` (validation, the algorithm's job event and its check, the
ledger's charge, at a party whose ledger limit is 10) in a fresh forked process, whose caches are empty
(no calibration is reused from another offer): CPU time of the decision (the target; the machine is shared),
its wall time, and peak RSS above the process's
RSS before it (ru_maxrss; the imports are not counted). A child is killed after --timeout seconds and
cannot allocate more than --memory-cap GiB (then "over").

PCA pipelines (``pca+LEARNER``, every learner that can follow PCA) get the corners of the pipeline's own
parameters (``pca_share``, the PCA step's ``pca_*``, epsilon and delta) at ``pca_k`` 2; the learner step's own
corners are those of the learner's rows (the step is the learner's plan at its share of the budget). A
regression learner (``label_kind`` "numeric") is offered a schema with a numeric target.

    PYTHONPATH=$PWD python bench/bench_offers.py [--algorithms glvq,kmeans,pca+glvq] [--timeout 120]

Target: worst CPU time <= 2 s and worst memory <= 300 MB. Prints one row per offer (sorted by time) and the
worst of each algorithm.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import select
import signal
import sys
import time
from dataclasses import replace
from typing import Any

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.params import table_for
from dpfed.algorithms.pipeline.spec import PCA_KEYS
from dpfed.algorithms.registry import algorithm_names, get_algorithm
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Feature, Schema
from dpfed.federation.session import PartyContext, decide

SCHEMA = Schema.numeric_box(8, 0.0, 1.0, n_classes=3)
REGRESSION = Schema(Schema.numeric_box(8, 0.0, 1.0).features, target=Feature("t", "numeric", lower=-1.0, upper=1.0))
BASE = {"epsilon": 1.0, "delta": 1e-5}
PIPELINE_BASE = {"pca_k": 2}
LEDGER_LIMIT = 10.0
TARGET_SECONDS, TARGET_MB = 2.0, 300.0


def _ends(p: Any) -> list[Any]:
    """The values of one parameter at the corners of its declared range."""
    if p.choices is not None:
        return list(p.choices)
    if p.type is bool:
        return [True, False]
    if p.type not in (int, float):
        return []
    out = []
    for end, is_open, toward in ((p.lo, p.lo_open, math.inf), (p.cap if p.cap is not None else p.hi, p.hi_open, -math.inf)):
        if end is None or not math.isfinite(end):
            continue
        if p.type is int:
            out.append(int(end) + (1 if is_open and toward > 0 else -1 if is_open else 0))
        else:
            v = float(end)
            out.append(v * (1 + 1e-6) + 1e-9 if is_open and toward > 0 else v * (1 - 1e-6) if is_open else v)
    return out


def _corner_params(name: str) -> list[Any]:
    """The parameters whose corners are offered: the table's, or for a pipeline its own (module docstring)."""
    table = table_for(get_algorithm(name))
    if not name.startswith("pca+"):
        return list(table.params)
    pca, learner = table_for(table.pca), table_for(table.learner)
    own = [replace(p, name=f"pca_{p.name}") for p in pca.params if p.name in PCA_KEYS]
    return [p for p in learner.params if p.name in BASE] + list(table.params) + own


def offers(names: list[str]) -> list[tuple[str, str, Any]]:
    """(algorithm, parameter, value) of every corner offer; ("", "", None) rows are the base offers."""
    out = []
    for name in names:
        out.append((name, "(base)", None))
        for p in _corner_params(name):
            for v in _ends(p):
                if p.default is not None and v == p.default and p.name not in BASE:
                    continue
                out.append((name, p.name, v))
    return out


def pipelines() -> list[str]:
    """``pca+LEARNER`` for every registered learner that can follow PCA."""
    return [f"pca+{n}" for n in algorithm_names() if n != "pca"]


def schema_for(algorithm: str) -> Schema:
    return REGRESSION if get_algorithm(algorithm).label_kind == "numeric" else SCHEMA


def _party(schema: Schema = SCHEMA) -> PartyContext:
    X = np.random.default_rng(0).uniform(size=(500, schema.n_features))
    rng = np.random.default_rng(1)
    y = rng.uniform(-1, 1, size=500) if schema.target is not None else rng.integers(0, 3, size=500)
    return PartyContext("p0", X, y, schema, BudgetLedger(":memory:", epsilon_limit=LEDGER_LIMIT, delta_limit=1e-5),
                        secure_aggregation=True)


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _child(algorithm: str, param: str, value: Any, cap_gib: float, out_fd: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (int(cap_gib * 2**30),) * 2)
    schema = schema_for(algorithm)
    party = _party(schema)
    params = {**BASE, **(PIPELINE_BASE if algorithm.startswith("pca+") else {})}
    if value is not None:
        params[param] = value
    base_kb = max(_rss_kb(), 0)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        d = decide(party, JobSpec(f"bench-{os.getpid()}", algorithm, params, schema))
        result = {"accept": d.accept, "reason": d.reason}
    except BaseException as exc:  # noqa: BLE001 - reported, never raised into the benchmark
        result = {"accept": False, "reason": f"raised {type(exc).__name__}: {exc}"}
    result["seconds"] = time.perf_counter() - t0
    result["cpu"] = time.process_time() - c0
    result["mb"] = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_kb, 0) / 1024
    os.write(out_fd, json.dumps(result).encode())
    os._exit(0)


def decide_in_child(algorithm: str, param: str, value: Any, timeout: float, cap_gib: float) -> dict[str, Any]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(algorithm, param, value, cap_gib, w)
    os.close(w)
    t0 = time.perf_counter()
    ready, _, _ = select.select([r], [], [], timeout)
    data = os.read(r, 1 << 20) if ready else b""
    if not data:
        os.kill(pid, signal.SIGKILL)  # the child this benchmark started
    os.waitpid(pid, 0)
    os.close(r)
    if not data:
        return {"accept": False, "reason": f"over: no decision within {timeout:g} s",
                "seconds": time.perf_counter() - t0, "cpu": float("nan"), "mb": float("nan")}
    return dict(json.loads(data))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algorithms", default=",".join(algorithm_names() + pipelines()))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a decision is killed")
    ap.add_argument("--memory-cap", type=float, default=3.0, help="GiB a deciding process may allocate")
    args = ap.parse_args(argv)
    rows = []
    for algorithm, param, value in offers(args.algorithms.split(",")):
        res = decide_in_child(algorithm, param, value, args.timeout, args.memory_cap)
        rows.append((algorithm, param, value, res))
        print(f"  {algorithm:12s} {param:24s} {str(value)[:14]:14s} {res['cpu']:7.3f} s cpu {res['seconds']:7.3f} s "
              f"{res['mb']:7.1f} MB  "
              f"{'accept' if res['accept'] else 'refuse'}  {res['reason'][:70]}", file=sys.stderr, flush=True)
    print(f"\nOffers decided at corners of the declared ranges (ledger limit {LEDGER_LIMIT:g}, epsilon 1, delta 1e-5 "
          f"unless the corner says otherwise); target <= {TARGET_SECONDS:g} s, <= {TARGET_MB:g} MB.\n")
    print("| algorithm | offers | worst CPU time (s) | at | worst wall time (s) | worst memory (MB) | at |")
    print("|---|---|---|---|---|---|---|")
    for name in args.algorithms.split(","):
        mine = [r for r in rows if r[0] == name]
        t = max(mine, key=lambda r: math.inf if math.isnan(r[3]["cpu"]) else r[3]["cpu"])
        w = max(r[3]["seconds"] for r in mine)
        m = max(mine, key=lambda r: -1.0 if math.isnan(r[3]["mb"]) else r[3]["mb"])
        print(f"| {name} | {len(mine)} | {t[3]['cpu']:.2f} | {t[1]}={t[2]} | {w:.2f} | {m[3]['mb']:.0f} | {m[1]}={m[2]} |")
    worst_t = max(math.inf if math.isnan(r[3]["cpu"]) else r[3]["cpu"] for r in rows)
    worst_m = max((r[3]["mb"] for r in rows if not math.isnan(r[3]["mb"])), default=0.0)
    over = [r for r in rows if r[3]["reason"].startswith("over")]
    print(f"\nworst: {worst_t:.2f} s, {worst_m:.0f} MB over {len(rows)} offers; killed: {len(over)}; "
          f"target met: {worst_t <= TARGET_SECONDS and worst_m <= TARGET_MB and not over}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
