"""Masked inputs delivered as partial modular sums (issue 12: workers and ingress shards merge their
parties' masked inputs; the coordinator's SecAgg half receives O(shards) vectors, not O(parties)).

Checked against independent references: the per-party path on the same round (the same survivors,
the same unmask answers), and the survivors' sum mod 2^B computed with Python integers. A partial
sum that overlaps another, names a party twice, has another length or names a party that shared no
keys refuses the round before any unmask request. Statistical tests state their false-alarm rate
(ALPHA, per test run).
"""
from __future__ import annotations

import dataclasses
import functools
import pickle

import numpy as np
import pytest
from scipy.stats import chi2

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import Aggregate, JobSpec, Task
from dpfed.algorithms.driver import drive
from dpfed.algorithms.secure_release import release_for
from dpfed.data.datasets import split_parties
from dpfed.federation import secagg as sa
from dpfed.federation import secure_wire as sw
from dpfed.federation.certs import init_ca, issue
from dpfed.federation.secure_gather import SecureGather
from dpfed.simulation.inprocess import make_parties, open_sessions, secure_send, secure_spec

ALPHA = 1e-6  # false-alarm rate of each chi-square uniformity test below
P = 10
TASK = Task("job-sum", 0, sw.MASKED, {})


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    certs = {}
    for i in range(P):
        crt, key = issue(f"p{i:03d}", d)
        certs[f"p{i:03d}"] = (crt.read_bytes(), key.read_bytes())
    return {"ca": (d / "ca.crt").read_bytes(), "certs": certs}


ROSTER = tuple(f"p{i:03d}" for i in range(P))


def _round(pki, bits: int, d: int, *, gone_advert=(), gone_input=(), seed: int = 0, min_survivors: int = 5):
    """One round's masked inputs on P real clients; two servers routed identically (one for each path).
    Parties in ``gone_advert`` never advertised keys (not routed), those in ``gone_input`` vanish before
    their masked input. Returns (clients, per-party server, partial-sum server, inputs x, masked inputs
    by name)."""
    cfg = sa.SecAggConfig("job-sum", ROSTER, bits=bits, min_survivors=min_survivors)
    clients = {n: sa.SecAggClient(cfg, n, *pki["certs"][n], pki["ca"]) for n in cfg.parties}
    one, merged = sa.SecAggServer(cfg), sa.SecAggServer(cfg)
    adverts = [c.advert() for n, c in clients.items() if n not in gone_advert]
    routed = one.route_adverts(0, adverts)
    merged.route_adverts(0, adverts)
    gen = np.random.default_rng(seed)
    xs = {n: gen.integers(0, 1 << bits, d, dtype=np.uint64) for n in cfg.parties}
    masked = {n: clients[n].masked_input(0, xs[n], routed[n]) for n in routed if n not in gone_input}
    return clients, one, merged, xs, masked


def _part(masked: dict, names, bits: int) -> Aggregate:
    """One shard's partial sum, merged as a shard merges: its parties' answers (masked vector and
    envelopes) through merge_masked."""
    d = next(iter(masked.values())).y.size
    parts = [Aggregate(sw.masked_to_arrays(masked[n], bits, ROSTER), (n,)) for n in names]
    return sw.merge_masked(TASK, parts, bits=bits, length=d)


def _sum(agg: Aggregate, bits: int, d: int) -> sa.MaskedSum:
    return sa.MaskedSum("job-sum", 0, agg.parties, sw.unpack_masked(agg.arrays, bits, d),
                        tuple(sw.envelopes_from_arrays(agg.arrays, "job-sum", 0, ROSTER, prefix=sw.ENV)))


def _expected(xs: dict, names, bits: int) -> np.ndarray:
    """The survivors' sum mod 2^B with Python integers (independent of the uint64 path)."""
    d = len(next(iter(xs.values())))
    return np.array([sum(int(xs[n][i]) for n in names) % (1 << bits) for i in range(d)], dtype=np.uint64)


def _bits_p(v: np.ndarray, bits: int) -> float:
    """p-value of the chi-square test (``bits`` df) that every bit position is a fair coin."""
    ones = ((v[:, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).sum(axis=0).astype(float)
    n = v.size
    return float(chi2.sf((((ones - n / 2) ** 2) / (n / 4)).sum(), bits))


# ------------------------------------------------------------------------------- the server


@pytest.mark.parametrize("bits", [16, 62])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_partial_sums_unmask_to_the_per_party_total_bit_for_bit(pki, bits, dropout):
    """30%: one party gone before advertising keys, two before their masked inputs; without dropouts
    one party does not answer the unmask request. Shards of 3, 3 and 4 parties (the gone ones inside
    them); the envelopes travel inside the partial sums."""
    k = round(dropout * P)
    gone = [f"p{i:03d}" for i in (1, 4, 8)][:k]
    silent = [] if gone else ["p005"]
    clients, one, merged, xs, masked = _round(pki, bits, 300, gone_advert=gone[:1], gone_input=gone[1:],
                                              seed=bits + k)
    shards = [[n for n in names if n in masked] for names in (sorted(clients)[:3], sorted(clients)[3:6],
                                                              sorted(clients)[6:])]
    req1 = one.collect_masked(0, masked.values(), length=300)
    req2 = merged.collect_masked(0, [_sum(_part(masked, s, bits), bits, 300) for s in shards], length=300)
    assert req1 == req2 and set(req1.survivors) == set(masked) and set(req1.dropped) == set(gone[1:])
    for n in req1.survivors:
        assert sorted(map(repr, one.envelopes_for(0, n))) == sorted(map(repr, merged.envelopes_for(0, n)))
    cr = merged.consistency_request(0)  # the consistency round: every survivor signs the set
    merged.add_signatures(0, {n: clients[n].sign_survivors(0, cr.survivors, cr.advert_digests) for n in cr.survivors})
    resps = [clients[n].unmask(0, req1.survivors, req1.dropped, merged.envelopes_for(0, n), merged.signatures_for(0, n))
             for n in req1.survivors if n not in silent]
    total1, total2 = one.unmask(0, resps), merged.unmask(0, resps)
    np.testing.assert_array_equal(total2, total1)
    np.testing.assert_array_equal(total2, _expected(xs, req1.survivors, bits))


def test_overlapping_duplicate_or_misshapen_sums_refuse_the_round(pki):
    clients, _, server, xs, masked = _round(pki, 16, 64)
    names = sorted(masked)
    good = [_sum(_part(masked, names[:5], 16), 16, 64), _sum(_part(masked, names[5:], 16), 16, 64)]
    bad_cases = {
        "overlapping party sets": [good[0], _sum(_part(masked, names[4:], 16), 16, 64)],
        "the same partial sum twice": [good[0], good[0], good[1]],
        "a party listed twice in one sum": [good[0], sa.MaskedSum("job-sum", 0, (names[5], names[5]), good[1].y)],
        "an input and a sum holding it": [*good, masked[names[0]]],
        "another length": [good[0], sa.MaskedSum("job-sum", 0, good[1].names, good[1].y[:63])],
        "another round": [good[0], sa.MaskedSum("job-sum", 1, good[1].names, good[1].y)],
        "an envelope of a party outside the sum": [dataclasses.replace(good[0], envelopes=good[1].envelopes[:1]
                                                                       + good[0].envelopes), good[1]],
    }
    for why, inputs in bad_cases.items():
        s = sa.SecAggServer(server.config)
        s._r(0).mask_sets = dict(server._r(0).mask_sets)
        with pytest.raises(sa.MaskedInputError) as exc:
            s.collect_masked(0, inputs, length=64)
        assert "\n" not in str(exc.value), why
        assert s._r(0).request is None and s._r(0).total is None, why
        with pytest.raises(sa.MaskedInputError):  # the round stays refused, even with good inputs
            s.collect_masked(0, good, length=64)
        with pytest.raises(sa.ProtocolError):  # and nothing can be unmasked
            s.unmask(0, [])
    # a sum naming a party that was sent no keys (it never advertised)
    _, _, s, _, masked = _round(pki, 16, 64, gone_advert=["p003"])
    fake = sa.MaskedSum("job-sum", 0, ("p002", "p003"), masked["p002"].y)
    with pytest.raises(sa.MaskedInputError, match="p003"):
        s.collect_masked(0, [fake], length=64)
    # the good partial sums pass on a fresh, identically routed server
    req = server.collect_masked(0, good, length=64)
    assert req.survivors == tuple(names)


# ------------------------------------------------------------------------------- the merge


def test_merge_is_associative_picklable_and_keeps_a_partys_bad_answer_out(pki):
    _, _, _, _, masked = _round(pki, 16, 128)
    names = sorted(masked)
    merge = pickle.loads(pickle.dumps(functools.partial(sw.merge_masked, bits=16, length=128)))
    single = [Aggregate(sw.masked_to_arrays(masked[n], 16, ROSTER), (n,)) for n in names]
    flat = merge(TASK, single)
    tree = merge(TASK, [merge(TASK, single[:3]), Aggregate({}, ()), merge(TASK, single[3:7]), *single[7:]])
    assert flat.parties == tree.parties == tuple(names)
    np.testing.assert_array_equal(flat.arrays["y"], tree.arrays["y"])
    envs = [set(map(repr, sw.envelopes_from_arrays(a.arrays, "job-sum", 0, ROSTER, prefix=sw.ENV)))
            for a in (flat, tree)]
    assert envs[0] == envs[1] == {repr(e) for n in names for e in masked[n].envelopes}  # every envelope, once
    assert flat.arrays["y"].dtype == np.uint16
    # a party's own answer of another length or type is left out (that party dropped out)
    bad = [Aggregate({"y": np.zeros(127, np.uint16)}, ("p000",)),
           Aggregate({"y": np.zeros(128, np.float64)}, ("p001",))]
    out = merge(TASK, bad + single[2:])
    assert out.parties == tuple(names[2:])
    assert merge(TASK, bad) == Aggregate({}, ())
    # a malformed partial sum of several parties, or a party twice, is an error
    with pytest.raises(ValueError, match="malformed"):
        merge(TASK, [Aggregate({"y": np.zeros(127, np.uint16)}, ("p000", "p001"))])
    with pytest.raises(ValueError, match="twice"):
        merge(TASK, [flat, single[0]])


def test_a_partial_sum_of_masked_vectors_is_uniform_and_the_test_rejects_an_unmasked_sum(pki):
    """Chi-square on the 32 bits of the words of a 3-party and of the whole roster's partial sum of
    masked inputs (each ALPHA); the same test rejects the same partial sum of the unmasked inputs."""
    d, bits = 1 << 16, 32
    clients, _, _, _, _ = _round(pki, bits, 8)
    x = (np.arange(d, dtype=np.uint64) % 100) * np.uint64(3)  # structured, far from uniform
    cfg = next(iter(clients.values())).config
    server = sa.SecAggServer(cfg)
    routed = server.route_adverts(1, [c.advert() for c in clients.values()])
    masked = {n: clients[n].masked_input(1, x, routed[n]) for n in clients}
    for shard in (sorted(clients)[:3], sorted(clients)):
        part = _part(masked, shard, bits)
        y = sw.unpack_masked(part.arrays, bits, d)
        assert _bits_p(y, bits) > ALPHA, shard
        plain = (x * np.uint64(len(shard))) & np.uint64((1 << bits) - 1)
        assert _bits_p(plain, bits) < ALPHA, shard


# ------------------------------------------------------------------------------- SecureGather


def _nb_run(adult, send_merged, dropout: float, aborts: bool = False):
    """A secure naive Bayes job (10 parties, P_min 6) in process; ``send_merged(send)`` or None. Its
    single round aborted (``aborts``), the job fails with the coordinator's error and no model."""
    data = split_parties(adult.X_train[:4000], adult.y_train[:4000], P, "iid", np.random.default_rng(2))
    names = [f"p{i}" for i in range(P)]
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": 6, "bits": 16}
    spec = secure_spec(JobSpec("nb-sums", "naive-bayes", params, adult.schema), names, sum(len(x) for x, _ in data))
    sessions = open_sessions(spec, make_parties(spec, data, seed=11, party_names=names, dropout=dropout))
    algo = get_algorithm("naive-bayes")
    kinds: list[str] = []
    send = secure_send(sessions)

    def recording(tasks):
        kinds.append(next(iter(tasks.values())).kind)
        return send(tasks)

    gather = SecureGather(spec, release_for(algo, spec), recording,
                          send_merged=None if send_merged is None else send_merged(recording))
    coord = algo.coordinator(spec, names)
    if aborts:
        with pytest.raises(ValueError, match="round was aborted"):
            drive(coord, gather, algo.combine)
        return None, gather, kinds
    drive(coord, gather, algo.combine)
    return coord.model(), gather, kinds


def _shards(groups):
    """send_merged as the shards do it: per shard, its parties' answers merged by the (pickled) merge."""
    def make(send):
        def send_merged(tasks, merge):
            merge = pickle.loads(pickle.dumps(merge))
            out = send(tasks)
            parts = []
            for g in groups:
                mine = [Aggregate(out[n], (n,)) for n in g if n in out]
                if mine:
                    parts.append(merge(next(iter(tasks.values())), mine))
            return parts
        return send_merged
    return make


SHARDS3 = [[f"p{i}" for i in range(0, 3)], [f"p{i}" for i in range(3, 6)], [f"p{i}" for i in range(6, 10)]]


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_secure_gather_with_partial_sums_gives_the_per_party_model(adult, dropout):
    ref, g1, _ = _nb_run(adult, None, dropout)
    got, g2, _ = _nb_run(adult, _shards(SHARDS3), dropout)
    assert g2.summary() == g1.summary() and g2.rounds == g1.rounds >= 1 and g2.aborted_rounds == 0
    if dropout:
        assert g2.dropouts >= 1
    assert set(g2.masked_parts) == {3} and min(g1.masked_parts) > 3  # one part per shard, not per party
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


@pytest.mark.parametrize("evil", ["overlap", "length", "party twice"])
def test_a_bad_partial_sum_aborts_the_round_before_any_unmask_request(adult, evil):
    def corrupt(send):
        honest = _shards(SHARDS3)(send)

        def send_merged(tasks, merge):
            parts = list(honest(tasks, merge))
            if evil == "overlap":  # a fourth part naming parties the second and third already hold
                parts.append(Aggregate(parts[1].arrays, (parts[1].parties[0], parts[2].parties[0])))
            elif evil == "length":
                parts[1] = Aggregate({"y": parts[1].arrays["y"][:-1]}, parts[1].parties)
            else:
                parts[2] = Aggregate(parts[2].arrays, parts[2].parties + parts[2].parties[:1])
            return parts
        return send_merged

    _, gather, kinds = _nb_run(adult, corrupt, 0.0, aborts=True)
    assert gather.rounds == 0 and gather.aborted_rounds >= 1
    assert sw.UNMASK not in kinds and sw.ADVERTISE in kinds
