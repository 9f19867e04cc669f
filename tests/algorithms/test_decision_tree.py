"""The private decision tree (issue 27 item 1, optional part: Friedman & Schuster's split choice from noisy
counts, federated level by level) against independent references: the counts a party computes before noise
equal a count written out here record by record over the same structure; the charged plan equals events built
here; the noise measured from the parties' actual answers (local, and distributed under secure aggregation)
has the planned variance in every round; a record far outside the bounds moves a round's vector by exactly
the planned sensitivity; a party refuses structures outside the plan; the coordinator finds a planted split.

Statistical tests state their false-alarm rate: ALPHA = 1e-6 (chi-square, two-sided) and the 1e-4 of
``tests/support/noise_checks.py``.
"""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.stats import chi2

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.decision_tree import DPDecisionTreeClassifier, plan_release
from dpfed.algorithms.decision_tree.task import party_vector
from dpfed.algorithms.driver import drive
from dpfed.algorithms.params import validate
from dpfed.algorithms.secure_release import release_for
from dpfed.core.ledger import BudgetLedger
from dpfed.data.datasets import load_dataset, split_parties
from dpfed.data.schema import Feature, Schema
from dpfed.federation.secure_gather import SecureGather
from dpfed.federation.session import PartyContext, decide
from dpfed.simulation.inprocess import make_parties, open_sessions, secure_send, secure_spec
from noise_checks import assert_gaussian_variance, atoms
from share_recorder import ShareRecorder

ALPHA = 1e-6
SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                 Feature("b", "categorical", categories=5), Feature("v", "numeric", lower=-5.0, upper=5.0)),
                n_classes=3)
BINS, F, S = 4, 4, 3 + 4 + 5 + 4     # grid: 4 features, 16 cells


def _data(n: int = 300, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    X = np.column_stack([g.integers(0, 3, n), g.uniform(0, 10, n), g.integers(0, 5, n), g.uniform(-5, 5, n)])
    return X, g.integers(0, 3, n)


def _spec(job: str = "dt", **kw) -> JobSpec:
    params = validate(get_algorithm("decision-tree"), {"epsilon": 1.0, "depth": 3, "bins": BINS, **kw}, SCHEMA)
    return JobSpec(job, "decision-tree", params, SCHEMA)


def _cell(x: np.ndarray, f: int) -> int:
    """Cell of record x in feature f, written out: equal-width cells on the bounds, codes as they are."""
    feat = SCHEMA.features[f]
    if feat.kind == "categorical":
        return int(x[f])
    v = feat.lower if math.isnan(x[f]) else min(max(x[f], feat.lower), feat.upper)   # NaN: the lower bound
    return min(int((v - feat.lower) / (feat.upper - feat.lower) * BINS), BINS - 1)


def _structure(depth: int, upto: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random valid tree: every node above level ``upto`` splits on a random feature and cell subset."""
    g = np.random.default_rng(seed)
    sizes = [3, BINS, 5, BINS]
    feature = np.full((1 << depth) - 1, -1, np.int64)
    left = np.zeros(((1 << depth) - 1, 5), np.uint8)
    for v in range((1 << upto) - 1):
        feature[v] = g.integers(0, F)
        left[v, :sizes[feature[v]]] = g.integers(0, 2, sizes[feature[v]])
    return feature, left


def _walk(x: np.ndarray, feature: np.ndarray, left: np.ndarray, steps: int) -> int:
    node = 0
    for _ in range(steps):
        if node >= len(feature) or feature[node] < 0:
            break
        node = 2 * node + (1 if left[node, _cell(x, int(feature[node]))] else 2)
    return node


def _reference(X, y, feature, left, r: int, depth: int) -> np.ndarray:
    """Round r's counts, record by record: a level's (node, feature, cell, class) or the leaves' (node, class)."""
    offsets = [0, 3, 3 + BINS, 8 + BINS]
    if r == depth:
        out = np.zeros(((2 << depth) - 1, 3), np.int64)
        for x, c in zip(X, y, strict=True):
            out[_walk(x, feature, left, depth), c] += 1
        return out.ravel()
    out = np.zeros((1 << r, S, 3), np.int64)
    for x, c in zip(X, y, strict=True):
        node = _walk(x, feature, left, r)
        if node >= (1 << r) - 1:
            for f in range(F):
                out[node - (1 << r) + 1, offsets[f] + _cell(x, f), c] += 1
    return out.ravel()


def _task(spec: JobSpec, r: int, feature, left) -> Task:
    return Task(spec.job_id, r, "dt-leaves" if r == spec.params["depth"] else "dt-level",
                arrays={"feature": feature, "left": left})


# ------------------------------------------------------------------------------------------ the counts

@pytest.mark.parametrize("r", [0, 1, 2, 3])
def test_counts_before_noise_equal_an_independent_count(r):
    X, y = _data(250)
    X[:10, 1], X[10:20, 3], X[20, 1] = 1e9, -1e9, np.nan    # outside the bounds: clamped, still one cell each
    spec = _spec(f"dt-count-{r}")
    feature, left = _structure(3, r, seed=r)
    got = party_vector(spec, _task(spec, r, feature, left), X, y)
    np.testing.assert_array_equal(got, _reference(X, y, feature, left, r, 3))
    if r == 3:
        assert got.sum() == len(X)


def test_counts_in_chunks_equal_the_independent_count(monkeypatch):
    """The party counts its records in chunks (memory): 7-record chunks give the same level counts."""
    from dpfed.algorithms.decision_tree import model

    monkeypatch.setattr(model, "_CHUNK", 7)
    X, y = _data(100)
    spec = _spec("dt-chunk")
    feature, left = _structure(3, 2, seed=4)
    got = party_vector(spec, _task(spec, 2, feature, left), X, y)
    np.testing.assert_array_equal(got, _reference(X, y, feature, left, 2, 3))


@pytest.mark.parametrize("far", [1e12, -1e12, math.inf])
def test_a_far_record_moves_each_round_by_exactly_the_planned_sensitivity(far):
    """D against D + {a record with every numeric feature at ``far``}: a level's vector changes in exactly F
    entries by 1 when the record reaches the level (L1 = F, L2 = sqrt(F)), the leaves' in one entry."""
    spec = _spec("dt-far", depth=3)
    plan = plan_release(spec)
    X, y = _data(200)
    rec = np.array([[2.0, far, 4.0, -far]])
    for r in range(4):
        task = _task(spec, r, *_structure(3, r, seed=10 + r))
        diff = party_vector(spec, task, np.vstack([X, rec]), np.append(y, 1)) - party_vector(spec, task, X, y)
        assert np.all((diff == 0) | (diff == 1))
        assert np.abs(diff).sum() in ((0, plan.rounds[r].l1) if r < 3 else (1,))
        assert math.sqrt(float((diff ** 2).sum())) <= plan.rounds[r].l2 * (1 + 1e-12)
    assert plan.rounds[0].l1 == F and plan.rounds[3].l1 == 1


def test_party_refuses_a_structure_outside_the_plan():
    spec = _spec("dt-refuse", depth=3)
    party = get_algorithm("decision-tree").party()
    feature, left = _structure(3, 1, seed=0)
    party.check_task(spec, _task(spec, 1, feature, left))
    deep = feature.copy()
    deep[1] = 0   # a split at level 1 sent with round 1
    bad = [(_task(spec, 1, deep, left), "only above level"),
           (_task(spec, 1, np.append(feature, -1), left), "planned depth"),
           (_task(spec, 1, np.where(feature >= 0, 9, -1), left), "grid feature"),
           (_task(spec, 1, feature, left * 2), "0/1"),
           (Task(spec.job_id, 1, "dt-leaves", arrays={"feature": feature, "left": left}), "not a"),
           (Task(spec.job_id, 4, "dt-level", arrays={"feature": feature, "left": left}), "not a"),
           (Task(spec.job_id, 1, "dt-level", params={"x": 1}, arrays={"feature": feature, "left": left}), "exactly")]
    orphan = np.full(7, -1, np.int64)
    orphan[1] = 0
    bad.append((_task(spec, 3, orphan, left), "split parent"))
    wide = left.copy()
    wide[0, 4] = 1 if feature[0] != 2 else 0
    wide[0, 3:] = 1 if feature[0] in (0, 1, 3) and feature[0] != 2 else wide[0, 3:]
    if feature[0] != 2:
        bad.append((_task(spec, 1, feature, wide), "beyond the cells"))
    for task, msg in bad:
        with pytest.raises(TaskRejected, match=msg):
            party.check_task(spec, task)


# ------------------------------------------------------------------------------------------ the plan

def _pld_eps(event, delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


def test_local_plan_equals_events_built_here():
    """D Gaussians with multiplier s / sqrt((1 - leaf_share) / D) and the leaves' s / sqrt(leaf_share), s the
    smallest scale dp_accounting's PLD accepts for the composition; noise std z sqrt(F) in a level."""
    spec = _spec("dt-plan", depth=4, leaf_share=0.3, delta=1e-6)
    plan = plan_release(spec)
    half = get_algorithm("decision-tree").party_for(spec.params)
    assert [r.kind for r in plan.rounds] == ["dt-level"] * 4 + ["dt-leaves"]
    s = plan.rounds[4].multiplier * math.sqrt(0.3)

    def built(scale):
        return dpa.ComposedDpEvent([dpa.GaussianDpEvent(scale / math.sqrt(0.7 / 4))] * 4
                                   + [dpa.GaussianDpEvent(scale / math.sqrt(0.3))])

    assert _pld_eps(built(s), 1e-6) <= 1.0 + 1e-6 < _pld_eps(built(s * 0.999), 1e-6)
    got = sorted(a.noise_multiplier for a, n in atoms(half.job_event(spec)) for _ in range(n))
    want = sorted(a.noise_multiplier for a, n in atoms(built(s)) for _ in range(n))
    assert got == pytest.approx(want, rel=1e-9)
    for r, rnd in enumerate(plan.rounds):
        assert half.task_event(spec, _task(spec, r, *_structure(4, 0, 0))) == rnd.event
        assert rnd.noise == pytest.approx(rnd.multiplier * (2.0 if r < 4 else 1.0), rel=1e-9)


def _ddg_rdp(sigma: float, n: int, l2: float, l1: float, d: int, orders: np.ndarray) -> np.ndarray:
    """KLS21 Prop. 14 eq. (17), written out here."""
    tau = 10 * sum(math.exp(-2 * math.pi ** 2 * sigma ** 2 * k / (k + 1)) for k in range(1, n))
    s = math.sqrt(n) * sigma
    a2, a1 = l2 / s, l1 / s
    return np.minimum.reduce([orders * a2 ** 2 / 2 + tau * d, orders / 2 * (a2 ** 2 + 2 * a1 * tau + tau ** 2 * d),
                              orders / 2 * (a2 + tau * math.sqrt(d)) ** 2])


def test_secure_plan_equals_events_built_here():
    """One distributed discrete Gaussian per round with P_min - c shares, L2/L1 sqrt(F)/F and length 2^r S k
    for a level, 1/1 and (2^(D+1) - 1) k for the leaves; shares z_r Delta_2 / sqrt(h) with z_r in the local
    plan's ratios; the composition (RDP curves added, KLS21 eq. (17) written out) meets epsilon."""
    names = [f"p{i}" for i in range(6)]
    spec = secure_spec(_spec("dt-sec", depth=3, noise="distributed", secure_aggregation=True, delta=1e-6,
                             min_survivors=5, colluders=1), names, 10_000)
    plan = plan_release(spec)
    orders = np.arange(2, 257, dtype=np.float64)
    rdp = np.zeros_like(orders)
    s = plan.rounds[3].multiplier * math.sqrt(0.2)
    for r, rnd in enumerate(plan.rounds):
        l2, l1, dim = (2.0, 4.0, (1 << r) * S * 3) if r < 3 else (1.0, 1.0, 15 * 3)
        share = 0.8 / 3 if r < 3 else 0.2
        assert (rnd.event.parties, rnd.event.l2_sensitivity, rnd.event.l1_sensitivity, rnd.event.dimension) == \
            (4, l2, l1, dim)
        assert rnd.noise == pytest.approx(max(0.5, s / math.sqrt(share) * l2 / 2.0), rel=1e-9)
        rdp += _ddg_rdp(rnd.noise, 4, l2, l1, dim, orders)
    eps = float(rdp_privacy_accountant.compute_epsilon(orders, rdp, 1e-6)[0])
    assert eps <= 1.0 * (1 + 2e-3)
    half = get_algorithm("decision-tree").party_for(spec.params)
    sp = half.plan(spec, _task(spec, 2, *_structure(3, 2, 0)))
    assert sp.integer and sp.length == 4 * S * 3 and sp.event() == plan.rounds[2].event


# ------------------------------------------------------------------------------------------ the noise

def test_local_noise_measured_from_the_answers_matches_the_plan():
    """Through the real party session, every round of 30 jobs: answer minus the count computed here is
    round(sigma_r Z), sigma_r the charged multiplier times sqrt(F) (levels) or 1 (leaves); false-alarm 1e-4."""
    X, y = _data()
    level, leaves, events = [], [], None
    for j in range(30):
        spec = _spec(f"dt-noise-{j}", depth=2)
        party = PartyContext("p", X, y, SCHEMA, BudgetLedger(":memory:", epsilon_limit=1e6, delta_limit=0.5))
        d = decide(party, spec)
        assert d.accept, d.reason
        events = d.event
        for r in range(3):
            feature, left = _structure(2, r, seed=j)
            out = d.session.answer(_task(spec, r, feature, left))
            (level if r < 2 else leaves).append(out["counts"] - _reference(X, y, feature, left, r, 2))
    plan = plan_release(spec)
    zs = sorted(a.noise_multiplier for a, _ in atoms(events))
    assert zs[0] == pytest.approx(plan.rounds[0].multiplier) and zs[-1] == pytest.approx(plan.rounds[2].multiplier)
    assert_gaussian_variance(np.concatenate(level), plan.rounds[0].noise ** 2 + 1 / 12)
    assert_gaussian_variance(np.concatenate(leaves), plan.rounds[2].noise ** 2 + 1 / 12)


def test_distributed_noise_measured_from_the_shares_matches_the_plan():
    """Secure aggregation in process, 5 parties, whole jobs: in every round the decoded sum minus the parties'
    exact vectors (recorded at the noise step, and equal to the count computed here over the structure the
    coordinator sent) has variance 5 sigma_r^2 per entry (two-sided chi-square at ALPHA over 4 jobs)."""
    X, y = _data(600, seed=5)
    data = split_parties(X, y, 5, "iid", np.random.default_rng(0))
    names = [f"p{i}" for i in range(5)]
    algo = get_algorithm("decision-tree")
    z2, n = 0.0, 0
    with ShareRecorder() as rec:
        for j in range(4):
            spec = secure_spec(_spec(f"dt-dist-{j}", depth=2, noise="distributed", secure_aggregation=True,
                                     delta=1e-6, epsilon=4.0), names, len(X))
            parties = make_parties(spec, data, seed=j, party_names=names)
            gather = SecureGather(spec, release_for(algo, spec), rec.send(secure_send(open_sessions(spec, parties))))
            coord = algo.coordinator(spec, names)
            seen = []
            drive(coord, lambda task, g=gather, s=seen: s.append((task, g(task)[0])) or [s[-1][1]], algo.combine)
            clean, _ = rec.take()
            plan = plan_release(spec)
            for task, agg in seen:
                r = task.round
                feature, left = np.asarray(task.arrays["feature"]), np.asarray(task.arrays["left"])
                for p in parties:
                    np.testing.assert_array_equal(clean[(r, p.name)], _reference(p.X, p.y, feature, left, r, 2))
                noise = agg.arrays["counts"] - sum(clean[(r, s)] for s in agg.parties)
                z2 += float((noise.astype(np.float64) ** 2).sum() / (5 * plan.rounds[r].noise ** 2))
                n += noise.size
            assert len(seen) == 3 and coord.model()["leaf_proba"].shape == (7, 3)
    assert n == 4 * (16 * 3 + 2 * 16 * 3 + 7 * 3)
    assert chi2.ppf(ALPHA / 2, n) < z2 < chi2.isf(ALPHA / 2, n), z2 / n


# ------------------------------------------------------------------------------------------ the coordinator

def test_the_coordinator_finds_a_planted_split():
    """Label = (u >= 5) with large epsilon: the root splits on u between cells 1 and 2 (threshold 5), and the
    model predicts the rule."""
    g = np.random.default_rng(1)
    X = np.column_stack([g.integers(0, 3, 3000), g.uniform(0, 10, 3000), g.integers(0, 5, 3000),
                         g.uniform(-5, 5, 3000)])
    y = (X[:, 1] >= 5).astype(np.int64)
    schema = Schema(SCHEMA.features, n_classes=2)
    spec = JobSpec("dt-planted", "decision-tree", validate(get_algorithm("decision-tree"), {
        "epsilon": 20.0, "delta": 1e-6, "depth": 2, "bins": BINS}, schema), schema)
    est = DPDecisionTreeClassifier(epsilon=20.0, max_depth=2, bins=BINS, schema=schema, random_state=0)
    with pytest.warns(UserWarning):  # a seeded generator is for simulations only
        est.fit(X, y)
    assert int(est.model_["feature"][0]) == 1 and list(est.model_["left"][0, :BINS]) == [1, 1, 0, 0]
    assert est.score(X, y) > 0.99
    assert est.privacy_event_ == plan_release(spec).event


def test_estimator_learns_nursery_and_follows_sklearn_conventions():
    from sklearn.base import clone

    ds = load_dataset("nursery")
    est = DPDecisionTreeClassifier(epsilon=1.0, max_depth=5, schema=ds.schema, random_state=0)
    with pytest.warns(UserWarning):
        est.fit(ds.X_train, ds.y_train)
    assert est.score(ds.X_test, ds.y_test) > 0.8
    assert est.predict_proba(ds.X_test[:5]).sum(axis=1) == pytest.approx(np.ones(5))
    assert clone(est).get_params()["max_depth"] == 5
    with pytest.raises(ValueError, match="public schema"):
        DPDecisionTreeClassifier().fit(ds.X_train, ds.y_train)
