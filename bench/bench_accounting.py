"""Accounting benchmark: ``python bench/bench_accounting.py``.

Prints a markdown table (and writes ``bench/results/accounting.md``) of
1. wall time of ``dpfed privacy epsilon`` / ``privacy noise`` for T = 5000 steps (pld, rdp),
   in-process (the accounting itself) and as a fresh console-script process (with imports);
2. calibration overshoot vs target: our bracketed Brent search against an epsilon-tolerance
   bisection with Opacus' stopping rule (stop when target - eps < 0.01), both measured against
   the smallest sigma found with rtol = 1e-7;
3. ledger charge throughput (durable SQLite file, charges/s), one process and four processes.
   Each charge re-accounts the owner's whole history (one PLD of Gaussian(50/sqrt(n)) here),
   so the cost per charge grows slowly with n; the figure is the mean over n = 1..N.
"""
from __future__ import annotations

import importlib.metadata
import io
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dp_accounting as dpa

from dpfed.core import accounting as A
from dpfed.core import accountants, calibration
from dpfed.cli import main as cli_main
from dpfed.core.ledger import BudgetLedger

Q, T, DELTA, SIGMA, TARGET = 0.01, 5000, 1e-5, 1.5, 2.17


def _clear() -> None:
    accountants._epsilon_cached.cache_clear()


def _time_inprocess(argv: list[str], repeat: int = 3) -> float:
    times = []
    devnull = open(os.devnull, "w")
    for _ in range(repeat):
        _clear()
        old, sys.stdout = sys.stdout, devnull
        try:
            t0 = time.perf_counter()
            cli_main(argv)
            times.append(time.perf_counter() - t0)
        finally:
            sys.stdout = old
    devnull.close()
    return statistics.median(times)


def _time_subprocess(argv: list[str]) -> float:
    exe = shutil.which("dpfed") or sys.exit("the dpfed console script is not installed")
    t0 = time.perf_counter()
    subprocess.run([exe, *argv], check=True, capture_output=True)
    return time.perf_counter() - t0


def cli_rows() -> list[str]:
    rows = ["| command (q=0.01, T=5000, delta=1e-5) | accountant | in-process (s) | fresh process (s) |",
            "|---|---|---|---|"]
    for acc in ("pld", "rdp"):
        eps_argv = ["privacy", "epsilon", "--noise-multiplier", str(SIGMA), "--sampling-rate", str(Q),
                    "--steps", str(T), "--delta", str(DELTA), "--accountant", acc]
        noise_argv = ["privacy", "noise", "--epsilon", str(TARGET), "--sampling-rate", str(Q),
                      "--steps", str(T), "--delta", str(DELTA), "--accountant", acc]
        for name, argv in (("privacy epsilon --noise-multiplier 1.5", eps_argv),
                           ("privacy noise --epsilon 2.17", noise_argv)):
            rows.append(f"| `{name}` | {acc} | {_time_inprocess(argv):.2f} | {_time_subprocess(argv):.2f} |")
    return rows


def extreme_rows() -> list[str]:
    """Issue 13: inputs that used to run for minutes (or 9 GB) now answer in seconds; which accountant."""
    import json
    import resource

    rows = ["| extreme input (q=0.01, delta=1e-5) | accountant used | answer | in-process (s) | peak RSS (MB) |",
            "|---|---|---|---|---|"]
    cases = [
        ("privacy epsilon --noise-multiplier 0.01 --steps 5000",
         ["privacy", "epsilon", "--noise-multiplier", "0.01", "--steps", "5000"]),
        ("privacy epsilon --noise-multiplier 1 --steps 100000000",
         ["privacy", "epsilon", "--noise-multiplier", "1", "--steps", "100000000"]),
        ("privacy noise --epsilon 10000 --steps 5000", ["privacy", "noise", "--epsilon", "10000", "--steps", "5000"]),
        ("privacy noise --epsilon 20 --steps 5000", ["privacy", "noise", "--epsilon", "20", "--steps", "5000"]),
        ("privacy epsilon --noise-multiplier 0.5 --steps 1000000",
         ["privacy", "epsilon", "--noise-multiplier", "0.5", "--steps", "1000000"]),
    ]
    for name, argv in cases:
        full = argv + ["--sampling-rate", str(Q), "--delta", str(DELTA), "--json"]
        _clear()
        buf = io.StringIO()
        old, sys.stdout = sys.stdout, buf
        try:
            t0 = time.perf_counter()
            cli_main(full)
            wall = time.perf_counter() - t0
        finally:
            sys.stdout = old
        out = json.loads(buf.getvalue())
        answer = out["epsilon"] if argv[1] == "epsilon" else out["noise_multiplier"]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append(f"| `{name}` | {out['accountant']} | {answer:.4g} | {wall:.2f} | {rss:.0f} |")
    return rows


def _opacus_rule(target: float, q: float, steps: int, accountant: str, tol: float = 0.01) -> tuple[float, int]:
    """Bisection on sigma that stops once target - eps(sigma_high) < tol (Opacus' criterion)."""
    n = 0

    def eps(s: float) -> float:
        nonlocal n
        n += 1
        return A.dp_sgd_epsilon(s, q, steps, DELTA, accountant=accountant)

    low, high = 0.0, 10.0
    e_high = eps(high)
    while e_high > target:
        low, high = high, 2 * high
        e_high = eps(high)
    while target - e_high > tol:
        mid = (low + high) / 2
        e_mid = eps(mid)
        if e_mid < target:
            high, e_high = mid, e_mid
        else:
            low = mid
    return high, n


def calibration_rows() -> list[str]:
    rows = ["| target eps (q, T) | accountant | ours: sigma over min | ours: eps(sigma) | ours (s) "
            "| Opacus rule: sigma over min | Opacus rule (s) |",
            "|---|---|---|---|---|---|---|"]
    for target, q, steps in ((1.0, 0.01, 5000), (TARGET, Q, T), (8.0, 0.01, 5000)):
        for acc in ("pld", "rdp"):
            _clear()
            t0 = time.perf_counter()
            ours = A.calibrate_noise_multiplier(target, DELTA, q, steps, accountant=acc)
            t_ours = time.perf_counter() - t0
            eps_ours = A.dp_sgd_epsilon(ours, q, steps, DELTA, accountant=acc)
            t0 = time.perf_counter()
            op, _ = _opacus_rule(target, q, steps, acc)
            t_op = time.perf_counter() - t0
            best = A.calibrate_noise_multiplier(target, DELTA, q, steps, accountant=acc, rtol=1e-7)
            rows.append(f"| {target:g} ({q:g}, {steps}) | {acc} | {100 * (ours / best - 1):+.4f} % | "
                        f"{eps_ours:.6f} | {t_ours:.2f} | {100 * (op / best - 1):+.3f} % | {t_op:.2f} |")
    return rows


def _charge_many(path: str, job: str, n: int, event_sigma: float) -> None:
    _clear()  # a forked child must not reuse the parent's cached epsilons
    led = BudgetLedger(path, epsilon_limit=1e6, delta_limit=DELTA)
    ev = dpa.GaussianDpEvent(event_sigma)
    for _ in range(n):
        led.charge(job, ev)
    led.close()


def ledger_rows(n: int = 120) -> list[str]:
    rows = ["| ledger (durable SQLite, WAL, synchronous=FULL) | charges | wall (s) | charges/s |",
            "|---|---|---|---|"]
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        for procs in (1, 4):
            path = str(Path(tmp) / f"ledger{procs}.db")
            BudgetLedger(path, epsilon_limit=1e6, delta_limit=DELTA).close()
            t0 = time.perf_counter()
            if procs == 1:
                _charge_many(path, "j", n, 50.0)
            else:
                ps = [ctx.Process(target=_charge_many, args=(path, f"j{i}", n // procs, 50.0))
                      for i in range(procs)]
                for p in ps:
                    p.start()
                for p in ps:
                    p.join()
                    if p.exitcode != 0:
                        raise RuntimeError("a charging process failed")
            wall = time.perf_counter() - t0
            with BudgetLedger(path, epsilon_limit=1e6, delta_limit=DELTA) as led:
                done = led.report()["total"]["charges"]
            rows.append(f"| {procs} process{'es' if procs > 1 else ''}, {n} x Gaussian(50) charges, PLD "
                        f"| {done} | {wall:.2f} | {done / wall:.0f} |")
    return rows


def _clear_plans() -> None:
    from dpfed.algorithms import kmeans, lvq, naive_bayes
    _clear()
    calibration._gaussian_cached.cache_clear()
    for f in (kmeans.make_plan, naive_bayes.plan.local_plan, lvq.plan._plan_cached):
        f.cache_clear()


def plan_charge_seconds(algorithm: str, epsilon: float) -> tuple[float, float]:
    """Seconds for one party's plan (calibration included, caches cleared) plus its ledger charge, as
    in ``run_inprocess`` (ledger limit = the job's epsilon); and the epsilon charged."""
    from dpfed.algorithms.contract import JobSpec
    from dpfed.algorithms.lvq import prepare_params
    from dpfed.algorithms.registry import get_algorithm
    from dpfed.data.schema import Schema
    from dpfed.simulation.inprocess import default_ledger

    _clear_plans()
    schema = Schema.numeric_box(4, -1.0, 1.0, n_classes=3)
    params: dict[str, object] = {"epsilon": epsilon, "delta": 1e-6}
    t0 = time.perf_counter()
    if algorithm in ("glvq", "gmlvq"):  # the coordinator / CLI fills in the calibrated multiplier
        params = prepare_params({**params, "epochs": 3, "sampling_rate": 0.01})
    elif algorithm == "kmeans":
        params["k"] = 3
    spec = JobSpec(f"bench-{algorithm}-{epsilon}", algorithm, params, schema)
    event = get_algorithm(algorithm).party_for(spec.params).job_event(spec)
    with default_ledger(spec) as led:
        spent = led.charge(spec.job_id, event)
    return time.perf_counter() - t0, spent


def plan_rows(epsilons: tuple[float, ...] = (1.0, 20.0, 100.0)) -> list[str]:
    rows = ["| plan + charge (one party, caches cleared; LVQ: 3 epochs at q=0.01, delta=1e-6) | "
            + " | ".join(f"eps {e:g} (s)" for e in epsilons) + " |",
            "|---|" + "---:|" * len(epsilons)]
    for algorithm in ("naive-bayes", "kmeans", "glvq", "gmlvq"):
        cells = []
        for e in epsilons:
            sec, spent = plan_charge_seconds(algorithm, e)
            assert spent <= e * (1 + 1e-9), (algorithm, e, spent)
            cells.append(f"{sec:.2f}")
        rows.append(f"| {algorithm} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    if sys.argv[1:] == ["--plans"]:  # only the plan + charge table
        print("\n".join(plan_rows()))
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    header = ["# Accounting benchmark", "",
              f"`python bench/bench_accounting.py` on {platform.machine()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, dp-accounting {importlib.metadata.version('dp-accounting')}, "
              f"PLD grid {A.PLD_VALUE_DISCRETIZATION:g}; load average at start {load:.2f} "
              "(shared machine: other jobs were running).", ""]
    sections = [cli_rows(), extreme_rows(), calibration_rows(), ledger_rows(), plan_rows()]
    text = "\n".join(header + [line for s in sections for line in s + [""]])
    print(text)
    out = Path(__file__).resolve().parent / "results" / "accounting.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
