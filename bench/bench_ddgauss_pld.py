"""What the PLD ledger charges for the distributed discrete Gaussian of each secure job (issue 29 item 1):
``PYTHONPATH=$PWD python bench/bench_ddgauss_pld.py``.

For every algorithm with a secure release, the job event of its default secure offer (that of
``bench/bench_secure_offer.py``: epsilon 1, delta 1e-5, 5 parties, P_min 5, 2,500 records; the plans are
calibrated by RDP so that every ledger accepts them) is charged at delta 1e-5 by
* the RDP ledger (KLS21's RDP curve),
* the PLD ledger as it was (multi-coordinate releases by the same RDP curve, combined with the PLD of the rest),
* the PLD ledger now (the dominating Gaussian of :mod:`dpfed.core.ddgauss_gdp`),
* and, as a floor that is NOT a bound, the continuous Gaussian mechanism of the same total variance n sigma^2
  (what the charge would be if the summed shares were exactly Gaussian).
CPU seconds of one PLD accounting (fresh caches, the ledger's grid for epsilon 1). Writes
``bench/results/ddgauss_pld.md`` and ``ddgauss_pld.png``.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import dp_accounting
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_secure_offer import SCHEMA, secure_params  # noqa: E402

from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.registry import algorithm_names, get_algorithm  # noqa: E402
from dpfed.core import accountants, ddgauss_gdp  # noqa: E402
from dpfed.core.composition import flatten  # noqa: E402
from dpfed.core.event_json import event_from_json  # noqa: E402
from dpfed.core.events import DistributedDiscreteGaussianDpEvent as DDG  # noqa: E402

DELTA = 1e-5
OUT = Path(__file__).resolve().parent / "results"


def _charge(event: Any, accountant: str) -> float:
    grid = accountants.pld_grid(1.0)
    acc = accountants.make_accountant(accountant, pld_discretization=grid)
    return float(acc.compose(event).get_epsilon(DELTA))


def _gaussian_floor(event: Any) -> Any:
    """The same composition with every distributed discrete Gaussian replaced by the continuous Gaussian of the
    same total variance (a floor for comparison, not a bound)."""
    parts = []
    for key, count in flatten([event]).items():
        ev = event_from_json(key)
        inner, q = (ev.event, float(ev.sampling_probability)) if isinstance(
            ev, dp_accounting.PoissonSampledDpEvent) else (ev, 1.0)
        if isinstance(inner, DDG):
            nm = math.sqrt(inner.parties) * inner.sigma_share / min(inner.l2_sensitivity, inner.l1_sensitivity)
            ev = dp_accounting.GaussianDpEvent(nm)
            ev = ev if q == 1.0 else dp_accounting.PoissonSampledDpEvent(q, ev)
        parts.append(dp_accounting.SelfComposedDpEvent(ev, count) if count > 1 else ev)
    return dp_accounting.ComposedDpEvent(parts)


def _describe(event: Any) -> str:
    out = []
    for key, count in flatten([event]).items():
        ev = event_from_json(key)
        q = float(ev.sampling_probability) if isinstance(ev, dp_accounting.PoissonSampledDpEvent) else 1.0
        inner = ev.event if q < 1.0 else ev
        if isinstance(inner, DDG):
            out.append(f"{count}x d={inner.dimension} sigma={inner.sigma_share:.4g} n={inner.parties} "
                       f"D2={inner.l2_sensitivity:.4g}" + (f" q={q:g}" if q < 1 else ""))
    return "; ".join(out)


def measure(name: str) -> dict[str, Any]:
    spec = JobSpec("bench", name, secure_params(name), SCHEMA)
    event = get_algorithm(name).party_for(spec.params).job_event(spec)
    row: dict[str, Any] = {"algorithm": name, "releases": _describe(event), "rdp": _charge(event, "rdp")}
    real = accountants.gaussian_dominance
    accountants.gaussian_dominance = lambda ev: None  # the PLD ledger as it was: RDP for multi-coordinate releases
    try:
        row["before"] = _charge(event, "pld")
    finally:
        accountants.gaussian_dominance = real
    ddgauss_gdp.dominating_pld.cache_clear()
    t0 = time.process_time()
    row["now"] = _charge(event, "pld")
    row["cpu"] = time.process_time() - t0
    row["floor"] = _charge(_gaussian_floor(event), "pld")
    return row


def main() -> int:
    names = [n for n in algorithm_names() if get_algorithm(n).secure is not None]
    rows = []
    for name in names:
        try:
            rows.append(measure(name))
        except Exception as exc:  # noqa: BLE001 - a refused default offer is reported, not raised
            print(f"  {name}: skipped ({type(exc).__name__}: {str(exc)[:80]})", file=sys.stderr)
            continue
        print(f"  {name}: {rows[-1]}", file=sys.stderr, flush=True)
    lines = [
        "| algorithm | distributed discrete Gaussian releases | RDP ledger | PLD ledger before (RDP fallback) "
        "| PLD ledger now | Gaussian floor (not a bound) | now / before | CPU s (now) |",
        "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['algorithm']} | {r['releases']} | {r['rdp']:.4f} | {r['before']:.4f} | {r['now']:.4f} | "
                     f"{r['floor']:.4f} | {r['now'] / r['before']:.3f} | {r['cpu']:.2f} |")
    table = "\n".join(lines)
    print(table)
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.2
    for i, (key, label) in enumerate([("rdp", "RDP ledger"), ("before", "PLD before"), ("now", "PLD now"),
                                      ("floor", "Gaussian floor")]):
        ax.bar([j + (i - 1.5) * width for j in range(len(rows))], [r[key] for r in rows], width, label=label)
    ax.set_xticks(range(len(rows)), [r["algorithm"] for r in rows], rotation=20)
    ax.set_ylabel(f"epsilon charged at delta {DELTA:g}")
    ax.set_ylim(0.8, 1.02)
    ax.set_title("Default secure offers (calibrated by RDP for epsilon 1): what each ledger charges")
    ax.legend(fontsize=8)
    fig.tight_layout()
    OUT.mkdir(exist_ok=True)
    fig.savefig(OUT / "ddgauss_pld.png", dpi=120)
    (OUT / "ddgauss_pld.md").write_text(
        "# The PLD ledger's charge of the distributed discrete Gaussian (bench/bench_ddgauss_pld.py)\n\n"
        f"Default secure offers (epsilon 1, delta {DELTA:g}, 5 parties); epsilon charged at delta {DELTA:g}. "
        "![charges](ddgauss_pld.png)\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
