"""The batched per-block k-means of sample-and-aggregate equals ordinary per-block k-means.

:func:`dpfed.algorithms.kmeans.block_kmeans` (3-d batches, chunks, converged blocks dropped) against the
plain per-block path (:func:`kmeans_plusplus` then :func:`lloyd` on each block in turn, drawing
from the same generator) and against scikit-learn's Lloyd from the same initial centers.
Deterministic (fixed seeds, no privacy noise): false-alarm rate 0. Budget: < 5 s on one core.
"""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans

from dpfed.algorithms.kmeans import block_kmeans, kmeans_plusplus, lloyd
from dpfed.algorithms.kmeans.sample_aggregate import assign_blocks


def _data(n: int = 3000, d: int = 7, k: int = 4, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-5, 5, size=(k, d))
    return centers[rng.integers(0, k, size=n)] + rng.normal(size=(n, d)) * 1.5


def _per_block(X: np.ndarray, blocks: list[np.ndarray], k: int, rng: np.random.Generator, iters: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The unbatched path: (initial centers, final centers), each (m, k, d)."""
    inits, finals = [], []
    for idx in blocks:
        C0 = kmeans_plusplus(X[idx], k, rng)
        inits.append(C0)
        # tol=0: stop only at an exact fixed point, i.e. the same centers as running all iters
        finals.append(lloyd(X[idx], C0, iters=iters, tol=0.0)[0])
    return np.stack(inits), np.stack(finals)


@pytest.mark.parametrize("chunk_bytes", [1 << 22, 4000])  # one chunk; ~1 block per chunk
def test_batched_block_kmeans_equals_the_per_block_path(chunk_bytes: int) -> None:
    X, k = _data(), 4
    blocks = assign_blocks(len(X), 40, np.random.default_rng(1))  # uneven sizes, ~75 records
    got = block_kmeans(X, blocks, k, np.random.default_rng(2), iters=20, chunk_bytes=chunk_bytes)
    _, want = _per_block(X, blocks, k, np.random.default_rng(2), iters=20)
    assert got.shape == want.shape == (40, k, X.shape[1])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def test_batched_lloyd_equals_scikit_learn_from_the_same_start() -> None:
    X, k = _data(seed=3), 4
    blocks = assign_blocks(len(X), 12, np.random.default_rng(4))
    got = block_kmeans(X, blocks, k, np.random.default_rng(5), iters=20)
    inits, _ = _per_block(X, blocks, k, np.random.default_rng(5), iters=20)
    for j, idx in enumerate(blocks):
        km = KMeans(n_clusters=k, init=inits[j], n_init=1, max_iter=20, tol=0.0, algorithm="lloyd").fit(X[idx])
        # scikit-learn lists the same set of centers; compare as sets (sorted rows)
        np.testing.assert_allclose(np.sort(got[j], axis=0), np.sort(km.cluster_centers_, axis=0), rtol=0, atol=1e-8)


def test_the_comparison_can_fail() -> None:
    """Fewer Lloyd steps, or other k-means++ draws, give centers far from the reference."""
    X, k = _data(), 4
    blocks = assign_blocks(len(X), 40, np.random.default_rng(1))
    _, want = _per_block(X, blocks, k, np.random.default_rng(2), iters=20)
    one_step = block_kmeans(X, blocks, k, np.random.default_rng(2), iters=1)
    other_seed = block_kmeans(X, blocks, k, np.random.default_rng(3), iters=20)
    assert np.abs(one_step - want).max() > 1e-3
    assert np.abs(other_seed - want).max() > 1e-3


def test_degenerate_blocks_keep_their_centers() -> None:
    """A block of identical records: every k-means++ draw falls back to uniform, clusters go
    empty and keep their center; all k centers equal that record."""
    X = np.vstack([np.tile([[1.0, -2.0, 3.0]], (20, 1)), _data(n=60, d=3, k=3)])
    blocks = [np.arange(20), np.arange(20, 80)]
    got = block_kmeans(X, blocks, 3, np.random.default_rng(0))
    np.testing.assert_array_equal(got[0], np.tile([[1.0, -2.0, 3.0]], (3, 1)))
    _, want = _per_block(X, blocks, 3, np.random.default_rng(0), iters=20)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


def test_block_smaller_than_k_is_refused() -> None:
    X = _data(n=30)
    with pytest.raises(ValueError, match="at least k=4"):
        block_kmeans(X, [np.arange(27), np.arange(27, 30)], 4, np.random.default_rng(0))
