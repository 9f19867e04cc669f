"""What a party's distributed-noise encoding costs, per component. Run:
``python bench/bench_encode.py [--repeats 7] [--out bench/results/encode_run.md]``; prints a table.

Times ``distributed_noise.encode`` (KLS21 Alg. 1: clip, rotate, scale, conditional rounding, one exact
discrete Gaussian share, mod 2^B) on one vector, and on a batch of per-record rows as DP-SGD sends
them (``secure_session.encode_rows`` -> ``quantize`` row by row), at d = 622,496 (full-Omega MNIST
GMLVQ) and d = 10^4, noise planned as in bench/bench_secure.py (epsilon 1, delta 1e-5, B = 16,
P_min = 0.7 P). Components are attributed by timing the functions ``quantize`` calls (clip_rows,
_rotate_inplace, the conditional rounding, the discrete Gaussian sampler) while the real ``encode``
runs; "other" is the rest (sums, mod 2^B, the sign masks). Process CPU time, one BLAS thread, the
run with the least total CPU of ``--repeats`` (interleaved cases); the load average is printed.
Works on older revisions too (it times whichever rounding function the module has).
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
import warnings
from collections import defaultdict
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from dpfed.core import distributed_noise as dn  # noqa: E402
from dpfed.core.rng import ReproducibleSeedWarning, SecureRNG  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PARTS = {"clip": ("clip_rows",), "rotate": ("_rotate_inplace",),
         "round": ("conditional_round32", "conditional_round"), "noise": ("sample_discrete_gaussian_alias",)}
CASES = [(622_496, 1, 10), (622_496, 12, 10), (10_000, 1, 100), (10_000, 140, 100)]  # (d, rows, parties)


def instrument() -> dict[str, float]:
    """Wrap the functions ``quantize`` / ``add_noise_mod`` call (module attributes) with CPU timers."""
    spent: dict[str, float] = defaultdict(float)
    for part, names in PARTS.items():
        for name in names:
            f = getattr(dn, name, None)
            if f is None:
                continue

            def timed(*a, _f=f, _part=part, **k):  # type: ignore[no-untyped-def]
                t0 = time.process_time()
                try:
                    return _f(*a, **k)
                finally:
                    spent[_part] += time.process_time() - t0

            setattr(dn, name, timed)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None, help="also write the table here")
    args = ap.parse_args()
    warnings.simplefilter("ignore", ReproducibleSeedWarning)
    spent = instrument()
    rng = SecureRNG.from_seed("bench-encode")
    setups = []
    for d, rows, p in CASES:
        plan = dn.plan_distributed_noise(1.0, 1e-5, clip=1.0, dimension=d, bits=16, parties=p,
                                         survivors_min=max(2, 7 * p // 10), vectors=p * rows)
        x = np.random.default_rng(0).normal(size=(rows, d)) * (2.0 / np.sqrt(d))  # norm ~2: clipped
        setups.append((d, rows, plan, x if rows > 1 else x[0]))
    best: list[dict[str, float] | None] = [None] * len(setups)
    load0 = os.getloadavg()
    for _ in range(args.repeats + 1):  # the first pass warms caches (tables, Hadamard blocks), untimed
        for i, (_d, _rows, plan, x) in enumerate(setups):
            spent.clear()
            t0 = time.process_time()
            dn.encode(x, plan, seed=b"bench-encode", rng=rng)
            total = time.process_time() - t0
            run = {**{k: spent.get(k, 0.0) for k in PARTS}, "total": total}
            if _ > 0 and (best[i] is None or total < best[i]["total"]):  # type: ignore[index]
                best[i] = run
    load1 = os.getloadavg()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    lines = [f"encode CPU ms (best of {args.repeats}; commit {commit}; {platform.machine()}, {os.cpu_count()} cores "
             f"shared, load average {load0[0]:.1f} before, {load1[0]:.1f} after)", "",
             "| d | rows | clip | rotate | round | noise | other | encode total | per row (clip+rotate+round) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (d, rows, _plan, _x), run in zip(setups, best, strict=True):
        assert run is not None
        ms = {k: 1e3 * v for k, v in run.items()}
        other = ms["total"] - sum(ms[k] for k in PARTS)
        per_row = (ms["clip"] + ms["rotate"] + ms["round"]) / rows
        lines.append(f"| {d:,} | {rows} | {ms['clip']:.2f} | {ms['rotate']:.2f} | {ms['round']:.2f} | "
                     f"{ms['noise']:.2f} | {other:.2f} | {ms['total']:.2f} | {per_row:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
