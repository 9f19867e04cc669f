"""The automatic forest shape (trees T, depth D), from public parameters only (the same at every party and at
the coordinator).

Depth the data supports. A leaf's class counts are useful only when its expected count is well above the noise
added to each entry (Fletcher & Islam 2015, "A differentially private random decision forest using reliable
signal-to-noise ratios"; survey: Fletcher & Islam 2019, ACM CSUR). With n records spread over 2^D leaves a leaf
holds n / 2^D on average, against noise of std sigma per entry, so the signal-to-noise rule is

    D_snr = floor(log2(n / (SNR sigma))),   SNR = 2   (the expected leaf count at least twice the noise std).

That expectation holds when the records fill the public domain (every feature categorical and the domain's
cell count prod_j |dom_j| <= FILL n): then the records spread over the leaves. When the domain is numeric or
much larger than n, records concentrate on few occupied cells, most random splits leave one side empty, and
the occupied leaves hold far more than n / 2^D: the depth then follows n alone, one level past the forest's
earlier noise-free rule of thumb (about four records per class and leaf):

    D_n = round(log2(n / k)) + 2,   target D* = D_n + EXTRA (EXTRA = 1)   (k classes),

deeper than Fan et al. 2003's m / 2, which JPW 2012 start from. D* = min(D_n, D_snr) for a filled domain.

Trees for depth. The released vector has T 2^D k entries, capped at MAX_AUTO_COUNTS = 2^22: on adult (n =
32561, k = 2) 30 trees allow only D = 16 < D* = 17. When ``trees`` is not set and the noise is small (the
per-entry std per unit of L2 sensitivity, sigma(T) / sqrt(T), the Gaussian's multiplier z, at most Z_TRADE = 8
with MIN_AUTO_TREES trees: epsilon >= 0.5 at delta = 1e-6), the forest trades trees for depth: T = the most
trees (at most MAX_AUTO_TREES = 30) that fit D* under the caps, but at least MIN_AUTO_TREES = 16; otherwise
T = 30. Then D = the deepest depth <= D* that fits T. With ``trees`` set, D = D* lowered to fit.

Measured before choosing (numpy, the released-vector sum with the rounded Gaussian of delta = 1e-6 (5 parties'
distributed shares sum to about the same std), pseudo-count 1, test accuracy; adult: mean of 16 tree/noise
seeds (s.e. 0.0004-0.0016); mushroom: 9 seeds):

    adult      epsilon 0.1   0.3    1      3    no noise   mushroom    0.1    0.3    1      3    no noise
    T=60 D=15    .803     -    .818     -     .823         T=30 D=13  .920   .968   .987   .994   .996
    T=30 D=16    .804   .816   .821   .823   .825         T=30 D=14  .923   .968   .991   .996   .999  <- D*
    T=16 D=17    .798   .815   .823   .826   .828         T=30 D=15  .916   .967   .991   .997   .999
    T= 8 D=18      -      -    .822   .827   .830

Depth is what random trees on a numeric domain gain from (no noise: .821-.823 / .825 / .828 / .830 at D = 15
/ 16 / 17 / 18), and what the noise takes back at small epsilon; T 2^D fixed, trading trees for one more level
(T=16 D=17 against T=30 D=16, paired over the 16 seeds) gains +0.0016 at epsilon 1 (s.e. 0.0012: a weak
gain) and +0.0023 at 3 (s.e. 0.0011), loses 0.0009 at 0.3 (s.e. 0.0015) and 0.0055 at 0.1 (s.e. 0.0017):
hence the trade only above the noise threshold, and the floor of 16 trees (8 trees of depth 18 do not beat 16
of depth 17 at epsilon 1, -0.001). The tree seeds' spread is large: on seeds 0-2 (the benchmark's) the trade
gains +0.0055 at epsilon 1, on seeds 3-15 +0.0008. Mushroom (T = 30 fits the extra level) gains from it at
epsilon 1 and 3 and ties at 0.1 and 0.3 (also over 16 seeds at 0.1 with the 5-party distributed std, 227 against
the local 199: 0.9148 / 0.9165, s.e. 0.004); two extra levels lose at 0.1. Nursery (a filled domain, D* = D_snr
= 4 / 5 / 7 / 9 at epsilon 0.1 / 0.3 / 1 / 3, T = 30) is unchanged; its sweep over D = 4..10 (3 seeds) puts the
best depth at 4 / 7 / 8 / 10, within 0.006 of the rule's depth except at epsilon 0.3 and 3 (0.008 and 0.016
below the best).

n is the public ``records`` bound and sigma the central per-entry noise std of the job's mechanism at (epsilon,
delta) for T trees (distributed noise sums to about the same std); without ``records`` the library defaults
apply (:mod:`.plan`). The shape always stays within the released-vector and structure caps.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from dpfed.algorithms.random_forest.structure import usable_features
from dpfed.data.schema import Schema

__all__ = ["SNR", "FILL", "EXTRA", "MIN_AUTO_TREES", "MAX_AUTO_TREES", "Z_TRADE", "MAX_AUTO_COUNTS",
           "MAX_AUTO_STRUCTURE",
           "target_depth", "auto_depth", "auto_shape"]

SNR = 2.0
#: A categorical domain with at most FILL x n cells counts as filled by the records.
FILL = 2.0
#: Levels beyond D_n for a numeric or sparse domain (module docstring's measurements).
EXTRA = 1
#: The automatic number of trees: the most that fit the target depth, within these bounds.
MIN_AUTO_TREES = 16
MAX_AUTO_TREES = 30
#: Trade trees for depth only when the noise per unit of L2 sensitivity (the Gaussian's multiplier z) is at most
#: this (delta = 1e-6: epsilon >= 0.5; module docstring's measurements).
Z_TRADE = 8.0
#: The automatic shape stays within the parameter caps (options.MAX_COUNTS, options.MAX_STRUCTURE).
MAX_AUTO_COUNTS = 1 << 22
MAX_AUTO_STRUCTURE = 1 << 23


def target_depth(schema: Schema, records: int, sigma: float, features: Sequence[str] | None = None) -> int:
    """D* (module docstring) for ``records`` public records and per-entry noise std ``sigma``, before the caps."""
    n, k = max(1, int(records)), max(1, schema.n_classes)
    depth = int(round(math.log2(n / k))) + 2
    cols = usable_features(schema, features)
    cats = [f.categories for f in (schema.features[int(j)] for j in cols) if f.kind == "categorical"]
    if not (len(cats) == len(cols) and math.prod(int(c) for c in cats) <= FILL * n):
        return depth + EXTRA
    if sigma > 0:
        depth = min(depth, int(math.floor(math.log2(max(1.0, n / (SNR * sigma))))))
    return max(1, depth)


def _fits(schema: Schema, trees: int, depth: int) -> bool:
    words = -(-int(max([1, *schema.domain_sizes.tolist()])) // 64)
    k = max(1, schema.n_classes)
    return trees * (1 << depth) * k <= MAX_AUTO_COUNTS and trees * ((1 << depth) - 1) * words <= MAX_AUTO_STRUCTURE


def _capped(schema: Schema, trees: int, depth: int) -> int:
    while depth > 1 and not _fits(schema, trees, depth):
        depth -= 1
    return max(1, depth)


def auto_depth(schema: Schema, records: int, trees: int, sigma: float,
               features: Sequence[str] | None = None) -> int:
    """The automatic depth for a given number of trees: D* lowered to fit the caps."""
    return _capped(schema, trees, target_depth(schema, records, sigma, features))


def auto_shape(schema: Schema, records: int, sigma_for: Callable[[int], float],
               features: Sequence[str] | None = None) -> tuple[int, int]:
    """The automatic (trees, depth) (module docstring); ``sigma_for(T)`` is the per-entry noise std with T trees.
    Trees are traded for depth only when the noise per unit of L2 sensitivity with MIN_AUTO_TREES trees,
    sigma / sqrt(T), is at most Z_TRADE."""
    want = target_depth(schema, records, sigma_for(MAX_AUTO_TREES), features)
    trees = MAX_AUTO_TREES
    if sigma_for(MIN_AUTO_TREES) <= Z_TRADE * math.sqrt(MIN_AUTO_TREES):
        while trees > MIN_AUTO_TREES and not _fits(schema, trees, want):
            trees -= 1
    return trees, auto_depth(schema, records, trees, sigma_for(trees), features)
