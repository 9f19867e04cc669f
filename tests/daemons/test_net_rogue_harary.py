"""A coordinator that lies to a 100-party SecAgg+ job learns no single input (issue 24), over real gRPC with
mutual TLS: 100 real party daemons (threads of the test process, four records each) connected to the
hostile coordinator (:mod:`evil_coordinator`), a secure naive Bayes job with P_min 70 and no colluder, so
a random Harary graph of 24 neighbours and t = 2 (:func:`~dpfed.federation.secagg_graph.harary_parameters`:
2t is far below the neighbour count, the setting in which the issue's attack needs no colluder).

The attack on a target T with neighbours A_T, H the first t of them and R the rest: T is told that H
dropped (it would reveal its pairwise seeds with H), the members of R that T dropped (they would reveal
their seeds with T), the members of H and everyone else that all survived (H would return t shares of
T's self mask). Each party signs the set it is told; the coordinator relays to each the signatures made
on its own set. With the consistency round T refuses (nobody else signed its set), a second set asked of
H is refused, and the seeds of T with H never leave: T's input stays masked. With the signature check
disabled (monkeypatched, in-process parties) the same messages unmask T's input exactly, which shows
the attack is real and the test able to fail.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import JobSpec
from dpfed.data.schema import Schema
from dpfed.federation import secagg as sa
from dpfed.federation import secagg_client
from dpfed.federation import secure_wire as sw
from dpfed.federation.secagg_crypto import add_masks, clear_top, mask_dtype
from dpfed.federation.secagg_shamir import reconstruct_secret
from evil_coordinator import EvilCoordinator
from net_helpers import ThreadParty, make_pki, party_config, stop_parties

N, P_MIN, BITS = 100, 70, 16
SCHEMA = Schema.numeric_box(2, 0.0, 1.0, n_classes=2)
NAMES = [f"party-{i}" for i in range(N)]


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """The hostile coordinator and 100 party daemons (four records each), shared by this module's jobs."""
    root = tmp_path_factory.mktemp("harary")
    pki = make_pki(root / "pki", parties=N)
    cpu = time.process_time()
    with EvilCoordinator(pki.files("coordinator"), max_workers=N + 40) as ev:
        parties: list[ThreadParty] = []
        try:
            for i, name in enumerate(NAMES):
                rng = np.random.default_rng(i)
                X, y = rng.uniform(size=(4, 2)), rng.integers(0, 2, 4).astype(np.int64)
                cfg = party_config(pki, root, name, ev.port, data=X, labels=y, schema=SCHEMA, seed=None,
                                   epsilon_limit=50.0)
                parties.append(ThreadParty(dataclasses.replace(cfg, accountant="rdp")))
            assert sorted(ev.wait_registered(N, timeout=120)) == sorted(NAMES)
            yield ev, parties
        finally:
            stop_parties(parties)
            print(f"\n100-party Harary module: {time.process_time() - cpu:.1f} CPU s (test process, all threads)")
            assert all(p.error is None for p in parties)


@pytest.fixture
def inputs(monkeypatch):
    """What each party masked (its encoded input x), recorded inside the party: the truth to compare with."""
    seen: dict[tuple[str, str], tuple[np.ndarray, int]] = {}
    real = sa.SecAggClient.masked_input

    def spy(self, r, x_mod, adverts):
        seen[(self.config.job_id, self.name)] = np.array(x_mod, dtype=np.uint64), self.config.bits
        return real(self, r, x_mod, adverts)

    monkeypatch.setattr(sa.SecAggClient, "masked_input", spy)
    return seen


def _spec(job: str) -> JobSpec:
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": P_MIN, "bits": BITS, "records": 400, "roster": NAMES}
    return JobSpec(job, "naive-bayes", params, SCHEMA)


def _lying_round(ev, spec):
    """Offer, adverts, masked inputs (each party gets its neighbours' adverts), then the attack's sets signed
    and the unmask requests sent to T, H and R. Returns (config, task kind, T, H, masked answers, unmask results)."""
    job = spec.job_id
    assert all(r.accept for r in ev.offer_all(spec, N)), "every party accepts the job"
    cfg = sw.secagg_config(spec, BITS)
    assert cfg.degree is not None and 24 <= cfg.degree <= 34 and cfg.threshold == 2, (cfg.degree, cfg.threshold)
    task = get_algorithm(spec.algorithm).coordinator(spec, NAMES).next_task()
    kind = {"kind": task.kind}
    res = ev.scatter(job, 0, sw.ADVERTISE, {n: (kind, {}) for n in NAMES})
    adverts = {n: sw.adverts_from_arrays(r.arrays, job, NAMES)[0] for n, r in res.items()}
    inner = {sw.INNER + k: np.asarray(v) for k, v in task.arrays.items()}
    params = {"kind": task.kind, "params": dict(task.params)}
    tasks = {n: (params, {**inner, **sw.adverts_to_arrays([adverts[n]] + [adverts[v] for v in cfg.neighbours(n)],
                                                          NAMES, sw.ADV)}) for n in NAMES}
    # one party first: its noise sampler's table (dgauss_alias, an lru_cache) is then built once, not by 100
    # threads of this one process at the same time (separate daemons each build their own anyway)
    masked = ev.scatter(job, 0, sw.MASKED, {NAMES[0]: tasks.pop(NAMES[0])})
    masked.update(ev.scatter(job, 0, sw.MASKED, tasks))
    assert not any(r.error for r in masked.values()), [r.error for r in masked.values() if r.error][:1]
    target = NAMES[0]
    nb = sorted(cfg.neighbours(target))
    hold, rest = nb[:cfg.threshold], nb[cfg.threshold:]
    told = {n: tuple(NAMES) for n in NAMES}
    told[target] = tuple(n for n in NAMES if n not in hold)
    told.update({v: tuple(n for n in NAMES if n != target) for v in rest})
    sign = {n: ({"kind": task.kind, "survivors": list(s)},
                sw.consistency_to_arrays(sa.ConsistencyRequest(job, 0, s, {v: adverts[v].digest() for v in s}),
                                         NAMES)) for n, s in told.items()}
    signed = ev.scatter(job, 0, sw.CONSISTENCY, sign)
    assert not any(r.error for r in signed.values())
    sigs = {n: np.asarray(r.arrays["sig"], dtype=np.uint8).tobytes() for n, r in signed.items()}
    unmask = {}
    for n in [target, *nb]:
        relay = [(v, sigs[v]) for v in sorted({n, *cfg.neighbours(n)}) if v in told[n] and told[v] == told[n]]
        unmask[n] = _unmask_task(task.kind, masked, n, told[n], relay)
    return cfg, task.kind, target, hold, masked, ev.scatter(job, 0, sw.UNMASK, unmask)


def _unmask_task(kind, masked, n, survivors, relay):
    envs = [e for r in masked.values() for e in sw.envelopes_from_arrays(r.arrays, "", 0, NAMES, prefix=sw.ENV)
            if e.receiver == n]
    dropped = [v for v in NAMES if v not in survivors]
    return ({"kind": kind, "survivors": list(survivors), "dropped": dropped},
            {**sw.envelopes_to_arrays(envs, NAMES, sw.ENV), **sw.signatures_to_arrays(relay, NAMES)})


def _unmasked(cfg, spec, target, masked, answers, bits: int) -> np.ndarray | None:
    """The target's input as the coordinator can rebuild it from what it holds (its masked vector, the shares
    of its self mask and the pairwise seeds revealed), or None if something it needs was never revealed."""
    resp = {n: sw.unmask_from_arrays(r.arrays, spec.job_id, 0, n, NAMES) for n, r in answers.items() if not r.error}
    shares = [a.self_mask_shares[target] for a in resp.values() if target in a.self_mask_shares]
    seeds = {}
    for v in cfg.neighbours(target):
        k = resp[target].pairwise_seeds.get(v) if target in resp else None
        k = k or (resp[v].pairwise_seeds.get(target) if v in resp else None)
        if k is None:
            return None
        seeds[v] = k
    if len(shares) < cfg.threshold:
        return None
    acc = np.asarray(masked[target].arrays["y"]).astype(mask_dtype(bits))
    # the target added +PRG(b) and +PRG(k_tv) for t < v, -PRG(k_tv) for t > v (SecAggClient.masked_input)
    add_masks(acc, [(reconstruct_secret(shares, cfg.threshold), True)] + [(k, target < v) for v, k in seeds.items()], 0)
    return clear_top(acc, bits).astype(np.uint64)


def test_inconsistent_sets_on_a_100_party_harary_job_recover_no_input(federation, inputs):
    ev, parties = federation
    spec = _spec("rogue-harary")
    cfg, kind, target, hold, masked, answers = _lying_round(ev, spec)
    assert answers[target].error and not answers[target].arrays, "the target refuses: its set is signed by no neighbour"
    assert "Consistency" in answers[target].error, answers[target].error
    for h in hold:  # H answered for "everyone survived"; a second set for the seeds with T is refused
        retry = ev.scatter(spec.job_id, 0, sw.UNMASK, {h: _unmask_task(
            kind, masked, h, tuple(n for n in NAMES if n != target), [])})[h]
        assert retry.error and not retry.arrays, retry.arrays
        got = sw.unmask_from_arrays(answers[h].arrays, spec.job_id, 0, h, NAMES) if not answers[h].error else None
        assert got is None or target not in got.pairwise_seeds
    assert _unmasked(cfg, spec, target, masked, answers, inputs[(spec.job_id, target)][1]) is None
    for p in parties:  # one charge per party: the plan, nothing else
        assert p.daemon.ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"]


def test_without_the_signature_check_the_same_attack_unmasks_the_target(federation, inputs, monkeypatch):
    """The control: parties that answer any set they signed themselves (check_signatures disabled) give the
    lying coordinator the target's input, equal to what the target masked."""
    ev, _ = federation
    monkeypatch.setattr(secagg_client, "check_signatures", lambda *a, threshold, **k: threshold)
    spec = _spec("rogue-harary-unchecked")
    cfg, _, target, _, masked, answers = _lying_round(ev, spec)
    assert not answers[target].error, answers[target].error
    truth, bits = inputs[(spec.job_id, target)]
    x = _unmasked(cfg, spec, target, masked, answers, bits)
    assert x is not None and np.array_equal(x, truth)
