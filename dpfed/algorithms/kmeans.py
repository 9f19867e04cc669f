"""Private k-means: sample-and-aggregate (NRS07 Sec. 4 and 6) and DP Lloyd, alone or across parties.

Pieces, in the order a party runs them (method ``sample-aggregate``):

1. a noisy record count (discrete Laplace) fixes the number of blocks m (so m is public);
2. records go to m blocks independently (:func:`dpfed.algorithms.sample_aggregate.assign_blocks`), and
   ordinary k-means (k-means++ start, Lloyd) runs on each block (:func:`kmeans`);
3. each block's k centers are put into a canonical order (:func:`canonical_order`: Hungarian
   matching to k public anchor points -- a fixed function of the block's own center *set*, so one
   record changes one aligned answer, and the order does not depend on how centers or blocks are
   listed);
4. the m aligned answers (vectors of length k*d) are aggregated privately: NRS07's center of
   attention with smooth-sensitivity Gaussian noise (``aggregator="coa"``) or GUPT's clamped
   mean (``aggregator="mean"``);
5. optionally ``refine_steps`` DP Lloyd steps on the party's records start from that answer;
6. noisy cluster sizes (discrete Laplace) of the released centers.

Method ``lloyd`` is DP Lloyd from a uniformly random start (Blum et al. 2005, "SuLQ"; the
diffprivlib baseline): each iteration releases per-cluster noisy sums (Gaussian) and counts
(discrete Laplace). Every budget split is public, computed from the job parameters alone, and
calibrated so that the PLD composition of all releases is exactly the job's (epsilon, delta).

Across parties each party runs this on its own records (one task; parallel composition) and the
coordinator merges the P*k released centers, weighted by their noisy sizes, by weighted
k-means++ and Lloyd (post-processing). That is ``noise = "local"``, private against the coordinator
on its own. ``noise = "distributed"`` runs only under secure aggregation and is the central algorithm
over every party's records, round by round, each release an integer vector plus one discrete
Gaussian share per party (:mod:`dpfed.algorithms.kmeans_secure`: DP Lloyd sums and counts, the
sample-and-aggregate clamped mean; the center of attention is refused there, and why).
"""
from __future__ import annotations

import argparse
import hashlib
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
from dp_accounting import dp_event
from scipy.optimize import linear_sum_assignment

from dpfed.core import accounting
from dpfed.algorithms.estimator import EstimatorParams
from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import (Aggregate, Algorithm, CoordinatorAlgorithm, JobSpec, PartyAlgorithm,
                                       Released, Task, TaskRejected, stack_combine, sum_combine)
from dpfed.algorithms.params import (EPSILON, MEMORY_CAP_BYTES, Param, ParamTable, arg_type, delta_param,
                                     noise_param)
from dpfed.core.clipping import clamp, sum_sensitivity
from dpfed.core.mechanisms import discrete_laplace, gaussian
from dpfed.core.rng import SecureRNG
from dpfed.algorithms.sample_aggregate import assign_blocks, center_of_attention_release, clamped_mean_release
from dpfed.data.schema import Schema
from dpfed.core.memo import shared_cache

__all__ = [
    "kmeans_plusplus", "lloyd", "kmeans", "block_kmeans", "inertia", "public_anchors", "canonical_order", "align_blocks",
    "KMeansPlan", "make_plan", "plan_event", "fit_private", "block_answers", "merge_centers", "DPKMeans", "ALGORITHMS",
    "numeric_part",
]

METHODS = ("sample-aggregate", "lloyd")
AGGREGATORS = ("mean", "coa")
DEFAULTS: dict[str, Any] = {
    "method": "sample-aggregate", "k": 5, "aggregator": "mean", "refine_steps": 2, "lloyd_iters": 5,
    "block_size": 0, "per_cluster": 10, "max_blocks": 2000, "anchor_seed": 0,
}
_COUNT_SHARE = 0.02        # noisy record count (fixes m): 2 % of epsilon, pure
_SIZES_SHARE = 0.05        # noisy final cluster sizes: 5 %, pure
_STEP_COUNT_SHARE = 0.05   # noisy counts of all DP Lloyd steps together: 5 %, pure


# --------------------------------------------------------------------------- non-private k-means

def _sqdist(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared distances (n, k), ||x||^2 - 2 x.c + ||c||^2, clipped at 0."""
    d = np.einsum("ij,ij->i", X, X)[:, None] - 2.0 * (X @ C.T) + np.einsum("ij,ij->i", C, C)[None, :]
    return np.maximum(d, 0.0)


def _cluster_sums(X: np.ndarray, lab: np.ndarray, k: int, w: np.ndarray | None = None) -> np.ndarray:
    """Per-cluster (weighted) sums of the rows of X, (k, d): one sparse (k x n) indicator product."""
    from scipy import sparse

    n = len(lab)
    ind = sparse.csr_matrix((np.ones(n) if w is None else np.asarray(w, dtype=np.float64),
                             (np.asarray(lab), np.arange(n))), shape=(k, n))
    return np.asarray(ind @ np.asarray(X, dtype=np.float64))


def _draw(p: np.ndarray, u: float) -> int:
    """Index drawn with probability proportional to p >= 0, by inverting the cumulative sum at u."""
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, u * c[-1], side="right"), len(p) - 1))


def kmeans_plusplus(X: np.ndarray, k: int, rng: np.random.Generator, weights: np.ndarray | None = None
                    ) -> np.ndarray:
    """k-means++ seeding (Arthur & Vassilvitskii 2007), optionally weighted; needs k <= len(X)."""
    n = len(X)
    if k > n:
        raise ValueError(f"k={k} clusters need at least k records, got {n}")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    centers = np.empty((k, X.shape[1]))
    u = rng.random(k)
    centers[0] = X[_draw(w, u[0])]
    closest = _sqdist(X, centers[:1])[:, 0]
    for j in range(1, k):
        p = w * closest
        centers[j] = X[_draw(p if p.sum() > 0 else w, u[j])]
        np.minimum(closest, _sqdist(X, centers[j:j + 1])[:, 0], out=closest)
    return centers


def lloyd(X: np.ndarray, centers: np.ndarray, *, iters: int = 50, weights: np.ndarray | None = None,
          tol: float = 1e-6) -> tuple[np.ndarray, np.ndarray, float]:
    """Lloyd's iterations from ``centers``; empty clusters keep their center. Returns
    (centers, labels, inertia)."""
    C = np.array(centers, dtype=np.float64)
    w = np.ones(len(X)) if weights is None else np.asarray(weights, dtype=np.float64)
    k = len(C)
    for _ in range(iters):
        lab = np.argmin(_sqdist(X, C), axis=1)
        cnt = np.bincount(lab, weights=w, minlength=k)
        sums = _cluster_sums(X, lab, k, w)
        new = np.where(cnt[:, None] > 0, sums / np.maximum(cnt, 1e-300)[:, None], C)
        shift = float(np.max(np.abs(new - C)))
        C = new
        if shift <= tol:
            break
    D = _sqdist(X, C)
    lab = np.argmin(D, axis=1)
    return C, lab, float(np.sum(w * D[np.arange(len(X)), lab]))


def kmeans(X: np.ndarray, k: int, rng: np.random.Generator, *, n_init: int = 1, iters: int = 50,
           weights: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Best of ``n_init`` runs of k-means++ + Lloyd: (centers, inertia)."""
    best: tuple[np.ndarray, float] | None = None
    for _ in range(n_init):
        C, _, inert = lloyd(X, kmeans_plusplus(X, k, rng, weights), iters=iters, weights=weights)
        if best is None or inert < best[1]:
            best = (C, inert)
    assert best is not None
    return best


def block_kmeans(X: np.ndarray, blocks: Sequence[np.ndarray], k: int, rng: np.random.Generator, *,
                 iters: int = 20, chunk_bytes: int = 1 << 22) -> np.ndarray:
    """k-means++ + up to ``iters`` Lloyd steps on every block, batched: (m, k, d) centers.

    Per block the same computation as :func:`kmeans_plusplus` then :func:`lloyd` (the
    sample-and-aggregate estimator; through :func:`dpfed.algorithms.sample_aggregate.run_blocks` it would
    be a Python loop over ~1000 blocks), on 3-d arrays (blocks x records x d) padded with zero
    weights and processed in chunks of about ``chunk_bytes`` of records. The k uniforms of block
    j's k-means++ are the j-th k draws of ``rng`` (as sequential per-block calls would take
    them). A block whose labels did not change in a Lloyd step is at a fixed point (its centers
    would be recomputed bit for bit), so it leaves the batch: same answer as ``iters`` steps.
    Each block needs >= k records."""
    m, d = len(blocks), X.shape[1]
    sizes = np.array([len(b) for b in blocks])
    if sizes.min() < k:
        raise ValueError(f"every block needs at least k={k} records")
    u = rng.random((m, k))
    out = np.empty((m, k, d))
    per = max(1, int(chunk_bytes) // (8 * d * int(sizes.max())))
    for s in range(0, m, per):
        out[s:s + per] = _kmeans_batch(X, blocks[s:s + per], sizes[s:s + per], k, u[s:s + per], iters)
    return out


def _kmeans_batch(X: np.ndarray, blocks: Sequence[np.ndarray], sizes: np.ndarray, k: int, u: np.ndarray,
                  iters: int) -> np.ndarray:
    """:func:`block_kmeans` on one chunk of blocks, given their k-means++ uniforms u (mb, k)."""
    mb, d, bmax = len(blocks), X.shape[1], int(sizes.max())
    rows = np.repeat(np.arange(mb), sizes)
    cols = np.arange(len(rows)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    P = np.zeros((mb, bmax, d))
    W = np.zeros((mb, bmax))
    P[rows, cols] = X[np.concatenate(blocks)]
    W[rows, cols] = 1.0
    sq = np.einsum("mbd,mbd->mb", P, P)
    ar = np.arange(mb)

    def sqd(P: np.ndarray, sq: np.ndarray, C: np.ndarray) -> np.ndarray:  # (mb, bmax, kc) to C (mb, kc, d)
        return np.maximum(sq[:, :, None] - 2.0 * np.matmul(P, C.transpose(0, 2, 1))
                          + np.einsum("mkd,mkd->mk", C, C)[:, None, :], 0.0)

    def draw(p: np.ndarray, u: np.ndarray) -> np.ndarray:  # one index per block, prob ~ p (rows)
        c = np.cumsum(p, axis=1)
        return np.minimum((c <= (u * c[:, -1])[:, None]).sum(axis=1), sizes - 1)

    C = np.empty((mb, k, d))
    C[:, 0] = P[ar, draw(W, u[:, 0])]
    closest = sqd(P, sq, C[:, :1])[:, :, 0]
    for j in range(1, k):
        p = W * closest
        p = np.where(p.sum(axis=1, keepdims=True) > 0, p, W)
        C[:, j] = P[ar, draw(p, u[:, j])]
        np.minimum(closest, sqd(P, sq, C[:, j:j + 1])[:, :, 0], out=closest)
    act = ar                                  # blocks still moving
    prev = np.full((mb, bmax), -1)            # labels of the previous step
    for _ in range(iters):
        Pa, Wa = (P, W) if len(act) == mb else (P[act], W[act])
        lab = np.argmin(sqd(Pa, sq[act], C[act]), axis=2)
        moving = np.any((lab != prev[act]) & (Wa > 0), axis=1)
        if not moving.all():                  # fixed points: C[act[~moving]] is final
            act, lab, Pa, Wa = act[moving], lab[moving], Pa[moving], Wa[moving]
            if len(act) == 0:
                break
        prev[act] = lab
        onehot = (lab[:, :, None] == np.arange(k)) * Wa[:, :, None]
        cnt = onehot.sum(axis=1)
        sums = np.matmul(onehot.transpose(0, 2, 1), Pa)
        C[act] = np.where(cnt[:, :, None] > 0, sums / np.maximum(cnt, 1.0)[:, :, None], C[act])
    return C


def inertia(X: np.ndarray, centers: np.ndarray) -> float:
    """Sum of squared distances from each record to its nearest center (chunked)."""
    total = 0.0
    for s in range(0, len(X), 200_000):
        total += float(_sqdist(X[s:s + 200_000], centers).min(axis=1).sum())
    return total


# --------------------------------------------------------------------------- canonical order

def public_anchors(k: int, lower: np.ndarray, upper: np.ndarray, seed: int = 0) -> np.ndarray:
    """k public anchor points, uniform in the public box (seeded: not data, not privacy noise)."""
    rng = np.random.default_rng([int(seed), 0x6B6D65616E73])
    return lower + rng.random((k, len(lower))) * (upper - lower)


def canonical_order(centers: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """The k centers reordered so that center j is the one matched to anchor j by a minimum
    total squared distance matching (Hungarian, scipy). A function of the *set* of centers:
    the same set listed in any order gives the same output (up to exact cost ties)."""
    order = np.lexsort(centers.T[::-1])  # list the set in a fixed order before matching
    C = centers[order]
    rows, cols = linear_sum_assignment(_sqdist(anchors, C))
    out = np.empty_like(C)
    out[rows] = C[cols]
    return out


def align_blocks(block_centers: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """(m, k, d) block answers -> (m, k*d) canonical vectors (each block independently)."""
    return np.stack([canonical_order(c, anchors).ravel() for c in block_centers])


def numeric_part(X: np.ndarray, schema: Schema) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numeric columns of X with their public bounds (categorical columns are ignored); no
    copy when X is already float64 and all numeric (callers must not write to the result)."""
    num = schema.numeric
    if not num.any():
        raise ValueError("k-means needs at least one numeric column in the schema")
    Xf = np.asarray(X, dtype=np.float64)
    return (Xf if num.all() else Xf[:, num]), schema.lower, schema.upper


# --------------------------------------------------------------------------- budget plan

def _share_multiplier(eps: float, delta: float) -> float:
    """The split rule between budget shares, not a calibration: a share ``eps`` of the scaled budget
    becomes the Gaussian multiplier sqrt(2 ln(1.25/delta))/eps (the classic exchange rate, Dwork &
    Roth 2014 Thm. A.1), which fixes how the (epsilon, delta) aggregator and the Gaussian steps share
    it; :func:`make_plan` then calibrates the one scale by :func:`dpfed.core.accounting.calibrate`."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / eps


@dataclass(frozen=True)
class KMeansPlan:
    """Every noise parameter of one party's fit, from public job parameters only."""

    method: str
    k: int
    aggregator: str
    count_noise: float            # discrete Laplace parameter (1/scale) of the record count, 0 = none
    agg_epsilon: float            # coa: (agg_epsilon, agg_delta) smooth-sensitivity release
    agg_delta: float
    agg_noise_multiplier: float   # mean: Gaussian multiplier of the clamped mean
    steps: int                    # DP Lloyd steps (refinement, or the whole of method lloyd)
    step_noise_multiplier: float  # Gaussian multiplier of each step's sums (sensitivity = radius)
    step_count_noise: float       # discrete Laplace parameter of each step's counts
    sizes_noise: float            # discrete Laplace parameter of the final cluster sizes
    epsilon: float
    delta: float


def plan_event(plan: KMeansPlan) -> dp_event.DpEvent:
    """The composition of all of a party's releases under ``plan``."""
    ev: list[dp_event.DpEvent] = []
    if plan.count_noise > 0:
        ev.append(dp_event.DiscreteLaplaceDpEvent(plan.count_noise, 1))
    if plan.method == "sample-aggregate":
        if plan.aggregator == "coa":
            ev.append(accounting.EpsilonDeltaDpEvent(plan.agg_epsilon, plan.agg_delta))
        else:
            ev.append(dp_event.GaussianDpEvent(plan.agg_noise_multiplier))
    for _ in range(plan.steps):
        ev.append(dp_event.GaussianDpEvent(plan.step_noise_multiplier))
        ev.append(dp_event.DiscreteLaplaceDpEvent(plan.step_count_noise, 1))
    ev.append(dp_event.DiscreteLaplaceDpEvent(plan.sizes_noise, 1))
    return accounting.compose(ev)


def _plan_at(x: float, method: str, k: int, aggregator: str, steps: int, eps: float, delta: float,
             agg_weight: float) -> KMeansPlan:
    count = _COUNT_SHARE * eps if method == "sample-aggregate" else 0.0
    scaled = x * eps  # the part of the budget that is calibrated
    agg_eps = scaled * agg_weight if method == "sample-aggregate" else 0.0
    step_eps = scaled * (1.0 - agg_weight) / steps if steps else 0.0
    return KMeansPlan(
        method=method, k=k, aggregator=aggregator, count_noise=count,
        agg_epsilon=agg_eps if aggregator == "coa" else 0.0, agg_delta=delta / 2 if aggregator == "coa" else 0.0,
        agg_noise_multiplier=_share_multiplier(agg_eps, delta) if method == "sample-aggregate" and aggregator == "mean" else 0.0,
        steps=steps, step_noise_multiplier=_share_multiplier(step_eps, delta) if steps else 0.0,
        step_count_noise=_STEP_COUNT_SHARE * eps / steps if steps else 0.0,
        sizes_noise=_SIZES_SHARE * eps, epsilon=eps, delta=delta)


@shared_cache(maxsize=256)
def make_plan(method: str, k: int, aggregator: str, steps: int, epsilon: float, delta: float) -> KMeansPlan:
    """Calibrate one budget scale x so that the PLD epsilon (at ``delta``) of :func:`plan_event` is
    within 0.1 % below ``epsilon``, never above: :func:`dpfed.core.accounting.calibrate` on the
    noise scale 1/x. Shares: record count 2 %, sizes 5 %, step counts 5 % (pure, fixed); the rest
    is split between the aggregator (1/2 if refining, else all) and the DP Lloyd steps (equal shares)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if aggregator not in AGGREGATORS:
        raise ValueError(f"aggregator must be one of {AGGREGATORS}, got {aggregator!r}")
    if method == "lloyd" and steps < 1:
        raise ValueError("DP Lloyd needs at least one iteration")
    agg_weight = 1.0 if method == "sample-aggregate" and steps == 0 else (0.5 if method == "sample-aggregate" else 0.0)

    def at(noise_scale: float) -> KMeansPlan:
        return _plan_at(1.0 / noise_scale, method, k, aggregator, steps, epsilon, delta, agg_weight)

    s = accounting.calibrate(lambda v: plan_event(at(v)), epsilon, delta, lo=1e-4, hi=1e4, guess=2.0, rtol=1e-3)
    return at(s)


# --------------------------------------------------------------------------- private fit (one party)

def _dl(value: np.ndarray, noise: float, rng: SecureRNG, events: list[dp_event.DpEvent] | None) -> np.ndarray:
    """Counts plus discrete Laplace noise of epsilon ``noise`` (sensitivity 1); the event goes to ``events``."""
    rel = discrete_laplace(np.asarray(value, dtype=np.int64), sensitivity=1, epsilon=noise, rng=rng)
    if events is not None:
        events.append(rel.event)
    return np.asarray(rel.value, dtype=np.int64)


def _dp_lloyd_step(X: np.ndarray, C: np.ndarray, lower: np.ndarray, upper: np.ndarray, plan: KMeansPlan,
                   rng: SecureRNG, events: list[dp_event.DpEvent] | None = None) -> np.ndarray:
    """One DP Lloyd step: per-cluster sums of (x - mid) plus Gaussian noise of std z R (on the public
    grid, :func:`dpfed.core.mechanisms.gaussian`), R = ||upper-lower||/2
    the largest l2 norm of a centred record (add/remove sensitivity of the sum vector), and
    counts plus discrete Laplace (sensitivity 1). Clusters with a noisy count < 1 keep their
    center; new centers are clamped to the box (post-processing)."""
    k, d = C.shape
    mid = (lower + upper) / 2
    R = sum_sensitivity(lower - mid, upper - mid, norm=2)  # = ||upper - lower|| / 2
    lab = np.argmin(_sqdist(X, C), axis=1)
    cnt = np.bincount(lab, minlength=k)
    sums = _cluster_sums(X - mid, lab, k)
    # floating-point-safe Gaussian on the public grid; its event is exactly the planned
    # GaussianDpEvent(step_noise_multiplier) (the grid's rounding is paid for in noise)
    rel = gaussian(sums, sensitivity=R, noise_multiplier=plan.step_noise_multiplier, rng=rng)
    if events is not None:
        events.append(rel.event)
    noisy_sums = rel.value
    noisy_cnt = _dl(cnt, plan.step_count_noise, rng, events).astype(np.float64)
    new = np.where(noisy_cnt[:, None] >= 1, mid + noisy_sums / np.maximum(noisy_cnt, 1)[:, None], C)
    return np.clip(new, lower, upper)


def fit_private(X: np.ndarray, lower: np.ndarray, upper: np.ndarray, plan: KMeansPlan, rng: SecureRNG, *,
                per_cluster: int = 10, max_blocks: int = 2000, block_size: int = 0, anchor_seed: int = 0,
                info: dict[str, Any] | None = None, strict: bool = True,
                events: list[dp_event.DpEvent] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One party's private k-means under ``plan`` (already charged): (centers (k, d), noisy sizes (k,)).
    ``events`` (if given) receives the event of every release, in order.

    ``strict=False`` (a party answering a charged task): nothing here fails because of the records,
    since a failure after the charge would tell whether they are few or odd. Records are clamped into
    the public box, the number of blocks m comes from the *noisy* count, and a block holding fewer
    than k records answers the k public anchors (a function of that block alone, so one record still
    changes one block's answer). ``strict=True`` (a data owner's local estimator): those cases raise
    a clear error instead. ``info`` (if given) receives non-private diagnostics for tests and
    benchmarks; it must never leave the party.
    """
    X = np.asarray(X, dtype=np.float64)
    k = plan.k
    if X.ndim != 2 or X.shape[1] != len(lower):
        raise ValueError(f"expected records with {len(lower)} numeric columns")
    if strict and len(X) == 0:
        raise ValueError("no records: a party needs data to fit k-means")
    outside = int(np.sum(np.any((X < lower) | (X > upper), axis=1)))
    if outside and strict:
        raise ValueError(f"{outside} record(s) lie outside the public domain box; clip or fix the schema bounds")
    if outside or not np.all(np.isfinite(X)):
        X = clamp(np.nan_to_num(X, nan=0.0), lower, upper)  # +-inf -> +-max float, then the box
    np_rng = rng.numpy()  # non-privacy randomness: block assignment, k-means++ in blocks, start
    if plan.method == "lloyd":
        C = lower + np_rng.random((k, len(lower))) * (upper - lower)
    else:
        n_noisy = int(_dl(np.array([len(X)]), plan.count_noise, rng, events)[0])
        size = block_size if block_size > 0 else per_cluster * k
        m = max(3, min(max_blocks, n_noisy // size))  # at least 3 blocks (the center of attention needs 3)
        if strict and len(X) < m * k:
            raise ValueError(f"too few records for sample-and-aggregate with k={k}: {m} blocks need at least "
                             f"{m * k} records")
        blocks = assign_blocks(len(X), m, np_rng, allow_empty=not strict)
        short = sum(len(b) < k for b in blocks)
        if strict and short:
            raise ValueError(f"{short} of {m} blocks hold fewer than k={k} records; use fewer blocks or smaller k")
        A = block_answers(X, blocks, k, lower, upper, np_rng, anchor_seed)
        lo_v, hi_v = np.tile(lower, k), np.tile(upper, k)
        if plan.aggregator == "coa":
            rel = center_of_attention_release(A, epsilon=plan.agg_epsilon, delta=plan.agg_delta,
                                              diameter=float(np.linalg.norm(hi_v - lo_v)), rng=rng,
                                              lower=lo_v, upper=hi_v)
        else:
            rel = clamped_mean_release(A, lower=lo_v, upper=hi_v, noise_multiplier=plan.agg_noise_multiplier, rng=rng)
        C = rel.value.reshape(k, -1)
        if events is not None:
            events.append(rel.event)
        if info is not None:
            info.update(blocks=m, aggregate_noise_std=rel.noise_std, block_answers=A)
            info["aggregate"] = C.copy()
    for _ in range(plan.steps):
        C = _dp_lloyd_step(X, C, lower, upper, plan, rng, events)
    lab = np.argmin(_sqdist(X, C), axis=1)
    sizes = _dl(np.bincount(lab, minlength=k), plan.sizes_noise, rng, events)
    return C, sizes


def block_answers(X: np.ndarray, blocks: Sequence[np.ndarray], k: int, lower: np.ndarray, upper: np.ndarray,
                  np_rng: np.random.Generator, anchor_seed: int = 0) -> np.ndarray:
    """The m aligned block answers (m, k*d) of sample-and-aggregate: k-means on every block of >= k
    records, the k public anchors for a smaller block (a function of that block alone, so one record
    still changes one answer), each put into the canonical order of the anchors."""
    m = len(blocks)
    full = np.array([len(b) >= k for b in blocks], dtype=bool)
    anchors = public_anchors(k, lower, upper, anchor_seed)
    Z = np.broadcast_to(anchors, (m, k, len(lower))).copy()
    if full.any():
        Z[full] = block_kmeans(X, [b for b, f in zip(blocks, full) if f], k, np_rng)
    return align_blocks(Z.reshape(m, k, -1), anchors)


def merge_centers(centers: Sequence[np.ndarray], sizes: Sequence[np.ndarray], k: int, seed: int = 0
                  ) -> np.ndarray:
    """Post-processing across parties: weighted k-means++ (10 starts) + Lloyd over the P*k
    released centers, weights = noisy sizes clipped at 0 (a tiny floor keeps zero-size points)."""
    P = np.concatenate([np.asarray(c, dtype=np.float64) for c in centers])
    w = np.concatenate([np.maximum(np.asarray(s, dtype=np.float64), 0.0) for s in sizes]) + 1e-6
    if len(centers) == 1:
        return np.asarray(centers[0], dtype=np.float64)
    return kmeans(P, k, np.random.default_rng(seed), n_init=10, iters=100, weights=w)[0]


# --------------------------------------------------------------------------- estimator

class DPKMeans(EstimatorParams):
    """scikit-learn-style private k-means.

    ``DPKMeans(n_clusters=5, epsilon=1.0, delta=1e-6, bounds=(lower, upper), method="sample-aggregate")``;
    ``fit(X)`` spends (epsilon, delta) on X (bounds are public, never taken from X) and sets
    ``cluster_centers_``, ``cluster_sizes_`` (noisy), ``inertia_`` (of the private centers on X,
    a non-private diagnostic), ``privacy_event_``. ``random_state`` seeds the noise (tests only).
    """

    def __init__(self, n_clusters: int = 5, *, epsilon: float = 1.0, delta: float = 1e-6,
                 bounds: tuple[Any, Any] | None = None, method: str = "sample-aggregate",
                 aggregator: str = "mean", refine_steps: int = 2, lloyd_iters: int = 5, per_cluster: int = 10,
                 max_blocks: int = 2000, block_size: int = 0, random_state: int | None = None) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.method = method
        self.aggregator = aggregator
        self.refine_steps = refine_steps
        self.lloyd_iters = lloyd_iters
        self.per_cluster = per_cluster
        self.max_blocks = max_blocks
        self.block_size = block_size
        self.random_state = random_state

    def _plan(self) -> KMeansPlan:
        steps = self.lloyd_iters if self.method == "lloyd" else self.refine_steps
        return make_plan(self.method, int(self.n_clusters), self.aggregator, int(steps), float(self.epsilon),
                         float(self.delta))

    def fit(self, X: np.ndarray, y: Any = None) -> "DPKMeans":
        if self.bounds is None:
            raise ValueError("bounds=(lower, upper) are required: public bounds, never computed from the data")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError("X must be a 2-d array")
        lower = np.broadcast_to(np.asarray(self.bounds[0], dtype=np.float64), (X.shape[1],)).copy()
        upper = np.broadcast_to(np.asarray(self.bounds[1], dtype=np.float64), (X.shape[1],)).copy()
        if not np.all(upper > lower):
            raise ValueError("bounds need lower < upper in every column")
        if not np.all(np.isfinite(X)):
            raise ValueError("X holds NaN or infinite values")
        if self.n_clusters < 1 or self.n_clusters > len(X):
            raise ValueError(f"n_clusters={self.n_clusters} must lie in 1..{len(X)} (the number of records)")
        plan = self._plan()
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(self.random_state)
        info: dict[str, Any] = {}
        C, sizes = fit_private(X, lower, upper, plan, rng, per_cluster=self.per_cluster, max_blocks=self.max_blocks,
                               block_size=self.block_size, info=info)
        self.cluster_centers_, self.cluster_sizes_ = C, sizes
        self.privacy_event_ = plan_event(plan)
        self.plan_ = plan
        self.n_blocks_ = info.get("blocks", 0)
        self.inertia_ = inertia(X, C)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.argmin(_sqdist(np.asarray(X, dtype=np.float64), self.cluster_centers_), axis=1)

    def score(self, X: np.ndarray, y: Any = None) -> float:
        """Negative inertia, as scikit-learn's KMeans.score."""
        return -inertia(np.asarray(X, dtype=np.float64), self.cluster_centers_)


# --------------------------------------------------------------------------- federated halves

def _job_options(params: Mapping[str, Any]) -> dict[str, Any]:
    opts = {key: params.get(key, val) for key, val in DEFAULTS.items()}
    for key in ("k", "refine_steps", "lloyd_iters", "block_size", "per_cluster", "max_blocks", "anchor_seed"):
        if not isinstance(opts[key], int) or isinstance(opts[key], bool):
            raise TaskRejected(f"kmeans option {key!r} must be an integer")
    if opts["k"] < 1 or opts["refine_steps"] < 0 or opts["lloyd_iters"] < 1 or opts["max_blocks"] < 3:
        raise TaskRejected("kmeans needs k >= 1, refine_steps >= 0, lloyd_iters >= 1, max_blocks >= 3")
    if opts["method"] not in METHODS or opts["aggregator"] not in AGGREGATORS:
        raise TaskRejected(f"kmeans method must be one of {METHODS} and aggregator one of {AGGREGATORS}")
    return opts


def _spec_plan(spec: JobSpec) -> tuple[KMeansPlan, dict[str, Any]]:
    o = _job_options(spec.params)
    if spec.delta <= 0:
        raise TaskRejected("kmeans needs delta > 0 (Gaussian and smooth-sensitivity noise)")
    steps = o["lloyd_iters"] if o["method"] == "lloyd" else o["refine_steps"]
    return make_plan(o["method"], o["k"], o["aggregator"], steps, spec.epsilon, spec.delta), o


def _distributed(spec: JobSpec) -> bool:
    return spec.params.get("noise", "local") == "distributed"


class KMeansParty(PartyAlgorithm):
    """Local noise: one task ("fit", round 0), private centers and noisy sizes from this party's records.
    Distributed noise under secure aggregation: the rounds of :mod:`dpfed.algorithms.kmeans_secure`."""

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        if _distributed(spec):
            from dpfed.algorithms import kmeans_secure

            return kmeans_secure.job_event(spec)
        return plan_event(_spec_plan(spec)[0])

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent | None:
        if _distributed(spec):
            return None  # its rounds are answered by the secure session only (never by answer)
        return plan_event(_spec_plan(spec)[0])  # the job is this one round

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if _distributed(spec):
            from dpfed.algorithms import kmeans_secure

            return kmeans_secure.check_task(spec, task)
        if task.job_id != spec.job_id or task.kind != "fit" or task.round != 0:
            raise TaskRejected("kmeans answers exactly one task: round 0, kind 'fit'")

    def needs_secure_aggregation(self, spec: JobSpec) -> bool:
        """Distributed noise: each answer carries one share of the noise."""
        return _distributed(spec)

    def secure_plan(self, spec: JobSpec, task: Task) -> sn.SecurePlan | None:
        if not sn.is_secure(spec.params):
            return None
        from dpfed.algorithms import kmeans_secure

        return kmeans_secure.secure_plan(spec, task)

    def secure_rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                    rng: SecureRNG) -> Iterator[np.ndarray]:
        from dpfed.algorithms import kmeans_secure

        if self.secure_plan(spec, task) is None:
            raise TaskRejected("not a secure kmeans task")
        return kmeans_secure.secure_rows(spec, task, X, rng)

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        if _distributed(spec):
            raise TaskRejected("a distributed-noise kmeans job answers only through secure aggregation")
        plan, o = _spec_plan(spec)
        Xn, lower, upper = numeric_part(X, spec.schema)
        events: list[dp_event.DpEvent] = []
        try:
            C, sizes = fit_private(Xn, lower, upper, plan, rng, per_cluster=o["per_cluster"],
                                   max_blocks=o["max_blocks"], block_size=o["block_size"],
                                   anchor_seed=o["anchor_seed"], strict=False, events=events)
        except ValueError as exc:
            raise TaskRejected(str(exc)) from None
        # one row per party (stack_combine)
        return Released({"centers": C[None], "sizes": sizes.astype(np.float64)[None]}, tuple(events))


class KMeansCoordinator(CoordinatorAlgorithm):
    """Issues the single fit task, then merges the parties' released centers."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec = spec
        self.plan, self.opts = _spec_plan(spec)
        self.parties = list(parties)
        self._done = False
        self._centers: np.ndarray | None = None
        self._sizes: np.ndarray | None = None

    def next_task(self) -> Task | None:
        return None if self._done else Task(self.spec.job_id, 0, "fit")

    def absorb(self, task: Task, combined: Aggregate) -> None:
        k, d = self.opts["k"], int(self.spec.schema.numeric.sum())
        C, S = np.asarray(combined.arrays["centers"], dtype=np.float64), np.asarray(combined.arrays["sizes"])
        m = len(combined.parties)
        if m == 0:
            raise ValueError("no party answered the kmeans task")
        if C.shape != (m, k, d) or S.shape != (m, k) or not np.all(np.isfinite(C)):
            raise ValueError("malformed kmeans answers")
        order = np.argsort(np.array(combined.parties))  # the same merge whatever order the answers came in
        cs, ss = list(C[order]), list(S[order])
        self._centers = merge_centers(cs, ss, k, seed=0)
        sizes_all = np.concatenate(ss)
        lab = np.argmin(_sqdist(np.concatenate(cs), self._centers), axis=1)
        self._sizes = np.bincount(lab, weights=np.maximum(sizes_all, 0), minlength=k)
        self._done = True

    @property
    def progress(self) -> float:
        return 1.0 if self._done else 0.0

    def model(self) -> dict[str, np.ndarray]:
        if self._centers is None:
            raise RuntimeError("the kmeans job has not finished")
        return {"algorithm": np.array("kmeans"), "cluster_centers": self._centers, "cluster_sizes": self._sizes}

    def summary(self) -> dict[str, Any]:
        p = self.plan
        return {"method": p.method, "k": p.k, "aggregator": p.aggregator if p.method == "sample-aggregate" else "",
                "dp_lloyd_steps": p.steps}


def _coordinator(spec: JobSpec, parties: Sequence[str]) -> CoordinatorAlgorithm:
    """The local-noise merge, or the secure rounds of a distributed-noise job."""
    if sn.is_secure(spec.params):
        from dpfed.algorithms.kmeans_secure import SecureKMeansCoordinator

        return SecureKMeansCoordinator(spec, parties)
    return KMeansCoordinator(spec, parties)


def combine(task: Task, parts: Sequence[Aggregate]) -> Aggregate:
    """Local noise ("fit"): the parties' centers stacked; a secure round: its decoded sum as it is."""
    return stack_combine(task, parts) if task.kind == "fit" else sum_combine(task, parts)


_NONPRIVATE_CACHE: dict[tuple[str, int], float] = {}


def nonprivate_inertia(X: np.ndarray, k: int, seed: int = 0) -> tuple[float, str]:
    """Inertia of scikit-learn KMeans(n_init=10) if importable, else our k-means++ (n_init=10)."""
    key = (hashlib.blake2b(np.ascontiguousarray(X).view(np.uint8), digest_size=16).hexdigest(), k)
    try:
        from sklearn.cluster import KMeans  # test/bench extra, not a runtime dependency
        impl = "sklearn"
    except ImportError:  # pragma: no cover - depends on the environment
        impl = "numpy"
    if key not in _NONPRIVATE_CACHE:
        if impl == "sklearn":
            _NONPRIVATE_CACHE[key] = float(KMeans(n_clusters=k, n_init=10, random_state=seed).fit(X).inertia_)
        else:
            _NONPRIVATE_CACHE[key] = kmeans(X, k, np.random.default_rng(seed), n_init=10, iters=300)[1]
    return _NONPRIVATE_CACHE[key], impl


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema
             ) -> dict[str, Any]:
    """``inertia`` of the released centers on X's numeric columns, ``inertia_nonprivate``
    (k-means with 10 starts on the same data; ``nonprivate_impl`` says whose) and their ratio."""
    Xn, _, _ = numeric_part(X, schema)
    C = np.asarray(model["cluster_centers"], dtype=np.float64)
    inert = inertia(Xn, C)
    ref, impl = nonprivate_inertia(Xn, len(C))
    return {"inertia": inert, "inertia_nonprivate": ref, "inertia_ratio": inert / ref if ref > 0 else float("inf"),
            "nonprivate_impl": impl}


#: Memory estimate of a party's fit without its records: the m aligned block answers (m x k*d), the
#: block centers and the aggregator's copies (MEMORY_FACTOR of them) plus the m x m block distances.
MEMORY_FACTOR = 4

PARAMS = ParamTable((
    EPSILON, delta_param(1e-6, positive=True),
    Param("method", str, DEFAULTS["method"], choices=METHODS,
          help="kmeans: sample-and-aggregate (NRS07) or DP Lloyd (default sample-aggregate)"),
    Param("k", int, DEFAULTS["k"], lo=1, cap=1000, help="kmeans: number of clusters (default 5)"),
    Param("aggregator", str, DEFAULTS["aggregator"], choices=AGGREGATORS,
          help="kmeans sample-aggregate: clamped mean (GUPT) or center of attention (NRS07)"),
    Param("refine_steps", int, DEFAULTS["refine_steps"], lo=0, cap=100,
          help="kmeans sample-aggregate: DP Lloyd steps after aggregation (default 2)"),
    Param("lloyd_iters", int, DEFAULTS["lloyd_iters"], lo=1, cap=1000,
          help="kmeans lloyd: DP Lloyd iterations (default 5)"),
    Param("per_cluster", int, DEFAULTS["per_cluster"], lo=1, cap=1_000_000,
          help="kmeans sample-aggregate: block size = this * k records (default 10)"),
    Param("max_blocks", int, DEFAULTS["max_blocks"], lo=3, cap=100_000,
          help="kmeans sample-aggregate: at most this many blocks (default 2000)"),
    Param("block_size", int, DEFAULTS["block_size"], lo=0, cap=100_000_000,
          help="kmeans sample-aggregate: records per block (0: blocks_per_cluster * k)"),
    Param("anchor_seed", int, DEFAULTS["anchor_seed"], lo=0, hi=2**32 - 1,
          help="seed of the public anchor points that order each block's centers"),
    noise_param(),
    *sn.SECURE_PARAMS,
), check=lambda p, schema: _check_params(p, schema))


#: Smallest epsilon of one pure release (a discrete Laplace count): below it the PLD accountant overflows.
MIN_RELEASE_EPSILON = 1e-5


def _check_params(p: dict[str, Any], schema: Schema | None) -> None:
    steps = p["lloyd_iters"] if p["method"] == "lloyd" else p["refine_steps"]
    key = "lloyd_iters" if p["method"] == "lloyd" else "refine_steps"
    if p["noise"] == "distributed":
        from dpfed.algorithms.kmeans_secure import COA_REFUSAL, NOT_SECURE_REFUSAL

        if not sn.is_secure(p):
            raise TaskRejected(NOT_SECURE_REFUSAL)
        if p["method"] == "sample-aggregate" and p["aggregator"] == "coa":
            raise TaskRejected(COA_REFUSAL)
    elif steps and _STEP_COUNT_SHARE * p["epsilon"] / steps < MIN_RELEASE_EPSILON:
        most = int(_STEP_COUNT_SHARE * p["epsilon"] / MIN_RELEASE_EPSILON)
        raise TaskRejected(f"kmeans parameter {key!r} must be at most {most} at epsilon {p['epsilon']:g} (each step's "
                           f"counts get epsilon {_STEP_COUNT_SHARE:g} * epsilon / {key} >= {MIN_RELEASE_EPSILON:g})")
    if schema is None:
        return
    d = int(schema.numeric.sum())
    if d < 1:
        raise TaskRejected("kmeans needs at least one numeric feature with public bounds in the schema")
    m = p["max_blocks"] if p["method"] == "sample-aggregate" else 1
    need = 8 * (MEMORY_FACTOR * m * p["k"] * d + m * m)
    if need > MEMORY_CAP_BYTES:
        raise TaskRejected(f"kmeans with max_blocks {m} x k {p['k']} x d {d} needs about {need / 2**30:.1f} GiB, more "
                           f"than the cap {MEMORY_CAP_BYTES / 2**30:.0f} GiB; lower max_blocks or k")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=METHODS, default=DEFAULTS["method"], help=PARAMS.get("method").help)
    p.add_argument("--k", type=arg_type(PARAMS, "k"), default=DEFAULTS["k"], help=PARAMS.get("k").help)
    p.add_argument("--aggregator", choices=AGGREGATORS, default=DEFAULTS["aggregator"],
                   help=PARAMS.get("aggregator").help)
    for flag, key in (("--refine-steps", "refine_steps"), ("--lloyd-iters", "lloyd_iters"),
                      ("--blocks-per-cluster", "per_cluster"), ("--max-blocks", "max_blocks")):
        p.add_argument(flag, type=arg_type(PARAMS, key), default=DEFAULTS[key], dest=key, help=PARAMS.get(key).help)
    p.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(a: argparse.Namespace) -> dict[str, Any]:
    return {"method": a.method, "k": a.k, "aggregator": a.aggregator, "refine_steps": a.refine_steps,
            "lloyd_iters": a.lloyd_iters, "per_cluster": a.per_cluster, "max_blocks": a.max_blocks,
            "noise": getattr(a, "noise", "local")}


ALGORITHMS = {
    "kmeans": Algorithm(name="kmeans", party=KMeansParty, coordinator=_coordinator, evaluate=evaluate,
                        add_arguments=add_arguments, params_from_args=params_from_args,
                        default_delta=1e-6, needs_labels=False, combine=combine),
}
