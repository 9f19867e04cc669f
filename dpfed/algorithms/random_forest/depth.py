"""The automatic tree depth, from public parameters only (the same at every party and at the coordinator).

A leaf's class counts are useful only when its expected count is well above the noise added to each entry
(Fletcher & Islam 2015, "A differentially private random decision forest using reliable signal-to-noise
ratios"; survey: Fletcher & Islam 2019, "Decision tree classification with differential privacy", ACM
CSUR). With n records spread over 2^D leaves a leaf holds n / 2^D on average, against noise of std sigma
per entry, so the signal-to-noise rule is

    D_snr = floor(log2(n / (SNR sigma))),   SNR = 2   (the expected leaf count at least twice the noise std).

That expectation holds when the records fill the public domain (every feature categorical and the domain's
cell count prod_j |dom_j| <= FILL n): then the records spread over the leaves. When the domain is numeric or
much larger than n, records concentrate on few occupied cells, most random splits leave one side empty, and
the occupied leaves hold far more than n / 2^D (measured: adult and mushroom keep gaining accuracy up to the
deepest trees even at epsilon 0.1): the depth then follows n alone,

    D_n = round(log2(n / k)) + 2   (k classes; about four records per class and leaf without noise),

(the forest's earlier noise-blind rule; deeper than Fan et al. 2003's m / 2, which JPW 2012 start from).
The depth is min(D_n, D_snr) for a filled domain and D_n otherwise, at least 1 and within the
released-vector and structure caps. n is the public ``records`` bound and sigma the central per-entry noise
std of the job's mechanism at (epsilon, delta) (distributed noise sums to about the same std); without
``records`` the library default depth applies.
"""
from __future__ import annotations

import math
from typing import Sequence

from dpfed.algorithms.random_forest.structure import usable_features
from dpfed.data.schema import Schema

__all__ = ["SNR", "FILL", "MAX_AUTO_COUNTS", "MAX_AUTO_STRUCTURE", "auto_depth"]

SNR = 2.0
#: A categorical domain with at most FILL x n cells counts as filled by the records.
FILL = 2.0
#: The automatic depth stays within the parameter caps (options.MAX_COUNTS, options.MAX_STRUCTURE).
MAX_AUTO_COUNTS = 1 << 22
MAX_AUTO_STRUCTURE = 1 << 23


def auto_depth(schema: Schema, records: int, trees: int, sigma: float,
               features: Sequence[str] | None = None) -> int:
    """The automatic depth (module docstring) for ``records`` public records and per-entry noise std ``sigma``."""
    n, k = max(1, int(records)), max(1, schema.n_classes)
    depth = int(round(math.log2(n / k))) + 2
    cols = usable_features(schema, features)
    cats = [f.categories for f in (schema.features[int(j)] for j in cols) if f.kind == "categorical"]
    filled = len(cats) == len(cols) and math.prod(int(c) for c in cats) <= FILL * n
    if filled and sigma > 0:
        depth = min(depth, int(math.floor(math.log2(max(1.0, n / (SNR * sigma))))))
    words = -(-int(max([1, *schema.domain_sizes.tolist()])) // 64)
    while depth > 1 and (trees * (1 << depth) * k > MAX_AUTO_COUNTS
                         or trees * ((1 << depth) - 1) * words > MAX_AUTO_STRUCTURE):
        depth -= 1
    return max(1, depth)
