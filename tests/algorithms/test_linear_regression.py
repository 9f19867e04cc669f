"""Tests of differentially private linear regression (dpfed.algorithms.linear_regression) and of the schema's
regression target and missing-value rules, against independent references (NumPy, dp_accounting,
scikit-learn). Statistical checks use fixed seeds (deterministic); each states its false-alarm rate.
"""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from dpfed.algorithms import DPLinearRegression, get_algorithm
from dpfed.algorithms import linear_regression as lr
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.params import validate
from dpfed.core import accounting
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.ledger import BudgetLedger
from dpfed.data.datasets import load_dataset
from dpfed.data.schema import DataValidationError, Feature, Schema
from dpfed.federation.session import PartyContext, decide
from dpfed.simulation import run_inprocess
from dpfed.simulation.inprocess import secure_spec
from noise_checks import (
    assert_gaussian_variance,
    assert_heavy_variance,
    discrete_gaussian_variance,
    discrete_laplace_moments,
)

pytestmark = pytest.mark.filterwarnings("ignore::dpfed.core.rng.ReproducibleSeedWarning")

SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                 Feature("v", "numeric", lower=-5.0, upper=5.0)),
                target=Feature("t", "numeric", lower=-3.0, upper=10.0))
TASK = Task("lr", 0, "lr-statistics")


def _data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    X = np.column_stack([g.integers(0, 3, n), g.uniform(0, 10, n), g.uniform(-5, 5, n)])
    y = 1.0 + 0.5 * X[:, 1] - 0.3 * X[:, 2] + (X[:, 0] == 2) + g.normal(0, 0.3, n)
    return X, y


def _spec(job: str = "lr", schema: Schema = SCHEMA, **kw) -> JobSpec:
    return JobSpec(job, "linear-regression", validate(get_algorithm("linear-regression"),
                                                      {"epsilon": 1.0, "delta": 1e-5, **kw}, schema), schema)


def _encoded(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The encoding of the plan's docstring, written here from scratch: clamped numeric columns rescaled to
    [-1, 1], dummies for codes 1 and 2, the intercept, divided by sqrt(P + C + 1) = 2; target to [-1, 1]."""
    u = np.clip(2 * X[:, 1] / 10 - 1, -1, 1)
    v = np.clip(2 * (X[:, 2] + 5) / 10 - 1, -1, 1)
    U = np.column_stack([u, v, X[:, 0] == 1, X[:, 0] == 2, np.ones(len(X))]) / 2.0
    return U, np.clip(2 * (y + 3) / 13 - 1, -1, 1)


# --------------------------------------------------------------------------------------------- the plan

def _pld_eps(event: dpa.DpEvent, delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


def test_adassp_plan_is_the_smallest_gaussian_meeting_the_target():
    """GaussianDpEvent(z): dp_accounting's own PLD accountant finds it within (1, 1e-5), and 0.1 % less noise not;
    the Gaussian's sigma is z times the L2 sensitivity derived here from the weights."""
    spec = _spec()
    plan = lr.plan_release(spec)
    (ev,) = [plan.event]
    assert isinstance(ev, dpa.GaussianDpEvent)
    assert _pld_eps(ev, 1e-5) <= 1.0 + 1e-4 and _pld_eps(dpa.GaussianDpEvent(ev.noise_multiplier * 0.999), 1e-5) > 1.0
    w, d = plan.weights, 5
    rounded = d * (d + 1) // 2 + d + 1
    l2 = math.hypot(math.hypot(w["xx"], w["xy"], w["yy"], w["n"]) + 0.5 * math.sqrt(rounded),
                    w["lmin"] * (1 + d / (2 * w["xx"])) + 2)
    assert plan.l2 == pytest.approx(l2, rel=1e-8)
    assert plan.noise == pytest.approx(ev.noise_multiplier * l2, rel=1e-8)
    assert lr.LinearRegressionParty().job_event(spec) == ev == lr.LinearRegressionParty().task_event(spec, TASK)


def test_functional_plan_is_pure_epsilon():
    spec = _spec(method="functional", delta=0.0)
    assert lr.plan_release(spec).event == dp_event.DiscreteLaplaceDpEvent(1.0, 1)


def test_secure_plan_is_the_distributed_discrete_gaussian_with_the_derived_sensitivities():
    """KLS21's event with P_min - c honest shares and the L2 / L1 sensitivities derived here; sigma_share is
    the smallest that meets the target under the ledger's RDP accounting (0.1 % less does not)."""
    spec = secure_spec(_spec(noise="distributed", secure_aggregation=True), ["p0", "p1", "p2"], 900)
    plan = lr.plan_release(spec)
    w, d = plan.weights, 5
    rounded = d * (d + 1) // 2 + d + 1
    dl = w["lmin"] * (1 + d / (2 * w["xx"])) + 2
    l2 = math.hypot(math.hypot(w["xx"], w["xy"], w["yy"], w["n"]) + 0.5 * math.sqrt(rounded), dl)
    l1 = w["xx"] * (d + 1) / 2 + w["xy"] * math.sqrt(d) + w["yy"] + w["n"] + 0.5 * rounded + dl
    want = DistributedDiscreteGaussianDpEvent(plan.noise, 3, l2, l1, rounded + 2)
    ev = plan.event
    assert isinstance(ev, DistributedDiscreteGaussianDpEvent)
    for got, exp in ((ev.sigma_share, want.sigma_share), (ev.l2_sensitivity, l2), (ev.l1_sensitivity, l1)):
        assert got == pytest.approx(exp, rel=1e-8)
    assert (ev.parties, ev.dimension) == (3, rounded + 2)
    assert accounting.epsilon(ev, 1e-5, accountant="rdp") <= 1.0
    less = DistributedDiscreteGaussianDpEvent(ev.sigma_share * 0.999, 3, ev.l2_sensitivity, ev.l1_sensitivity,
                                              ev.dimension)
    assert accounting.epsilon(less, 1e-5, accountant="rdp") > 1.0


# --------------------------------------------------------------------------------------------- statistics

def test_sufficient_statistics_equal_numpy_on_the_clamped_records():
    """The party's integer vector / W equals X^T X (upper triangle), X^T y, y^T y and n computed with NumPy on
    the clamped, encoded records, within the per-record rounding (n / 2 units per entry), lambda_min within
    its own (D / (2 W_xx) per record), and the records far outside the bounds count as the bounds."""
    X, y = _data()
    X[:5, 1], X[5:10, 2], y[10:15] = 1e9, -np.inf, 1e12
    spec = _spec()
    plan = lr.plan_release(spec)
    layout = lr.Layout.from_schema(SCHEMA)
    got = lr.sufficient_statistics(X, y, layout, plan.weights).astype(np.float64)
    U, yt = _encoded(X, y)
    A = U.T @ U
    iu = np.triu_indices(5)
    w, n, off = plan.weights, len(X), layout.offsets
    np.testing.assert_allclose(got[:15], w["xx"] * A[iu], atol=n / 2)
    np.testing.assert_allclose(got[15:20], w["xy"] * U.T @ yt, atol=n / 2)
    assert abs(got[20] - w["yy"] * yt @ yt) <= n / 2 and got[21] == w["n"] * n
    assert abs(got[off["lmin"]] / w["lmin"] - np.linalg.eigvalsh(A)[0]) <= 5 * n / (2 * w["xx"]) + 1 / w["lmin"]


def test_missing_target_or_feature_value_is_refused():
    X, y = _data(20)
    X[3, 1] = np.nan
    with pytest.raises(DataValidationError, match="NaN"):
        lr.sufficient_statistics(X, y, lr.Layout.from_schema(SCHEMA), lr.plan_release(_spec()).weights)


# --------------------------------------------------------------------------------------------- noise

def _party(X, y, name="p") -> PartyContext:
    return PartyContext(name, X, y, SCHEMA, BudgetLedger(":memory:", epsilon_limit=1e6, delta_limit=0.5))


@pytest.mark.parametrize("method", ["adassp", "functional"])
def test_noise_of_the_parties_answers_matches_the_plan(method):
    """The real party session's answers minus the noiseless vector (computed here from scratch, integer rounding
    per record): Gaussian variance sigma^2 + 1/12 with sigma = z * L2 (the charged z), or discrete Laplace of
    scale (L1 + 1) / eps for the functional mechanism. 40 jobs x 23 entries; two-sided false-alarm rate 1e-4
    (tests/support/noise_checks.py; its power check rejects half the variance)."""
    X, y = _data(200)
    U, yt = _encoded(X, y)
    iu, ju = np.triu_indices(5)
    resid = []
    for j in range(40):
        extra = {"method": "functional", "delta": 0.0} if method == "functional" else {}
        spec = _spec(f"lr-noise-{j}", **extra)
        d = decide(_party(X, y), spec)
        assert d.accept, d.reason
        out = d.session.answer(Task(spec.job_id, 0, "lr-statistics"))
        plan = lr.plan_release(spec)
        w = plan.weights
        clean = np.concatenate([np.rint(w["xx"] * U[:, iu] * U[:, ju]).sum(0),
                                np.rint(w["xy"] * U * yt[:, None]).sum(0),
                                [np.rint(w["yy"] * yt * yt).sum(), w["n"] * len(X)]])
        resid.append(out["stats"][:len(clean)] - clean)
    resid = np.concatenate(resid).astype(np.float64)
    if method == "adassp":
        assert isinstance(d.event, dpa.GaussianDpEvent)
        assert_gaussian_variance(resid, (d.event.noise_multiplier * plan.l2) ** 2 + 1 / 12)
    else:
        var, kurt = discrete_laplace_moments((plan.l1 + 1) / 1.0)
        assert_heavy_variance(resid, var, kurt)


def test_secure_noise_of_the_survivors_sum_matches_the_plan(monkeypatch):
    """Distributed noise under secure aggregation, in process: the decoded sum minus the parties' noiseless
    vectors is the sum of 3 discrete Gaussian shares N_Z(0, sigma_share^2) (variance 3 x the discrete Gaussian's).
    6 jobs x 22 entries; two-sided false-alarm rate 1e-4."""
    parts = [_data(60, seed=s) for s in range(3)]
    sums = []
    real = lr.LinearRegressionCoordinator.absorb

    def spy(self, task, combined):
        sums.append(np.asarray(combined.arrays["stats"]))
        return real(self, task, combined)

    monkeypatch.setattr(lr.LinearRegressionCoordinator, "absorb", spy)
    resid = []
    for j in range(6):
        spec = _spec(f"lr-secure-noise-{j}", noise="distributed", secure_aggregation=True)
        run_inprocess(spec, parts, seed=j)
        full = secure_spec(spec, [f"party-{i}" for i in range(3)], 180)
        plan = lr.plan_release(full)
        clean = sum(lr.sufficient_statistics(X, y, lr.Layout.from_schema(SCHEMA), plan.weights) for X, y in parts)
        resid.append((sums[-1] - clean)[:-1])  # lambda_min: the party's own, not a sum of records
    assert_gaussian_variance(np.concatenate(resid).astype(np.float64), 3 * discrete_gaussian_variance(plan.noise))


# --------------------------------------------------------------------------------------------- models

def test_huge_epsilon_matches_scikit_learn():
    """At epsilon 100 the model is close to scikit-learn's ridge on the same encoding with AdaSSP's lambda (and
    its R^2 within 0.01 of the ordinary least squares fit)."""
    from sklearn.linear_model import LinearRegression, Ridge

    X, y = _data(2000)
    est = DPLinearRegression(epsilon=100.0, schema=SCHEMA, random_state=0).fit(X, y)
    U, yt = _encoded(X, y)
    lam = float(est.model_["ridge_lambda"])
    ref = Ridge(alpha=lam, fit_intercept=False).fit(U, yt)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=0.02)
    Xt, yt2 = _data(500, seed=9)
    ols = LinearRegression().fit(np.column_stack([Xt[:, 1:], Xt[:, 0] == 1, Xt[:, 0] == 2]), yt2)
    r2_ols = ols.score(np.column_stack([Xt[:, 1:], Xt[:, 0] == 1, Xt[:, 0] == 2]), yt2)
    assert est.score(Xt, yt2) >= r2_ols - 0.01
    fm = DPLinearRegression(epsilon=100.0, delta=0.0, method="functional", schema=SCHEMA, random_state=0).fit(X, y)
    assert fm.score(Xt, yt2) >= r2_ols - 0.05


def test_california_housing_five_parties_distributed(monkeypatch):
    """The README command in process: 5 parties, distributed noise under secure aggregation, epsilon 1, seed 0;
    R^2 and RMSE reported; the bench (3 seeds) has the targets."""
    from dpfed.algorithms.linear_regression import evaluate
    from dpfed.data.datasets import split_parties

    ds = load_dataset("california_housing")
    assert ds.split == {"split_source": "random", "split_seed": 20180425, "test_fraction": 0.2}
    spec = _spec("lr-cal", ds.schema, noise="distributed", secure_aggregation=True)
    res = run_inprocess(spec, split_parties(ds.X_train, ds.y_train, 5, "iid", np.random.default_rng(0)), seed=0)
    m = evaluate(res.model, ds.X_test, ds.y_test, ds.schema)
    assert m["r2"] > 0.5 and 50_000 < m["rmse"] < 90_000 and res.epsilon_spent <= 1.0


# --------------------------------------------------------------------------------------------- schema

def test_missing_values_are_refused_in_one_line_naming_the_column_and_count():
    X, y = _data(50)
    X[[1, 4, 9], 2] = np.nan
    with pytest.raises(DataValidationError) as err:
        SCHEMA.validate(X, y)
    msg = str(err.value)
    assert "\n" not in msg and "column 'v': 3 NaN/Inf value(s) (3 missing" in msg and "impute" in msg


def test_a_public_imputation_rule_fills_missing_values():
    feats = list(SCHEMA.features)
    feats[2] = Feature("v", "numeric", lower=-5.0, upper=5.0, impute=1.5)
    schema = Schema(tuple(feats), target=SCHEMA.target)
    X, y = _data(50)
    X[[1, 4], 2] = np.nan
    Xv = schema.validate(X, y)
    assert (Xv[[1, 4], 2] == 1.5).all() and np.isfinite(Xv).all()
    assert Schema.from_json(schema.to_json()) == schema
    with pytest.raises(ValueError, match="impute"):
        Feature("v", "numeric", lower=-5.0, upper=5.0, impute=6.0)


def test_the_bundled_california_schema_imputes_total_bedrooms():
    raw = np.load(load_dataset("california_housing").schema and "dpfed/data/california_housing.npz")
    assert int(np.isnan(raw["X"]).sum()) == 207
    ds = load_dataset("california_housing")
    assert ds.schema.task == "regression" and ds.y_train.dtype == np.float64
    assert np.isfinite(ds.X_train).all() and np.isfinite(ds.X_test).all()
    no_rule = Schema(tuple(Feature(f.name, f.kind, f.categories, f.lower, f.upper, clip=f.clip)
                           for f in ds.schema.features), target=ds.schema.target)
    with pytest.raises(DataValidationError, match="column 'total_bedrooms': 207 NaN/Inf value"):
        no_rule.validate(raw["X"], raw["y"])


def test_target_schema_round_trips_and_checks_its_values():
    text = SCHEMA.to_file_text()
    assert '"target": {"name": "t", "lower": -3.0, "upper": 10.0}' in text
    assert Schema.from_json(SCHEMA.to_json()) == SCHEMA and SCHEMA.label == "t" and SCHEMA.task == "regression"
    X, y = _data(30)
    y[:4] = 100.0
    with pytest.raises(DataValidationError, match="target 't': 4 value"):
        SCHEMA.validate(X, y)
    with pytest.raises(ValueError, match="either label classes"):
        Schema.from_dict({"features": [{"name": "x", "kind": "numeric", "lower": 0, "upper": 1}], "n_classes": 2,
                          "target": {"name": "t", "lower": 0, "upper": 1}})


def test_a_classifier_refuses_a_regression_target_and_the_reverse(tmp_path):
    with pytest.raises(TaskRejected, match="naive-bayes is a classifier") as err:
        validate(get_algorithm("naive-bayes"), {"epsilon": 1.0}, SCHEMA)
    assert "\n" not in str(err.value)
    classes = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
    with pytest.raises(TaskRejected, match="linear-regression fits a numeric target"):
        validate(get_algorithm("linear-regression"), {"epsilon": 1.0}, classes)
    X, y = _data(20)  # a party refuses the offer, charging nothing
    party = _party(X, y)
    d = decide(party, JobSpec("nb-on-reg", "naive-bayes", {"epsilon": 1.0, "delta": 1e-6}, SCHEMA))
    assert not d.accept and "is a classifier" in d.reason and party.ledger.spent("nb-on-reg") == 0


def test_schema_template_with_a_target_then_a_csv_regression_dataset(tmp_path):
    """``dpfed schema template --target``: placeholders refused until filled in; the filled schema loads a CSV with
    float targets (a missing target cell is refused, naming the count)."""
    from dpfed.cli.schema import template

    path = tmp_path / "r.csv"
    path.write_text("u,v,price\n1,2,3.5\n2,3,4.5\n3,1,2.25\n0,0,1\n")
    doc = template(str(path), target="price", bounds=(0.0, 10.0))
    with pytest.raises(ValueError, match="placeholder"):
        Schema.from_dict(doc)
    doc["target"].update(lower=0.0, upper=10.0)
    schema = Schema.from_dict(doc)
    assert schema.task == "regression" and schema.label == "price"
    ds = load_dataset(str(path), schema=schema, test_fraction=0.25)
    assert ds.y_train.dtype == np.float64 and sorted(np.concatenate([ds.y_train, ds.y_test])) == [1, 2.25, 3.5, 4.5]
    path.write_text("u,v,price\n1,2,3.5\n2,3,\n")
    with pytest.raises(DataValidationError, match="label column 'price': 1 empty"):
        load_dataset(str(path), schema=schema)


def test_model_file_predicts_raw_records_as_the_job_evaluates(tmp_path, capsys):
    """A released model written as a model file loads as DPLinearRegression; on RAW records (missing values
    included, imputed by the schema's rule) its R^2 is the job's own evaluation, and ``dpfed model evaluate``
    prints the same RMSE and R^2."""
    import json

    from dpfed.algorithms.model_file import load_model, write_model_file
    from dpfed.cli import main
    from dpfed.data.datasets import split_parties

    ds = load_dataset("california_housing")
    spec = _spec("mf-lr", ds.schema)
    model = run_inprocess(spec, split_parties(ds.X_train, ds.y_train, 3, "iid", np.random.default_rng(0)),
                          seed=3).model
    raw = np.load("dpfed/data/california_housing.npz")
    X, y = raw["X"][:3000].astype(np.float64), raw["y"][:3000].astype(np.float64)
    assert np.isnan(X).any()
    job_eval = lr.evaluate(model, X, y, ds.schema)
    path = write_model_file(tmp_path / "model", model, algorithm="linear-regression", params=dict(spec.params),
                            schema=ds.schema.to_dict(), job_id="mf-lr")
    assert load_model(path).score(X, y) == pytest.approx(job_eval["r2"], abs=1e-12) and job_eval["r2"] > 0.5
    np.savez(tmp_path / "test.npz", X=X, y=y, feature_names=raw["feature_names"])
    assert main(["model", "evaluate", str(tmp_path / "test.npz"), "--model", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["r2"] == pytest.approx(job_eval["r2"], rel=1e-12) and out["rmse"] == pytest.approx(job_eval["rmse"])


def test_pca_then_linear_regression_keeps_the_target():
    """``pca+linear-regression``: the learner's projected schema keeps the regression target (and a classifier
    after PCA still refuses it); the job runs and reports R^2."""
    g = np.random.default_rng(0)
    X = g.uniform(0, 1, (600, 4))
    y = X @ np.array([3.0, 2.0, 1.0, 0.5]) + g.normal(0, 0.1, 600)
    schema = Schema(Schema.numeric_box(4, 0.0, 1.0).features, target=Feature("t", "numeric", lower=-1.0, upper=8.0))
    algo = get_algorithm("pca+linear-regression")
    with pytest.raises(TaskRejected, match="is a classifier"):
        validate(get_algorithm("pca+naive-bayes"), {"epsilon": 2.0}, schema)
    params = validate(algo, {"epsilon": 1.0, "delta": 1e-5, "pca_k": 4}, schema)
    res = run_inprocess(JobSpec("pca-lr", "pca+linear-regression", params, schema), [(X[:300], y[:300]),
                                                                                     (X[300:], y[300:])], seed=0)
    assert set(algo.evaluate(res.model, X, y, schema)) == {"rmse", "r2"}
