"""The consistency round against a lying coordinator (issue 24), with real SecAggClient/SecAggServer objects:

* the threshold theorem of :mod:`dpfed.federation.secagg_graph` checked by exhaustive search over every
  strategy of a coordinator on small graphs (and the same search finds the issue's attack when parties
  answer any set, i.e. without the consistency round);
* the issue's attack (different survivor sets to different parties) on 5 parties and on a 100-party
  Harary job recovers no single input: the unmask requests it needs are refused;
* an unmask request whose set differs from the signed one, forged, missing, duplicated signatures, and
  signatures of non-survivors are refused, and a refusal reveals nothing and aborts the round there;
* envelopes of a dropped party relabelled as another round's are refused by every survivor; an advert
  signed with another party's certificate, an operator certificate carrying the party's name, or a
  revoked certificate is refused.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from cryptography import x509

from dpfed.federation import secagg as sa
from dpfed.federation.certs import init_ca, issue, revoke

# ------------------------------------------------------------------------------ exhaustive search


def _attack(n: int, nbrs: dict[int, list[int]], t: int, corrupt: frozenset[int], *, consistency: bool = True,
            u: int = 0) -> tuple | None:
    """A strategy of the coordinator (with ``corrupt``) that recovers x_u, or None. Searched: the adverts
    routed to u (A_u, any subset of its neighbours of size >= t), the set S_u told to u, and for every
    other honest party: S_u, all parties, or all but u (any other set is dominated: a party's set matters
    for the attack on u only through u's membership and equality with S_u; other honest parties get all
    their neighbours' adverts, which only adds signatures and holders). Rules: secagg_graph's docstring;
    ``consistency=False``: a party answers whatever set it is told (today's protocol before issue 24)."""
    honest = [v for v in range(n) if v not in corrupt and v != u]
    everyone = frozenset(range(n))
    for a_bits in range(1 << len(nbrs[u])):
        a_u = frozenset(x for i, x in enumerate(nbrs[u]) if a_bits >> i & 1)
        if len(a_u) < t:
            continue
        others = [v for v in range(n) if v != u]
        for s_bits in range(1 << len(others)):
            s_u = frozenset([u] + [x for i, x in enumerate(others) if s_bits >> i & 1])
            if len(s_u & a_u) < t:
                continue
            for assign in itertools.product((0, 1, 2), repeat=len(honest)):
                if any(g == 0 and h not in s_u for h, g in zip(honest, assign, strict=True)):
                    continue
                group = {**dict(zip(honest, assign, strict=True)), u: 0}
                sets = {0: s_u, 1: everyone, 2: everyone - {u}}
                answers = {w: _answers(w, group, sets, a_u if w == u else frozenset(nbrs[w]), t, corrupt,
                                       consistency) for w in group}
                shares = len(corrupt & a_u) + sum(1 for w in honest if w in a_u and answers[w]
                                                  and u in sets[group[w]])
                seeds = all(v in corrupt or (answers[u] and v not in s_u)
                            or (v in group and answers[v] and u not in sets[group[v]]) for v in a_u)
                if shares >= t and seeds:
                    return a_u, s_u, group
    return None


def _answers(w: int, group: dict, sets: dict, a_w: frozenset, t: int, corrupt: frozenset, consistency: bool) -> bool:
    s = sets[group[w]]
    if len(s & a_w) < t:  # fewer than t of its neighbours listed: its self mask could not be rebuilt
        return False
    if not consistency:
        return True
    signed = sum(1 for x in a_w & s if x != w and (x in corrupt or group.get(x) == group[w]))
    return signed >= t  # its own signature, and t valid ones from neighbours it masked with


def _complete(n: int) -> dict[int, list[int]]:
    return {u: [v for v in range(n) if v != u] for u in range(n)}


def _ring(n: int, k: int) -> dict[int, list[int]]:
    return {u: sorted({(u + o) % n for o in range(-k // 2, k // 2 + 1) if o}) for u in range(n)}


@pytest.mark.parametrize("graph", ["complete-3", "complete-4", "complete-5", "complete-6", "ring-7-2", "ring-6-4"])
def test_exhaustive_search_finds_an_attack_exactly_when_t_is_at_most_the_corrupt_neighbours(graph):
    """Every corrupt set of up to 2 parties (not the target; on a complete graph one per size, the others
    are the same up to relabelling) and every t: an attack on party 0 exists iff t <= c_u (its corrupt
    neighbours), i.e. t >= safe_threshold(k, c_u) is exactly the safe range."""
    kind, *dims = graph.split("-")
    n = int(dims[0])
    nbrs = _complete(n) if kind == "complete" else _ring(n, int(dims[1]))
    k = len(nbrs[0])
    for c in range(0, min(2, n - 2) + 1):
        sets = [tuple(range(1, c + 1))] if kind == "complete" else itertools.combinations(range(1, n), c)
        for corrupt in sets:
            c_u = len(set(corrupt) & set(nbrs[0]))
            for t in range(1, k + 1):
                found = _attack(n, nbrs, t, frozenset(corrupt))
                assert (found is not None) == (t < sa.safe_threshold(k, c_u)), (graph, corrupt, t, found)


def test_without_the_consistency_round_the_search_finds_the_issue_attack():
    """The same search with parties answering any set: 5 parties, t = 2, no colluder, the input of
    party 0 is recovered (different sets to different parties), and on every complete graph up to 6
    parties exactly when 2t <= k (no colluder)."""
    assert _attack(5, _complete(5), 2, frozenset(), consistency=False) is not None
    for n in range(3, 7):
        k = n - 1
        for t in range(1, k + 1):
            found = _attack(n, _complete(n), t, frozenset(), consistency=False)
            assert (found is not None) == (2 * t <= k), (n, t)


def test_every_jobs_configuration_meets_the_threshold_and_an_override_below_it_is_flagged():
    for n, c, pmin in [(5, 0, 3), (5, 1, 4), (12, 3, 8), (40, 5, 30), (100, 5, 70), (200, 10, 150)]:
        cfg = sa.SecAggConfig("job", tuple(f"p{i:03d}" for i in range(n)), min_survivors=pmin,
                              corrupt_fraction=c / n, dropout_fraction=1 - pmin / n)
        assert cfg.colluders == c and cfg.safe_against_lying_coordinator, (n, c)
        if cfg.degree is None:
            assert cfg.threshold >= sa.safe_threshold(cfg.neighbour_count, c) == c + 1
    low = sa.SecAggConfig("job", tuple(f"p{i}" for i in range(6)), corrupt_fraction=2 / 6, threshold=2)
    assert not low.safe_against_lying_coordinator


# ------------------------------------------------------------------------------ the real protocol

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    names = [f"p{i:03d}" for i in range(100)]
    certs = {}
    for n in names:
        crt, key = issue(n, d)
        certs[n] = (crt.read_bytes(), key.read_bytes())
    op_crt, op_key = issue("p001", d, d / "operator", role="operator")  # an operator certificate named p001
    crl = revoke("p099", d)
    serials = {r.serial_number for r in x509.load_pem_x509_crl(crl.read_bytes())}
    return {"ca": (d / "ca.crt").read_bytes(), "certs": certs, "revoked": frozenset(serials),
            "operator_p001": (op_crt.read_bytes(), op_key.read_bytes())}


def _job(pki, n: int, pmin: int, job: str = "job-rogue", **kw):
    cfg = sa.SecAggConfig(job, tuple(f"p{i:03d}" for i in range(n)), bits=16, min_survivors=pmin,
                          corrupt_fraction=0.0, dropout_fraction=1 - pmin / n, **kw)
    clients = {u: sa.SecAggClient(cfg, u, *pki["certs"][u], pki["ca"]) for u in cfg.parties}
    server = sa.SecAggServer(cfg)
    routed = server.route_adverts(0, [c.advert() for c in clients.values()])
    xs = {u: np.full(64, i + 1, dtype=np.uint64) for i, u in enumerate(cfg.parties)}
    inputs = {u: clients[u].masked_input(0, xs[u], routed[u]) for u in cfg.parties}
    return cfg, clients, server, inputs


def _digests(clients, names):
    return {v: clients[v].advert().digest() for v in names}


def _lying_round(cfg, clients, server, inputs, told: dict[str, tuple[str, ...]]):
    """The coordinator tells each party its own survivor set, collects what each signs, and relays to each
    party every signature made on that party's set (the best it can do); returns the unmask answers it
    obtained and the refusals."""
    server.collect_masked(0, inputs.values())
    sigs = {u: clients[u].sign_survivors(0, s, _digests(clients, s)) for u, s in told.items()}
    got, refused = {}, {}
    for u, s in told.items():
        relay = [(v, sigs[v]) for v in s if v in sigs and told[v] == s]
        dropped = tuple(v for v in cfg.parties if v not in s)
        boxes = [e for m in inputs.values() for e in m.envelopes if e.receiver == u]
        try:
            got[u] = clients[u].unmask(0, s, dropped, boxes, relay)
        except sa.UnmaskRefused as exc:
            refused[u] = str(exc)
    return got, refused


def _recoverable(cfg, clients, target: str, answers: dict) -> bool:
    """Whether the answers hold t shares of the target's self mask and every pairwise seed it masked with."""
    peers = clients[target]._rounds[0].peers if 0 in clients[target]._rounds else {}
    shares = sum(1 for a in answers.values() if target in a.self_mask_shares)
    seeds = all(target in answers.get(v, sa.UnmaskResponse("", 0, v, {}, {})).pairwise_seeds
                or v in answers.get(target, sa.UnmaskResponse("", 0, target, {}, {})).pairwise_seeds for v in peers)
    return shares >= cfg.threshold and seeds


def test_the_issues_inconsistent_survivor_sets_recover_no_input(pki):
    """5 parties, P_min 3, no colluder (t = 2): a is told b, c survived; b, c that a dropped; d, e that all
    survived. Without the consistency round this unmasks a's input (the issue's attack); with it every
    party refuses its unmask request, so nothing at all is revealed."""
    cfg, clients, server, inputs = _job(pki, 5, 3)
    a, b, c, d, e = cfg.parties
    told = {a: (a, b, c), b: (b, c, d, e), c: (b, c, d, e), d: (a, b, c, d, e), e: (a, b, c, d, e)}
    got, refused = _lying_round(cfg, clients, server, inputs, told)
    assert not got and set(refused) == set(cfg.parties), got
    assert not _recoverable(cfg, clients, a, got)


def test_a_100_party_harary_job_with_inconsistent_sets_recovers_no_input(pki):
    """100 parties on a Harary graph (P_min 90): the target and half its neighbours are told the target's
    neighbours in one half dropped, the others that everyone survived (the attack generalised). Every
    neighbour's set differs from one of the two; whatever answers the coordinator gets, the target's input
    stays masked, and the target itself refuses (its neighbours signed the other set)."""
    cfg, clients, server, inputs = _job(pki, 100, 90, job="job-harary")
    assert cfg.degree is not None and cfg.degree < 99
    target = cfg.parties[0]
    nb = list(cfg.neighbours(target))
    half = set(nb[: len(nb) // 2])
    everyone = tuple(cfg.parties)
    without_half = tuple(v for v in cfg.parties if v not in half)
    without_target = tuple(v for v in cfg.parties if v != target)
    told = {u: everyone for u in cfg.parties}
    told[target] = without_half
    told.update({v: without_target for v in half})
    got, refused = _lying_round(cfg, clients, server, inputs, told)
    assert target in refused and not _recoverable(cfg, clients, target, got)


def _consistent(pki, n=6, pmin=4, job="job-cons"):
    cfg, clients, server, inputs = _job(pki, n, pmin, job=job)
    req = server.collect_masked(0, inputs.values())
    cr = server.consistency_request(0)
    server.add_signatures(0, {u: clients[u].sign_survivors(0, cr.survivors, cr.advert_digests) for u in cr.survivors})
    u = cfg.parties[0]
    return cfg, clients, server, req, u, server.envelopes_for(0, u), server.signatures_for(0, u)


@pytest.mark.parametrize("variant", ["other-set", "forged", "missing", "own-missing", "duplicated", "non-survivor",
                                     "too-few", "no-consistency"])
def test_an_unmask_request_without_the_signed_set_and_its_signatures_is_refused(pki, variant):
    """Each variant refused with nothing revealed, and the round is over for that party; the unaltered
    request is answered (control)."""
    cfg, clients, server, req, u, boxes, sigs = _consistent(pki, job=f"job-{variant}")
    surv, drop = list(req.survivors), list(req.dropped)
    t = cfg.threshold
    if variant == "other-set":
        surv, drop = surv[:-1], drop + surv[-1:]
    elif variant == "forged":
        v, s = sigs[1]
        sigs = [sigs[0], (v, s[:-1] + bytes([s[-1] ^ 1])), *sigs[2:]]
    elif variant == "missing":
        sigs = []
    elif variant == "own-missing":
        sigs = [x for x in sigs if x[0] != u]
    elif variant == "duplicated":
        sigs = sigs + sigs[1:2]
    elif variant == "non-survivor":
        sigs = sigs + [("p099", sigs[1][1])]
    elif variant == "too-few":
        sigs = [x for x in sigs if x[0] == u] + [x for x in sigs if x[0] != u][: t - 1]
    elif variant == "no-consistency":
        cfg, clients, server, inputs = _job(pki, 6, 4, job="job-nocons")
        req = server.collect_masked(0, inputs.values())
        boxes, sigs = server.envelopes_for(0, u), []
    with pytest.raises(sa.UnmaskRefused):
        clients[u].unmask(0, surv, drop, boxes, sigs)
    assert clients[u]._rounds.get(0) is None or clients[u]._rounds[0].response is None
    # control: another party of the same round, with the request as the coordinator made it, is answered
    w = cfg.parties[1]
    if variant != "no-consistency":
        resp = clients[w].unmask(0, req.survivors, req.dropped, server.envelopes_for(0, w), server.signatures_for(0, w))
        assert len(resp.self_mask_shares) == len(req.survivors) - 1


def test_a_second_different_survivor_set_is_not_signed(pki):
    cfg, clients, server, inputs = _job(pki, 6, 4, job="job-twice")
    u, names = cfg.parties[0], cfg.parties
    first = clients[u].sign_survivors(0, names, _digests(clients, names))
    assert clients[u].sign_survivors(0, names, _digests(clients, names)) == first  # a repeat: the same
    with pytest.raises(sa.ConsistencyRefused):
        clients[u].sign_survivors(0, names[:-1], _digests(clients, names[:-1]))
    other = {**_digests(clients, names), names[2]: bytes(32)}  # an advert this party did not use
    with pytest.raises(sa.ConsistencyRefused, match="not those this party used"):
        clients[names[1]].sign_survivors(0, names, other)
    with pytest.raises(sa.ConsistencyRefused):  # a party holding no masked input of the round signs nothing
        sa.SecAggClient(cfg, u, *pki["certs"][u], pki["ca"]).sign_survivors(0, names, _digests(clients, names))


def test_a_dropped_partys_envelopes_relabelled_as_another_rounds_are_refused_by_every_survivor(pki):
    """p005 sends its masked input in round 0 and is dropped in round 1; the coordinator lists it as a
    survivor of round 1 (signed by everyone) and hands its round-0 envelopes relabelled as round 1's:
    every survivor refuses (the envelope key and associated data are bound to the round)."""
    cfg = sa.SecAggConfig("job-relabel", tuple(f"p{i:03d}" for i in range(6)), bits=16, min_survivors=4)
    clients = {u: sa.SecAggClient(cfg, u, *pki["certs"][u], pki["ca"]) for u in cfg.parties}
    server = sa.SecAggServer(cfg)
    routed = server.route_adverts(0, [c.advert() for c in clients.values()])
    x = np.arange(8, dtype=np.uint64)
    old = {u: clients[u].masked_input(0, x, routed[u]) for u in cfg.parties}
    for u in cfg.parties:
        clients[u].forget(0)
    routed = server.route_adverts(1, [c.advert() for c in clients.values()])
    for u in cfg.parties[:5]:
        clients[u].masked_input(1, x, routed[u])
    relabelled = [dataclasses.replace(e, round=1) for e in old["p005"].envelopes]
    names = cfg.parties  # p005 claimed a survivor of round 1 (it is not signed by p005: it is gone)
    sigs = [(u, clients[u].sign_survivors(1, names, _digests(clients, names))) for u in names[:5]]
    for u in names[:5]:
        with pytest.raises(sa.EnvelopeError):
            clients[u].unmask(1, names, (), [e for e in relabelled if e.receiver == u], sigs)


def test_adverts_signed_with_another_partys_or_an_operator_or_a_revoked_certificate_are_refused(pki):
    cfg = sa.SecAggConfig("job-certs", tuple(f"p{i:03d}" for i in range(4)) + ("p099",), bits=16, min_survivors=3)
    me = sa.SecAggClient(cfg, "p000", *pki["certs"]["p000"], pki["ca"], revoked=pki["revoked"])
    good = {u: sa.SecAggClient(cfg, u, *pki["certs"][u], pki["ca"]).advert() for u in ("p001", "p002", "p003")}
    mallory = sa.SecAggClient(cfg, "p002", *pki["certs"]["p002"], pki["ca"]).advert()
    stolen = dataclasses.replace(mallory, name="p001")  # p001's keys signed with p002's certificate
    with pytest.raises(sa.KeySubstitutionError, match="certificate of 'p002'"):
        me.masked_input(0, np.zeros(4, np.uint64), [me.advert(), stolen, good["p002"], good["p003"]])
    op_crt, op_key = pki["operator_p001"]  # an operator-role certificate with CN p001 signs p001's keys
    with pytest.raises(sa.KeySubstitutionError):
        sa.SecAggClient(cfg, "p001", op_crt, op_key, pki["ca"])  # not even its own client accepts it
    forged = _advert_signed_with(cfg, "p001", op_crt, op_key)
    with pytest.raises(sa.KeySubstitutionError, match="not a party certificate"):
        me.masked_input(0, np.zeros(4, np.uint64), [me.advert(), forged, good["p002"], good["p003"]])
    revoked = sa.SecAggClient(cfg, "p099", *pki["certs"]["p099"], pki["ca"]).advert()
    with pytest.raises(sa.KeySubstitutionError, match="revoked"):
        me.masked_input(0, np.zeros(4, np.uint64), [me.advert(), revoked, *good.values()])
    out = me.masked_input(0, np.zeros(4, np.uint64), [me.advert(), *good.values()])  # control: honest adverts
    assert len(out.envelopes) == 3


def _advert_signed_with(cfg, name: str, cert_pem: bytes, key_pem: bytes) -> sa.KeyAdvert:
    """An advert for ``name`` with fresh keys, signed with the given certificate's key (whatever its role)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, x25519

    raw = [x25519.X25519PrivateKey.generate().public_key().public_bytes(serialization.Encoding.Raw,
                                                                         serialization.PublicFormat.Raw)
           for _ in range(2)]
    unsigned = sa.KeyAdvert(cfg.job_id, name, raw[0], raw[1], cert_pem, b"")
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return dataclasses.replace(unsigned, signature=key.sign(unsigned.signed_bytes(), ec.ECDSA(hashes.SHA256())))
