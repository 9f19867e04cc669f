"""Speed of the exact Polya share sampler (dpfed/core/polya.py): one party's share vector of L entries.

    python bench/bench_polya.py

Target (issue 27 follow-up): vectors of a few thousand entries in well under a second. Prints a markdown table
of the best of 3 wall times per (scale, shares, L); scales as the statistics plans use them ((L1 + 1) / epsilon
with L1 = h 2^16: ~6.6e5 at epsilon 1 and one level, ~5e6 at epsilon 0.1 and 8 levels).
"""
from __future__ import annotations

import time
import warnings

from dpfed.core.polya import sample_polya_share
from dpfed.core.rng import SecureRNG

warnings.simplefilter("ignore")  # a seeded generator warns by design


def main() -> None:
    rng = SecureRNG.from_seed("bench-polya")
    print("| scale | shares | entries | best of 3 (s) |\n|---|---|---|---|")
    for scale in (3.0, 6.6e5, 5.2e6):
        for shares in (1, 5):
            for n in (1000, 5000, 50_000):
                best = min(_timed(scale, shares, n, rng) for _ in range(3))
                print(f"| {scale:g} | {shares} | {n} | {best:.3f} |", flush=True)


def _timed(scale: float, shares: int, n: int, rng: SecureRNG) -> float:
    t = time.perf_counter()
    sample_polya_share(scale, shares, n, rng)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
