"""Noise measured from a party's actual answers matches the charged plan, for every release path (issue 10,
"Test strength").

Each test drives the real party session (:func:`decide`, :meth:`PartySession.answer`) or, where the
statistic is internal to the party, the party half's own release function with a fixed input; it
subtracts the noiseless statistic it computes itself with numpy and compares the measured variance
with the variance implied by the *charged* event and the sensitivity the test derives from the
public parameters. Every check has a two-sided false-alarm rate of 1e-4 and a power check (half the
noise variance is rejected); see ``tests/support/noise_checks.py``.
"""
from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import dp_event

from dpfed.algorithms import lvq, naive_bayes
from dpfed.algorithms.contract import JobSpec, Released, Task
from dpfed.core.ledger import BudgetLedger
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Feature, Schema
from dpfed.federation.session import PartyContext, decide
from noise_checks import (
    assert_gaussian_variance,
    assert_heavy_variance,
    atoms,
    discrete_gaussian_variance,
    discrete_laplace_moments,
)


def _arrays(out) -> dict:
    """The arrays of a party half's answer (a bare dict or a :class:`Released` with its events)."""
    return out.arrays if isinstance(out, Released) else out


def _party(X, y, schema, name="p", secure=False) -> PartyContext:
    return PartyContext(name, X, y, schema, BudgetLedger(":memory:", epsilon_limit=1e6, delta_limit=0.5),
                        secure_aggregation=secure)


def _answers(party: PartyContext, spec: JobSpec, tasks) -> tuple[list[dict], object]:
    """Decide ``spec`` at ``party`` and answer ``tasks`` through the session (a fresh ledger per party: a
    ledger re-accounts its whole history on every charge)."""
    d = decide(party, spec)
    assert d.accept, d.reason
    return [d.session.answer(t) for t in tasks], d.event


# ------------------------------------------------------------------------------------------ naive Bayes

NB_SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                    Feature("b", "categorical", categories=4), Feature("v", "numeric", lower=-5.0, upper=5.0)),
                   n_classes=3)


def _nb_data(n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(3)
    X = np.column_stack([g.integers(0, 3, n), g.uniform(0, 10, n), g.integers(0, 4, n), g.uniform(-5, 5, n)])
    return X, g.integers(0, 3, n)


def _nb_statistics(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weighted integer statistics of the module docstring, computed here from scratch: class counts,
    class x value histograms, then per class the sums S of round(w x~) and Q of round(w x~^2), x~ the value
    rescaled by the public bounds into [-1, 1] (clamped)."""
    k = 3
    counts = np.bincount(y, minlength=k) * w[0]
    hists = [np.bincount(y * m + X[:, col].astype(int), minlength=k * m) * w[1 + j]
             for j, (col, m) in enumerate([(0, 3), (2, 4)])]
    S, Q = np.zeros((k, 2)), np.zeros((k, 2))
    for f, (col, lo, hi) in enumerate([(1, 0.0, 10.0), (3, -5.0, 5.0)]):
        xt = np.clip(2 * (X[:, col] - lo) / (hi - lo) - 1, -1, 1)
        ws, wq = w[3 + f], w[5 + f]
        S[:, f] = np.bincount(y, np.rint(ws * xt), minlength=k)
        Q[:, f] = np.bincount(y, np.rint(wq * xt * xt), minlength=k)
    return np.concatenate([counts, *hists, S.ravel(), Q.ravel()])


@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1e-6), ("laplace", 0.0)])
def test_naive_bayes_noise_matches_the_charged_event(mechanism, delta):
    """Gaussian (delta > 0): one rounded Gaussian of std z * ||w||_2 per entry, z the charged
    GaussianDpEvent's multiplier, ||w||_2 the L2 sensitivity (a record moves one entry of each group g by
    at most w_g); Laplace (delta = 0): the charged DiscreteLaplaceDpEvent(eps, 1) is pure eps-DP, met by a
    discrete Laplace of scale (||w||_1 + 1) / eps (the mechanism's documented choice above L1 4096; the
    exact-sensitivity scale ||w||_1 / eps differs by 1e-5 relative). 150 jobs x 36 entries; false-alarm
    rate 1e-4 (Laplace: normal approximation, within a factor 2)."""
    X, y = _nb_data()
    eps, jobs = 1.0, 150
    resid, event = [], None
    for j in range(jobs):
        party = _party(X, y, NB_SCHEMA)
        spec = JobSpec(f"nb-{j}", "naive-bayes", {"epsilon": eps, "delta": delta, "mechanism": mechanism}, NB_SCHEMA)
        (out,), event = _answers(party, spec, [Task(spec.job_id, 0, "nb-statistics")])
        w = naive_bayes.plan_release(spec).weights  # public: grid units per group
        resid.append(out["stats"] - _nb_statistics(X, y, w))
    resid = np.concatenate(resid).astype(np.float64)
    ((ev, _),) = atoms(event)
    if mechanism == "gaussian":
        assert isinstance(ev, dp_accounting.GaussianDpEvent)
        sigma = ev.noise_multiplier * math.sqrt(float(np.sum(w.astype(float) ** 2)))
        assert_gaussian_variance(resid, sigma ** 2 + 1 / 12)
    else:
        assert isinstance(ev, dp_event.DiscreteLaplaceDpEvent) and ev.sensitivity == 1
        assert ev.noise_parameter == pytest.approx(eps)
        var, kurt = discrete_laplace_moments((int(w.sum()) + 1) / eps)
        assert_heavy_variance(resid, var, kurt)


# ------------------------------------------------------------------------------------------ statistics

def _stats_vector(X: np.ndarray, y: np.ndarray, W: int, Wc: int | None = None) -> np.ndarray:
    """The statistics job below, computed here from scratch: per class the Bernstein sums W (1 - u)^2, W 2u(1 - u),
    W u^2 of u = clamp(v) rescaled by [-5, 5] (each record's rounded cumulative sums differenced), the histogram of
    ``a`` per class, and a 4-bin histogram of ``u`` over [0, 10] per class, each cell Wc (default W) per record."""
    Wc = W if Wc is None else Wc
    k = 2
    t = (np.clip(X[:, 3], -5, 5) + 5) / 10
    cum = np.rint(np.column_stack([(1 - t) ** 2, 1 - t * t, np.ones_like(t)]) * W)
    parts = np.diff(cum, axis=1, prepend=0.0)
    moments = np.stack([np.bincount(y, parts[:, c], minlength=k) for c in range(3)], axis=1).ravel()
    hist_a = np.bincount(y * 3 + X[:, 0].astype(int), minlength=k * 3) * Wc
    bins = np.minimum((np.clip(X[:, 1], 0, 10) / 2.5).astype(int), 3)
    hist_u = np.bincount(y * 4 + bins, minlength=k * 4) * Wc
    return np.concatenate([moments, hist_a, hist_u]).astype(np.int64)


@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1e-6), ("laplace", 0.0)])
def test_statistics_noise_matches_the_charged_event(mechanism, delta):
    """Three blocks, one record adding its block weight once to each (m = 3 levels). Gaussian: equal weights W
    (public: the plan's grid units), a rounded Gaussian of std z W sqrt(3) per entry, z the charged multiplier.
    Laplace: the charged DiscreteLaplaceDpEvent(eps, 1) met level by level at eps / 3: the moments block on the
    2^16 grid with a discrete Laplace of scale (2^16 + 1) 3 / eps, the two histograms in whole counts with scale
    3 / eps (each residual standardized by its block's planned std; the larger kurtosis, conservative). 120 jobs
    x 20 entries through the real party session; false-alarm rate 1e-4."""
    from dpfed.algorithms import statistics

    X, y = _nb_data()
    y = y % 2
    schema = Schema(NB_SCHEMA.features, n_classes=2)
    eps, jobs, G = 1.0, 120, 1 << 16
    resid, event, W = [], None, 0
    for j in range(jobs):
        party = _party(X, y, schema)
        spec = JobSpec(f"st-{j}", "statistics", {"epsilon": eps, "delta": delta, "mechanism": mechanism,
                                                 "queries": ["var:v", "histogram:a", "histogram:u:bins=4"],
                                                 "group_by": "class"}, schema)
        (out,), event = _answers(party, spec, [Task(spec.job_id, 0, "statistics")])
        w = statistics.plan_release(spec).weights.tolist()
        if mechanism == "gaussian":
            assert len(w) == 3 and len(set(w)) == 1
            W = int(w[0])
            resid.append(out["stats"] - _stats_vector(X, y, W))
        else:
            assert w == [G, 1, 1]
            resid.append(out["stats"] - _stats_vector(X, y, G, 1))
    resid = np.stack(resid).astype(np.float64)
    ((ev, _),) = atoms(event)
    if mechanism == "gaussian":
        assert isinstance(ev, dp_accounting.GaussianDpEvent)
        assert_gaussian_variance(resid, (ev.noise_multiplier * W * math.sqrt(3)) ** 2 + 1 / 12)
    else:
        assert isinstance(ev, dp_event.DiscreteLaplaceDpEvent) and ev.sensitivity == 1
        assert ev.noise_parameter == pytest.approx(eps)
        var_m, kurt_m = discrete_laplace_moments((G + 1) * 3 / eps)
        var_c, kurt_c = discrete_laplace_moments(3 / eps)
        std = np.concatenate([np.full(6, math.sqrt(var_m)), np.full(14, math.sqrt(var_c))])
        assert_heavy_variance(resid / std, 1.0, max(kurt_m, kurt_c))


# ------------------------------------------------------------------------------------------ LVQ

LVQ_SCHEMA = Schema.numeric_box(4, 0.0, 1.0, n_classes=10)
PARTIES = 4  # distributed placement: each party adds 1/P of the noise variance (simulation-only shares)


def _lvq_spec(job: str, **kw) -> JobSpec:
    params = {"epsilon": 2.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.5, "noise_multiplier": 5.0, **kw}
    return JobSpec(job, "glvq", lvq.prepare_params(params), LVQ_SCHEMA)


def _split(event) -> tuple[list, list]:
    """(initialisation atoms, DP-SGD step atoms) of a charged LVQ plan."""
    init, steps = [], []
    for ev, mult in atoms(event):
        (steps if isinstance(ev, dp_accounting.PoissonSampledDpEvent) else init).append((ev, mult))
    return init, steps


@pytest.mark.parametrize("init,noise", [("gaussian", "local"), ("gaussian", "distributed"), ("laplace", "local"),
                                        ("laplace", "distributed")])
def test_lvq_initialisation_noise_matches_the_charged_event(init, noise):
    """Counts (sensitivity 1) and per-class sums of the records rescaled into [-1, 1]^d (L2 sensitivity
    sqrt(d), L1 d) from the party half's init answer, 400 answers on fixed data. Gaussian: the charged pair
    GaussianDpEvent(zc), GaussianDpEvent(zs) composes to one z with 1/z^2 = 1/zc^2 + 1/zs^2, split by the
    public count_fraction cf (zc = z / sqrt(cf)); counts get round(zc Z) (distributed: a discrete Gaussian
    of variance zc^2 / P, its exact variance), sums N(0, (zs sqrt(d))^2) (distributed: / P). Laplace (never
    split): counts a discrete Laplace of scale 1 / eps_c (charged DiscreteLaplaceDpEvent(eps_c, 1)), sums a
    Laplace of scale d / eps_s (charged as eps_s-DP). False-alarm rate 1e-4 per check."""
    g = np.random.default_rng(5)
    X, y = g.uniform(0, 1, (300, 4)), g.integers(0, 10, 300)
    spec = _lvq_spec(f"init-{init}-{noise}", init=init, noise=noise, parties=PARTIES)
    d = decide(_party(X, y, LVQ_SCHEMA, secure=noise == "distributed"), spec)
    assert d.accept, d.reason
    init_atoms, _ = _split(d.event)
    rng = SecureRNG.from_seed(f"init-{init}-{noise}")
    counts, sums = [], []
    for _ in range(400):
        out = _arrays(lvq.LVQParty().answer(spec, Task(spec.job_id, 0, "init"), X, y, rng))
        counts.append(out["counts"] - np.bincount(y, minlength=10))
        sums.append(out["sums"] - np.stack([(2 * X[y == c] - 1).sum(axis=0) for c in range(10)]))
    counts, sums = np.concatenate(counts).astype(float), np.concatenate(sums).ravel()
    cf, dim = lvq.DEFAULTS["count_fraction"], 4
    share = PARTIES if noise == "distributed" else 1
    if init == "gaussian":
        zs_ = sorted(ev.noise_multiplier for ev, _ in init_atoms)
        assert all(isinstance(ev, dp_accounting.GaussianDpEvent) for ev, _ in init_atoms) and len(zs_) == 2
        z = sum(v ** -2 for v in zs_) ** -0.5
        zs, zc = z / math.sqrt(1 - cf), z / math.sqrt(cf)
        assert zs_ == pytest.approx([zs, zc], rel=1e-9)
        count_var = zc ** 2 + 1 / 12 if share == 1 else discrete_gaussian_variance(zc / math.sqrt(share))
        assert_gaussian_variance(counts, count_var)
        assert_gaussian_variance(sums, (zs * math.sqrt(dim)) ** 2 / share)
    else:
        (dl, _), (pure, _) = init_atoms
        assert isinstance(dl, dp_event.DiscreteLaplaceDpEvent) and dl.sensitivity == 1
        assert pure.epsilon + dl.noise_parameter == pytest.approx(0.2 * 2.0)  # init_fraction * epsilon
        assert_heavy_variance(counts, *discrete_laplace_moments(1 / dl.noise_parameter))
        assert_heavy_variance(sums, 2 * (dim / pure.epsilon) ** 2, 6.0)


W_AT = np.array([[0.5, -0.5, 0.25, 0.0], [-0.5, 0.5, 0.0, 0.25]])  # rescaled prototypes, on a binary grid


@pytest.mark.parametrize("algorithm", ["glvq", "gmlvq"])
@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("noise", ["local", "distributed"])
def test_lvq_step_noise_matches_the_charged_event(algorithm, exact, noise):
    """DP-SGD steps through decide + PartySession.answer: every record sits exactly on its own class's
    prototype, where the GLVQ / GMLVQ gradient is exactly zero (d+ = 0, so dmu/dd- = 0 and x - w+ = 0), so
    the answer is pure noise whatever the Poisson sample. Planned std: nm * clip, nm the multiplier of the
    charged PoissonSampledDpEvent(q, GaussianDpEvent(nm)), clip public; distributed: variance / P. 80 steps
    x 8 (GLVQ) or 24 (GMLVQ) entries; false-alarm rate 1e-4."""
    schema = Schema.numeric_box(4, 0.0, 1.0, n_classes=2)
    X = np.repeat((W_AT + 1) / 2, 30, axis=0)  # back into the public box [0, 1], exactly
    y = np.repeat([0, 1], 30)
    clip = 0.7
    spec = JobSpec(f"step-{algorithm}-{exact}-{noise}", algorithm,
                   {"epsilon": 8.0, "delta": 1e-5, "epochs": 40, "sampling_rate": 0.5, "noise_multiplier": 4.0,
                    "clip": clip, "exact_noise": exact, "noise": noise, "parties": PARTIES}, schema)
    arrays = {"prototypes": W_AT} | ({"omega": np.eye(4) / 2} if algorithm == "gmlvq" else {})
    tasks = [Task(spec.job_id, 0, "init")] + [Task(spec.job_id, r, "step", arrays=arrays) for r in range(1, 81)]
    answers, event = _answers(_party(X, y, schema, secure=noise == "distributed"), spec, tasks)
    resid = np.concatenate([np.concatenate([a[k].ravel() for k in sorted(a)]) for a in answers[1:]])
    assert resid.size == 80 * (8 + (16 if algorithm == "gmlvq" else 0))
    _, ((sgd, mult),) = _split(event)
    assert mult == 80 and sgd.sampling_probability == 0.5
    share = PARTIES if noise == "distributed" else 1
    assert_gaussian_variance(resid, (sgd.event.noise_multiplier * clip) ** 2 / share)


# ------------------------------------------------------------------------------------------ k-means

KM_SCHEMA = Schema.numeric_box(5, 0.0, 1.0)


def _km_atoms(event) -> dict[str, list]:
    out: dict[str, list] = {"gauss": [], "dlap": [], "other": []}
    for ev, mult in atoms(event):
        key = ("gauss" if isinstance(ev, dp_accounting.GaussianDpEvent) else
               "dlap" if isinstance(ev, dp_event.DiscreteLaplaceDpEvent) else "other")
        out[key] += [ev] * mult
    return out


ITERS = 10


def test_kmeans_dp_lloyd_sums_counts_and_sizes_match_the_charged_event(monkeypatch):
    """Method lloyd, k = 1, ten iterations, 500 answers (decide + PartySession.answer, then the party
    half). The step's noisy sums and counts are post-processed into the centers before they leave the
    party, so they are observed at the mechanism boundary (the module's ``gaussian`` and ``_dl``, wrapped,
    not replaced); the final noisy sizes are in the answer. With k = 1 the statistics are the test's own:
    sum(x - mid) and n. Plan: sums N(0, (z R)^2) with z the charged GaussianDpEvent's multiplier and
    R = ||upper - lower||_2 / 2 the largest centred record; counts and sizes discrete Laplace of scale
    1 / eps_i, the charged DiscreteLaplaceDpEvent(eps_i, 1) (step counts first, sizes last in the plan).
    False-alarm rate 1e-4 per check (counts and sizes: normal approximation; with only 500 sizes within a
    factor 3)."""
    from dpfed.algorithms import kmeans
    from dpfed.algorithms.kmeans import fit as kmeans_fit

    seen: dict[str, list] = {"sums": [], "counts": []}
    real_gaussian, real_dl = kmeans_fit.gaussian, kmeans_fit._dl

    def spy_gaussian(value, **kw):
        rel = real_gaussian(value, **kw)
        assert np.allclose(value, (X - mid).sum(axis=0)[None], rtol=0, atol=1e-9)  # the test's own statistic
        seen["sums"].append(np.asarray(rel.value) - np.asarray(value))
        return rel

    def spy_dl(value, noise, *rest):
        out = real_dl(value, noise, *rest)
        assert np.array_equal(value, [len(X)])  # k = 1: every record in the one cluster
        seen["counts"].append((np.asarray(out) - np.asarray(value), noise))
        return out

    monkeypatch.setattr(kmeans_fit, "gaussian", spy_gaussian)
    monkeypatch.setattr(kmeans_fit, "_dl", spy_dl)
    g = np.random.default_rng(7)
    X = g.uniform(0, 1, (200, 5))
    mid = 0.5
    sizes, jobs = [], 500
    spec = JobSpec("km", "kmeans", {"epsilon": 1.0, "delta": 1e-6, "method": "lloyd", "k": 1, "lloyd_iters": ITERS},
                   KM_SCHEMA)
    (out,), event = _answers(_party(X, None, KM_SCHEMA), spec, [Task(spec.job_id, 0, "fit")])
    rng = SecureRNG.from_seed("km")
    for j in range(jobs):  # the first answer through the session, the others from the party half directly
        if j:
            out = _arrays(kmeans.KMeansParty().answer(spec, Task(spec.job_id, 0, "fit"), X, None, rng))
        sizes.append(out["sizes"].ravel() - len(X))
    ev = _km_atoms(event)
    gauss, step_dl, sizes_dl = ev["gauss"][0], ev["dlap"][0], ev["dlap"][-1]
    assert not ev["other"] and len(ev["gauss"]) == ITERS and len(ev["dlap"]) == ITERS + 1
    assert len(set(ev["gauss"])) == 1 and len(set(ev["dlap"][:-1])) == 1
    # the spies saw exactly 300 x (sums, step count, sizes); the sums' noise is measured against the test's
    # own statistic: the wrapper records released - input, and the input must be sum(x - mid)
    R = math.sqrt(5) / 2
    sums = np.concatenate([s.ravel() for s in seen["sums"]])
    assert sums.size == jobs * ITERS * 5
    assert_gaussian_variance(sums, (gauss.noise_multiplier * R) ** 2)
    steps = [c for i, (c, _) in enumerate(seen["counts"]) if i % (ITERS + 1) != ITERS]
    step_counts = np.concatenate(steps).astype(float)
    assert_heavy_variance(step_counts, *discrete_laplace_moments(1 / step_dl.noise_parameter), alpha=1e-4)
    assert_heavy_variance(np.concatenate(sizes), *discrete_laplace_moments(1 / sizes_dl.noise_parameter))


def test_gupt_clamped_mean_noise_matches_the_charged_event():
    """GUPT's clamped mean (the default aggregator) on fixed block answers: N(0, (z Delta)^2) with z the
    charged GaussianDpEvent's multiplier of a sample-and-aggregate plan and Delta = ||upper - lower||_2 / m
    (one of m answers moves within the box). 400 releases x 10 coordinates; false-alarm rate 1e-4."""
    from dpfed.algorithms import kmeans
    from dpfed.algorithms.kmeans.sample_aggregate import clamped_mean_release

    plan = kmeans.make_plan("sample-aggregate", 2, "mean", 0, 1.0, 1e-6)
    ev = _km_atoms(kmeans.plan_event(plan))
    (z,) = {e.noise_multiplier for e in ev["gauss"]}
    m, p = 200, 10
    Z = np.random.default_rng(2).uniform(0.25, 0.75, (m, p))
    rng = SecureRNG.from_seed("gupt")
    resid = np.concatenate([clamped_mean_release(Z, lower=np.zeros(p), upper=np.ones(p), noise_multiplier=z,
                                                 rng=rng).value - Z.mean(axis=0) for _ in range(400)])
    assert_gaussian_variance(resid, (z * math.sqrt(p) / m) ** 2)


def test_center_of_attention_noise_matches_the_smooth_sensitivity():
    """NRS07's center of attention on m identical answers: every radius is 0, so U_k = 0 for k < m - t0
    and U_{m - t0} = the diameter, t0 = floor((m - 1) / 2) + 2, hence S_beta = diameter e^(-beta (m - t0));
    the noise is N(0, (S_beta / alpha)^2) with (alpha, beta) the public calibration for (epsilon, delta) and
    the answer's dimension. 60 releases x 20 coordinates; false-alarm rate 1e-4."""
    from dpfed.algorithms.kmeans.sample_aggregate import center_of_attention_release, gaussian_smooth_params

    m, p, eps, delta = 1000, 20, 1.0, 1e-6
    Z = np.full((m, p), 0.5)
    pr = gaussian_smooth_params(eps, delta, p)
    S = math.sqrt(p) * math.exp(-pr.beta * (m - ((m - 1) // 2 + 2)))
    rng = SecureRNG.from_seed("coa")
    resid = np.concatenate([center_of_attention_release(Z, epsilon=eps, delta=delta, diameter=math.sqrt(p), rng=rng,
                                                        lower=np.zeros(p), upper=np.ones(p)).value - 0.5
                            for _ in range(60)])
    assert_gaussian_variance(resid, (S / pr.alpha) ** 2)
