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


def _run_round(clients, server, r, xs, before_share=(), before_input=(), after_input=()):
    """One round; parties in the three sets vanish at that point. Returns (sum, request, responses)."""
    adverts = [c.advertise_keys(r) for c in clients.values()]
    routed = server.route_adverts(r, adverts)
    envs = [e for n, c in clients.items() if n not in before_share for e in c.share_keys(r, routed[n])]
    boxes = server.route_envelopes(r, envs)
    inputs = [clients[n].masked_input(r, xs[n], boxes[n]) for n in boxes if n not in before_input]
    req = server.collect_masked(r, inputs)
    resps = [clients[n].unmask(r, req.survivors, req.dropped) for n in req.survivors if n not in after_input]
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
def test_sum_exact_with_dropouts(pki, bits, fraction):
    """10 parties, 3 rounds on one job; per round a fraction drops, split between before sharing keys,
    before sending the masked input and after it (not answering the unmask request)."""
    cfg = sa.SecAggConfig("job-drop", _names(10), bits=bits, min_survivors=5)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    gen = np.random.default_rng(int(fraction * 10) + bits)
    for r in range(3):
        xs = {n: gen.integers(0, 1 << bits, 257, dtype=np.uint64) for n in cfg.parties}
        gone = list(gen.permutation(cfg.parties)[: round(fraction * 10)])
        parts = [[g for j, g in enumerate(gone) if (j + r) % 3 == kind] for kind in range(3)]  # rotate kinds
        total, req, _ = _run_round(clients, server, r, xs, *parts)
        assert set(req.survivors) == set(cfg.parties) - set(parts[0]) - set(parts[1])
        assert set(req.dropped) == set(parts[1])
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
    xs = {n: gen.integers(0, 1 << 32, 64, dtype=np.uint64) for n in cfg.parties}
    gone = list(gen.permutation(cfg.parties)[:60])
    total, req, resps = _run_round(clients, server, 0, xs, gone[:20], gone[20:40], gone[40:])
    assert len(req.survivors) == 160
    assert max(len(r.self_mask_shares) + len(r.mask_key_shares) for r in resps) <= k
    np.testing.assert_array_equal(total, _expected(xs, req.survivors, 32))


# ------------------------------------------------------------------------------- coordinator's view


def test_masked_vector_is_uniform_and_the_test_rejects_an_unmasked_one(pki):
    """Chi-square on bytes (255 df) and on bits (32 df) of one party's masked vector, alpha 1e-6 each."""
    cfg = sa.SecAggConfig("job-view", _names(5), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    d = 1 << 16
    x = (np.arange(d, dtype=np.uint64) % 100) * np.uint64(3)  # structured, far from uniform
    xs = {n: x for n in cfg.parties}
    adverts = server.route_adverts(0, [c.advertise_keys(0) for c in clients.values()])
    boxes = server.route_envelopes(0, [e for n, c in clients.items() for e in c.share_keys(0, adverts[n])])
    y = clients["p002"].masked_input(0, xs["p002"], boxes["p002"]).y
    assert _chi2_bytes(y, 4) > ALPHA and _chi2_bits(y, 32) > ALPHA
    assert _chi2_bytes(x, 4) < ALPHA and _chi2_bits(x, 32) < ALPHA
    # one unit changed in one coordinate still fails the bit test: the test's power is not a fluke
    assert _chi2_bits(x + np.uint64(1 << 20), 32) < ALPHA


def test_late_input_of_dropped_party_stays_masked(pki):
    """p005 is declared dropped in round 0, then its masked input arrives. The coordinator holds its
    reconstructed mask key s_p005 and all adverts: removing every pairwise mask leaves x + PRG(b_p005,0),
    which is still uniform; no honest party will reveal a share of b_p005,0, and t-1 colluders' shares
    do not give it."""
    cfg = sa.SecAggConfig("job-late", _names(8), bits=32, min_survivors=4)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    d = 1 << 15
    xs = {n: (np.arange(d, dtype=np.uint64) * np.uint64(7)) % np.uint64(1000) for n in cfg.parties}
    total, req, resps = _run_round(clients, server, 0, xs, before_input=["p005"])
    np.testing.assert_array_equal(total, _expected(xs, req.survivors, 32))
    late = clients["p005"].masked_input(0, xs["p005"], _boxes_for(clients, "p005")).y
    # the coordinator's best reconstruction: s_p005 from the dropped-key shares, minus all pairwise masks
    sk = sa._reconstruct_secret([r.mask_key_shares["p005"] for r in resps], cfg.threshold)
    priv = x25519.X25519PrivateKey.from_private_bytes(sk)
    best = late.copy()
    for v in cfg.neighbours("p005"):
        pk = x25519.X25519PublicKey.from_public_bytes(clients[v].advertise_keys(0).s_pk)
        m = sa.expand_mask(sa.pairwise_seed(priv.exchange(pk), cfg.job_id, 0, "p005", v), 0, d, 32)
        best = best - m if "p005" < v else best + m
    best &= np.uint64((1 << 32) - 1)
    # sanity of the attack: with b_p005,0 (held only by p005) the coordinator would have x exactly
    b = clients["p005"]._rounds[0].b
    np.testing.assert_array_equal((best - sa.expand_mask(b, 0, d, 32)) & np.uint64((1 << 32) - 1), xs["p005"])
    assert _chi2_bytes(best, 4) > ALPHA and _chi2_bits(best, 32) > ALPHA and _chi2_bits(xs["p005"], 32) < ALPHA
    for n in req.survivors:  # honest parties refuse to call p005 a survivor of round 0 now
        with pytest.raises(sa.UnmaskRefused):
            clients[n].unmask(0, tuple(req.survivors) + ("p005",), ())
    colluders = list(req.survivors)[: cfg.threshold - 1]
    pts = [sa._share_parse(clients[n]._rounds[0].held["p005"][1]) for n in colluders]
    guess = sa.shamir_reconstruct(pts).to_bytes(66, "big")[-32:]
    assert guess != b


def _boxes_for(clients, name):
    """Envelopes addressed to ``name`` in round 0 (p005 did share its keys before vanishing)."""
    return [e for n, c in clients.items() if n != name for e in c._rounds[0].envelopes if e.receiver == name]


# ------------------------------------------------------------------------------- parties' checks


def _setup_round(pki, p=6, r=0, **kw):
    cfg = sa.SecAggConfig("job-chk", _names(p), bits=32, **kw)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    adverts = server.route_adverts(r, [c.advertise_keys(r) for c in clients.values()])
    return cfg, clients, server, adverts


def _signed(cfg, name, cert_pem, key_pem, keys_from):
    """An advert for ``name`` with ``keys_from``'s public keys, validly signed by ``cert_pem``'s key."""
    key = serialization.load_pem_private_key(key_pem, None)
    adv = sa.KeyAdvert(cfg.job_id, 0, name, keys_from.c_pk, keys_from.s_pk, cert_pem, b"")
    return dataclasses.replace(adv, signature=key.sign(adv.signed_bytes(), ec.ECDSA(hashes.SHA256())))


def test_substituted_public_key_is_detected(pki):
    cfg, clients, server, adverts = _setup_round(pki)
    honest = clients["p001"].advertise_keys(0)
    fake = sa.SecAggClient(cfg, "p002", *pki["certs"]["p002"], pki["ca"]).advertise_keys(0)
    cases = {
        "swapped s key": dataclasses.replace(honest, s_pk=fake.s_pk),
        "swapped c key": dataclasses.replace(honest, c_pk=fake.c_pk),
        "replayed to another round": dataclasses.replace(honest, round=1),
        "other party's certificate": dataclasses.replace(fake, name="p001"),
        "foreign CA, CN p001": _signed(cfg, "p001", *pki["evil_p001"], fake),
        "coordinator's own certificate": _signed(cfg, "p001", *pki["certs"]["coordinator"], fake),
    }
    for why, bad in cases.items():
        routed = [bad if a.name == "p001" else a for a in adverts["p000"]]
        victim = sa.SecAggClient(cfg, "p000", *pki["certs"]["p000"], pki["ca"])
        victim.advertise_keys(0)
        with pytest.raises(sa.KeySubstitutionError):
            victim.share_keys(0, routed)
            pytest.fail(why)
    assert len(clients["p000"].share_keys(0, adverts["p000"])) == 5  # the honest adverts pass


def test_envelope_tampered_or_readdressed_fails(pki):
    cfg, clients, server, adverts = _setup_round(pki)
    boxes = server.route_envelopes(0, [e for n, c in clients.items() for e in c.share_keys(0, adverts[n])])
    e = next(e for e in boxes["p000"] if e.sender == "p001")
    x = np.zeros(8, np.uint64)
    flipped = bytes([e.ciphertext[0] ^ 1]) + e.ciphertext[1:]
    for bad in (dataclasses.replace(e, ciphertext=flipped), dataclasses.replace(e, sender="p002"),
                dataclasses.replace(e, round=1, job_id=e.job_id)):
        others = [o for o in boxes["p000"] if o.sender != "p001"]
        with pytest.raises((sa.EnvelopeError, sa.ProtocolError)):
            clients["p000"].masked_input(0, x, others + [bad])
    # the same envelope re-addressed to p002 (receiver field changed) is refused by p002
    with pytest.raises(sa.EnvelopeError):
        clients["p002"].masked_input(0, x, [dataclasses.replace(e, receiver="p002")]
                                     + [o for o in boxes["p002"] if o.sender != "p001"])
    # reflected back to its sender as if p000 had sent it (same pair of c keys)
    with pytest.raises(sa.EnvelopeError):
        clients["p001"].masked_input(0, x, [dataclasses.replace(e, sender="p000", receiver="p001")]
                                     + [o for o in boxes["p001"] if o.sender != "p000"])
    assert clients["p000"].masked_input(0, x, boxes["p000"]).y.shape == (8,)  # untouched ones open


def _through_input(pki, **kw):
    cfg, clients, server, adverts = _setup_round(pki, **kw)
    boxes = server.route_envelopes(0, [e for n, c in clients.items() for e in c.share_keys(0, adverts[n])])
    for n, c in clients.items():
        c.masked_input(0, np.arange(4, dtype=np.uint64), boxes[n])
    return cfg, clients


def test_unmask_refuses_both_kinds_of_share_for_one_party(pki):
    cfg, clients = _through_input(pki)
    c = clients["p000"]
    with pytest.raises(sa.UnmaskRefused):
        c.unmask(0, ("p000", "p001", "p002", "p003", "p004"), ("p004", "p005"))
    # sequentially: p005 declared dropped, then listed as survivor -> refused; p005's b never leaves
    first = c.unmask(0, ("p000", "p001", "p002", "p003", "p004"), ("p005",))
    assert set(first.mask_key_shares) == {"p005"} and "p005" not in first.self_mask_shares
    with pytest.raises(sa.UnmaskRefused):
        c.unmask(0, ("p000", "p001", "p002", "p003", "p004", "p005"), ())
    with pytest.raises(sa.UnmaskRefused):  # and the reverse: a survivor cannot later be called dropped
        c.unmask(0, ("p000", "p002", "p003", "p004"), ("p001", "p005"))
    again = c.unmask(0, ("p000", "p001", "p002", "p003", "p004"), ("p005",))  # a consistent retry is fine
    assert again.mask_key_shares == first.mask_key_shares and again.self_mask_shares == first.self_mask_shares


def test_fewer_than_min_survivors_reveals_nothing(pki):
    cfg, clients = _through_input(pki, min_survivors=5)
    survivors, dropped = ("p000", "p001", "p002", "p003"), ("p004", "p005")
    for n in survivors:
        with pytest.raises(sa.TooFewSurvivors):
            clients[n].unmask(0, survivors, dropped)
        assert clients[n]._rounds[0].status == {}  # no share released, no state changed
    server = sa.SecAggServer(cfg)
    server._r(0).mask_sets = {n: set() for n in cfg.parties}
    with pytest.raises(sa.ReconstructionError):
        server.collect_masked(0, [sa.MaskedInput(cfg.job_id, 0, n, np.zeros(4, np.uint64)) for n in survivors])


def test_second_different_input_in_a_round_is_refused(pki):
    cfg, clients = _through_input(pki)
    c = clients["p000"]
    assert c.masked_input(0, np.arange(4, dtype=np.uint64), []).y.shape == (4,)  # retry: same answer
    with pytest.raises(sa.ProtocolError):
        c.masked_input(0, np.arange(1, 5, dtype=np.uint64), [])



@pytest.mark.parametrize("bits", [16, 62])
def test_masking_leaves_the_input_alone_and_a_retry_resends_the_same_vector(pki, bits):
    """Masking works in place on a copy: the caller's x is unchanged (B = 62: the same dtype as x), the
    vector sent is the caller's to keep (zeroing it does not change what a retry of the round resends)."""
    cfg = sa.SecAggConfig(f"job-retry-{bits}", _names(4), bits=bits, min_survivors=2)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    routed = server.route_adverts(0, [c.advertise_keys(0) for c in clients.values()])
    boxes = server.route_envelopes(0, [e for n, c in clients.items() for e in c.share_keys(0, routed[n])])
    x = np.arange(1000, dtype=np.uint64) * np.uint64(3)
    y = clients["p000"].masked_input(0, x, boxes["p000"]).y
    np.testing.assert_array_equal(x, np.arange(1000, dtype=np.uint64) * np.uint64(3))
    first = y.copy()
    y[:] = 0
    again = clients["p000"].masked_input(0, x.copy(), boxes["p000"]).y
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
    monkeypatch.setattr(sa, "_clear_top", lambda a, b: a)
    raw = sa.expand_mask(seed, 3, d, bits)
    np.testing.assert_array_equal(raw & np.uint64((1 << bits) - 1), m)
    if bits == 8 * WORD_BYTES[bits]:
        np.testing.assert_array_equal(raw, m)
    else:
        assert int(raw.max()) >> bits and _chi2_low_high(raw, bits)[1] < ALPHA


@pytest.mark.parametrize("bits", WIDTHS)
def test_server_recomputes_the_partys_masks_for_each_width(pki, bits):
    """8 parties, d one chunk plus 3: p002 drops before its input (the server recomputes its pairwise
    masks with every survivor), p005 after it (not answering); the server removes each survivor's self
    mask. The sum equals the survivors' sum mod 2^B computed with Python integers: one recomputed mask
    word differing from the party's leaves a random residue there. Inputs near 2^B exercise the wrap."""
    cfg = sa.SecAggConfig(f"job-width-{bits}", _names(8), bits=bits, min_survivors=4)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    gen = np.random.default_rng(bits)
    d = (1 << 16) + 3
    xs = {n: np.uint64((1 << bits) - 1) - gen.integers(0, min(1 << bits, 1 << 20), d, dtype=np.uint64)
          for n in cfg.parties}
    total, req, _ = _run_round(clients, server, 0, xs, before_input=["p002"], after_input=["p005"])
    assert req.dropped == ("p002",) and "p005" in req.survivors
    assert total.dtype == np.uint64
    np.testing.assert_array_equal(total, _expected(xs, req.survivors, bits))


# ------------------------------------------------------------------------------- key agreements per round


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


def test_one_x25519_agreement_per_neighbour_and_key_pair_per_round(pki, monkeypatch):
    """Harary graph, 20 parties, degree 6, two rounds: per party and round, X25519(c_u, c_v) once per
    neighbour (in share_keys; masked_input opens v's envelope with the key kept from it) and
    X25519(s_u, s_v) once per neighbour (in masked_input): 2k agreements, not 3k. The masked vectors
    are bit for bit x + PRG(b_u) + sum_v sign PRG(HKDF(X25519(s_u, s_v))) with the agreement computed
    here, and the sum is exact."""

    monkeypatch.setattr(sa, "x25519", types.SimpleNamespace(X25519PrivateKey=_CountingKey,
                                                            X25519PublicKey=x25519.X25519PublicKey))
    cfg = sa.SecAggConfig("job-count", _names(20), bits=32, min_survivors=10, degree=6, threshold=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    gen = np.random.default_rng(11)
    for r in range(2):
        _CountingKey.calls.clear()
        xs = {n: gen.integers(0, 1 << 32, 100, dtype=np.uint64) for n in cfg.parties}
        adv = {n: c.advertise_keys(r) for n, c in clients.items()}
        routed = server.route_adverts(r, adv.values())
        boxes = server.route_envelopes(r, [e for n, c in clients.items() for e in c.share_keys(r, routed[n])])
        after_share = dict(_CountingKey.calls)
        ys = {n: clients[n].masked_input(r, xs[n], boxes[n]) for n in cfg.parties}
        for n in cfg.parties:
            k = len(cfg.neighbours(n))
            assert k == 6
            assert after_share.get(adv[n].c_pk, 0) == k and after_share.get(adv[n].s_pk, 0) == 0
            assert _CountingKey.calls.get(adv[n].c_pk, 0) == k, f"{n}: c agreements in round {r}"
            assert _CountingKey.calls.get(adv[n].s_pk, 0) == k, f"{n}: s agreements in round {r}"
            st = clients[n]._rounds[r]
            want = xs[n] + sa.expand_mask(st.b, r, 100, 32)
            for v in cfg.neighbours(n):
                raw = st.s_sk.real.exchange(x25519.X25519PublicKey.from_public_bytes(adv[v].s_pk))
                m = sa.expand_mask(sa.pairwise_seed(raw, cfg.job_id, r, n, v), r, 100, 32)
                want = want + m if n < v else want - m
            np.testing.assert_array_equal(ys[n].y, want & np.uint64((1 << 32) - 1))
        req = server.collect_masked(r, ys.values())
        total = server.unmask(r, [clients[n].unmask(r, req.survivors, req.dropped) for n in req.survivors])
        np.testing.assert_array_equal(total, _expected(xs, cfg.parties, 32))
        assert sum(_CountingKey.calls.values()) == 2 * 6 * 20  # unmasking with no dropout: no agreement


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


def test_forget_erases_the_kept_envelope_keys(pki):
    """After round 0, p000 holds for each neighbour v the key of v's envelope to it (derived here from
    v's side of X25519(c_v, c_p000)); forget(0) leaves none of them, nor the raw agreement, nor the
    round's private keys, reachable from the client; round 1 still runs."""
    cfg = sa.SecAggConfig("job-forget", _names(6), bits=32, min_survivors=3)
    clients, server = _clients(pki, cfg), sa.SecAggServer(cfg)
    xs = {n: np.arange(8, dtype=np.uint64) for n in cfg.parties}
    _run_round(clients, server, 0, xs)
    u, job = "p000", cfg.job_id
    mine = clients[u]._rounds[0]
    raw_priv = {k.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption()) for k in (mine.c_sk, mine.s_sk)}
    c_pk = mine.advert.c_pk
    open_keys, raws = set(), set()
    for v in cfg.neighbours(u):
        raw = clients[v]._rounds[0].c_sk.exchange(x25519.X25519PublicKey.from_public_bytes(c_pk))
        raws.add(raw)
        open_keys.add(sa._envelope_key(raw, job, 0, v, u))
    before = _secrets_reachable(clients[u])
    assert open_keys <= before and raw_priv <= before  # the search sees the cache and the round's keys
    clients[u].forget(0)
    leaked = (open_keys | raws | raw_priv) & _secrets_reachable(clients[u])
    assert not leaked, f"{len(leaked)} secrets of round 0 still reachable after forget(0)"
    assert 0 not in clients[u]._rounds
    total, req, _ = _run_round(clients, server, 1, xs)
    np.testing.assert_array_equal(total, _expected(xs, req.survivors, 32))
