"""The private decision tree's automatic depth, from public parameters only (the same at every party and at the
coordinator): the job's ``records`` bound n, epsilon, delta, ``leaf_share`` and the schema's grid (F features,
S cells in all) and k classes.

Friedman & Schuster (KDD 2010, "Data mining with differential privacy", Sec. 4.2) stop growing a node when its
noisy count N gives N / (t C) < sqrt(2) / epsilon: the expected count of one (cell, class) entry below the
noise std of one entry (t values per attribute, C classes; Laplace). Fletcher & Islam (2015, "A differentially
private random decision forest using reliable signal-to-noise ratios"; survey: ACM CSUR 2019) choose the depth
by the same signal-to-noise idea. Applied in expectation to the last split level D - 1 of a tree of depth D,
whose nodes hold n / 2^(D-1) records on average, with t = S / F (the mean cells per feature) and the level's
per-entry noise std sigma_D = s sqrt(D / (1 - leaf_share)) sqrt(F) (:mod:`.plan`: each of the D levels gets
(1 - leaf_share) / D of rho, L2 sensitivity sqrt(F); s the single-Gaussian multiplier of (epsilon, delta),
Balle & Wang 2018's analytic Gaussian), the depth is the largest D with

    n / (2^(D-1) (S / F) k)  >=  SNR sigma_D,        SNR = 1,

at least 1, at most :data:`MAX_DEPTH` and within the released-vector and structure caps. Distributed noise
sums to about the same std (its RDP calibration is looser: +14 % at epsilon 0.1, +7 % at 1 on adult), and the
rule uses the analytic std for both, so a plan does not depend on the roster. The
coordinator's data-driven stopping rule (:func:`.model.min_count`) still turns the nodes that the noise cannot
support into leaves; the depth bounds how thinly the budget is spread over the levels.

The constant SNR (and t = S / F rather than FS10's largest t) was chosen by a numpy sweep
(``DPDecisionTreeClassifier``, one party, depths 1-10, adult / nursery / mushroom at epsilon 0.1, 0.3, 1, 3,
delta 1e-6, 16 bins, leaf_share 0.2), as the summed accuracy regret against each of the 12 cases' best depth.
Seeds 0-2 (the choice): SNR 1: 0.071 (largest 0.020), SNR 1.4: 0.061, 0.5: 0.159, 2: 0.118; t = the largest
feature's cells needed SNR 0.7 (0.053); the best fixed depth, 5: 0.150 (0.038). Seeds 3-5 alone (held out):
SNR 1 0.133 against fixed 5's 0.125, a tie within the noise; seeds 0-5 pooled: 0.048 (0.017) against 0.083
(0.026) for fixed 5 or 6. FS10's own constant 1 lies on the plateau SNR 1-1.4 and is kept. The rule's depths
there: adult 3 / 4 / 5 / 7, nursery 2 / 3 / 5 / 6, mushroom 1 / 3 / 4 / 5 (epsilon 0.1 / 0.3 / 1 / 3), and
8 / 7 / 7 at epsilon 10 (adult 0.848 against depth 5's 0.844, nursery 0.916 against 0.894, seeds 0-2). Five
parties with distributed noise (``run_inprocess``, the benchmark's configuration), rule against depth 5,
seeds 0-8 at epsilon 0.1: adult 0.800 / 0.809, nursery 0.746 / 0.758, mushroom 0.918 / 0.870 (one split:
its spread over seeds is 0.08-0.11); seeds 3-8 at epsilon 0.3: adult 0.823 / 0.822, nursery 0.841 / 0.791,
mushroom 0.988 / 0.962. Bins and leaf share stay fixed (16, 0.2): at the rule's depth (seeds 0-2) 4, 8 or 32
bins on adult and leaf shares 0.1, 0.35, 0.5 moved accuracy by less than the spread over seeds or lowered it
(adult at epsilon 3: 0.830 with 4 bins, 0.833 with 8, against 0.842), so no automatic rule for them. Without
``records`` (no public n) the library default depth applies.
"""
from __future__ import annotations

import math

from dpfed.core import accounting

__all__ = ["SNR", "MAX_DEPTH", "MAX_COUNTS", "MAX_STRUCTURE", "level_noise", "auto_depth", "within_caps"]

SNR = 1.0
MAX_DEPTH = 12
#: Largest released count vector of a level (2^(depth-1) x grid cells x classes): 32 MB of int64.
MAX_COUNTS = 1 << 22
#: Largest structure sent with a task: (2^depth - 1) nodes x the widest feature's cells.
MAX_STRUCTURE = 1 << 22


def level_noise(depth: int, features: int, epsilon: float, delta: float, leaf_share: float) -> float:
    """sigma_D of the module docstring: the per-entry noise std of a level of a depth-``depth`` tree."""
    s = accounting.gaussian_noise_multiplier(epsilon, delta, accountant="analytic")
    return s * math.sqrt(depth / (1.0 - leaf_share)) * math.sqrt(features)


def within_caps(depth: int, cells: int, widest: int, k: int) -> bool:
    """Whether a tree of ``depth`` keeps its deepest level's vector and its structure within the caps."""
    return ((1 << (depth - 1)) * cells * k <= MAX_COUNTS and ((1 << depth) - 1) * widest <= MAX_STRUCTURE)


def auto_depth(records: int, k: int, features: int, cells: int, widest: int, epsilon: float, delta: float,
               leaf_share: float) -> int:
    """The automatic depth (module docstring) for ``records`` public records and a grid of ``features``
    features, ``cells`` cells in all (the widest ``widest``), ``k`` classes."""
    n, k, f = max(1, int(records)), max(1, int(k)), max(1, int(features))
    depth = 1
    for d in range(2, MAX_DEPTH + 1):
        signal = n / ((1 << (d - 1)) * (cells / f) * k)
        if signal < SNR * level_noise(d, f, epsilon, delta, leaf_share) or not within_caps(d, cells, widest, k):
            break
        depth = d
    return depth
