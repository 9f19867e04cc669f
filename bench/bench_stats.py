"""Benchmark of federated statistics (issue 27 item 2) against diffprivlib 0.6.6's tools, in the same run.

    python bench/bench_stats.py [--seeds N [--local-seeds M]] [--coverage-seeds 200] [--stats median,quantile --out stats_tree]

Adult (all 48,842 records), columns age, hours-per-week, education-num (schema bounds 16..100, 1..99, 1..16),
ungrouped, by sex and by class; epsilon 0.1 and 1 (delta 1e-6); statistics mean, variance, histogram (10
equal-width bins over the bounds), median, 90 % quantile. Each statistic is its own job (its own epsilon) for
every method, per group (groups are disjoint: parallel composition for both):

* diffprivlib: ``tools.mean/var/histogram/median/quantile`` on each group's values with the same bounds;
* dpfed one party: the ``statistics`` job's two halves on all records (``run_local``, mechanism auto);
* dpfed one party, Gaussian: the same with mechanism gaussian (the central counterpart of distributed noise);
* dpfed 5 parties, distributed: iid split, ``run_inprocess`` under secure aggregation (the real party sessions,
  ledgers and SecAgg) with mechanism auto: for these one-statistic jobs Polya shares summing to a discrete
  Laplace (``ddlaplace``, planned for all 5 shares), the Gaussian shares having the larger variance.

Expected absolute error (``E ...`` columns; mean and histogram rows): what each method's noise law implies,
computed from its plan (dpfed: ``plan_release``'s per-entry variance; diffprivlib: its mechanisms' scales) and the
true group sizes, means and cell counts, independently of the draws: a mean's error is linearised,
(r / n) ((1 - mu) e_u - mu e_0) for dpfed's two Bernstein entries (n private), Laplace entries of scale s giving
E|a L1 - b L2| = (a^2 + ab + b^2) / (a + b) (a, b = r (1 - mu) s / n, r mu s / n), Gaussian ones
sd sqrt(2 / pi); diffprivlib's mean adds Laplace((upper - lower) / (n epsilon)) with n public (replace-one
neighbours: half dpfed's add/remove sensitivity), E = its scale. A histogram cell of count c with noise X,
clipped at 0 by both: E|max(c + X, 0) - c| = s (1 - e^(-c/s) / 2) for Laplace(s), the Gaussian analogue, and
a geometric (discrete Laplace) q^|k| summed exactly: diffprivlib's (q = e^-epsilon) and dpfed's whole counts under
Laplace (q from the plan's per-entry variance 2q / (1 - q)^2: exact for one party; for 5 distributed shares the
discrete Laplace of the same variance, an approximation).

Errors: mean absolute error over groups (and bins) and seeds; variance relative (|est - true| / true). Every
error job, (column, grouping, statistic, epsilon, method, seed) and for diffprivlib also the group (one call per
group), has a seed of its own (``job_seed``: SHA-256 of that key): dpfed's one-party SecureRNG, the 5 parties'
session seed, diffprivlib's ``random_state``. Before, one seed per method and seed index served every row (the
noise comes out in the same order whatever the data), so the 9 rows of a summary, and diffprivlib's groups of a
row, drew the same 3 noises per method and the geometric means hung on those 3 draws.
Repetitions and confidence intervals: each row's MAE is a mean over independent jobs, so a summary ratio (the
geometric mean over the 9 rows of a ratio of two methods' MAEs) carries sampling error; with the issue's 3 seeds
its standard error was a factor 1.1-2.0 and the summaries could not tell the mechanisms apart. Each row now runs
:data:`SEEDS` jobs per method, by statistic (the 5 parties' jobs, ~0.2 s each under SecAgg, fewer; diffprivlib's
and dpfed's one-party jobs, milliseconds, more; ``--seeds N`` runs N for every method, ``--local-seeds M`` then M
for the cheap ones), and every ratio comes with a 95 % confidence interval by the delta method on log MAE:
per row and method, the MAE is the mean of n per-seed errors (one value per job: the mean over its groups and
bins; the jobs are independent), so Var(log MAE) ~ s^2 / (n MAE^2) (s the sample standard deviation of the
per-seed errors); the methods' jobs are independent, so a row's log ratio has the sum of the two variances and
the mean of the R rows' log ratios their sum over R^2. The interval is exp(centre +- 1.96 se), the centre
corrected for Jensen's bias of a log mean (E log MAE ~ log E MAE - Var / 2), so it covers the ratio of the true
expected errors; on exponential per-seed errors (|Laplace| noise, the most skewed case here) it covers at
0.93-0.94 with 20-40 seeds per row (``tests/algorithms/test_statistics_bench_coverage.py``). Rows where
diffprivlib failed on any call are left out, as before. A row counts as "worse" only when its own interval lies
above 1.
True values: NumPy on the records (quantiles NumPy's default). Coverage: over ``--coverage-seeds`` runs of
one job per column and grouping answering all five statistics together (one composed plan, one party), the
fraction of intervals that hold the true value (quantiles: NumPy's ``inverted_cdf``, the estimand), with its
binomial standard error. Every (column, grouping, epsilon, seed) job is seeded on its own, so the intervals'
noises are independent and the binomial standard error holds (one seed per run shared by all nine column x
grouping jobs drew the same noise for each, so 30,000 histogram intervals were ~6,000 independent ones). Writes bench/results/stats.md and stats_error_vs_epsilon.png (``--out NAME``:
NAME.md and NAME_error_vs_epsilon.png). ``--stats`` restricts the error rows to some statistics; the coverage job
still composes all five (its plan is the full one) and reports all five.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import time
import warnings
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")  # seeded SecureRNGs warn by design; this is a simulation

from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.algorithms.driver import run_local  # noqa: E402
from dpfed.algorithms.params import validate  # noqa: E402
from dpfed.algorithms.registry import get_algorithm  # noqa: E402
from dpfed.core.rng import SecureRNG  # noqa: E402
from dpfed.data.datasets import load_dataset, split_parties  # noqa: E402
from dpfed.simulation.inprocess import run_inprocess, secure_spec  # noqa: E402

COLUMNS = ("age", "hours-per-week", "education-num")
GROUPINGS = (None, "sex", "class")
STATS = ("mean", "var", "histogram", "median", "quantile")
EPSILONS = (0.1, 1.0)
DELTA = 1e-6
BINS = 10
RESULTS = Path(__file__).resolve().parent / "results"
#: Jobs per row and method, by statistic: (5 parties distributed, the cheap methods: diffprivlib and dpfed's one
#: party, Laplace and Gaussian). Mean and histogram summaries sit near their targets (1.0 against diffprivlib,
#: 1.2 for 5 parties), so they get the most; median and quantile ratios are far from theirs (0.1-0.3).
SEEDS = {"mean": (40, 160), "var": (8, 40), "histogram": (12, 64), "median": (5, 10), "quantile": (5, 10)}
Z95 = 1.959964  # the normal 97.5 % quantile
ALGO = get_algorithm("statistics")


def _query(stat: str, col: str) -> str:
    return {"histogram": f"histogram:{col}:bins={BINS}", "quantile": f"quantile:{col}:0.9"}.get(stat, f"{stat}:{col}")


def _groups(ds, by):
    if by is None:
        return [np.ones(len(ds.X), bool)]
    codes = ds.y if by == "class" else ds.X[:, ds.schema.names.index(by)].astype(int)
    return [codes == g for g in range(int(codes.max()) + 1)]


def _truth(x, stat, lo, hi, method="linear"):
    if stat == "mean":
        return x.mean()
    if stat == "var":
        return x.var()
    if stat == "histogram":
        return np.histogram(x, BINS, (lo, hi))[0].astype(float)
    return np.quantile(x, 0.5 if stat == "median" else 0.9, method=method)


def _err(est, true, stat):
    e = np.abs(np.asarray(est, float) - true)
    return float(np.mean(e / true)) if stat == "var" else float(np.mean(e))


def job_seed(*key) -> int:
    """A 32-bit seed of its own for one job (a row's method, statistic, epsilon, seed and group): SHA-256 of the key."""
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:4], "big")


def diffprivlib_est(x, stat, eps, lo, hi, seed):
    """diffprivlib's tool for ``stat``; ``seed`` is its ``random_state`` (numpy's RandomState seed)."""
    import diffprivlib.tools as dt

    if stat == "mean":
        return dt.mean(x, epsilon=eps, bounds=(lo, hi), random_state=seed)
    if stat == "var":
        return dt.var(x, epsilon=eps, bounds=(lo, hi), random_state=seed)
    if stat == "histogram":
        return dt.histogram(x, epsilon=eps, bins=BINS, range=(lo, hi), random_state=seed)[0]
    if stat == "median":
        return dt.median(x, epsilon=eps, bounds=(lo, hi), random_state=seed)
    return dt.quantile(x, 0.9, epsilon=eps, bounds=(lo, hi), random_state=seed)


def _spec(ds, queries, by, eps, mech="auto", distributed=False, job="b"):
    p = {"epsilon": eps, "delta": DELTA, "queries": queries, "mechanism": mech}
    if by:
        p["group_by"] = by
    if distributed:
        p.update(noise="distributed", secure_aggregation=True)
    return JobSpec(job, "statistics", validate(ALGO, p, ds.schema), ds.schema)


def dpfed_answers(ds, queries, by, eps, seed, mode, parts=None):
    """The answers of one dpfed job; ``seed`` is the job's own (``job_seed``): the one party's SecureRNG, and the
    5 parties' session seed (each party's generator keyed by seed, job id and party name)."""
    if mode == "5 parties distributed":
        res = run_inprocess(_spec(ds, queries, by, eps, distributed=True, job=f"b{seed}"), parts, seed=seed)
        return res.summary["results"]
    mech = "gaussian" if mode == "1 party gaussian" else "auto"
    coord = run_local(ALGO, _spec(ds, queries, by, eps, mech), ds.X, ds.y, SecureRNG.from_seed(f"{mode}{seed}")).coordinator
    return [a.to_dict() for a in coord.answers]


def _plan_noise(ds, stat, col, by, eps, mode):
    """(kind, per-entry variance in records^2) of a dpfed mode's plan for the one-statistic job."""
    from dpfed.algorithms import statistics

    spec = _spec(ds, [_query(stat, col)], by, eps, "gaussian" if mode == "1 party gaussian" else "auto",
                 distributed=mode == "5 parties distributed")
    shares = 1
    if mode == "5 parties distributed":
        spec, shares = secure_spec(spec, [f"p{i}" for i in range(5)], len(ds.X)), 5
    plan = statistics.plan_release(spec)
    return ("laplace" if plan.mechanism in ("laplace", "ddlaplace") else "gauss"), plan.entry_variance(0, shares)


def _e_clipped(c, kind, s):
    """E|max(c + X, 0) - c| for Laplace(s) (kind laplace) or N(0, s^2) X, c >= 0 arrays."""
    from statistics import NormalDist

    c = np.asarray(c, float)
    if kind == "laplace":
        return s * (1 - np.exp(-c / s) / 2)
    phi = np.array([NormalDist().cdf(-x / s) for x in c.ravel()]).reshape(c.shape)
    return s * math.sqrt(2 / math.pi) - s / math.sqrt(2 * math.pi) * np.exp(-c * c / (2 * s * s)) + c * phi


def _e_geometric(c, q) -> list[float]:
    """E|max(c + X, 0) - c| per count c for the discrete Laplace P(k) = q^|k| (1 - q) / (1 + q), summed exactly."""
    t = -1 / math.log(q)
    k = np.arange(-int(60 * t) - 1, int(60 * t) + 2)
    pk = (1 - q) / (1 + q) * q ** np.abs(k)
    return [float(np.sum(pk * np.abs(np.maximum(ci + k, 0) - ci))) for ci in c]


def expected_error(ds, stat, col, by, eps, mode):
    """The expected absolute error the method's noise implies (module docstring); NaN for var and quantiles."""
    if stat not in ("mean", "histogram"):
        return float("nan")
    j = ds.schema.names.index(col)
    lo, hi = ds.schema.features[j].lower, ds.schema.features[j].upper
    r, out = hi - lo, []
    kind, v = ("", 0.0) if mode == "diffprivlib" else _plan_noise(ds, stat, col, by, eps, mode)
    s = math.sqrt(v / 2) if kind == "laplace" else math.sqrt(v)
    for m in _groups(ds, by):
        x = np.clip(ds.X[m, j], lo, hi)
        n = len(x)
        if stat == "mean" and mode == "diffprivlib":
            out.append(r / (n * eps))
        elif stat == "mean":
            mu = (x.mean() - lo) / r
            a, b = r * (1 - mu) * s / n, r * mu * s / n
            out.append((a * a + a * b + b * b) / (a + b) if kind == "laplace"
                       else math.sqrt(a * a + b * b) * math.sqrt(2 / math.pi))
        elif mode == "diffprivlib":  # geometric noise q^|k| (1 - q) / (1 + q), truncated at 0
            c = np.histogram(x, BINS, (lo, hi))[0].astype(float)
            out.extend(_e_geometric(c, math.exp(-eps)))
        elif kind == "laplace":  # whole counts: the discrete Laplace of the plan's variance 2q / (1 - q)^2
            c = np.histogram(x, BINS, (lo, hi))[0].astype(float)
            out.extend(_e_geometric(c, 1 - (math.sqrt(2 * v + 1) - 1) / v))
        else:
            c = np.histogram(x, BINS, (lo, hi))[0].astype(float)
            out.extend(_e_clipped(c, kind, s).tolist())
    return float(np.mean(out))


def _values(ans, by):
    return [ans["value"]] if by is None else ans["value"]


def row_seeds(stat: str, seeds: int | None = None, local: int | None = None) -> dict[str, int]:
    """Jobs per method for a row of ``stat``: :data:`SEEDS`, or ``seeds`` for all (``local`` for the cheap ones)."""
    dist, cheap = SEEDS[stat] if seeds is None else (seeds, local or seeds)
    return {"diffprivlib": cheap, "1 party": cheap, "1 party gaussian": cheap, "5 parties distributed": dist}


def error_rows(ds, seeds: int | None = None, stats=STATS, local_seeds: int | None = None):
    """One row per (column, grouping, statistic, epsilon): each method's per-seed errors (``per_seed``), their mean
    (the row's MAE) and the expected error; ``seeds``/``local_seeds``: :func:`row_seeds`."""
    parts = split_parties(ds.X, ds.y, 5, "iid", np.random.default_rng(0))
    modes = ("1 party", "1 party gaussian", "5 parties distributed")
    rows = []
    for col in COLUMNS:
        j = ds.schema.names.index(col)
        lo, hi = ds.schema.features[j].lower, ds.schema.features[j].upper
        for by in GROUPINGS:
            masks = _groups(ds, by)
            for stat in stats:
                truth = [_truth(ds.X[m, j], stat, lo, hi) for m in masks]
                n = row_seeds(stat, seeds, local_seeds)
                for eps in EPSILONS:
                    errs: dict[str, list[float]] = {m: [] for m in ("diffprivlib",) + modes}
                    for seed in range(n["diffprivlib"]):
                        e = []
                        for g, m in enumerate(masks):
                            try:
                                est = diffprivlib_est(ds.X[m, j], stat, eps, lo, hi,
                                                      job_seed("diffprivlib", col, by, stat, eps, seed, g))
                            except RuntimeError:  # diffprivlib's exponential mechanism on heavy ties: no answer
                                est = np.nan
                            e.append(_err(est, truth[g], stat))
                        errs["diffprivlib"].append(float(np.mean(e)))  # NaN if a group failed
                    for mode in modes:
                        for seed in range(n[mode]):
                            ans = dpfed_answers(ds, [_query(stat, col)], by, eps,
                                                job_seed(mode, col, by, stat, eps, seed), mode, parts)[0]
                            errs[mode].append(float(np.mean([_err(v, truth[g], stat)
                                                             for g, v in enumerate(_values(ans, by))])))
                    rows.append({"column": col, "by": by or "-", "stat": stat, "eps": eps,
                                 "per_seed": {k: np.array(v) for k, v in errs.items()},
                                 **{k: float(np.mean(v)) for k, v in errs.items()},  # NaN: diffprivlib failed
                                 **{f"E {k}": expected_error(ds, stat, col, by, eps, k) for k in errs}})
                    print(_row(rows[-1]), flush=True)
    return rows


def _log_mae(errs: np.ndarray) -> tuple[float, float]:
    """(log MAE, its delta-method variance s^2 / (n MAE^2)) of one method's per-seed errors in one row."""
    m = float(np.mean(errs))
    return math.log(m), (float(np.var(errs, ddof=1)) / (len(errs) * m * m) if len(errs) > 1 else math.nan)


def ratio_ci(sel, a: str, b: str) -> tuple[float, float, float, list]:
    """Geometric mean over the rows ``sel`` of MAE_a / MAE_b, its 95 % interval by the delta method on log MAE
    (module docstring), and each row's (ratio, lower, upper); rows with a NaN or zero error left out."""
    use = [r for r in sel if r[a] > 0 and r[b] > 0]  # NaN compares False
    if not use:
        return math.nan, math.nan, math.nan, []
    per_row, logs, var, bias = [], [], 0.0, 0.0
    for r in use:
        (la, va), (lb, vb) = _log_mae(r["per_seed"][a]), _log_mae(r["per_seed"][b])
        half, centre = Z95 * math.sqrt(va + vb), la - lb + (va - vb) / 2  # Jensen: E log MAE ~ log mu - v / 2
        per_row.append((r[a] / r[b], math.exp(centre - half), math.exp(centre + half)))
        logs.append(la - lb)
        var, bias = var + va + vb, bias + (va - vb) / 2
    k = len(use)
    centre, half = (sum(logs) + bias) / k, Z95 * math.sqrt(var) / k
    return math.exp(sum(logs) / k), math.exp(centre - half), math.exp(centre + half), per_row


METHODS = ("diffprivlib", "1 party", "1 party gaussian", "5 parties distributed")


def _ci(point: float, lo: float, hi: float) -> str:
    return "-" if math.isnan(point) else f"{point:.3f} [{lo:.3f}, {hi:.3f}]"


def _row(r) -> str:
    expected = " | ".join("-" if math.isnan(r[f"E {m}"]) else f"{r[f'E {m}']:.4g}" for m in METHODS)
    n = {m: len(r["per_seed"][m]) for m in METHODS}
    cis = " | ".join(_ci(*ratio_ci([r], a, b)[:3]) for a, b in RATIOS[:2])
    return (f"| {r['column']} | {r['by']} | {r['stat']} | {r['eps']:g} | "
            + " | ".join(f"{r[m]:.4g}" for m in METHODS) + f" | {expected} | "
            + f"{n['5 parties distributed']} / {n['1 party']} | {cis} |")


ROW_HEAD = ("| column | grouping | statistic | epsilon | diffprivlib | dpfed 1 party | dpfed 1 party Gaussian | "
            "dpfed 5 parties distributed | E diffprivlib | E 1 party | E 1 party Gaussian | E 5 distributed | "
            "jobs: 5 distributed / others | 1 party / diffprivlib [95% CI] | 5 distributed / 1 party [95% CI] |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
RATIOS = (("1 party", "diffprivlib"), ("5 parties distributed", "1 party"), ("5 parties distributed", "1 party gaussian"))


def summary(rows, stats=STATS) -> list[str]:
    """The summary table: per (statistic, epsilon) each ratio's geometric mean over the rows with its 95 %
    delta-method interval (:func:`ratio_ci`), the rows no worse, and the expected ratios."""
    out = ["| statistic | epsilon | dpfed 1 party / diffprivlib | 95% CI | 5 distributed / 1 party | 95% CI | "
           "5 distributed / 1 party Gaussian | 95% CI | expected: 1 party / diffprivlib | expected: 5 distributed / "
           "1 party |", "|---|---|---|---|---|---|---|---|---|---|"]
    for stat in stats:
        for eps in EPSILONS:
            sel = [r for r in rows if r["stat"] == stat and r["eps"] == eps]
            failed = sum(math.isnan(r["diffprivlib"]) for r in sel)
            cells = []
            for k, (a, b) in enumerate(RATIOS):
                point, lo, hi, per_row = ratio_ci(sel, a, b)
                worse = sum(x[1] > 1 for x in per_row)
                note = ""
                if k == 0:
                    note = (f" ({sum(r[a] <= r[b] for r in sel)}/{len(sel) - failed} rows no worse, {worse} worse"
                            " by their CI" + (f"; diffprivlib failed on {failed}" if failed else "") + ")")
                elif k == 1:
                    note = f" ({worse} rows above 1 by their CI)"
                cells += [f"{point:.3f}{note}", f"[{lo:.3f}, {hi:.3f}]"]
            out.append(f"| {stat} | {eps:g} | " + " | ".join(cells) + f" | {_gm_or_dash(sel, 'E 1 party', 'E diffprivlib')}"
                       f" | {_gm_or_dash(sel, 'E 5 parties distributed', 'E 1 party')} |")
    return out


def coverage(ds, runs):
    """Per (epsilon, statistic): fraction of intervals holding the true value over ``runs`` seeds."""
    hits: dict[tuple, list[float]] = {}
    for col in COLUMNS:
        j = ds.schema.names.index(col)
        lo, hi = ds.schema.features[j].lower, ds.schema.features[j].upper
        for by in GROUPINGS:
            masks = _groups(ds, by)
            truth = {s: [_truth(ds.X[m, j], s, lo, hi, "inverted_cdf") for m in masks] for s in STATS}
            for eps in EPSILONS:
                spec = _spec(ds, [_query(s, col) for s in STATS], by, eps)
                for seed in range(runs):
                    rng = SecureRNG.from_seed(f"cov-{col}-{by}-{eps:g}-{seed}")  # every job its own noise
                    coord = run_local(ALGO, spec, ds.X, ds.y, rng).coordinator
                    for s, a in zip(STATS, coord.answers, strict=True):
                        t = np.array(truth[s])
                        inside = (np.asarray(a.lower) <= t + 1e-9) & (t - 1e-9 <= np.asarray(a.upper))
                        hits.setdefault((eps, s), []).extend(inside.ravel().astype(float).tolist())
    return {k: (float(np.mean(v)), len(v)) for k, v in hits.items()}


def _gm_or_dash(sel, a, b) -> str:
    """Geometric mean of r[a] / r[b] over the rows, or '-' where not computed."""
    x = [math.log(r[a] / r[b]) for r in sel if r[a] > 0 and r[b] > 0]
    return f"{math.exp(np.mean(x)):.3f}" if x else "-"


def plot(rows, path, stats=STATS):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(stats), figsize=(4 * len(stats), 3.4), squeeze=False)
    axes = axes[0]
    for ax, stat in zip(axes, stats):
        for method, style in (("diffprivlib", "k--o"), ("1 party", "b-o"), ("1 party gaussian", "c-s"),
                              ("5 parties distributed", "r-^")):
            ys = [np.nanmean([r[method] for r in rows if r["stat"] == stat and r["eps"] == e]) for e in EPSILONS]
            ax.loglog(EPSILONS, ys, style, label=method)
        ax.set_title(f"{stat} ({'relative ' if stat == 'var' else ''}MAE)")
        ax.set_xlabel("epsilon")
    axes[0].legend(fontsize=7)
    fig.suptitle("Adult: age, hours-per-week, education-num; all / by sex / by class (mean over them)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=None,
                    help="jobs per row for every method (default: per statistic, SEEDS: " +
                         ", ".join(f"{k} {d}/{c}" for k, (d, c) in SEEDS.items()) + " for 5 distributed/others)")
    ap.add_argument("--local-seeds", type=int, default=None,
                    help="with --seeds: jobs per row for diffprivlib and dpfed's one party (default: --seeds)")
    ap.add_argument("--coverage-seeds", type=int, default=200)
    ap.add_argument("--stats", default=",".join(STATS), help="comma-separated subset of " + ",".join(STATS))
    ap.add_argument("--out", default="stats", help="result name under bench/results (default stats)")
    args = ap.parse_args()
    stats = tuple(s for s in STATS if s in args.stats.split(","))
    if not stats or set(args.stats.split(",")) - set(STATS):
        ap.error(f"--stats takes a comma-separated subset of {','.join(STATS)}")
    if (args.seeds is not None and args.seeds < 1) or (args.local_seeds is not None and (args.seeds is None
                                                                                         or args.local_seeds < 1)):
        ap.error("--seeds takes a positive integer; --local-seeds a positive integer, with --seeds")
    t0 = time.perf_counter()
    ds = load_dataset("adult")
    print(ROW_HEAD)
    rows = error_rows(ds, args.seeds, stats, args.local_seeds)
    table = summary(rows, stats)
    print("\n".join(table))
    cov = coverage(ds, args.coverage_seeds) if args.coverage_seeds > 0 else {}
    ctab = ["| epsilon | statistic | intervals | coverage (nominal 0.95) | binomial s.e. |", "|---|---|---|---|---|"]
    for (eps, stat), (c, n) in sorted(cov.items()):
        ctab.append(f"| {eps:g} | {stat} | {n} | {c:.4f} | {math.sqrt(0.95 * 0.05 / n):.4f} |")
    print("\n".join(ctab))
    png = f"{args.out}_error_vs_epsilon.png"
    plot(rows, RESULTS / png, stats)
    body = "\n".join(_row(r) for r in rows)
    flags = "" if args.seeds is None else f" --seeds {args.seeds}" + (
        f" --local-seeds {args.local_seeds}" if args.local_seeds else "")
    flags += "" if stats == STATS else f" --stats {','.join(stats)} --out {args.out}"
    jobs = "; ".join(f"{s} {'/'.join(str(row_seeds(s, args.seeds, args.local_seeds)[m]) for m in RATIOS[1])}"
                     for s in stats)
    (RESULTS / f"{args.out}.md").write_text(
        f"# Federated statistics against diffprivlib 0.6.6 (bench/bench_stats.py)\n\n"
        f"`python bench/bench_stats.py{flags} --coverage-seeds {args.coverage_seeds}`, "
        f"{time.perf_counter() - t0:.0f} s. Method and definitions: the script's docstring.\n\n"
        f"## Summary (geometric mean of the error ratios over the 9 column x grouping rows, 95 % CI by the delta method on log MAE)\n\n"
        + "\n".join(table) + "\n\n## Interval coverage\n\n" + "\n".join(ctab)
        + f"\n\n## Mean absolute error (variance: relative), mean over groups and jobs (5 distributed / others: "
        f"{jobs})\n\n" + ROW_HEAD + "\n" + body + f"\n\n![error vs epsilon]({png})\n")


if __name__ == "__main__":
    main()
