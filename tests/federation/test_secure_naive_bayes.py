"""Naive Bayes with distributed discrete Gaussian noise under secure aggregation, in process: the
decoded statistics are exactly the survivors' integer vectors plus their shares (30% dropout), the
noise of the decoded sums measured from the actual answers has the planned variance, the charge is
an independent recomputation of KLS21 Prop. 14 for P_min - c shares, and one record's vector stays
within the stated sensitivities.

Statistical tests state their false-alarm rate ALPHA per test run.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.stats import chi2

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import JobSpec, TaskRejected
from dpfed.algorithms.driver import drive
from dpfed.algorithms.naive_bayes import Layout, evaluate, secure_release, sufficient_statistics
from dpfed.algorithms.params import validate
from dpfed.algorithms.secure_release import release_for
from dpfed.data.datasets import split_parties
from dpfed.federation.secure_gather import SecureGather
from dpfed.simulation.inprocess import make_parties, open_sessions, secure_send, secure_spec
from share_recorder import ShareRecorder

ALPHA = 1e-6
P, PMIN, C = 10, 6, 1
JOBS = 8


def _params(**extra) -> dict:
    return {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
            "min_survivors": PMIN, "colluders": C, "bits": 16, **extra}


@pytest.fixture(scope="module")
def runs(adult):
    """JOBS secure naive Bayes jobs over P parties with 30% dropout; per job the parties' noiseless
    integer vectors and encoded inputs (recorded at the noise step), the survivors and the model."""
    data = split_parties(adult.X_train, adult.y_train, P, "iid", np.random.default_rng(0))
    names = [f"p{i}" for i in range(P)]
    algo = get_algorithm("naive-bayes")
    out = []
    with ShareRecorder() as rec:
        for j in range(JOBS):
            spec = secure_spec(JobSpec(f"nb-secure-{j}", "naive-bayes", _params(), adult.schema), names,
                               sum(len(x) for x, _ in data))
            parties = make_parties(spec, data, seed=7, party_names=names, dropout=0.3)
            sessions = open_sessions(spec, parties)
            recording_send = rec.send(secure_send(sessions))

            coord = algo.coordinator(spec, names)
            gather = SecureGather(spec, release_for(algo, spec), recording_send)
            seen = []

            def g(task, gather=gather, seen=seen):
                agg = gather(task)
                seen.append(agg[0])
                return agg

            try:
                drive(coord, g, algo.combine)
            except ValueError as exc:  # a dropout in the unmask step left too few shares: the job fails
                assert "aborted" in str(exc) and not seen[0].parties
                rec.take()
                continue
            clean, encoded = ({name: v for (_, name), v in d.items()} for d in rec.take())  # one round
            out.append((spec, parties, clean, encoded, seen[0], coord))
    return out


def test_sums_exact_with_30_percent_dropout(runs, adult):
    """The decoded vector is the centred sum mod 2^B of exactly the survivors' encoded inputs (Python
    integers here), and the noiseless part of each input is the party's own statistics vector."""
    dropped = 0
    for spec, parties, clean, encoded, agg, _ in runs:
        plan = secure_release(spec)[1]
        B = plan.noise.bits
        dropped += len(parties) - len(agg.parties)
        assert len(agg.parties) >= PMIN
        total = [sum(int(encoded[n][i]) for n in agg.parties) % (1 << B) for i in range(plan.length)]
        want = [t - (1 << B) if t >= 1 << (B - 1) else t for t in total]
        assert agg.arrays["stats"].dtype == np.int64
        assert agg.arrays["stats"].tolist() == want
        w = secure_release(spec)[0].weights
        for p in parties:
            if p.name in clean:
                np.testing.assert_array_equal(clean[p.name], sufficient_statistics(p.X, p.y, Layout.from_schema(
                    spec.schema), w))
    assert dropped >= 3 and len(runs) >= 4  # 30% dropout actually happened (seeded)
    acc = evaluate(runs[0][5].model(), adult.X_test, adult.y_test, adult.schema)["test_accuracy"]
    assert acc > 0.80


def test_noise_of_decoded_sums_matches_the_plan(runs):
    """Decoded sum minus the survivors' noiseless vectors is the noise of the sum; pooled over entries
    and jobs its variance must be S sigma_share^2 (S survivors) by a two-sided chi-square test at
    ALPHA. Shares planned for all P parties instead of P_min - c would fail it (ratio 0.5)."""
    z2, n = 0.0, 0
    for spec, _, clean, _, agg, _ in runs:
        sigma = secure_release(spec)[1].noise.sigma_share
        noise = agg.arrays["stats"] - sum(clean[s] for s in agg.parties)
        z2 += float((noise.astype(np.float64) ** 2).sum() / (len(agg.parties) * sigma ** 2))
        n += noise.size
    assert n >= 1000
    assert chi2.ppf(ALPHA / 2, n) < z2 < chi2.isf(ALPHA / 2, n), z2 / n


def _kls21_epsilon(sigma: float, n: int, l2: float, l1: float, d: int, delta: float) -> float:
    """KLS21 Prop. 14 eq. (17), written out here, converted by dp-accounting's RDP -> (eps, delta)."""
    orders = np.arange(2, 257, dtype=np.float64)
    tau = 10 * sum(math.exp(-2 * math.pi ** 2 * sigma ** 2 * k / (k + 1)) for k in range(1, n))
    s = math.sqrt(n) * sigma
    a2, a1 = l2 / s, l1 / s
    rdp = np.minimum.reduce([orders * a2 ** 2 / 2 + tau * d, orders / 2 * (a2 ** 2 + 2 * a1 * tau + tau ** 2 * d),
                             orders / 2 * (a2 + tau * math.sqrt(d)) ** 2])
    return float(rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)[0])


def test_epsilon_is_an_independent_recomputation(runs):
    spec, parties = runs[0][0], runs[0][1]
    nb, sp = secure_release(spec)
    w = nb.weights.astype(np.float64)
    want = _kls21_epsilon(sp.noise.sigma_share, PMIN - C, math.sqrt((w ** 2).sum()), w.sum(),
                          Layout.from_schema(spec.schema).length, spec.delta)
    for p in parties:
        assert p.ledger.spent(spec.job_id) == pytest.approx(want, rel=2e-3)
        assert p.ledger.spent(spec.job_id) <= spec.epsilon * (1 + 1e-9)
    assert want > 0.95 * spec.epsilon  # calibrated to the target, not far below


def test_one_record_moves_the_vector_within_the_stated_sensitivity(adult):
    """Every single record's integer vector (here: the 2000 most extreme of adult's training set and
    values at the public bounds) has L2 <= Delta_2 and L1 <= Delta_1 of the charged event."""
    spec = secure_spec(JobSpec("nb-sens", "naive-bayes", _params(), adult.schema), [f"p{i}" for i in range(P)], 10**5)
    nb, _ = secure_release(spec)
    layout = Layout.from_schema(adult.schema)
    X = np.array(adult.X_train, dtype=np.float64)
    Z = np.abs((X[:, layout.num_cols] - layout.lower) / (layout.upper - layout.lower) * 2 - 1).sum(axis=1)
    pick = np.argsort(-Z)[:2000]
    X, y = X[pick], adult.y_train[pick]
    X[:50, layout.num_cols] = layout.upper
    X[50:100, layout.num_cols] = layout.lower
    for i in range(len(X)):
        v = sufficient_statistics(X[i:i + 1], y[i:i + 1], layout, nb.weights).astype(np.float64)
        assert np.sqrt((v ** 2).sum()) <= nb.event.l2_sensitivity + 1e-9
        assert np.abs(v).sum() <= nb.event.l1_sensitivity + 1e-9


def test_distributed_noise_needs_secure_aggregation_and_gaussian_shares(adult):
    with pytest.raises(TaskRejected, match="only under secure aggregation"):
        validate(get_algorithm("naive-bayes"), {"epsilon": 1.0, "noise": "distributed"}, adult.schema)
    with pytest.raises(TaskRejected, match="discrete Gaussian shares"):
        validate(get_algorithm("naive-bayes"), {**_params(), "mechanism": "laplace"}, adult.schema)
    assert validate(get_algorithm("naive-bayes"), {"epsilon": 1.0}, adult.schema)["noise"] == "local"
