"""The k-means model maths (pure NumPy, no privacy): squared distances, k-means++ (Arthur & Vassilvitskii
2007) and Lloyd's iterations, the batched per-block k-means of sample-and-aggregate, the canonical order of a
block's centers (Hungarian matching to public anchors), the aligned block answers, and the merge of the
parties' released centers (post-processing)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from dpfed.data.schema import Schema

__all__ = ["sqdist", "cluster_sums", "kmeans_plusplus", "lloyd", "kmeans", "block_kmeans", "inertia", "public_anchors",
           "canonical_order", "align_blocks", "block_answers", "numeric_part", "merge_centers"]


# --------------------------------------------------------------------------- non-private k-means

def sqdist(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared distances (n, k), ||x||^2 - 2 x.c + ||c||^2, clipped at 0."""
    d = np.einsum("ij,ij->i", X, X)[:, None] - 2.0 * (X @ C.T) + np.einsum("ij,ij->i", C, C)[None, :]
    return np.maximum(d, 0.0)


def cluster_sums(X: np.ndarray, lab: np.ndarray, k: int, w: np.ndarray | None = None) -> np.ndarray:
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
    closest = sqdist(X, centers[:1])[:, 0]
    for j in range(1, k):
        p = w * closest
        centers[j] = X[_draw(p if p.sum() > 0 else w, u[j])]
        np.minimum(closest, sqdist(X, centers[j:j + 1])[:, 0], out=closest)
    return centers


def lloyd(X: np.ndarray, centers: np.ndarray, *, iters: int = 50, weights: np.ndarray | None = None,
          tol: float = 1e-6) -> tuple[np.ndarray, np.ndarray, float]:
    """Lloyd's iterations from ``centers``; empty clusters keep their center. Returns
    (centers, labels, inertia)."""
    C = np.array(centers, dtype=np.float64)
    w = np.ones(len(X)) if weights is None else np.asarray(weights, dtype=np.float64)
    k = len(C)
    for _ in range(iters):
        lab = np.argmin(sqdist(X, C), axis=1)
        cnt = np.bincount(lab, weights=w, minlength=k)
        sums = cluster_sums(X, lab, k, w)
        new = np.where(cnt[:, None] > 0, sums / np.maximum(cnt, 1e-300)[:, None], C)
        shift = float(np.max(np.abs(new - C)))
        C = new
        if shift <= tol:
            break
    D = sqdist(X, C)
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
    sample-and-aggregate estimator; through :func:`dpfed.algorithms.kmeans.sample_aggregate.run_blocks` it
    would be a Python loop over ~1000 blocks), on 3-d arrays (blocks x records x d) padded with zero
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
        total += float(sqdist(X[s:s + 200_000], centers).min(axis=1).sum())
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
    rows, cols = linear_sum_assignment(sqdist(anchors, C))
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
