"""k-means with distributed discrete Gaussian noise under secure aggregation, in process: every
round's decoded vector is exactly the survivors' plain integer sums (computed here from the records
and the broadcast centers) plus their noise shares, with 0 % and 30 % dropout; the noise of the decoded
sums measured from the actual answers has the planned variance; the charge is an independent
recomputation of KLS21 Prop. 14 for P_min - c shares over the job's schedule; one record moves a
release by at most the stated sensitivity; a round below P_min reveals nothing; refusals.

Statistical tests state their false-alarm rate ALPHA per test run; everything else is deterministic
(seeded parties and dropouts).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.stats import chi2

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.driver import drive
from dpfed.algorithms.kmeans import coordinator as kc
from dpfed.algorithms.kmeans import secure as ks
from dpfed.algorithms.kmeans import secure_plan as ksp
from dpfed.algorithms.params import validate
from dpfed.algorithms.secure_release import release_for
from dpfed.core import accounting
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.data.datasets import make_blobs
from dpfed.data.schema import Schema
from dpfed.federation import secure_wire as sw
from dpfed.federation.secure_gather import SecureGather
from dpfed.simulation.inprocess import make_parties, open_sessions, secure_send, secure_spec
from share_recorder import ShareRecorder

warnings.filterwarnings("ignore", message="SecureRNG seeded explicitly")

ALPHA = 1e-6
P, PMIN, C = 6, 4, 1
K, D = 3, 5
SCHEMA = Schema.numeric_box(D, -15.0, 15.0)
#: (method, refine_steps / lloyd_iters) cycled over the jobs: every kind of round appears
CONFIGS = [("sample-aggregate", 2), ("sample-aggregate", 0), ("lloyd", 3)]
KINDS = {("sample-aggregate", 2): ["count", "aggregate", "step", "step"],
         ("sample-aggregate", 0): ["count", "aggregate", "sizes"], ("lloyd", 3): ["step"] * 3}


def _params(method: str, steps: int, **extra) -> dict:
    key = "lloyd_iters" if method == "lloyd" else "refine_steps"
    return {"epsilon": 1.0, "delta": 1e-6, "k": K, "method": method, key: steps, "noise": "distributed",
            "secure_aggregation": True, "min_survivors": PMIN, "colluders": C, "bits": 16, **extra}


def _data():
    X, _, _ = make_blobs(6000, D, K, seed=3)
    return [(X[i::P], None) for i in range(P)]


def _run_jobs(dropout: float, jobs: int, tag: str, send_filter=None, epsilon: float = 1.0) -> list[dict]:
    """``jobs`` secure k-means jobs; per job the spec, sessions, and per round the task, the decoded
    aggregate, and every party's noiseless vector and encoded input (recorded at the noise step)."""
    data = _data()
    names = [f"p{i}" for i in range(P)]
    algo = get_algorithm("kmeans")
    out = []
    with ShareRecorder() as rec:
        for j in range(jobs):
            method, steps = CONFIGS[j % len(CONFIGS)]
            params = _params(method, steps, epsilon=epsilon)
            spec = secure_spec(JobSpec(f"km-secure-{tag}-{j}", "kmeans", params, SCHEMA), names,
                               sum(len(x) for x, _ in data))
            parties = make_parties(spec, data, seed=11 + j, party_names=names, dropout=dropout)
            sessions = open_sessions(spec, parties)
            sent: list[Task] = []
            recording = rec.send(secure_send(sessions))

            def recording_send(tasks, recording=recording, sent=sent):
                sent.extend(tasks.values())
                res = recording(tasks)
                return res if send_filter is None else send_filter(tasks, res)

            coord = algo.coordinator(spec, names)
            gather = SecureGather(spec, release_for(algo, spec), recording_send)
            rounds = []

            def g(task, gather=gather, rounds=rounds):
                agg = gather(task)
                rounds.append((task, agg[0]))
                return agg

            drive(coord, g, algo.combine)
            clean, encoded = rec.take()
            out.append({"spec": spec, "parties": parties, "sessions": sessions, "rounds": rounds, "sent": sent,
                        "clean": clean, "encoded": encoded, "coord": coord, "gather": gather,
                        "kinds": KINDS[(method, steps)]})
    return out


@pytest.fixture(scope="module")
def runs0():
    return _run_jobs(0.0, 6, "d0")


@pytest.fixture(scope="module")
def runs30():
    return _run_jobs(0.3, 15, "d30")


def _centred(v: np.ndarray, bits: int) -> np.ndarray:
    v = np.asarray(v, dtype=np.int64) & ((1 << bits) - 1)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v)


def _plain(kind: str, task: Task, X: np.ndarray, scale: int, count_scale: int) -> np.ndarray | None:
    """The plain integer vector of one party, written out here: per record its cluster (nearest
    broadcast center), rint(scale * (x - mid) / half) into that cluster's sums, count_scale into its
    count. None for the aggregate (its blocks come from the party's own random partition)."""
    lo, hi = SCHEMA.lower, SCHEMA.upper
    if kind == "count":
        return np.array([len(X)])
    if kind == "aggregate":
        return None
    Cb = np.asarray(task.arrays["centers"])
    out = np.zeros((K, D + 1), dtype=np.int64)
    for x in np.clip(X, lo, hi):
        c = int(np.argmin([float(np.dot(x - cj, x - cj)) for cj in Cb]))
        out[c, :D] += np.rint(scale * (x - (lo + hi) / 2) / ((hi - lo) / 2)).astype(np.int64)
        out[c, D] += count_scale if kind == "step" else 1
    return out[:, D] if kind == "sizes" else np.concatenate([out[:, :D].ravel(), out[:, D]])


def _check_exact(runs, X_of) -> int:
    """Every unaborted round: decoded == centred sum of the survivors' encoded inputs (Python ints);
    decoded minus their noise shares == the sum of their plain integer vectors. Returns dropouts."""
    dropped = 0
    for run in runs:
        plan = ksp.secure_kmeans_plan(run["spec"])
        for task, agg in run["rounds"]:
            if not agg.parties:
                continue
            rel = plan.release(task.kind)
            B = rel.noise.bits
            dropped += P - len(agg.parties)
            assert len(agg.parties) >= PMIN
            decoded = np.concatenate([np.asarray(agg.arrays[name]).ravel() for name, _ in rel.layout])
            assert decoded.dtype == np.int64
            total = [sum(int(run["encoded"][(task.round, n)][i]) for n in agg.parties) % (1 << B)
                     for i in range(rel.dimension)]
            assert decoded.tolist() == [t - (1 << B) if t >= 1 << (B - 1) else t for t in total]
            noise = sum(_centred(run["encoded"][(task.round, n)].astype(np.int64) - run["clean"][(task.round, n)], B)
                        for n in agg.parties)
            clean = sum(run["clean"][(task.round, n)] for n in agg.parties)
            np.testing.assert_array_equal(decoded - noise, clean)
            for n in agg.parties:
                want = _plain(task.kind, task, X_of[n], rel.scale, rel.count_scale)
                if want is None:  # the aggregate: m block vectors, each in [-S_a, S_a]^{kd}
                    m = int(task.params["blocks"])
                    assert np.abs(run["clean"][(task.round, n)]).max() <= m * rel.scale
                else:
                    np.testing.assert_array_equal(run["clean"][(task.round, n)], want)
    return dropped


def test_decoded_sums_are_the_plain_integer_sums_without_dropout(runs0):
    X_of = {f"p{i}": x for i, (x, _) in enumerate(_data())}
    assert _check_exact(runs0, X_of) == 0
    assert all(len(r["rounds"]) == len(r["kinds"]) and r["gather"].aborted_rounds == 0 for r in runs0)


def test_decoded_sums_are_the_plain_integer_sums_with_30_percent_dropout(runs30):
    X_of = {f"p{i}": x for i, (x, _) in enumerate(_data())}
    assert _check_exact(runs30, X_of) >= 10  # dropouts actually happened (seeded)
    assert sum(r["gather"].dropped_rounds for r in runs30) >= 5


def test_noise_of_decoded_sums_matches_the_plan(runs0, runs30):
    """Decoded sum minus the survivors' plain vectors is the noise of the sum; each entry over its
    variance S sigma_r^2 (S survivors, sigma_r the round's planned share), pooled over entries, rounds
    and jobs, must be chi-square distributed: two-sided test at ALPHA. Shares planned for all P parties
    instead of P_min - c would fail it (ratio 0.5), so would a missing or doubled share."""
    z2, n = 0.0, 0
    for run in runs0 + runs30:
        plan = ksp.secure_kmeans_plan(run["spec"])
        for task, agg in run["rounds"]:
            if not agg.parties:
                continue
            rel = plan.release(task.kind)
            decoded = np.concatenate([np.asarray(agg.arrays[name]).ravel() for name, _ in rel.layout])
            noise = decoded - sum(run["clean"][(task.round, s)] for s in agg.parties)
            z2 += float((noise.astype(np.float64) ** 2).sum() / (len(agg.parties) * rel.noise.sigma_share ** 2))
            n += noise.size
    assert n >= 400  # power: a variance ratio of 0.5 is rejected with probability > 1 - 1e-6
    assert chi2.ppf(ALPHA / 2, n) < z2 < chi2.isf(ALPHA / 2, n), z2 / n


def test_coordinator_centers_are_the_noisy_means_of_the_plain_sums():
    """The centers the coordinator broadcasts after an aggregate or a step lie where the survivors'
    plain sums put them, up to 6 standard deviations of the planned noise of every sum entry involved
    (aggregate: mid + half (sums / S_a) / (m |S|); step: mid + half (sums / S) / (counts / S_c) for
    clusters holding >= 6 count-noise deviations + 1 records): a decoding with the wrong scale, or the
    wrong divisor, fails. Epsilon 50 so that the noise is small against the box. False-alarm rate < 1e-6
    (2e-9 per entry, union bound over < 500 entries)."""
    lo, hi = SCHEMA.lower, SCHEMA.upper
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    checked = 0
    for run in _run_jobs(0.0, 3, "e50", epsilon=50.0) + _run_jobs(0.3, 3, "e50d", epsilon=50.0):
        plan = ksp.secure_kmeans_plan(run["spec"])
        tasks = {t.round: t for t, _ in run["rounds"]}
        for task, agg in run["rounds"]:
            nxt = tasks.get(task.round + 1)
            if not agg.parties or task.kind not in ("aggregate", "step") or nxt is None:
                continue
            rel = plan.release(task.kind)
            tol = 6 * math.sqrt(len(agg.parties)) * rel.noise.sigma_share  # per entry, integer units
            plain = sum(run["clean"][(task.round, n)] for n in agg.parties).astype(np.float64)
            got = np.asarray(nxt.arrays["centers"])
            if task.kind == "aggregate":
                div = rel.scale * int(task.params["blocks"]) * len(agg.parties)
                s = plain.reshape(K, D)
                lo_c, hi_c = mid + half * (s - tol) / div, mid + half * (s + tol) / div
                ok = np.ones(K, bool)
            else:
                s, c = plain[:K * D].reshape(K, D), plain[K * D:]
                ok = c - tol > rel.count_scale
                corners = np.stack([(s + a * tol) / (c[:, None] + b * tol) for a in (-1, 1) for b in (-1, 1)])
                lo_c = mid + half * corners.min(0) * rel.count_scale / rel.scale
                hi_c = mid + half * corners.max(0) * rel.count_scale / rel.scale
            lo_c, hi_c = np.clip(lo_c, lo, hi), np.clip(hi_c, lo, hi)
            assert np.all((got[ok] >= lo_c[ok] - 1e-9) & (got[ok] <= hi_c[ok] + 1e-9)), (task.kind, got, lo_c, hi_c)
            checked += int(ok.sum())
    assert checked >= 20


def _kls21_rdp(orders: np.ndarray, sigma: float, n: int, l2: float, l1: float, d: int) -> np.ndarray:
    """KLS21 Prop. 14 eq. (17), written out here."""
    tau = 10 * sum(math.exp(-2 * math.pi ** 2 * sigma ** 2 * k / (k + 1)) for k in range(1, n))
    s = math.sqrt(n) * sigma
    a2, a1 = l2 / s, l1 / s
    return np.minimum.reduce([orders * a2 ** 2 / 2 + tau * d, orders / 2 * (a2 ** 2 + 2 * a1 * tau + tau ** 2 * d),
                              orders / 2 * (a2 + tau * math.sqrt(d)) ** 2])


def _independent(spec: JobSpec, kinds: list[str]) -> tuple[float, list]:
    """(epsilon, events) of the job from its public parameters: the schedule and the sensitivities
    written out here (S = 2^16, S_c = rint(S (d/3)^(1/4))), the share std of each kind from the public plan."""
    S = 1 << 16
    Sc = round(S * (D / 3) ** 0.25)
    sens = {"count": (1.0, 1.0, 1), "sizes": (1.0, 1.0, K),
            "aggregate": (2 * S * math.sqrt(K * D), 2.0 * S * K * D, K * D),
            "step": (math.sqrt(D * S * S + Sc * Sc), float(D * S + Sc), K * (D + 1))}
    orders = np.arange(2, 257, dtype=np.float64)
    rdp, events = np.zeros_like(orders), []
    for r, kind in enumerate(kinds):
        sigma = get_algorithm("kmeans").party_for(spec.params).plan(spec, Task(spec.job_id, r, kind)).noise.sigma_share
        l2, l1, d = sens[kind]
        rdp += _kls21_rdp(orders, sigma, PMIN - C, l2, l1, d)
        events.append(DistributedDiscreteGaussianDpEvent(float(sigma), PMIN - C, float(l2), float(l1), int(d)))
    return float(rdp_privacy_accountant.compute_epsilon(orders, rdp, spec.delta)[0]), events


def test_epsilon_is_an_independent_recomputation(runs0):
    """A party's charge equals KLS21 Prop. 14 composed over the schedule with P_min - c shares and the
    sensitivities derived here; the charged event is exactly those rounds' events; the coordinator's
    recomputation from the public spec is the same event."""
    for run in runs0:
        spec = run["spec"]
        want, events = _independent(spec, run["kinds"])
        charged = run["sessions"][0].event
        assert accounting.flatten([charged]) == accounting.flatten(events)
        recomputed = get_algorithm("kmeans").party_for(spec.params).job_event(spec)
        assert accounting.event_to_json(recomputed) == accounting.event_to_json(charged)
        for p in run["parties"]:
            assert p.ledger.spent(spec.job_id) == pytest.approx(want, rel=2e-3)
            assert p.ledger.spent(spec.job_id) <= spec.epsilon * (1 + 1e-9)
        assert want > 0.95 * spec.epsilon  # calibrated to the target, not far below


def test_one_record_moves_each_release_within_its_sensitivity():
    """Single records (box corners, the centre, random points) give step / sizes vectors with L2 <= Delta_2
    and L1 <= Delta_1 of the charged event; two block answers anywhere in the box differ by at most the
    aggregate's sensitivities."""
    spec = secure_spec(JobSpec("km-sens", "kmeans", _params("sample-aggregate", 1), SCHEMA),
                       [f"p{i}" for i in range(P)], 6000)
    plan = ksp.secure_kmeans_plan(spec)
    lo, hi = SCHEMA.lower, SCHEMA.upper
    corners = np.array(np.meshgrid(*np.stack([lo, hi], axis=1))).reshape(D, -1).T
    pts = np.vstack([corners, (lo + hi) / 2, np.random.default_rng(0).uniform(lo, hi, (200, D))])
    centers = np.random.default_rng(1).uniform(lo, hi, (K, D))
    step = plan.release("step")
    for x in pts:
        v = ks.step_vector(x[None], centers, lo, hi, step.scale, step.count_scale).astype(np.float64)
        assert np.sqrt((v ** 2).sum()) <= step.event.l2_sensitivity + 1e-9
        assert np.abs(v).sum() <= step.event.l1_sensitivity + 1e-9
        assert np.abs(ks.sizes_vector(x[None], centers)).sum() == 1
    agg = plan.release("aggregate")
    a = ks.aggregate_vector(corners[:1], lo, hi, K, 1, agg.scale, np.random.default_rng(0))  # one block: anchors
    b = np.rint(agg.scale * np.ones(K * D)).astype(np.int64)                                 # the far corner
    c = -b
    for u, v in ((a, b), (b, c), (a, c)):
        diff = (u - v).astype(np.float64)
        assert np.sqrt((diff ** 2).sum()) <= agg.event.l2_sensitivity + 1e-9
        assert np.abs(diff).sum() <= agg.event.l1_sensitivity + 1e-9


def test_a_round_below_pmin_reveals_nothing():
    """The masked inputs of round 1 (the aggregate) reach the coordinator from only PMIN - 1 parties:
    no unmask request is sent for that round, the round's aggregate is empty, the centers do not
    move, and the job goes on (the other rounds complete)."""
    def filt(tasks, res):
        t = next(iter(tasks.values()))
        if t.kind == sw.MASKED and t.round == 1:
            keep = sorted(res)[:PMIN - 1]
            return {n: a for n, a in res.items() if n in keep}
        return res

    run = _run_jobs(0.0, 1, "abort", send_filter=filt)[0]
    assert run["gather"].aborted_rounds == 1
    assert not [t for t in run["sent"] if t.round == 1 and t.kind == sw.UNMASK]
    (t1, a1), = [(t, a) for t, a in run["rounds"] if t.round == 1]
    assert a1.parties == () and a1.arrays == {}
    (t2, _), = [(t, a) for t, a in run["rounds"] if t.round == 2]
    start = kc.SecureKMeansCoordinator(run["spec"], [f"p{i}" for i in range(P)]).C
    np.testing.assert_array_equal(t2.arrays["centers"], start)  # round 2 starts where the job started
    assert [bool(a.parties) for _, a in run["rounds"]] == [True, False, True, True]


def test_refusals_name_the_reason():
    with pytest.raises(TaskRejected, match="only under secure aggregation"):
        validate(get_algorithm("kmeans"), {"epsilon": 1.0, "noise": "distributed"}, SCHEMA)
    with pytest.raises(TaskRejected, match="center of attention"):
        validate(get_algorithm("kmeans"), _params("sample-aggregate", 2, aggregator="coa"), SCHEMA)
    assert validate(get_algorithm("kmeans"), {"epsilon": 1.0}, SCHEMA)["noise"] == "local"
    spec = secure_spec(JobSpec("km-ref", "kmeans", _params("sample-aggregate", 2), SCHEMA),
                       [f"p{i}" for i in range(P)], 6000)
    half = get_algorithm("kmeans").party_for(spec.params)
    C0 = np.zeros((K, D))
    bad = [Task(spec.job_id, 4, "step", arrays={"centers": C0}),         # beyond the schedule
           Task(spec.job_id, 2, "sizes", arrays={"centers": C0}),        # wrong kind for round 2
           Task(spec.job_id, 2, "step", arrays={"centers": C0 + 99.0}),  # outside the public box
           Task(spec.job_id, 2, "step", arrays={"centers": np.zeros((K + 1, D))}),
           Task(spec.job_id, 1, "aggregate", params={"blocks": 2}),
           Task(spec.job_id, 1, "aggregate", params={"blocks": 5, "extra": 1}),
           Task(spec.job_id, 0, "count", params={"blocks": 5})]
    for t in bad:
        with pytest.raises(TaskRejected):
            half.check_task(spec, t)
    assert half.plan(spec, bad[0]) is None and half.plan(spec, bad[1]) is None
    half.check_task(spec, Task(spec.job_id, 2, "step", arrays={"centers": C0}))
    with pytest.raises(TaskRejected, match="only through secure aggregation"):
        half.answer(spec, Task(spec.job_id, 0, "count"), np.zeros((3, D)), None, None)
