"""Cost of secure aggregation (``dpfed.federation.secagg``): one party's steps and the coordinator's
unmasking. Run: ``python bench/bench_secagg.py [--repeats 3]``.

Prints a markdown table and writes it to bench/results/secagg.md. Times are the best of
``--repeats`` CPU-time runs (``time.process_time``; single-threaded), each on a fresh round. The
issue's target: a party's masking at most 0.2 s per round for d = 10^6 with ~20 neighbours.
Keys are per job (``SecAggClient``; round 0 verifies the adverts and agrees once per neighbour and
is left out); per round a party prepares (fresh self-mask seed, Shamir shares in envelopes, pairwise
seeds), masks and unmasks. Dropout rows lose 30 % of the parties before their masked input.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Callable

import numpy as np

from dpfed.federation import secagg as sa
from dpfed.simulation.inprocess import simulation_credentials

RESULTS = Path(__file__).resolve().parent / "results" / "secagg.md"


def _best(fn: Callable[[int], float], repeats: int) -> float:
    return min(fn(r) for r in range(repeats))


def _cpu(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def party_rows(ca: bytes, certs: dict, d: int, neighbours: int, bits: int, repeats: int) -> list[tuple[str, float]]:
    """prepare_round / masked_input / unmask of one party in a complete graph."""
    cfg = sa.SecAggConfig("bench-party", tuple(sorted(certs))[: neighbours + 1], bits=bits,
                          min_survivors=neighbours // 2)
    clients = {n: sa.SecAggClient(cfg, n, *certs[n], ca) for n in cfg.parties}
    me = cfg.parties[0]
    adverts = [c.advert() for c in clients.values()]
    x = np.arange(d, dtype=np.uint64) & np.uint64((1 << bits) - 1)
    t: dict[str, list[float]] = {"prepare": [], "mask": [], "unmask": []}
    for r in range(repeats + 1):  # round 0 checks the adverts and agrees with each neighbour: once per job
        t["prepare"].append(_cpu(lambda: clients[me].prepare_round(r, adverts)))
        t["mask"].append(_cpu(lambda: clients[me].masked_input(r, x, adverts)))
        envs = [e for n, c in clients.items() if n != me for e in c.masked_input(r, x, adverts).envelopes
                if e.receiver == me]
        surv, drop = cfg.parties[: len(cfg.parties) - 2], cfg.parties[-2:]
        digests = {n: clients[n].advert().digest() for n in surv}
        sigs = [(n, clients[n].sign_survivors(r, surv, digests)) for n in surv]  # the consistency round
        t["unmask"].append(_cpu(lambda: clients[me].unmask(r, surv, drop, envs, sigs)))  # signatures checked
    return [(f"party {k} (d = {d:.0e}, {neighbours} neighbours, B = {bits})", min(v[1:])) for k, v in t.items()]


def server_row(ca: bytes, certs: dict, p: int, d: int, bits: int, dropout: bool, repeats: int) -> tuple[str, float, float, int]:
    """Coordinator unmask time (and a plain uint64 sum of the same inputs for scale)."""
    cfg = sa.SecAggConfig(f"bench-server-{p}", tuple(sorted(certs))[:p], bits=bits, min_survivors=p // 2)
    clients = {n: sa.SecAggClient(cfg, n, *certs[n], ca) for n in cfg.parties}
    gen = np.random.default_rng(p)
    xs = {n: gen.integers(0, 1 << bits, d, dtype=np.uint64) for n in cfg.parties}
    best, plain = float("inf"), float("inf")
    for r in range(repeats):
        server = sa.SecAggServer(cfg)
        gone = list(gen.permutation(cfg.parties)[: (3 * p) // 10]) if dropout else []
        routed = server.route_adverts(r, [c.advert() for c in clients.values()])
        inputs = [clients[n].masked_input(r, xs[n], routed[n]) for n in routed if n not in gone]
        req = server.collect_masked(r, inputs)
        cr = server.consistency_request(r)
        server.add_signatures(r, {n: clients[n].sign_survivors(r, cr.survivors, cr.advert_digests) for n in cr.survivors})
        resps = [clients[n].unmask(r, req.survivors, req.dropped, server.envelopes_for(r, n), server.signatures_for(r, n))
                 for n in req.survivors]
        out: list[np.ndarray] = []
        best = min(best, _cpu(lambda: out.append(server.unmask(r, resps))))
        want = np.zeros(d, np.uint64)
        plain = min(plain, _cpu(lambda: [np.add(want, xs[n], out=want) for n in req.survivors]))
        assert np.array_equal(out[0], want & np.uint64((1 << bits) - 1))
    graph = "complete" if cfg.degree is None else f"Harary k={cfg.degree}"
    return (f"server unmask P = {p} ({graph}, t = {cfg.threshold}), d = {d:.0e}, "
            f"{'30 % dropout' if dropout else 'no dropout'}", best, plain, len(req.dropped))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--d", type=int, default=10**6)
    args = ap.parse_args()
    ca, certs = simulation_credentials([f"p{i:03d}" for i in range(100)])
    lines = ["| step | CPU s | plain sum s | dropped (pairwise seeds revealed) |", "|---|---|---|---|"]
    for name, s in party_rows(ca, certs, args.d, 20, 32, args.repeats):
        lines.append(f"| {name} | {s:.4f} | | |")
    for p, d in ((10, 620_000), (100, 10_000)):
        for dropout in (False, True):
            name, s, plain, nd = server_row(ca, certs, p, d, 16, dropout, args.repeats)
            lines.append(f"| {name} | {s:.4f} | {plain:.4f} | {nd} |")
    head = (f"Secure aggregation, best of {args.repeats} (CPU seconds, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})\n\n")
    text = head + "\n".join(lines) + "\n"
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
