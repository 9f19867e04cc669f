"""One party's private k-means fit under local noise (the party half's release and the estimator's fit):
sample-and-aggregate (NRS07 Sec. 4) with optional DP Lloyd refinement, or DP Lloyd alone (Blum et al. 2005),
then noisy cluster sizes; every release's event is reported in order."""
from __future__ import annotations

from typing import Any

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.kmeans.model import block_answers, cluster_sums, sqdist
from dpfed.algorithms.kmeans.plan import KMeansPlan
from dpfed.algorithms.kmeans.sample_aggregate import assign_blocks, center_of_attention_release, clamped_mean_release
from dpfed.core.clipping import clamp, sum_sensitivity
from dpfed.core.mechanisms import discrete_laplace, gaussian
from dpfed.core.rng import SecureRNG

__all__ = ["fit_private"]


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
    lab = np.argmin(sqdist(X, C), axis=1)
    cnt = np.bincount(lab, minlength=k)
    sums = cluster_sums(X - mid, lab, k)
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
    lab = np.argmin(sqdist(X, C), axis=1)
    sizes = _dl(np.bincount(lab, minlength=k), plan.sizes_noise, rng, events)
    return C, sizes
