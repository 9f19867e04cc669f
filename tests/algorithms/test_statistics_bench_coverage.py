"""bench/bench_stats.py's interval coverage: its jobs must draw independent noise, else the binomial standard
error it prints for the pooled intervals is too small (issue 27: the histogram's 0.9463 at epsilon 0.1 was
30,000 intervals sharing ~6,000 noises, the same seed for every column and grouping job)."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from dpfed.algorithms.statistics.estimate import block_multiplier
from dpfed.algorithms.statistics.plan import discrete_laplace_var

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_stats.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_stats_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_coverage_jobs_draw_independent_noise(monkeypatch):
    """One coverage run (9 column x grouping jobs per epsilon, Adult): the histogram noise (answer minus NumPy's
    count, on cells unclamped in both jobs) of any two jobs at the same epsilon must differ somewhere. Two
    independent discrete Laplace draws of scale >= 4 are equal with probability <= 0.063 per cell, so equal
    noise on >= 6 common cells is a false alarm below 0.063^6 = 6.3e-8 per pair, < 3e-6 over the 36 pairs.
    With one seed shared by the jobs (the old bench) every pair of columns, and sex against class, had the
    same noise: this test failed."""
    bench = _bench()
    ds = bench.load_dataset("adult")
    noise: dict[tuple, np.ndarray] = {}
    real = bench.run_local

    def spy(algo, spec, X, y, rng):
        res = real(algo, spec, X, y, rng)
        col = spec.params["queries"][0].split(":")[1]
        j = ds.schema.names.index(col)
        lo, hi = ds.schema.features[j].lower, ds.schema.features[j].upper
        by = spec.params.get("group_by")
        truth = np.array([bench._truth(ds.X[m, j], "histogram", lo, hi) for m in bench._groups(ds, by)])
        value = np.asarray(res.coordinator.answers[bench.STATS.index("histogram")].value, float).reshape(truth.shape)
        noise[(col, by, spec.params["epsilon"])] = np.where(value > 0, value - truth, np.nan).ravel()
        return res

    monkeypatch.setattr(bench, "run_local", spy)
    bench.coverage(ds, 1)
    assert len(noise) == len(bench.COLUMNS) * len(bench.GROUPINGS) * len(bench.EPSILONS)
    keys = sorted(noise, key=str)
    pairs = 0
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[2] != b[2] or len(noise[a]) != len(noise[b]):
                continue
            both = ~np.isnan(noise[a]) & ~np.isnan(noise[b])
            assert both.sum() >= 6, (a, b)
            assert np.any(noise[a][both] != noise[b][both]), (a, b)
            pairs += 1
    assert pairs == 2 * (3 + 15)  # per epsilon: 3 pairs of the ungrouped jobs, 15 of the six two-group jobs


@pytest.mark.parametrize("eps, t", [(0.1, 40.0), (1.0, 4.0)])
def test_coverage_job_histogram_interval_is_the_exact_discrete_laplace_tail(eps, t):
    """The coverage job's plan (all five statistics composed, one party, auto, delta 1e-6) releases the histogram
    as whole counts with the discrete Laplace of scale m / epsilon = 4 / epsilon (m = 4 levels), and its interval
    half width k se misses exactly when |X| >= floor(k se) + 1, probability 2 q^(floor(k se) + 1) / (1 + q),
    here 0.0491 (t = 40) and 0.0437 (t = 4): at most alpha, so the intervals' coverage is >= 95 % in law."""
    from dpfed.algorithms import statistics

    bench = _bench()
    ds = bench.load_dataset("adult")
    spec = bench._spec(ds, [bench._query(s, "age") for s in bench.STATS], None, eps)
    plan, layout = statistics.plan_release(spec), statistics.job_layout(spec)
    (h,) = [b for b, bl in enumerate(layout.blocks) if bl.kind == "hist"]
    assert plan.mechanism == "laplace" and plan.weights[h] == 1 and float(plan.scales[h]) == t
    v = plan.entry_variance(h)
    assert v == pytest.approx(discrete_laplace_var(t))
    half = block_multiplier(plan.mechanism, 0.95, v) * math.sqrt(v)
    q = math.exp(-1 / t)
    miss = 2 * q ** (math.floor(half) + 1) / (1 + q)
    assert miss <= 0.05 and miss == pytest.approx({40.0: 0.0491, 4.0: 0.0437}[t], abs=5e-4)


def test_error_rows_draw_independent_noise(monkeypatch):
    """The error rows (issue 27's summaries are geometric means over 9 rows): two rows of the same statistic and
    epsilon, and diffprivlib's groups within a row, must draw different noise for every method. Histogram at
    epsilon 0.1, columns age and hours-per-week, ungrouped and by sex, one seed: noise = answer minus NumPy's
    count on cells unclamped in both. Whole counts with discrete Laplace-like noise of scale >= 10 (or a discrete
    Gaussian of larger variance) are equal with probability <= 0.025 per cell, so equal noise on >= 6 common
    cells is a false alarm below 0.025^6 = 2.4e-10 per pair, < 1e-8 over the pairs. With one seed per method
    and seed index (the old bench: ``{mode}{seed}``, ``b{seed}``, ``random_state=seed``) every pair was equal."""
    bench = _bench()
    ds = bench.load_dataset("adult")
    monkeypatch.setattr(bench, "COLUMNS", ("age", "hours-per-week"))
    monkeypatch.setattr(bench, "GROUPINGS", (None, "sex"))
    monkeypatch.setattr(bench, "EPSILONS", (0.1,))
    monkeypatch.setattr(bench, "expected_error", lambda *a: float("nan"))
    noise: dict[tuple, list[np.ndarray]] = {}

    def record(method, col, by, groups_values):
        j = ds.schema.names.index(col)
        lo, hi = ds.schema.features[j].lower, ds.schema.features[j].upper
        for m, v in zip(bench._groups(ds, by), groups_values, strict=True):
            t = bench._truth(ds.X[m, j], "histogram", lo, hi)
            v = np.asarray(v, float)
            noise.setdefault((method, col, by), []).append(np.where((v > 0) & (t > 0), v - t, np.nan))

    real_dpl, real_dpf = bench.diffprivlib_est, bench.dpfed_answers
    calls: list[np.ndarray] = []

    def dpl(x, stat, eps, lo, hi, seed):
        est = real_dpl(x, stat, eps, lo, hi, seed)
        v, t = np.asarray(est, float), bench._truth(x, stat, lo, hi)
        calls.append(np.where((v > 0) & (t > 0), v - t, np.nan))
        return est

    def dpf(ds_, queries, by, eps, seed, mode, parts=None):
        ans = real_dpf(ds_, queries, by, eps, seed, mode, parts)
        record(mode, queries[0].split(":")[1], by, bench._values(ans[0], by))
        return ans

    monkeypatch.setattr(bench, "diffprivlib_est", dpl)
    monkeypatch.setattr(bench, "dpfed_answers", dpf)
    bench.error_rows(ds, 1, ("histogram",))
    # diffprivlib's calls, in the bench's order: age (all; female, male), hours-per-week (all; female, male)
    assert len(calls) == 6
    for (col, by), idx in {("age", None): [0], ("age", "sex"): [1, 2],
                           ("hours-per-week", None): [3], ("hours-per-week", "sex"): [4, 5]}.items():
        noise[("diffprivlib", col, by)] = [calls[i] for i in idx]
    vectors: dict[str, list[np.ndarray]] = {}
    for (method, _, _), groups in sorted(noise.items(), key=str):
        vectors.setdefault(method, []).extend(groups)
    assert set(vectors) == {"diffprivlib", "1 party", "1 party gaussian", "5 parties distributed"}
    for method, vs in vectors.items():
        assert len(vs) == 6, method
        for i, a in enumerate(vs):
            for b in vs[i + 1:]:
                both = ~np.isnan(a) & ~np.isnan(b)
                assert both.sum() >= 6, method
                assert np.any(a[both] != b[both]), method


def test_summary_ratio_interval_covers_the_true_ratio():
    """bench_stats' 95 % interval of a summary ratio (``ratio_ci``: geometric mean over 9 rows of MAE_a / MAE_b,
    the delta method on log MAE) on synthetic rows whose per-seed errors are exponential (the law of |Laplace|
    noise, the most skewed errors of the bench) with known means: the true ratio exp(mean log(mu_a / mu_b)) (1.1
    here) must lie inside in 400 independent repetitions of 20 seeds per row and method at a rate in [0.89, 0.98]
    (simulated: 0.93; binomial s.d. 0.013, so a false alarm ~1e-3). Broken on purpose (method b's variance left
    out of the sum) the rate fell to 0.80 and this failed. The point estimate is checked against the formula
    built here, and each row's interval must cover its own true ratio at a similar rate."""
    bench = _bench()
    g = np.random.default_rng(7)
    mu_b = np.exp(g.normal(0, 1, 9))
    mu_a = mu_b * 1.1 * np.exp(g.normal(0, 0.2, 9))
    truth = float(np.exp(np.mean(np.log(mu_a / mu_b))))
    inside, rows_inside = 0, 0
    for _ in range(400):
        rows = []
        for a, b in zip(mu_a, mu_b, strict=True):
            ea, eb = g.exponential(a, 20), g.exponential(b, 20)
            rows.append({"a": ea.mean(), "b": eb.mean(), "per_seed": {"a": ea, "b": eb}})
        point, lo, hi, per_row = bench.ratio_ci(rows, "a", "b")
        assert point == pytest.approx(float(np.exp(np.mean([np.log(r["a"] / r["b"]) for r in rows]))))
        assert lo < point < hi and len(per_row) == 9
        inside += lo <= truth <= hi
        rows_inside += sum(x[1] <= ta / tb <= x[2] for x, ta, tb in zip(per_row, mu_a, mu_b, strict=True))
    assert 0.89 <= inside / 400 <= 0.98, inside
    assert 0.89 <= rows_inside / 3600 <= 0.98, rows_inside
