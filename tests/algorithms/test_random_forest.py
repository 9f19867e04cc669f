"""The random decision forest (issue 27 item 1) against independent references: the public structure is the
same at every party and at the coordinator; the leaf counts before noise equal a count computed here by walking
every record down every tree on its own; the charged plan equals an event built here from the parameters; the
noise measured from the parties' actual answers (local, and distributed under secure aggregation) has the
planned variance; a record far outside the bounds moves the counts by exactly the planned sensitivity.

Statistical tests state their false-alarm rate: ALPHA = 1e-6 (chi-square, two-sided) and the 1e-4 of
``tests/support/noise_checks.py``.
"""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.dp_event import DiscreteLaplaceDpEvent
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.stats import chi2

from dpfed.algorithms import DPRandomForestClassifier, get_algorithm
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.driver import drive
from dpfed.algorithms.params import validate
from dpfed.algorithms.random_forest import draw_forest, job_forest, leaf_counts, plan_release, secure_release
from dpfed.algorithms.secure_release import release_for
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.ledger import BudgetLedger
from dpfed.data.datasets import load_dataset, split_parties
from dpfed.data.schema import Feature, Schema
from dpfed.federation.secure_gather import SecureGather
from dpfed.federation.session import PartyContext, decide
from dpfed.simulation.inprocess import make_parties, open_sessions, secure_send, secure_spec
from noise_checks import assert_gaussian_variance, assert_heavy_variance, atoms, discrete_laplace_moments
from share_recorder import ShareRecorder

ALPHA = 1e-6
SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                 Feature("b", "categorical", categories=5), Feature("v", "numeric", lower=-5.0, upper=5.0)),
                n_classes=3)


def _data(n: int = 300, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    X = np.column_stack([g.integers(0, 3, n), g.uniform(0, 10, n), g.integers(0, 5, n), g.uniform(-5, 5, n)])
    return X, g.integers(0, 3, n)


def _spec(job: str = "rf", **kw) -> JobSpec:
    params = validate(get_algorithm("random-forest"), {"epsilon": 1.0, "trees": 4, "depth": 3, **kw}, SCHEMA)
    return JobSpec(job, "random-forest", params, SCHEMA)


def _walk(x: np.ndarray, forest, t: int) -> int:
    """One record down tree t, written out node by node (the reference for :func:`leaf_counts`)."""
    node, nodes = 0, forest.feature.shape[1]
    while node < nodes:
        f = int(forest.feature[t, node])
        if forest.numeric[f]:
            right = min(max(x[f], forest.lower[f]), forest.upper[f]) >= forest.threshold[t, node]
        else:
            c = int(x[f])
            right = bool((int(forest.goes_right[t, node, c // 64]) >> (c % 64)) & 1)
        node = 2 * node + 1 + int(right)
    return node - nodes


# ------------------------------------------------------------------------------------------ the structure

def test_same_public_trees_at_every_party_and_the_coordinator():
    spec = _spec("rf-struct", trees=6, depth=4)
    coord = get_algorithm("random-forest").coordinator(spec, ["p0", "p1"])
    fresh = draw_forest(SCHEMA, 6, 4, "job:rf-struct")
    for a in (coord.forest, job_forest(spec), fresh):
        for name in ("feature", "threshold", "goes_right"):
            np.testing.assert_array_equal(getattr(a, name), getattr(fresh, name))
    other = job_forest(_spec("rf-other", trees=6, depth=4))
    assert not np.array_equal(other.feature, fresh.feature)            # the job id seeds the structure
    seeded = [job_forest(_spec(j, trees=6, depth=4, tree_seed=11)) for j in ("x", "y")]
    np.testing.assert_array_equal(seeded[0].threshold, seeded[1].threshold)   # a public seed overrides it
    num = fresh.numeric[fresh.feature]
    lo, hi = fresh.lower[fresh.feature], fresh.upper[fresh.feature]
    assert np.all((fresh.threshold[num] >= lo[num]) & (fresh.threshold[num] <= hi[num]))
    assert np.isnan(fresh.threshold[~num]).all()


def test_leaf_counts_equal_an_independent_count():
    X, y = _data(250)
    X[:10, 1], X[10:20, 3] = 1e9, -1e9        # far outside the public bounds: clamped, still one leaf per tree
    forest = job_forest(_spec("rf-count", trees=5, depth=4))
    want = np.zeros((5, forest.leaves, 3), np.int64)
    for t in range(5):
        for i in range(len(X)):
            want[t, _walk(X[i], forest, t), y[i]] += 1
    got = leaf_counts(X, y, forest)
    np.testing.assert_array_equal(got, want.ravel())
    assert got.sum() == 5 * len(X)


def test_a_far_record_moves_the_counts_by_exactly_the_planned_sensitivity():
    """D against D + {a record with every numeric feature at +-1e12}: exactly T entries change, each by 1, so the
    L1 change is T and the L2 change sqrt(T), the plan's sensitivities."""
    spec = _spec("rf-far", trees=7, depth=5)
    forest, plan = job_forest(spec), plan_release(spec)
    X, y = _data(200)
    for far in (1e12, -1e12):
        rec = np.array([[2.0, far, 4.0, -far]])
        diff = leaf_counts(np.vstack([X, rec]), np.append(y, 1), forest) - leaf_counts(X, y, forest)
        assert np.abs(diff).sum() == plan.l1 == 7
        assert math.sqrt(float((diff ** 2).sum())) == pytest.approx(plan.l2)


# ------------------------------------------------------------------------------------------ the plan

def _pld_eps(event, delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


def _kls21_epsilon(sigma: float, n: int, l2: float, l1: float, d: int, delta: float) -> float:
    """KLS21 Prop. 14 eq. (17), written out here, converted by dp-accounting's RDP -> (eps, delta)."""
    orders = np.arange(2, 257, dtype=np.float64)
    tau = 10 * sum(math.exp(-2 * math.pi ** 2 * sigma ** 2 * k / (k + 1)) for k in range(1, n))
    s = math.sqrt(n) * sigma
    a2, a1 = l2 / s, l1 / s
    rdp = np.minimum.reduce([orders * a2 ** 2 / 2 + tau * d, orders / 2 * (a2 ** 2 + 2 * a1 * tau + tau ** 2 * d),
                             orders / 2 * (a2 + tau * math.sqrt(d)) ** 2])
    return float(rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)[0])


def test_plans_equal_events_built_here():
    """Laplace: pure epsilon (DiscreteLaplaceDpEvent(eps, 1)); Gaussian: GaussianDpEvent(z) with z the smallest
    multiplier dp_accounting's PLD accepts (sensitivity sqrt(T) is in sigma, not the event); secure: the
    distributed discrete Gaussian with L2 sqrt(T), L1 T, dimension T 2^D k and P_min - c shares, its sigma the
    smallest meeting the target by KLS21 eq. (17) written out here. The job is its one task."""
    lap = _spec("rf-lap", mechanism="laplace", delta=0.0)
    assert plan_release(lap).event == DiscreteLaplaceDpEvent(1.0, 1)
    gauss = _spec("rf-gauss", mechanism="gaussian", delta=1e-6, trees=9)
    plan = plan_release(gauss)
    z = plan.event.noise_multiplier
    assert _pld_eps(dpa.GaussianDpEvent(z), 1e-6) <= 1.0 + 1e-6 < _pld_eps(dpa.GaussianDpEvent(z * 0.999), 1e-6)
    assert plan.noise == pytest.approx(z * 3.0) and plan.l1 == 9
    half = get_algorithm("random-forest").party_for(gauss.params)
    assert half.job_event(gauss) == half.task_event(gauss, Task(gauss.job_id, 0, "rf-leaf-counts"))
    names = [f"p{i}" for i in range(6)]
    sec = secure_spec(_spec("rf-sec", trees=9, depth=3, noise="distributed", secure_aggregation=True, delta=1e-6,
                            min_survivors=5, colluders=1), names, 10_000)
    fp, sp = secure_release(sec)
    sigma = sp.noise.sigma_share
    assert fp.event == DistributedDiscreteGaussianDpEvent(sigma, 4, 3.0, 9.0, 9 * 8 * 3)
    assert sp.event() == fp.event and sp.integer and sp.length == 9 * 8 * 3
    assert _kls21_epsilon(sigma, 4, 3.0, 9.0, 216, 1e-6) <= 1.0 * (1 + 2e-3)
    assert _kls21_epsilon(sigma * 0.99, 4, 3.0, 9.0, 216, 1e-6) > 1.0


def test_caps_and_refusals():
    algo = get_algorithm("random-forest")
    with pytest.raises(TaskRejected, match="trees x 2\\^depth x classes"):
        validate(algo, {"epsilon": 1.0, "trees": 1024, "depth": 20}, SCHEMA)
    with pytest.raises(TaskRejected, match="depth"):
        validate(algo, {"epsilon": 1.0, "depth": 21}, SCHEMA)
    with pytest.raises(TaskRejected, match="only under secure aggregation"):
        validate(algo, {"epsilon": 1.0, "noise": "distributed"}, SCHEMA)
    with pytest.raises(TaskRejected, match="unknown feature"):
        validate(algo, {"epsilon": 1.0, "features": ["nope"]}, SCHEMA)
    with pytest.raises(TaskRejected, match="one task"):
        algo.party().check_task(_spec("rf-t"), Task("rf-t", 1, "rf-leaf-counts"))


# ------------------------------------------------------------------------------------------ the noise

@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1e-6), ("laplace", 0.0)])
def test_local_noise_measured_from_the_answers_matches_the_plan(mechanism, delta):
    """Through the real party session: answer minus the count computed here. Gaussian: round(sigma Z), sigma the
    charged multiplier times sqrt(T); Laplace: a discrete Laplace of scale T / eps (pure eps, charged as
    DiscreteLaplaceDpEvent(eps, 1)). 40 jobs x 216 entries; false-alarm rate 1e-4."""
    X, y = _data()
    resid, event = [], None
    for j in range(40):
        spec = _spec(f"rf-noise-{mechanism}-{j}", trees=9, mechanism=mechanism, delta=delta)
        party = PartyContext("p", X, y, SCHEMA, BudgetLedger(":memory:", epsilon_limit=1e6, delta_limit=0.5))
        d = decide(party, spec)
        assert d.accept, d.reason
        out, event = d.session.answer(Task(spec.job_id, 0, "rf-leaf-counts")), d.event
        forest = job_forest(spec)
        clean = np.zeros(9 * forest.leaves * 3, np.int64)
        for t in range(9):
            for i in range(len(X)):
                clean[(t * forest.leaves + _walk(X[i], forest, t)) * 3 + y[i]] += 1
        resid.append(out["counts"] - clean)
    r = np.concatenate(resid).astype(np.float64)
    ((ev, _),) = atoms(event)
    if mechanism == "gaussian":
        assert isinstance(ev, dpa.GaussianDpEvent)
        assert_gaussian_variance(r, (ev.noise_multiplier * 3.0) ** 2 + 1 / 12)
    else:
        assert ev == DiscreteLaplaceDpEvent(1.0, 1)
        var, kurt = discrete_laplace_moments(9 / 1.0)
        assert_heavy_variance(r, var, kurt)


def test_distributed_noise_measured_from_the_shares_matches_the_plan():
    """Secure aggregation in process, 5 parties: the decoded sum minus the parties' exact counts (recorded at
    the noise step and equal to :func:`leaf_counts` of their records) has variance 5 sigma_share^2 per entry
    (two-sided chi-square at ALPHA over 6 jobs)."""
    X, y = _data(600, seed=5)
    data = split_parties(X, y, 5, "iid", np.random.default_rng(0))
    names = [f"p{i}" for i in range(5)]
    algo = get_algorithm("random-forest")
    z2, n = 0.0, 0
    with ShareRecorder() as rec:
        for j in range(6):
            spec = secure_spec(_spec(f"rf-dist-{j}", trees=8, depth=4, noise="distributed", secure_aggregation=True,
                                     delta=1e-6), names, len(X))
            parties = make_parties(spec, data, seed=j, party_names=names)
            gather = SecureGather(spec, release_for(algo, spec), rec.send(secure_send(open_sessions(spec, parties))))
            coord = algo.coordinator(spec, names)
            seen = []
            drive(coord, lambda task, g=gather, s=seen: s.append(g(task)[0]) or s[-1:], algo.combine)
            clean, _ = rec.take()
            for p in parties:
                np.testing.assert_array_equal(clean[(0, p.name)], leaf_counts(p.X, p.y, job_forest(spec)))
            sigma = secure_release(spec)[1].noise.sigma_share
            noise = seen[0].arrays["counts"] - sum(clean[(0, s)] for s in seen[0].parties)
            z2 += float((noise.astype(np.float64) ** 2).sum() / (5 * sigma ** 2))
            n += noise.size
            assert coord.model()["leaf_proba"].shape == (8, 16, 3)
    assert n >= 2000
    assert chi2.ppf(ALPHA / 2, n) < z2 < chi2.isf(ALPHA / 2, n), z2 / n


# ------------------------------------------------------------------------------------------ the estimator

def test_estimator_learns_nursery_and_follows_sklearn_conventions():
    from sklearn.base import clone

    ds = load_dataset("nursery")
    est = DPRandomForestClassifier(epsilon=1.0, n_estimators=20, max_depth=6, schema=ds.schema, random_state=0)
    with pytest.warns(UserWarning):  # a seeded generator is for simulations only
        est.fit(ds.X_train, ds.y_train)
    assert est.score(ds.X_test, ds.y_test) > 0.8
    assert est.predict_proba(ds.X_test[:5]).sum(axis=1) == pytest.approx(np.ones(5))
    assert clone(est).get_params()["n_estimators"] == 20
    assert est.privacy_event_ == plan_release(JobSpec("estimator", "random-forest", {
        "epsilon": 1.0, "delta": 1e-6, "trees": 20, "depth": 6, "tree_seed": 0}, ds.schema)).event
