"""A secure round against a plain round, measured side by side in one run. Run:
``python bench/bench_secure.py [--repeats 2]``; prints a table and writes bench/results/secure.md.

Both rounds run every party and the coordinator in this one process, one after another (wall time
of the whole round = the sum of all parties' and the coordinator's work; network excluded):

* plain: each party adds float Gaussian noise (ChaCha20 ziggurat, the DP-SGD path) to its float64
  d-vector; the coordinator sums the P vectors.
* secure: each party advertises fresh signed X25519 keys, Shamir-shares its seeds to its neighbours
  (ChaCha20-Poly1305 envelopes, certificates checked), encodes its d-vector ONCE (per-party
  encoding: clip, randomized Hadamard rotation to d' = 2^ceil(log2 d), conditional rounding, one
  exact discrete Gaussian share, mod 2^B: ``dn.encode``), masks it, packs it to B bits, answers the
  unmask request; the coordinator routes keys and envelopes, unmasks and decodes (inverse rotation).
  This is the SecAgg + encoding cost; per-record encoding (each record's row rotated and rounded on
  its own, what LVQ jobs do) adds a rounding cost proportional to the batch, not measured here.

The algorithm's own computation (the gradient) is the same in both and left out, which makes the
ratio the worst case. Also: one party's masking for d = 10^6 and 20 neighbours, and the upload of one
answer at B = 16 against float64.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

from dpfed.core import distributed_noise as dn
from dpfed.core.rng import SecureRNG
from dpfed.federation import secagg as sa
from dpfed.simulation.inprocess import simulation_credentials
from dpfed.federation import secure_wire as sw

RESULTS = Path(__file__).resolve().parent / "results" / "secure.md"


def plain_round(xs: list[np.ndarray], rngs: list[SecureRNG], std: float) -> float:
    t0 = time.perf_counter()
    answers = [x + r.normal_ziggurat(x.size, std) for x, r in zip(xs, rngs)]
    total = np.zeros_like(xs[0])
    for a in answers:
        total += a
    return time.perf_counter() - t0


def secure_round(r: int, cfg: sa.SecAggConfig, clients: dict, xs: list[np.ndarray], rngs: list[SecureRNG],
                 plan: dn.DistributedNoisePlan, seed: bytes) -> tuple[float, int, float, float]:
    t0 = time.perf_counter()
    t_enc = t_mask = 0.0
    server = sa.SecAggServer(cfg)
    names = list(cfg.parties)
    routed = server.route_adverts(r, [clients[n].advertise_keys(r) for n in names])
    boxes = server.route_envelopes(r, [e for n in names for e in clients[n].share_keys(r, routed[n])])
    masked, size = [], 0
    for n, x, rng in zip(names, xs, rngs):
        t1 = time.perf_counter()
        enc = dn.encode(x, plan, seed=seed, rng=rng)
        t2 = time.perf_counter()
        packed = sw.pack_masked(clients[n].masked_input(r, enc, boxes[n]).y, plan.bits)
        t_enc, t_mask = t_enc + t2 - t1, t_mask + time.perf_counter() - t2
        size = packed["y"].nbytes
        masked.append(sa.MaskedInput(cfg.job_id, r, n, sw.unpack_masked(packed, plan.bits, plan.padded_dimension)))
    req = server.collect_masked(r, masked)
    total = server.unmask(r, [clients[n].unmask(r, req.survivors, req.dropped) for n in req.survivors])
    dn.decode(total, plan, seed=seed)
    for c in clients.values():
        c.forget(r)
    return time.perf_counter() - t0, size, t_enc, t_mask


def compare(ca: bytes, certs: dict, p: int, d: int, bits: int, repeats: int) -> dict:
    names = tuple(sorted(certs))[:p]
    cfg = sa.SecAggConfig(f"bench-secure-{p}", names, bits=bits, min_survivors=max(2, (7 * p) // 10),
                          corrupt_fraction=0.0, dropout_fraction=0.3)
    clients = {n: sa.SecAggClient(cfg, n, *certs[n], ca) for n in names}
    gen = np.random.default_rng(0)
    clip = 1.0
    xs = [gen.normal(size=d) * (clip / np.sqrt(d)) for _ in names]
    rngs = [SecureRNG.from_seed(i) for i in range(p)]
    gamma = dn.choose_gamma(bits, vectors=p, shares=p, clip=clip, dimension=d, sigma_real=clip)
    plan = dn.DistributedNoisePlan(dimension=d, clip=clip, gamma=gamma, bits=bits, sigma_share=max(0.5, 1.0 / gamma),
                                   honest_parties=max(1, (7 * p) // 10), parties=p, vectors=p)
    seed = b"bench-rotation"
    secure_round(0, cfg, clients, xs, rngs, plan, seed)  # warms the certificate cache, as a job's first round
    plains, secures, size = [], [], 0
    for r in range(1, repeats + 1):
        plains.append(plain_round(xs, rngs, clip))
        s, size, enc, msk = secure_round(r, cfg, clients, xs, rngs, plan, seed)
        secures.append((s, enc, msk))
    best = min(secures)
    return {"p": p, "d": d, "plain": min(plains), "secure": best[0], "encode": best[1], "mask": best[2], "graph":
            "complete" if cfg.degree is None else f"Harary k={cfg.degree}", "upload": size, "float64": 8 * d}


def masking(ca: bytes, certs: dict, d: int, neighbours: int, bits: int, repeats: int) -> float:
    cfg = sa.SecAggConfig("bench-mask", tuple(sorted(certs))[:neighbours + 1], bits=bits,
                          min_survivors=neighbours // 2)
    clients = {n: sa.SecAggClient(cfg, n, *certs[n], ca) for n in cfg.parties}
    me = cfg.parties[0]
    x = np.arange(d, dtype=np.uint64) & np.uint64((1 << bits) - 1)
    best = float("inf")
    for r in range(repeats + 1):
        adverts = [c.advertise_keys(r) for c in clients.values()]
        envs = [e for c in clients.values() for e in c.share_keys(r, adverts) if e.receiver == me]
        t0 = time.perf_counter()
        clients[me].masked_input(r, x, envs)
        if r:
            best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    load0 = os.getloadavg()
    ca, certs = simulation_credentials([f"p{i:03d}" for i in range(100)])
    rows = [compare(ca, certs, 10, 620_000, 16, args.repeats), compare(ca, certs, 100, 10_000, 16, args.repeats)]
    mask = masking(ca, certs, 10**6, 20, 16, args.repeats)
    load1 = os.getloadavg()
    lines = ["| round | plain s | secure s (all parties' encoding / masking; the rest: keys, shares, unmask, decode) "
             "| ratio | target | upload B=16 / float64 |", "|---|---|---|---|---|---|"]
    for row, target in zip(rows, (1.5, 2.0)):
        ratio = row["secure"] / row["plain"]
        lines.append(f"| P = {row['p']}, d = {row['d']:.3g} ({row['graph']}) | {row['plain']:.3f} | {row['secure']:.3f} ({row['encode']:.3f} / {row['mask']:.3f}) | "
                     f"{ratio:.2f}x | <= {target}x {'met' if ratio <= target else 'MISSED'} | "
                     f"{row['upload'] / row['float64']:.3f} ({row['upload']} / {row['float64']} bytes) |")
    lines.append(f"| one party's masking, d = 1e6, 20 neighbours, B = 16 | | {mask:.3f} | | <= 0.2 s "
                 f"{'met' if mask <= 0.2 else 'MISSED'} | |")
    head = (f"Secure vs plain round, best of {args.repeats} (wall seconds, every party and the coordinator in one "
            f"process; {platform.machine()}, {os.cpu_count()} cores, load average {load0[0]:.1f} before, "
            f"{load1[0]:.1f} after)\n\n")
    text = head + "\n".join(lines) + "\n"
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
