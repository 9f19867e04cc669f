"""Secure aggregation (Bonawitz et al. 2017; SecAgg+ graphs, Bell et al. 2020): an in-memory run of
the whole protocol, and the parties' own checks against a curious coordinator.

Expected sums are computed independently with Python integers; statistical tests state their
false-alarm rate (alpha) per test run.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
import types

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from scipy.stats import chi2

from dpfed.federation import secagg as sa
from dpfed.federation import secagg_client, secagg_crypto
from dpfed.federation.certs import init_ca, issue

ALPHA = 1e-6  # false-alarm rate of each chi-square uniformity test below


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    """A deployment CA, 200 party certificates, and a foreign CA issuing a look-alike 'p001'."""
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    certs = {}
    for i in range(200):
        name = f"p{i:03d}"
        crt, key = issue(name, d)
        certs[name] = (crt.read_bytes(), key.read_bytes())
    crt, key = issue("coordinator", d)
    certs["coordinator"] = (crt.read_bytes(), key.read_bytes())
    evil = tmp_path_factory.mktemp("evil")
    init_ca(evil)
    crt, key = issue("p001", evil)
    return {"ca": (d / "ca.crt").read_bytes(), "certs": certs, "evil_p001": (crt.read_bytes(), key.read_bytes())}


def _clients(pki: dict, cfg: sa.SecAggConfig) -> dict[str, sa.SecAggClient]:
    return {n: sa.SecAggClient(cfg, n, *pki["certs"][n], pki["ca"]) for n in cfg.parties}


def _names(p: int) -> tuple[str, ...]:
    return tuple(f"p{i:03d}" for i in range(p))


def _sign_all(clients, server, r, skip=()):
    """The consistency round: every survivor (but ``skip``) signs the survivor set the server claims."""
    cr = server.consistency_request(r)
    server.add_signatures(r, {n: clients[n].sign_survivors(r, cr.survivors, cr.advert_digests)
                              for n in cr.survivors if n not in skip})


def _unmask(clients, server, r, req, n, envelopes=None):
    """``n``'s answer to the server's unmask request (the consistency round run first, see _sign_all)."""
    return clients[n].unmask(r, req.survivors, req.dropped,
                             server.envelopes_for(r, n) if envelopes is None else envelopes,
                             server.signatures_for(r, n))


def _run_round(clients, server, r, xs, before_input=(), after_input=()):
    """One round; parties in ``before_input`` vanish before sending their masked input (declared
    dropped), those in ``after_input`` after it (not answering the unmask request). Returns
    (sum, request, responses)."""
    routed = server.route_adverts(r, [c.advert() for c in clients.values()])
    inputs = [clients[n].masked_input(r, xs[n], routed[n]) for n in routed if n not in before_input]
    req = server.collect_masked(r, inputs)
    _sign_all(clients, server, r)
    resps = [_unmask(clients, server, r, req, n) for n in req.survivors if n not in after_input]
    return server.unmask(r, resps), req, resps


def _expected(xs: dict, names, bits: int) -> np.ndarray:
    """The survivors' sum mod 2^B with Python integers (independent of the numpy uint64 path)."""
    d = len(next(iter(xs.values())))
    return np.array([sum(int(xs[n][i]) for n in names) % (1 << bits) for i in range(d)], dtype=np.uint64)


def _chi2_bytes(v: np.ndarray, nbytes: int) -> float:
    """p-value of the chi-square test that the low ``nbytes`` bytes of each word are uniform."""
    b = v.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :nbytes].ravel()
    counts = np.bincount(b, minlength=256)
    exp = b.size / 256
    return float(chi2.sf(((counts - exp) ** 2 / exp).sum(), 255))


def _chi2_bits(v: np.ndarray, bits: int) -> float:
    """p-value of the chi-square test (``bits`` df) that every bit position is a fair coin."""
    ones = ((v[:, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).sum(axis=0).astype(float)
    n = v.size
    return float(chi2.sf((((ones - n / 2) ** 2) / (n / 4)).sum(), bits))


# ------------------------------------------------------------------------------- Shamir


def test_shamir_any_t_shares_reconstruct_and_t_minus_1_do_not():
    secret = int.from_bytes(bytes(range(32)), "big")
    xs = [3, 5, 8, 11, 13, 21, 34]
    shares = sa.shamir_split(secret, xs, 4)
    for sub in itertools.combinations(zip(xs, shares, strict=True), 4):
        assert sa.shamir_reconstruct(sub) == secret
    for sub in itertools.combinations(zip(xs, shares, strict=True), 3):
        assert sa.shamir_reconstruct(sub) != secret  # fails only with probability ~2^-521


def test_shamir_t_minus_1_shares_exactly_uniform_small_field():
    """Exact argument: over GF(7), t = 3, the map from the two random coefficients to any two shares
    is a bijection onto GF(7)^2 for every secret, so t-1 shares have the same (uniform) distribution
    whatever the secret."""
    p, t = 7, 3
    for xs in itertools.combinations(range(1, p), t - 1):
        for secret in range(p):
            seen = [tuple(sa._shamir_eval(secret, c, xs, p)) for c in itertools.product(range(p), repeat=t - 1)]
            assert sorted(seen) == sorted(itertools.product(range(p), repeat=t - 1))


def test_shamir_split_t_minus_1_shares_chi_square():
    """The real sampler, GF(13), t = 3: the pair of shares at x = 1, 2 is uniform on 169 cells for two
    secrets (chi-square, alpha 1e-6 each); the same test rejects t = 2 (2 shares then fix the secret)."""
    p, n = 13, 13 * 13 * 120
    crit = chi2.isf(ALPHA, p * p - 1)

    def stat(secret: int, t: int) -> float:
        cells = np.zeros(p * p)
        for _ in range(n):
            a, b = sa.shamir_split(secret, [1, 2, 3], t, p)[:2]
            cells[a * p + b] += 1
        return float(((cells - n / p**2) ** 2 / (n / p**2)).sum())

    assert stat(0, 3) < crit and stat(5, 3) < crit
    assert stat(5, 2) > crit


# ------------------------------------------------------------------------------- sums with dropouts


@pytest.mark.parametrize("bits", [16, 62])
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.3])
def test_sum_exact_with_dropouts_over_many_rounds_with_the_same_keys(pki, bits, fraction):
    """10 parties, 8 rounds of one job with the same long-term keys; per round a random fraction drops
    before sending its masked input (declared dropped: the survivors reveal their round seeds with it),
    and in rounds without such a dropout one survivor does not answer the unmask request (its self mask
    is rebuilt from its neighbours' shares)."""
    cfg = sa.SecAggConfig("job-drop", _names(10), bits=bits, min_survivors=5)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    gen = np.random.default_rng(int(fraction * 10) + bits)
    for r in range(8):
        xs = {n: gen.integers(0, 1 << bits, 257, dtype=np.uint64) for n in cfg.parties}
        gone = list(gen.permutation(cfg.parties)[: round(fraction * 10)])
        late = [] if gone else [cfg.parties[r]]
        total, req, _ = _run_round(clients, server, r, xs, gone, late)
        assert set(req.survivors) == set(cfg.parties) - set(gone) and set(req.dropped) == set(gone)
        np.testing.assert_array_equal(total, _expected(xs, req.survivors, bits))


def test_secagg_plus_graph_200_parties_degree_log_and_sum_with_30_percent_dropouts(pki):
    cfg = sa.SecAggConfig("job-plus", _names(200), bits=32, min_survivors=100)
    k = cfg.degree
    assert k is not None and k <= 6 * math.log2(200) and k < 199
    for u in cfg.parties:
        nb = cfg.neighbours(u)
        assert len(nb) == k and u not in nb and all(u in cfg.neighbours(v) for v in nb)
    k1000, _ = sa.harary_parameters(1000, cfg.corrupt_fraction, cfg.dropout_fraction)
    assert k < k1000 <= 8 * math.log2(1000)  # grows, but logarithmically
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    gen = np.random.default_rng(200)
    for r in range(2):
        xs = {n: gen.integers(0, 1 << 32, 64, dtype=np.uint64) for n in cfg.parties}
        gone = list(gen.permutation(cfg.parties)[:60])
        total, req, resps = _run_round(clients, server, r, xs, gone)
        assert len(req.survivors) == 140
        assert max(len(x.self_mask_shares) + len(x.pairwise_seeds) for x in resps) <= k
        np.testing.assert_array_equal(total, _expected(xs, req.survivors, 32))


def _cover_ok(cfg: sa.SecAggConfig, survivors, dropped, asked) -> bool:
    """Independently of the server: the asked survivors can remove every mask if they all answer. Each
    survivor with a dropped neighbour is asked (only it knows that pairwise seed), and each survivor v has
    >= t asked survivors among its neighbours (holders of its envelopes)."""
    surv, drop, asked = set(survivors), set(dropped), set(asked)
    if not asked <= surv:
        return False
    if any(set(cfg.neighbours(u)) & drop and u not in asked for u in surv):
        return False
    return all(len(set(cfg.neighbours(v)) & asked) >= cfg.threshold for v in surv)


@pytest.mark.parametrize("p, colluders, fraction", [(8, 0, 0.0), (8, 0, 0.25), (100, 0, 0.0), (100, 5, 0.0),
                                                    (100, 0, 0.1), (100, 5, 0.3)])
def test_unmask_request_goes_to_just_enough_survivors_and_their_answers_give_the_exact_sum(pki, p, colluders,
                                                                                            fraction):
    """The coordinator asks only the survivors it needs (SecAggServer.unmaskers); their answers alone
    remove every mask. Without dropouts that is a small part of the survivors: at 100 parties (Harary,
    24-26 neighbours) with t = 2 about n t / k parties; the cover is checked against the graph here."""
    cfg = sa.SecAggConfig(f"job-few-{p}-{colluders}-{fraction}", _names(p), bits=16, min_survivors=max(2, int(0.7 * p)),
                          corrupt_fraction=colluders / p, dropout_fraction=0.3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    gen = np.random.default_rng(p + colluders)
    for r in range(3):
        xs = {n: gen.integers(0, 1 << 16, 33, dtype=np.uint64) for n in cfg.parties}
        gone = set(gen.permutation(cfg.parties)[: round(fraction * p)].tolist())
        routed = server.route_adverts(r, [c.advert() for c in clients.values()])
        req = server.collect_masked(r, [clients[n].masked_input(r, xs[n], routed[n]) for n in routed if n not in gone])
        _sign_all(clients, server, r)
        asked = server.unmaskers(r)
        assert _cover_ok(cfg, req.survivors, req.dropped, asked)
        for drop_one in sorted(asked)[:3]:  # one asked party fewer is not enough (minimal enough to matter)
            if not _cover_ok(cfg, req.survivors, req.dropped, set(asked) - {drop_one}):
                break
        else:
            pytest.fail("the asked set is not near-minimal: any of 3 parties could be left out")
        resps = [_unmask(clients, server, r, req, n) for n in asked]
        np.testing.assert_array_equal(server.unmask(r, resps), _expected(xs, req.survivors, 16))
        if not gone:
            bound = math.ceil(2.5 * p * cfg.threshold / cfg.neighbour_count) + 1
            assert len(asked) <= bound, (len(asked), cfg.threshold)
            if p == 100 and colluders == 0:
                assert len(asked) <= 20


def test_unmasking_from_a_set_missing_one_holder_fails_and_says_so(pki):
    """The cover is needed: leave out one asked party that some survivor's shares depend on, and the
    server cannot rebuild that self mask (the gather then asks the other survivors)."""
    cfg = sa.SecAggConfig("job-few-short", _names(100), bits=16, min_survivors=70, dropout_fraction=0.3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    xs = {n: np.arange(17, dtype=np.uint64) for n in cfg.parties}
    routed = server.route_adverts(0, [c.advert() for c in clients.values()])
    req = server.collect_masked(0, [clients[n].masked_input(0, xs[n], routed[n]) for n in routed])
    _sign_all(clients, server, 0)
    asked = server.unmaskers(0)
    short = next(set(asked) - {u} for u in asked if not _cover_ok(cfg, req.survivors, req.dropped, set(asked) - {u}))
    resps = {n: _unmask(clients, server, 0, req, n) for n in short}
    with pytest.raises(sa.ReconstructionError, match="threshold"):
        server.unmask(0, resps.values())
    rest = [n for n in req.survivors if n not in short]
    resps.update({n: _unmask(clients, server, 0, req, n) for n in rest})
    np.testing.assert_array_equal(server.unmask(0, resps.values()), _expected(xs, req.survivors, 16))


def test_a_survivor_silent_in_the_unmask_step_with_a_dropped_neighbour_aborts_the_round(pki):
    """What amortised keys give up (module docstring): p003's pairwise seed with the dropped p005 is known
    only to the two of them, so without p003's answer the server cannot unmask the round and says whose
    seed it lacks."""
    cfg = sa.SecAggConfig("job-silent", _names(6), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    xs = {n: np.arange(1 << 14, dtype=np.uint64) % np.uint64(50) for n in cfg.parties}
    with pytest.raises(sa.ReconstructionError, match="p003"):
        _run_round(clients, server, 0, xs, ["p005"], ["p003"])


# ------------------------------------------------------------------------------- coordinator's view


def test_masked_vector_is_uniform_and_the_test_rejects_an_unmasked_one(pki):
    """Chi-square on bytes (255 df) and on bits (32 df) of one party's masked vector, alpha 1e-6 each."""
    cfg = sa.SecAggConfig("job-view", _names(5), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    d = 1 << 16
    x = (np.arange(d, dtype=np.uint64) % 100) * np.uint64(3)  # structured, far from uniform
    routed = server.route_adverts(0, [c.advert() for c in clients.values()])
    y = clients["p002"].masked_input(0, x, routed["p002"]).y
    assert _chi2_bytes(y, 4) > ALPHA and _chi2_bits(y, 32) > ALPHA
    assert _chi2_bytes(x, 4) < ALPHA and _chi2_bits(x, 32) < ALPHA
    # one unit changed in one coordinate still fails the bit test: the test's power is not a fluke
    assert _chi2_bits(x + np.uint64(1 << 20), 32) < ALPHA


def _strip(y: np.ndarray, seeds: dict[str, bytes], me: str, r: int, bits: int) -> np.ndarray:
    """y minus the pairwise masks of ``me`` with each v, expanded from ``seeds[v]`` with round r's nonce."""
    out = y.copy()
    for v, k in seeds.items():
        m = sa.expand_mask(k, r, y.size, bits)
        out = out - m if me < v else out + m
    return out & np.uint64((1 << bits) - 1)


def test_late_input_of_dropped_party_cannot_be_unmasked(pki):
    """p005 is declared dropped in round 0, then its masked input arrives. The coordinator holds every
    survivor's revealed seed k_{v,p005},0, every advert and envelope (it even passes p005's envelopes on
    with the unmask requests): removing all of p005's pairwise masks
    leaves x + PRG(b_p005,0), still uniform; honest survivors refuse a second request calling p005 a
    survivor, and t-1 colluders' shares of b_p005,0 do not rebuild it (the server's reconstruction fails)."""
    cfg = sa.SecAggConfig("job-late", _names(8), bits=32, min_survivors=4)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    d = 1 << 15
    xs = {n: (np.arange(d, dtype=np.uint64) * np.uint64(7)) % np.uint64(1000) for n in cfg.parties}
    routed = server.route_adverts(0, [c.advert() for c in clients.values()])
    req = server.collect_masked(0, [clients[n].masked_input(0, xs[n], routed[n]) for n in cfg.parties if n != "p005"])
    late = clients["p005"].masked_input(0, xs["p005"], routed["p005"])  # after the request: never counted
    assert server.collect_masked(0, [late]) == req and req.dropped == ("p005",)
    # a curious coordinator even hands p005's envelopes to the survivors with their unmask requests
    _sign_all(clients, server, 0)
    resps = [_unmask(clients, server, 0, req, n, server.envelopes_for(0, n) +
                     [e for e in late.envelopes if e.receiver == n]) for n in req.survivors]
    np.testing.assert_array_equal(server.unmask(0, resps), _expected(xs, req.survivors, 32))
    revealed = {x.name: x.pairwise_seeds["p005"] for x in resps}
    assert set(revealed) == set(cfg.neighbours("p005")) and not any("p005" in x.self_mask_shares for x in resps)
    best = _strip(late.y, revealed, "p005", 0, 32)
    # sanity of the attack: with b_p005,0 (held only by p005) the coordinator would have x exactly
    b = clients["p005"]._rounds[0].b
    np.testing.assert_array_equal((best - sa.expand_mask(b, 0, d, 32)) & np.uint64((1 << 32) - 1), xs["p005"])
    assert _chi2_bytes(best, 4) > ALPHA and _chi2_bits(best, 32) > ALPHA and _chi2_bits(xs["p005"], 32) < ALPHA
    for n in req.survivors:  # honest parties refuse to call p005 a survivor of round 0 now
        with pytest.raises(sa.UnmaskRefused):
            clients[n].unmask(0, tuple(req.survivors) + ("p005",), (), late.envelopes, server.signatures_for(0, n))
    # t - 1 colluding survivors open p005's envelopes (the coordinator routes them): too few shares
    colluders = list(req.survivors)[: cfg.threshold - 1]
    shares = [clients[n]._open(clients[n]._rounds[0], 0, e) for n in colluders for e in late.envelopes
              if e.receiver == n]
    assert len(shares) == cfg.threshold - 1
    with pytest.raises(sa.ReconstructionError):
        sa._reconstruct_secret(shares, cfg.threshold)
    guess = sa.shamir_reconstruct([sa._share_parse(x) for x in shares]).to_bytes(66, "big")[-32:]
    assert guess != b


def test_revealed_seeds_of_one_round_do_not_unmask_another(pki):
    """Round 0: p005 drops, its neighbours reveal k_{v,p005},0. Round 1: p005 survives, its b_p005,1 is
    rebuilt. Its round-1 input minus PRG(b_p005,1) minus the masks of the round-0 seeds (expanded with
    either round's nonce) stays uniform; with the true round-1 seeds (held by p005 only) it is x."""
    cfg = sa.SecAggConfig("job-rounds", _names(6), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    d = 1 << 15
    xs = {n: np.arange(d, dtype=np.uint64) % np.uint64(300) for n in cfg.parties}
    _, _, resps0 = _run_round(clients, server, 0, xs, before_input=["p005"])
    seeds0 = {x.name: x.pairwise_seeds["p005"] for x in resps0}
    routed = server.route_adverts(1, [c.advert() for c in clients.values()])
    y1 = clients["p005"].masked_input(1, xs["p005"], routed["p005"]).y
    st = clients["p005"]._rounds[1]
    minus_b = (y1 - sa.expand_mask(st.b, 1, d, 32)) & np.uint64((1 << 32) - 1)
    for nonce_round in (0, 1):
        guess = _strip(minus_b, seeds0, "p005", nonce_round, 32)
        assert _chi2_bytes(guess, 4) > ALPHA and _chi2_bits(guess, 32) > ALPHA
    assert set(seeds0.values()).isdisjoint(st.seeds.values())
    np.testing.assert_array_equal(_strip(minus_b, st.seeds, "p005", 1, 32), xs["p005"])


def test_a_self_mask_rebuilt_in_one_round_does_not_unmask_a_late_input_of_another(pki):
    """Round 0: p005 survives, the coordinator rebuilds b_p005,0 from its neighbours' shares. Round 1: p005
    is declared dropped (its neighbours reveal their round-1 seeds with it) and its input arrives late.
    That input minus every revealed seed minus PRG(b_p005,0) (with either round's nonce) stays uniform:
    the self mask is fresh per round (a self mask per job would unmask it here)."""
    cfg = sa.SecAggConfig("job-fresh-b", _names(6), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    d = 1 << 15
    xs = {n: np.arange(d, dtype=np.uint64) % np.uint64(300) for n in cfg.parties}
    _, req0, resps0 = _run_round(clients, server, 0, xs)
    b0 = sa._reconstruct_secret([x.self_mask_shares["p005"] for x in resps0 if "p005" in x.self_mask_shares],
                                cfg.threshold)  # what the coordinator rebuilt in round 0
    _, _, resps1 = _run_round(clients, server, 1, xs, before_input=["p005"])
    routed = server.route_adverts(1, [c.advert() for c in clients.values()])
    late = clients["p005"].masked_input(1, xs["p005"], routed["p005"]).y
    minus_seeds = _strip(late, {x.name: x.pairwise_seeds["p005"] for x in resps1}, "p005", 1, 32)
    for nonce_round in (0, 1):
        guess = (minus_seeds - sa.expand_mask(b0, nonce_round, d, 32)) & np.uint64((1 << 32) - 1)
        assert _chi2_bytes(guess, 4) > ALPHA and _chi2_bits(guess, 32) > ALPHA
    b1 = clients["p005"]._rounds[1].b  # sanity: with round 1's own self mask it would be x
    np.testing.assert_array_equal((minus_seeds - sa.expand_mask(b1, 1, d, 32)) & np.uint64((1 << 32) - 1),
                                  xs["p005"])


# ------------------------------------------------------------------------------- parties' checks


def _setup_round(pki, p=6, r=0, **kw):
    cfg = sa.SecAggConfig("job-chk", _names(p), bits=32, **kw)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    adverts = server.route_adverts(r, [c.advert() for c in clients.values()])
    return cfg, clients, server, adverts


def _signed(cfg, name, cert_pem, key_pem, keys_from, job_id=None):
    """An advert for ``name`` with ``keys_from``'s public keys, validly signed by ``cert_pem``'s key."""
    key = serialization.load_pem_private_key(key_pem, None)
    adv = sa.KeyAdvert(job_id or cfg.job_id, name, keys_from.c_pk, keys_from.s_pk, cert_pem, b"")
    return dataclasses.replace(adv, signature=key.sign(adv.signed_bytes(), ec.ECDSA(hashes.SHA256())))


def test_substituted_public_key_is_detected(pki):
    cfg, clients, server, adverts = _setup_round(pki)
    honest = clients["p001"].advert()
    fake = sa.SecAggClient(cfg, "p002", *pki["certs"]["p002"], pki["ca"]).advert()
    other_job = sa.SecAggClient(dataclasses.replace(cfg, job_id="job-other"), "p001", *pki["certs"]["p001"],
                                pki["ca"]).advert()
    cases = {
        "swapped s key": lambda me: dataclasses.replace(honest, s_pk=fake.s_pk),
        "swapped c key": lambda me: dataclasses.replace(honest, c_pk=fake.c_pk),
        "replayed from another job": lambda me: dataclasses.replace(other_job, job_id=cfg.job_id),
        "advert of another job": lambda me: other_job,
        "other party's certificate": lambda me: dataclasses.replace(fake, name="p001"),
        "foreign CA, CN p001": lambda me: _signed(cfg, "p001", *pki["evil_p001"], fake),
        "coordinator's own certificate": lambda me: _signed(cfg, "p001", *pki["certs"]["coordinator"], fake),
        "the victim's own keys, signed by p001": lambda me: _signed(cfg, "p001", *pki["certs"]["p001"], me.advert()),
    }
    x = np.zeros(4, np.uint64)
    for why, make in cases.items():
        victim = sa.SecAggClient(cfg, "p000", *pki["certs"]["p000"], pki["ca"])
        bad = make(victim)
        routed = [victim.advert()] + [bad if a.name == "p001" else a for a in adverts["p000"] if a.name != "p000"]
        with pytest.raises(sa.KeySubstitutionError):
            victim.masked_input(0, x, routed)
            pytest.fail(why)
        assert not victim._rounds and not victim._masked  # nothing masked, nothing released
    # my own advert altered or outdated (a coordinator that kept a restarted party's old keys)
    stale = [dataclasses.replace(a, c_pk=fake.c_pk) if a.name == "p000" else a for a in adverts["p000"]]
    with pytest.raises(sa.KeySubstitutionError):
        clients["p000"].masked_input(0, x, stale)
    assert len(clients["p000"].masked_input(0, x, adverts["p000"]).envelopes) == 5  # the honest adverts pass


def _sign_set(clients, survivors, r=0):
    """Every survivor signs ``survivors`` as round r's set (their own adverts' digests): the signatures."""
    digests = {n: clients[n].advert().digest() for n in survivors}
    return [(n, clients[n].sign_survivors(r, survivors, digests)) for n in survivors]


def test_envelope_tampered_or_readdressed_fails(pki):
    cfg, clients, server, adverts = _setup_round(pki)
    x = np.zeros(8, np.uint64)
    req = server.collect_masked(0, [c.masked_input(0, x, adverts[n]) for n, c in clients.items()])
    boxes = {n: server.envelopes_for(0, n) for n in cfg.parties}
    e = next(e for e in boxes["p000"] if e.sender == "p001")
    flipped = bytes([e.ciphertext[0] ^ 1]) + e.ciphertext[1:]
    args = (req.survivors, req.dropped)
    sigs = _sign_set(clients, req.survivors)
    for bad in (dataclasses.replace(e, ciphertext=flipped), dataclasses.replace(e, sender="p002"),
                dataclasses.replace(e, round=1), dataclasses.replace(e, job_id="job-other")):
        others = [o for o in boxes["p000"] if o.sender != bad.sender]
        with pytest.raises(sa.EnvelopeError):
            clients["p000"].unmask(0, *args, others + [bad], sigs)
    # the same envelope re-addressed to p002 (receiver field changed) is refused by p002
    with pytest.raises(sa.EnvelopeError):
        clients["p002"].unmask(0, *args, [dataclasses.replace(e, receiver="p002")]
                               + [o for o in boxes["p002"] if o.sender != "p001"], sigs)
    # reflected back to its sender as if p000 had sent it (same pair of c keys)
    with pytest.raises(sa.EnvelopeError):
        clients["p001"].unmask(0, *args, [dataclasses.replace(e, sender="p000", receiver="p001")]
                               + [o for o in boxes["p001"] if o.sender != "p000"], sigs)
    # a failed opening committed nothing: the untouched envelopes open and give one share per survivor
    assert len(clients["p000"].unmask(0, *args, boxes["p000"], sigs).self_mask_shares) == 5


def _through_input(pki, **kw):
    cfg, clients, server, adverts = _setup_round(pki, **kw)
    ins = {n: c.masked_input(0, np.arange(4, dtype=np.uint64), adverts[n]) for n, c in clients.items()}
    envs = {n: [e for m in ins.values() for e in m.envelopes if e.receiver == n] for n in cfg.parties}
    return cfg, clients, envs


def test_unmask_refuses_both_the_self_mask_share_and_the_pairwise_seed_of_one_party(pki):
    cfg, clients, envs = _through_input(pki)
    c, mine = clients["p000"], envs["p000"]
    five = ("p000", "p001", "p002", "p003", "p004")
    sigs = _sign_set(clients, five)
    with pytest.raises(sa.UnmaskRefused):
        c.unmask(0, five, ("p004", "p005"), mine, sigs)
    assert c._rounds[0].request is None  # refused: nothing committed
    # p005 declared dropped: its seed, no share of its b; then listed as survivor -> refused
    first = c.unmask(0, five, ("p005",), mine, sigs)
    assert set(first.pairwise_seeds) == {"p005"} and "p005" not in first.self_mask_shares
    assert set(first.self_mask_shares) == {"p001", "p002", "p003", "p004"}
    with pytest.raises(sa.UnmaskRefused):
        c.unmask(0, ("p000", "p001", "p002", "p003", "p004", "p005"), (), mine, sigs)
    with pytest.raises(sa.UnmaskRefused):  # and the reverse: a survivor cannot later be called dropped
        c.unmask(0, ("p000", "p002", "p003", "p004"), ("p001", "p005"), mine, sigs)
    with pytest.raises(sa.UnmaskRefused):  # nor can a later request merely add a dropped party
        c.unmask(0, ("p000", "p001", "p002", "p003"), ("p004", "p005"), mine, sigs)
    again = c.unmask(0, five, ("p005",), mine, sigs)  # the same request: same answer
    assert again == first


def test_fewer_than_min_survivors_or_threshold_neighbours_reveals_nothing(pki):
    cfg, clients, envs = _through_input(pki, min_survivors=5)
    survivors, dropped = ("p000", "p001", "p002", "p003"), ("p004", "p005")
    digests = {n: clients[n].advert().digest() for n in survivors}
    for n in survivors:
        with pytest.raises(sa.TooFewSurvivors):
            clients[n].sign_survivors(0, survivors, digests)
        with pytest.raises(sa.UnmaskRefused):
            clients[n].unmask(0, survivors, dropped, envs[n])
        assert clients[n]._rounds[0].request is None and clients[n]._rounds[0].signed is None  # nothing released
    server = sa.SecAggServer(cfg)
    server._r(0).mask_sets = {n: set() for n in cfg.parties}
    with pytest.raises(sa.ReconstructionError):
        server.collect_masked(0, [sa.MaskedInput(cfg.job_id, 0, n, np.zeros(4, np.uint64)) for n in survivors])
    # threshold 4 of 5 neighbours: with only 3 of p000's neighbours surviving its b could not be rebuilt
    cfg, clients, envs = _through_input(pki, min_survivors=3, threshold=4)
    digests = {n: clients[n].advert().digest() for n in survivors}
    with pytest.raises(sa.UnmaskRefused, match="threshold"):
        clients["p000"].sign_survivors(0, survivors, digests)
    assert clients["p000"]._rounds[0].request is None


def test_second_different_input_in_a_round_is_refused(pki):
    cfg, clients, server, adverts = _setup_round(pki)
    c = clients["p000"]
    first = c.masked_input(0, np.arange(4, dtype=np.uint64), adverts["p000"])
    again = c.masked_input(0, np.arange(4, dtype=np.uint64), adverts["p000"])  # retry: the same message
    np.testing.assert_array_equal(again.y, first.y)
    assert again.envelopes == first.envelopes
    with pytest.raises(sa.ProtocolError):
        c.masked_input(0, np.arange(1, 5, dtype=np.uint64), adverts["p000"])
    with pytest.raises(sa.ProtocolError):  # another neighbour set: the masks would not match
        c.masked_input(0, np.arange(4, dtype=np.uint64), adverts["p000"][:-1])
    c.forget(0)
    with pytest.raises(sa.ProtocolError):  # forgotten: never masked again (a new b would leak x - x')
        c.masked_input(0, np.arange(4, dtype=np.uint64), adverts["p000"])


@pytest.mark.parametrize("bits", [16, 62])
def test_masking_leaves_the_input_alone_and_a_retry_resends_the_same_vector(pki, bits):
    """Masking works in place on a copy: the caller's x is unchanged (B = 62: the same dtype as x), the
    vector sent is the caller's to keep (zeroing it does not change what a retry of the round resends)."""
    cfg = sa.SecAggConfig(f"job-retry-{bits}", _names(4), bits=bits, min_survivors=2)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    routed = server.route_adverts(0, [c.advert() for c in clients.values()])
    x = np.arange(1000, dtype=np.uint64) * np.uint64(3)
    y = clients["p000"].masked_input(0, x, routed["p000"]).y
    np.testing.assert_array_equal(x, np.arange(1000, dtype=np.uint64) * np.uint64(3))
    first = y.copy()
    y[:] = 0
    again = clients["p000"].masked_input(0, x.copy(), routed["p000"]).y
    np.testing.assert_array_equal(again, first)
    assert again.dtype == np.uint64 and int(first.max()) < 1 << bits and not np.array_equal(first, x)


WIDTHS = [8, 12, 16, 20, 32, 62]  # B: whole words of 1, 2, 4, 8 bytes and words with top bits to clear
WORD_BYTES = {8: 1, 12: 2, 16: 2, 20: 4, 32: 4, 62: 8, 64: 8}  # the narrowest of 1, 2, 4, 8 bytes >= B bits


@pytest.mark.parametrize("bits", sorted(WORD_BYTES))
def test_mask_is_the_chacha20_keystream_mod_2_to_the_b(bits):
    """The chunked mask expansion equals one direct ChaCha20 keystream cut into little-endian words of
    WORD_BYTES[B] bytes (d spans several chunks and a partial one), each reduced mod 2^B; a negative
    mask cancels it; another round gives another mask."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    d, seed, w = 3 * (1 << 16) + 5, bytes(range(32)), WORD_BYTES[bits]
    nonce = (0).to_bytes(8, "little") + (7).to_bytes(8, "little")
    ks = Cipher(algorithms.ChaCha20(seed, nonce), mode=None).encryptor().update(bytes(w * d))
    at = (0, 1, 65535, 65536, 131073, d - 1)
    m = sa.expand_mask(seed, 7, d, bits)
    assert m.dtype == np.uint64 and int(m.max()) < 1 << bits
    assert [int(m[i]) for i in at] == [int.from_bytes(ks[w * i:w * i + w], "little") % (1 << bits) for i in at]
    if bits == 8 * w:
        np.testing.assert_array_equal(m, np.frombuffer(ks, dtype=f"<u{w}"))
    acc = np.arange(d, dtype=sa.mask_dtype(bits))
    sa._add_masks(acc, [(seed, False), (seed, True)], 7)
    np.testing.assert_array_equal(acc, np.arange(d, dtype=sa.mask_dtype(bits)))
    assert not np.array_equal(sa.expand_mask(seed, 8, 16, bits), sa.expand_mask(seed, 7, 16, bits))


def _chi2_low_high(v: np.ndarray, bits: int) -> tuple[float, float]:
    """p-values of the chi-square tests (2^k - 1 df, k = min(8, B)) that the low k bits, and the top k
    bits of [0, 2^B), are uniform. A word with bits set above B lands in no bin of the second test:
    its bins then fall short of their expected counts."""
    k = min(8, bits)
    exp = v.size / (1 << k)
    out = []
    for cell in (v & np.uint64((1 << k) - 1), v >> np.uint64(bits - k)):
        counts = np.bincount(cell.astype(np.int64), minlength=1 << k)[: 1 << k]
        out.append(float(chi2.sf(((counts - exp) ** 2 / exp).sum(), (1 << k) - 1)))
    return out[0], out[1]


@pytest.mark.parametrize("bits", WIDTHS)
def test_masks_uniform_mod_2_to_the_b_and_the_test_rejects_uncleared_top_bits(bits, monkeypatch):
    """2^18 masks of a fresh random seed: low and top 8 bits uniform (chi-square, alpha 1e-6 each, so a
    false alarm at most 2e-6 per width). The same masks drawn with the top bits not cleared (the
    clearing broken on purpose) fail the top-bits test whenever the word has more than B bits; for
    B = 8, 16, 32 the word is exactly B bits and there is nothing to clear."""
    seed, d = os.urandom(32), 1 << 18
    m = sa.expand_mask(seed, 3, d, bits)
    low, high = _chi2_low_high(m, bits)
    assert low > ALPHA and high > ALPHA, (seed.hex(), low, high)
    monkeypatch.setattr(secagg_crypto, "clear_top", lambda a, b: a)
    raw = sa.expand_mask(seed, 3, d, bits)
    np.testing.assert_array_equal(raw & np.uint64((1 << bits) - 1), m)
    if bits == 8 * WORD_BYTES[bits]:
        np.testing.assert_array_equal(raw, m)
    else:
        assert int(raw.max()) >> bits and _chi2_low_high(raw, bits)[1] < ALPHA


@pytest.mark.parametrize("bits", WIDTHS)
def test_server_recomputes_the_partys_masks_for_each_width(pki, bits):
    """8 parties, d one chunk plus 3, two rounds: p002 drops before its input in round 0 (the server
    removes the survivors' masks with it from their revealed seeds), p005 does not answer the unmask
    request of round 1 (its self mask is rebuilt from shares); the server removes each survivor's self
    mask. The sum equals the survivors' sum mod 2^B computed with Python integers: one recomputed mask
    word differing from the party's leaves a random residue there. Inputs near 2^B exercise the wrap."""
    cfg = sa.SecAggConfig(f"job-width-{bits}", _names(8), bits=bits, min_survivors=4)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    gen = np.random.default_rng(bits)
    d = (1 << 16) + 3
    for r, (before, after) in enumerate(((["p002"], []), ([], ["p005"]))):
        xs = {n: np.uint64((1 << bits) - 1) - gen.integers(0, min(1 << bits, 1 << 20), d, dtype=np.uint64)
              for n in cfg.parties}
        total, req, _ = _run_round(clients, server, r, xs, before, after)
        assert req.dropped == tuple(before) and set(after) <= set(req.survivors)
        assert total.dtype == np.uint64
        np.testing.assert_array_equal(total, _expected(xs, req.survivors, bits))


def _lp(*fields: bytes) -> bytes:
    return b"".join(len(f).to_bytes(4, "big") + f for f in fields)


def _advert_sha256(a: sa.KeyAdvert) -> bytes:
    """SHA-256 of an advert, written out here: the length-prefixed (tag, job, name, c_pk, s_pk) that is
    signed, then the certificate and the signature, length-prefixed in turn."""
    import hashlib

    signed = _lp(b"dpfed-secagg-advert-v2", a.job_id.encode(), a.name.encode(), a.c_pk, a.s_pk)
    return hashlib.sha256(_lp(signed, a.cert_pem, a.signature)).digest()


def test_adverts_by_reference_resolve_only_to_adverts_the_party_verified(pki):
    """Round 0 routes full adverts; rounds 1 and 2 name every advert by its SHA-256 (computed here): the
    masked vectors are those of full adverts (same neighbours, no new agreement) and the sums are exact.
    A reference the party cannot resolve to an advert it verified itself is refused before anything is
    prepared: a digest of keys never sent in full (a coordinator substituting keys), the right digest
    under another name, a neighbour's old advert after its new one was verified, and the party's own
    advert under a wrong digest."""
    cfg = sa.SecAggConfig("job-refs", _names(6), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    xs = {n: np.arange(32, dtype=np.uint64) * np.uint64(i + 3) for i, n in enumerate(cfg.parties)}
    _run_round(clients, server, 0, xs)
    for r in (1, 2):
        routed = server.route_adverts(r, [c.advert() for c in clients.values()])
        refs = {n: [sa.AdvertRef(a.name, _advert_sha256(a)) for a in routed[n]] for n in routed}
        assert all(ref.digest == a.digest() for n in routed for ref, a in zip(refs[n], routed[n], strict=True))
        inputs = [clients[n].masked_input(r, xs[n], refs[n]) for n in cfg.parties]
        assert all(set(clients[n]._rounds[r].peers) == set(cfg.neighbours(n)) for n in cfg.parties)
        req = server.collect_masked(r, inputs)
        _sign_all(clients, server, r)
        total = server.unmask(r, [_unmask(clients, server, r, req, n)
                                  for n in req.survivors])
        np.testing.assert_array_equal(total, _expected(xs, cfg.parties, 32))

    victim = clients["p000"]
    routed = server.route_adverts(3, [c.advert() for c in clients.values()])
    good = [sa.AdvertRef(a.name, _advert_sha256(a)) for a in routed["p000"]]
    forged = _signed(cfg, "p001", *pki["certs"]["p001"], clients["p005"].advert())  # valid, never sent in full
    new_p002 = sa.SecAggClient(cfg, "p002", *pki["certs"]["p002"], pki["ca"]).advert()
    x = np.zeros(32, np.uint64)
    bad_cases = {
        "digest of keys never sent in full": (sa.ProtocolError, "p001", sa.AdvertRef("p001", _advert_sha256(forged))),
        "p002's digest under the name p001": (sa.ProtocolError, "p001",
                                              sa.AdvertRef("p001", _advert_sha256(clients["p002"].advert()))),
        "a random digest": (sa.ProtocolError, "p003", sa.AdvertRef("p003", os.urandom(32))),
        "my own advert, wrong digest": (sa.KeySubstitutionError, "p000",
                                        sa.AdvertRef("p000", _advert_sha256(clients["p001"].advert()))),
    }
    for why, (err, who, bad) in bad_cases.items():
        with pytest.raises(err):
            victim.masked_input(3, x, [bad if g.name == who else g for g in good])
            pytest.fail(why)
        assert 3 not in victim._rounds and 3 not in victim._masked, why  # nothing prepared, nothing released
    # p002 restarts: its new advert is verified in full (round 3); its old one can no longer be named
    full = [new_p002 if a.name == "p002" else a for a in routed["p000"]]
    victim.masked_input(3, x, full)
    with pytest.raises(sa.ProtocolError):
        victim.masked_input(4, x, [g for g in good])  # good still names p002's old advert
    assert 4 not in victim._rounds and 4 not in victim._masked
    refs4 = [sa.AdvertRef(a.name, _advert_sha256(a)) for a in full]
    assert len(victim.masked_input(4, x, refs4).envelopes) == 5


def test_a_restarted_party_is_dropped_until_its_new_keys_are_routed(pki):
    """p003 restarts after round 0 (a new client: new keys). Round 1 is announced with its old advert:
    it refuses (its own keys came back outdated), is dropped, and its neighbours' seeds with its old keys
    remove their masks; round 2 routes its new advert (its neighbours verify and agree once more) and
    counts it. Every sum is exact."""
    cfg = sa.SecAggConfig("job-restart", _names(6), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    xs = {n: np.arange(64, dtype=np.uint64) * np.uint64(i + 1) for i, n in enumerate(cfg.parties)}
    _run_round(clients, server, 0, xs)
    old = clients["p003"].advert()
    clients["p003"] = sa.SecAggClient(cfg, "p003", *pki["certs"]["p003"], pki["ca"])
    routed = server.route_adverts(1, [old if n == "p003" else c.advert() for n, c in clients.items()])
    with pytest.raises(sa.KeySubstitutionError):
        clients["p003"].masked_input(1, xs["p003"], routed["p003"])
    inputs = [clients[n].masked_input(1, xs[n], routed[n]) for n in cfg.parties if n != "p003"]
    req = server.collect_masked(1, inputs)
    _sign_all(clients, server, 1)
    assert req.dropped == ("p003",)
    total = server.unmask(1, [_unmask(clients, server, 1, req, n)
                              for n in req.survivors])
    np.testing.assert_array_equal(total, _expected(xs, req.survivors, 32))
    total, req, _ = _run_round(clients, server, 2, xs)
    assert req.dropped == () and len(req.survivors) == 6
    np.testing.assert_array_equal(total, _expected(xs, cfg.parties, 32))


def test_hkdf_is_rfc_5869_hkdf_sha256():
    """The two-HMAC HKDF equals the ``cryptography`` package's HKDF-SHA256 (no salt, 32 bytes) on random
    secrets and infos, and RFC 5869's test case 3 (no salt, no info)."""
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    gen = np.random.default_rng(5)
    for n in range(50):
        secret, info = gen.bytes(32), gen.bytes(n * 3)
        assert sa._hkdf(secret, info) == HKDF(hashes.SHA256(), 32, None, info).derive(secret)
    okm = bytes.fromhex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
    assert sa._hkdf(bytes([0x0b] * 22), b"") == okm[:32]


def test_derivation_infos_are_length_prefixed_fields():
    """The HKDF infos and the envelopes' associated data are the length-prefixed fields (4-byte big-endian
    length; the round as an 8-byte signed big-endian integer) of tag, job, round and the two names, the
    pairwise ones in sorted order: written out here, field by field."""
    import struct

    def lp(*fields):
        enc = [f if isinstance(f, bytes) else (f.encode() if isinstance(f, str) else struct.pack(">q", f))
               for f in fields]
        return b"".join(len(e).to_bytes(4, "big") + e for e in enc)

    for job, r, u, v in [("job-1", 3, "party-2", "party-10"), ("j", 0, "b", "a"), ("x" * 300, 2**40, "é", "z"),
                         ("job", 7, "same", "same")]:
        assert sa._pairwise_info(job, r, u, v) == lp(b"dpfed-secagg-pairwise-v1", job, r, *sorted((u, v)))
        assert sa._pairwise_info(job, r, u, v) == sa._pairwise_info(job, r, v, u)
        assert sa._envelope_info(job, r, u, v) == lp(b"dpfed-secagg-envelope-v1", job, r, u, v)
        assert sa._envelope_ad(job, r, u, v) == lp(b"dpfed-secagg-envelope-ad-v1", job, r, u, v)
        assert sa._envelope_info(job, r, u, v) != sa._envelope_info(job, r, v, u) or u == v


# ------------------------------------------------------------------------------- key setup once per job


class _CountingKey:
    """An X25519 private key whose ``exchange`` calls are counted by its public key (the module's
    ``x25519`` is swapped for a namespace handing these out: nothing of secagg's own code is hooked)."""

    calls: dict[bytes, int] = {}

    def __init__(self, real: x25519.X25519PrivateKey) -> None:
        self.real = real
        self.pub = real.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @classmethod
    def generate(cls) -> _CountingKey:
        return cls(x25519.X25519PrivateKey.generate())

    @classmethod
    def from_private_bytes(cls, raw: bytes) -> _CountingKey:
        return cls(x25519.X25519PrivateKey.from_private_bytes(raw))

    def public_key(self):
        return self.real.public_key()

    def private_bytes(self, *a, **kw) -> bytes:
        return self.real.private_bytes(*a, **kw)

    def exchange(self, peer) -> bytes:
        _CountingKey.calls[self.pub] = _CountingKey.calls.get(self.pub, 0) + 1
        return self.real.exchange(peer)


def test_key_agreements_and_signatures_once_per_job_not_per_round(pki, monkeypatch):
    """Harary graph, 20 parties, degree 6, four rounds with 10% dropouts: over the whole job each party
    computes X25519(c_u, c_v) and X25519(s_u, s_v) once per neighbour (2k agreements), and makes one
    ECDSA signature; each checks each neighbour's signature once (ECDSA objects counted: 20 signatures
    + 120 checks, all in round 0, none after). Round 2's masked vectors are bit for bit
    x + PRG(b_u,2) + sum_v sign PRG(HKDF(X25519(s_u, s_v), round 2)) with the agreement computed here,
    and every sum is exact."""
    ecdsa = []

    def counting_ecdsa(alg):
        ecdsa.append(alg)
        return ec.ECDSA(alg)

    monkeypatch.setattr(secagg_client, "x25519", types.SimpleNamespace(X25519PrivateKey=_CountingKey,
                                                            X25519PublicKey=x25519.X25519PublicKey))
    monkeypatch.setattr(secagg_client, "ec", types.SimpleNamespace(ECDSA=counting_ecdsa,
                                                        EllipticCurvePrivateKey=ec.EllipticCurvePrivateKey,
                                                        EllipticCurvePublicKey=ec.EllipticCurvePublicKey))
    _CountingKey.calls.clear()
    cfg = sa.SecAggConfig("job-count", _names(20), bits=32, min_survivors=10, degree=6, threshold=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    adv = {n: c.advert() for n, c in clients.items()}
    gen = np.random.default_rng(11)
    for r in range(4):
        xs = {n: gen.integers(0, 1 << 32, 100, dtype=np.uint64) for n in cfg.parties}
        gone = [] if r == 0 else list(gen.permutation(cfg.parties)[:2])
        routed = server.route_adverts(r, adv.values())
        ys = {n: clients[n].masked_input(r, xs[n], routed[n]) for n in cfg.parties if n not in gone}
        if r == 2:
            for n, m in ys.items():
                st = clients[n]._rounds[r]
                want = xs[n] + sa.expand_mask(st.b, r, 100, 32)
                for v in cfg.neighbours(n):  # the dropped ones too: they were routed, then vanished
                    raw = clients[n]._s_sk.real.exchange(x25519.X25519PublicKey.from_public_bytes(adv[v].s_pk))
                    m_uv = sa.expand_mask(sa.pairwise_seed(raw, cfg.job_id, r, n, v), r, 100, 32)
                    want = want + m_uv if n < v else want - m_uv
                np.testing.assert_array_equal(m.y, want & np.uint64((1 << 32) - 1))
            _CountingKey.calls.clear()
        req = server.collect_masked(r, ys.values())
        _sign_all(clients, server, r)
        total = server.unmask(r, [_unmask(clients, server, r, req, n)
                                  for n in req.survivors])
        np.testing.assert_array_equal(total, _expected(xs, req.survivors, 32))
        if r == 0:
            for n in cfg.parties:
                assert _CountingKey.calls.get(adv[n].c_pk, 0) == 6, f"{n}: c agreements in round 0"
                assert _CountingKey.calls.get(adv[n].s_pk, 0) == 6, f"{n}: s agreements in round 0"
            assert len(ecdsa) == 20 + 20 * 6
            ecdsa.clear()
            _CountingKey.calls.clear()
        else:
            assert sum(_CountingKey.calls.values()) == 0 and not ecdsa, f"round {r}: key setup repeated"


def _secrets_reachable(root) -> set[bytes]:
    """Every bytes object and raw X25519 private key reachable from ``root`` through containers and
    instance attributes (types, modules and functions not followed)."""
    found: set[bytes] = set()
    seen: set[int] = set()
    stack = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (type, types.ModuleType, types.FunctionType, np.ndarray)):
            continue
        seen.add(id(o))
        if isinstance(o, bytes):
            found.add(o)
        elif isinstance(o, x25519.X25519PrivateKey):
            found.add(o.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                      serialization.NoEncryption()))
        elif isinstance(o, dict):
            stack += list(o.keys()) + list(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack += list(o)
        elif hasattr(o, "__dict__"):
            stack.append(vars(o))
    return found


def test_forget_erases_every_round_secret_and_close_the_job_keys(pki):
    """After round 0 (p005 dropped), p000 holds b_p000,0, its round seeds k_{p000,v},0, and the shares it
    opened; the keys of its envelopes to each neighbour and of theirs to it are derivable (computed here
    from the neighbours' side of X25519(c_v, c_p000)) but must not be kept. forget(0) leaves none of these
    reachable from the client; round 1 still runs with the same keys; close() then erases the long-term
    private keys and the agreements' HKDF keys too."""
    cfg = sa.SecAggConfig("job-forget", _names(6), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    xs = {n: np.arange(8, dtype=np.uint64) for n in cfg.parties}
    _, _, resps = _run_round(clients, server, 0, xs, before_input=["p005"])
    u, job = "p000", cfg.job_id
    mine = clients[u]._rounds[0]
    per_round = {mine.b, *mine.seeds.values()}
    per_round |= {sh for x in resps if x.name == u for sh in x.self_mask_shares.values()}
    c_pk = clients[u].advert().c_pk
    for v in cfg.neighbours(u):
        raw = clients[v]._c_sk.exchange(x25519.X25519PublicKey.from_public_bytes(c_pk))
        per_round |= {sa._envelope_key(raw, job, 0, v, u), sa._envelope_key(raw, job, 0, u, v)}
    before = _secrets_reachable(clients[u])
    assert {mine.b, *mine.seeds.values()} <= before  # the search sees the round's state
    assert len(mine.seeds) == 5 and mine.response is not None
    clients[u].forget(0)
    leaked = per_round & _secrets_reachable(clients[u])
    assert not leaked, f"{len(leaked)} secrets of round 0 still reachable after forget(0)"
    assert 0 not in clients[u]._rounds
    total, req, _ = _run_round(clients, server, 1, xs)
    np.testing.assert_array_equal(total, _expected(xs, req.survivors, 32))
    long_term = {k.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                 serialization.NoEncryption()) for k in clients[u]._keys()}
    long_term |= {x for p in clients[u]._peers.values() for x in (p.c_prk, p.s_prk)}
    assert long_term <= _secrets_reachable(clients[u])
    clients[u].close()
    assert not long_term & _secrets_reachable(clients[u])
    with pytest.raises(sa.ProtocolError):
        clients[u].masked_input(2, xs[u], server.route_adverts(2, [c.advert() for c in clients.values()])[u])
