"""The secure release of k-means with distributed discrete Gaussian noise under secure aggregation
(``noise = "distributed"``, ``secure_aggregation = true``): each round's check, the party's integer vector
(DP Lloyd sums and counts, the sample-and-aggregate mean), released plus one discrete Gaussian share per
party, masked, summed by SecAgg; and the coordinator's decode of the sum (:func:`decode`).

With local noise (:mod:`dpfed.algorithms.kmeans.fit`) a job is one task: every party fits private centers
on its own records and the coordinator merges them. Here the job is the *central* algorithm run over
the union of the parties' records, one SecAgg round per release (:mod:`dpfed.federation.secure_gather`);
the coordinator learns only the sum over the round's survivors (at least P_min of them), which holds
at least P_min - c noise shares that neither it nor the c colluders know (KLS21: Kairouz, Liu & Steinke,
ICML 2021, Thm. 1 / Prop. 14). The rounds, fixed by the public parameters
(:func:`dpfed.algorithms.kmeans.secure_plan.schedule`, with the weights and the budget):

* ``count`` (sample-and-aggregate): the party's record count n_p; Delta_2 = Delta_1 = 1.
* ``aggregate`` (sample-and-aggregate; task parameter ``blocks`` = m, the same at every party): the
  party puts its records into m blocks independently (NRS07 Sec. 4), runs k-means on each and aligns
  the k centers to the public anchors (:func:`dpfed.algorithms.kmeans.model.block_answers`); each block
  answer A_b in R^{kd} is clamped to the public box and rescaled to [-1, 1]^{kd}. The party sends
      a_p = sum_b rint(S_a clamp((A_b - mid) / half, -1, 1))   in Z^{kd}.
  A record lies in exactly one block, so adding or removing it changes one block answer, i.e. one
  summand moves between two points of [-S_a, S_a]^{kd}:  Delta_2 = 2 S_a sqrt(kd), Delta_1 = 2 S_a kd.
  The coordinator's mean of the survivors' blocks is mid + half (a / S_a) / (m |S|) (GUPT's clamped
  mean, Mohan et al. 2012, over every block of every survivor). m comes from the decoded count
  (m = clamp(floor(N / (|S_0| block size)), 3, max_blocks)), a post-processing of the count release, or
  from the public bound ``records`` / P if the count round was aborted; a party accepts any m in
  [3, max_blocks] (the sensitivity does not depend on it).
* ``step`` (DP Lloyd; ``refine_steps`` after the aggregate, or ``lloyd_iters`` for method ``lloyd``;
  task array ``centers`` C in R^{k x d}): per record x with z(x) = clamp((x - mid) / half, -1, 1) in
  [-1, 1]^d and its cluster c(x) = argmin_j ||x - C_j||_2, the concatenated vector of per-cluster
  coordinate sums and counts is
      v(x) = (rint(S z(x)) in row c(x) of the k x d sums,  S_c e_{c(x)} in the k counts)  in Z^{k(d+1)},
      Delta_2 = max_x ||v(x)||_2 = sqrt(d S^2 + S_c^2),      Delta_1 = max_x ||v(x)||_1 = d S + S_c
  (each record contributes to one cluster only: its d coordinates, each |rint(S z_j)| <= S, and one
  count). The party sends sum_{x in D_p} v(x): integers before any sum, no rotation and no rounding
  after it, so adding or removing a record moves the SecAgg sum by exactly v(x). The coordinator sets
  C_j <- mid + half (sums_j / S) / (counts_j / S_c) where counts_j / S_c >= 1 (else C_j stays), clamped
  to the box; the last step's counts / S_c are the reported cluster sizes (the sizes of the clusters
  whose means are the final centers).
* ``sizes`` (only when no step follows the aggregate): the per-cluster counts e_{c(x)}; Delta = 1.

Soundness. (i) Each round reveals sum_{p in S} (u_p + y_p) with u_p the party's integer vector and y_p
its share, S the survivors, |S| >= P_min (SecureGather aborts a round with fewer masked inputs before
anything is unmasked, so such a round reveals nothing). Given the <= c shares the colluders know, at least
|S| - c >= P_min - c i.i.d. N_Z(0, sigma^2) shares remain; the sum of exactly P_min - c of them is KLS21's
distributed discrete Gaussian on Z^L and any further independent share is post-processing. (ii) The
round's inputs (centers, m) are chosen by the coordinator from earlier releases and public parameters:
adaptive composition, accounted by RDP. (iii) No float or data-dependent quantity enters the noise:
the share std is public, the per-record vectors are integer and bounded by construction (records are
clamped into the public box first, NaN to the box). A party never answers a round outside
:func:`~dpfed.algorithms.kmeans.secure_plan.schedule` (kind and round fixed), and each round's masked input
once (the secure session).
"""
from __future__ import annotations

import math
from typing import Iterator, Mapping

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.kmeans.model import block_answers, sqdist
from dpfed.algorithms.kmeans.options import job_options
from dpfed.algorithms.kmeans.sample_aggregate import assign_blocks
from dpfed.algorithms.kmeans.secure_plan import Release, secure_kmeans_plan
from dpfed.core.rng import SecureRNG

__all__ = ["secure_plan", "round_event", "check_task", "secure_rows", "count_vector", "step_vector", "sizes_vector",
           "aggregate_vector", "blocks_for", "decode"]


def _kind_at(spec: JobSpec, task: Task) -> str | None:
    plan = secure_kmeans_plan(spec)
    r = task.round
    if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or not 0 <= r < len(plan.kinds):
        return None
    return plan.kinds[int(r)] if plan.kinds[int(r)] == task.kind else None


def secure_plan(spec: JobSpec, task: Task) -> sn.SecurePlan | None:
    """The public plan of round ``task.round`` if ``task.kind`` is the kind the schedule fixes for it."""
    kind = _kind_at(spec, task)
    if kind is None:
        return None
    rel = secure_kmeans_plan(spec).release(kind)
    return sn.SecurePlan(rel.noise, rel.layout, sn.rotation_seed(spec.job_id, int(task.round)), integer=True,
                         l1=rel.l1)


def round_event(spec: JobSpec, task: Task) -> DpEvent | None:
    """The charged event of round ``task.round`` (its kind's release; the job's event composes them); None
    for a task outside the schedule."""
    kind = _kind_at(spec, task)
    return None if kind is None else secure_kmeans_plan(spec).release(kind).event


def check_task(spec: JobSpec, task: Task) -> None:
    """Raise :class:`TaskRejected` unless ``task`` is the scheduled round with the expected inputs."""
    if task.job_id != spec.job_id:
        raise TaskRejected(f"task is for job {task.job_id!r}, not {spec.job_id!r}")
    kind = _kind_at(spec, task)
    if kind is None:
        raise TaskRejected(f"round {task.round} of this secure kmeans job is not a {task.kind!r} task "
                           f"(schedule: {', '.join(secure_kmeans_plan(spec).kinds)})")
    o = job_options(spec.params)
    if kind == "aggregate":
        m = task.params.get("blocks")
        if (set(task.params) != {"blocks"} or task.arrays or not isinstance(m, (int, np.integer))
                or isinstance(m, bool) or not 3 <= int(m) <= o["max_blocks"]):
            raise TaskRejected(f"an aggregate task carries exactly the parameter 'blocks' in [3, {o['max_blocks']}]")
    elif kind in ("step", "sizes"):
        if task.params or set(task.arrays) != {"centers"}:
            raise TaskRejected(f"a {kind} task carries exactly the array 'centers' and no parameters")
        C = np.asarray(task.arrays["centers"])
        lo, hi = spec.schema.lower, spec.schema.upper
        if (C.shape != (o["k"], len(lo)) or C.dtype.kind not in "iuf" or not np.all(np.isfinite(C))
                or np.any(C < lo) or np.any(C > hi)):
            raise TaskRejected(f"'centers' must be a finite {o['k']} x {len(lo)} array inside the public bounds")
    elif task.params or task.arrays:
        raise TaskRejected("the count task carries no parameters or arrays")


def _numeric(spec: JobSpec, X: np.ndarray) -> np.ndarray:
    """The numeric columns clamped into the public box (NaN to the lower bound): every per-record vector
    is bounded by construction, whatever the records."""
    Xn = np.asarray(X, dtype=np.float64)
    if Xn.ndim != 2 or Xn.shape[1] != spec.schema.n_features:
        raise TaskRejected(f"expected records with {spec.schema.n_features} columns")
    Xn = Xn[:, spec.schema.numeric]
    lo, hi = spec.schema.lower, spec.schema.upper
    return np.clip(np.where(np.isnan(Xn), lo, Xn), lo, hi)


def _rescaled_int(X: np.ndarray, lower: np.ndarray, upper: np.ndarray, scale: int) -> np.ndarray:
    """rint(scale clamp((x - mid) / half, -1, 1)) per entry, int64 in [-scale, scale]."""
    mid, half = (lower + upper) / 2.0, (upper - lower) / 2.0
    z = np.clip((X - mid) / half, -1.0, 1.0)
    return np.rint(z * scale).astype(np.int64)


_ROWS = 1 << 16  # records per chunk of a step


def _labels(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    return np.argmin(sqdist(X, C), axis=1) if len(X) else np.zeros(0, np.int64)


def step_vector(X: np.ndarray, centers: np.ndarray, lower: np.ndarray, upper: np.ndarray, scale: int,
                count_scale: int) -> np.ndarray:
    """sum over records of v(x) (module docstring): per-cluster sums of rint(scale z(x)) then counts
    times ``count_scale``, int64 of length k (d + 1); ``X`` already clamped into the box."""
    from scipy import sparse

    k, d = centers.shape
    sums = np.zeros((k, d), np.int64)
    counts = np.zeros(k, np.int64)
    for a in range(0, len(X), _ROWS):
        Xb = X[a:a + _ROWS]
        lab = _labels(Xb, centers)
        ind = sparse.csr_matrix((np.ones(len(lab), np.int64), (lab, np.arange(len(lab)))), shape=(k, len(lab)))
        sums += np.asarray(ind @ _rescaled_int(Xb, lower, upper, scale), dtype=np.int64)
        counts += np.bincount(lab, minlength=k)
    return np.concatenate([sums.ravel(), counts * int(count_scale)])


def sizes_vector(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Per-cluster record counts of ``centers`` (int64, length k)."""
    return np.bincount(_labels(X, centers), minlength=len(centers)).astype(np.int64)


def count_vector(X: np.ndarray) -> np.ndarray:
    return np.array([len(X)], dtype=np.int64)


def aggregate_vector(X: np.ndarray, lower: np.ndarray, upper: np.ndarray, k: int, blocks: int, scale: int,
                     rng: np.random.Generator, anchor_seed: int = 0) -> np.ndarray:
    """a_p = sum over the party's ``blocks`` blocks of rint(scale rescaled aligned answer), int64 of length k d."""
    parts = assign_blocks(len(X), int(blocks), rng, allow_empty=True)
    A = block_answers(X, parts, k, lower, upper, rng, anchor_seed)
    return _rescaled_int(A, np.tile(lower, k), np.tile(upper, k), scale).sum(axis=0)


def secure_rows(spec: JobSpec, task: Task, X: np.ndarray, rng: SecureRNG) -> Iterator[np.ndarray]:
    """The party's integer vector of the round as one row (the exact sum of its records' vectors)."""
    check_task(spec, task)
    rel = secure_kmeans_plan(spec).release(task.kind)
    o = job_options(spec.params)
    lo, hi = spec.schema.lower, spec.schema.upper
    Xn = _numeric(spec, X)
    if task.kind == "count":
        v = count_vector(Xn)
    elif task.kind == "aggregate":
        v = aggregate_vector(Xn, lo, hi, o["k"], int(task.params["blocks"]), rel.scale, rng.numpy(), o["anchor_seed"])
    elif task.kind == "step":
        v = step_vector(Xn, np.asarray(task.arrays["centers"], np.float64), lo, hi, rel.scale, rel.count_scale)
    else:
        v = sizes_vector(Xn, np.asarray(task.arrays["centers"], np.float64))
    yield v[None, :]


def blocks_for(n_hat: float, spec: JobSpec) -> int:
    """m, the blocks per party, from a (noisy or public) number of records per party."""
    o = job_options(spec.params)
    size = o["block_size"] if o["block_size"] > 0 else o["per_cluster"] * o["k"]
    return int(max(3, min(o["max_blocks"], math.floor(max(n_hat, 0.0) / size))))


def decode(spec: JobSpec, task: Task, rel: Release, sums: Mapping[str, np.ndarray], survivors: int,
           centers: np.ndarray, sizes: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The coordinator's post-processing of one round's decoded sum over ``survivors`` parties: the
    (centers, sizes, blocks per party) after it (module docstring: the count fixes m, the aggregate's
    clamped mean, a step's new centers and sizes, the sizes)."""
    a = {name: np.asarray(sums[name], dtype=np.float64) for name, _ in rel.layout}
    lower, upper = spec.schema.lower, spec.schema.upper
    mid, half = (lower + upper) / 2.0, (upper - lower) / 2.0
    if task.kind == "count":
        return centers, sizes, blocks_for(float(a["count"][0]) / survivors, spec)
    if task.kind == "aggregate":
        mean = a["sums"] / rel.scale / (int(task.params["blocks"]) * survivors)
        return np.clip(mid + half * mean, lower, upper), sizes, blocks
    if task.kind == "step":
        cnt = a["counts"] / rel.count_scale
        new = mid + half * (a["sums"] / rel.scale) / np.maximum(cnt, 1.0)[:, None]
        return np.clip(np.where(cnt[:, None] >= 1.0, new, centers), lower, upper), cnt, blocks
    return centers, a["counts"], blocks
