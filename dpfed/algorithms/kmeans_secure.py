"""k-means with distributed discrete Gaussian noise under secure aggregation (``noise = "distributed"``,
``secure_aggregation = true``): DP Lloyd sums and the sample-and-aggregate mean, released as
integer vectors plus one discrete Gaussian share per party, masked, summed by SecAgg.

With local noise (:mod:`dpfed.algorithms.kmeans`) a job is one task: every party fits private centers
on its own records and the coordinator merges them. Here the job is the *central* algorithm run over
the union of the parties' records, one SecAgg round per release (:mod:`dpfed.federation.secure_gather`);
the coordinator learns only the sum over the round's survivors (at least P_min of them), which holds
at least P_min - c noise shares that neither it nor the c colluders know (KLS21: Kairouz, Liu & Steinke,
ICML 2021, Thm. 1 / Prop. 14). The rounds, fixed by the public parameters (:func:`schedule`):

* ``count`` (sample-and-aggregate): the party's record count n_p; Delta_2 = Delta_1 = 1.
* ``aggregate`` (sample-and-aggregate; task parameter ``blocks`` = m, the same at every party): the
  party puts its records into m blocks independently (NRS07 Sec. 4), runs k-means on each and aligns
  the k centers to the public anchors (:func:`dpfed.algorithms.kmeans.block_answers`); each block
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

Weights. S (integer units per rescaled unit, "resolution 2^-16 of the half range") is 2^16, lowered
only where a share's std would leave the exact sampler's comfortable range (2^26 units). The count
weight minimises the squared error of a new center, sigma^2 / N^2 (d / S^2 + ||mu||^2 / S_c^2) (mu the
rescaled cluster mean), at fixed Delta_2^2 = d S^2 + S_c^2: a Lagrange multiplier gives
S_c^2 = ||mu|| S^2, and ||mu||^2 = d / 3 for a uniform box, so S_c = rint(S (d / 3)^(1/4)) (at least 1).

Budget. Each release r gets a central noise multiplier z_r = s / f_r (shares f_r of epsilon as the
split rule, as :func:`dpfed.algorithms.kmeans.make_plan`: count 2 %, sizes 5 %, the rest split between
the aggregate (1/2 when refining) and equal steps), so sigma_share_r = z_r Delta_2,r / sqrt(P_min - c);
the one scale s is calibrated (:func:`dpfed.core.accounting.calibrate`, RDP) so that the composition of
every round's ``DistributedDiscreteGaussianDpEvent(sigma_share_r, P_min - c, Delta_2,r, Delta_1,r, L_r)``
meets the job's (epsilon, delta). That composition is :func:`job_event`, which the party charges and the
coordinator recomputes from the same public parameters. Bits per round: the fewest >= ``bits`` that
hold the noiseless sum's public bound (``records`` S, P max_blocks S_a) plus the noise of all P shares
(:func:`dpfed.algorithms.secure_noise.integer_bits`).

Soundness. (i) Each round reveals sum_{p in S} (u_p + y_p) with u_p the party's integer vector and y_p
its share, S the survivors, |S| >= P_min (SecureGather aborts a round with fewer masked inputs before
anything is unmasked, so such a round reveals nothing). Given the <= c shares the colluders know, at least
|S| - c >= P_min - c i.i.d. N_Z(0, sigma^2) shares remain; the sum of exactly P_min - c of them is KLS21's
distributed discrete Gaussian on Z^L and any further independent share is post-processing. (ii) The
round's inputs (centers, m) are chosen by the coordinator from earlier releases and public parameters:
adaptive composition, accounted by RDP. (iii) No float or data-dependent quantity enters the noise:
the share std is public, the per-record vectors are integer and bounded by construction (records are
clamped into the public box first, NaN to the box). A party never answers a round outside
:func:`schedule` (kind and round fixed), and each round's masked input once (the secure session).

What is refused. The NRS07 *center of attention* aggregator (``aggregator = "coa"``) cannot be made
sound here: it picks one block answer from all of them and scales its noise by a beta-smooth upper
bound on the local sensitivity of that choice, computed from the block answers. The coordinator only
sees a sum, of which the center of attention of the union is no function; and if each party ran it on
its own blocks, its noise scale S_beta(Z_p) / alpha would depend on the party's records, so no share
std can be fixed in advance for P_min survivors, and the sum of such shares is not the NRS07
Lemma 2.6 mechanism for any answer. Such a job is refused with that reason (the clamped mean is sound).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task, TaskRejected
from dpfed.algorithms.kmeans import _COUNT_SHARE, _SIZES_SHARE, _job_options, _sqdist, block_answers
from dpfed.algorithms.sample_aggregate import assign_blocks
from dpfed.core import accounting
from dpfed.core import distributed_noise as dn
from dpfed.core.rng import SecureRNG
from dpfed.core.memo import shared_cache

__all__ = ["COA_REFUSAL", "NOT_SECURE_REFUSAL", "Release", "SecureKMeansPlan", "schedule", "secure_kmeans_plan",
           "job_event", "secure_plan", "check_task", "secure_rows", "count_vector", "step_vector", "sizes_vector",
           "aggregate_vector", "SecureKMeansCoordinator", "blocks_for"]

COA_REFUSAL = ("kmeans under secure aggregation needs aggregator 'mean': the center of attention's noise scales with "
               "a smooth sensitivity of the party's own block answers, data-dependent, so it cannot be split into "
               "noise shares planned in advance")
NOT_SECURE_REFUSAL = "kmeans distributed noise runs only under secure aggregation (secure_aggregation = true)"

#: Integer units per rescaled unit of a coordinate (resolution 2^-16 of the half range).
GRID = 1 << 16
#: Largest planned share std in integer units (the exact sampler refuses above 2^28).
MAX_SIGMA_SHARE = float(1 << 26)
#: Smallest grid accepted when GRID must be lowered to keep the share std in range.
MIN_GRID = 16


def schedule(method: str, steps: int) -> tuple[str, ...]:
    """The kind of every round of a secure k-means job (public, from the job parameters)."""
    if method == "lloyd":
        return ("step",) * int(steps)
    return ("count", "aggregate") + ("step",) * int(steps) + (() if steps else ("sizes",))


def _shares(kinds: Sequence[str]) -> dict[str, float]:
    """Fraction of epsilon per release of each kind (the split rule, not the calibration)."""
    fixed = {"count": _COUNT_SHARE, "sizes": _SIZES_SHARE}
    out = {k: fixed[k] for k in kinds if k in fixed}
    rest = 1.0 - sum(out.values())
    steps = kinds.count("step")
    if "aggregate" in kinds:
        out["aggregate"] = rest * (0.5 if steps else 1.0)
        rest -= out["aggregate"]
    if steps:
        out["step"] = rest / steps
    return out


@dataclass(frozen=True)
class Release:
    """One kind of round: layout of the integer vector, its weights, sensitivities and noise."""

    kind: str
    layout: tuple[tuple[str, tuple[int, ...]], ...]
    scale: int                # integer units per rescaled unit (steps' sums, the aggregate); 1 for counts
    count_scale: int          # a step's units per record in its counts (0: none)
    l2: float                 # Delta_2 of one record's change
    l1: float
    multiplier: float         # central std / Delta_2
    noise: dn.DistributedNoisePlan

    @property
    def dimension(self) -> int:
        return int(sum(math.prod(s) for _, s in self.layout))

    @property
    def event(self) -> dn.DistributedDiscreteGaussianDpEvent:
        return dn.DistributedDiscreteGaussianDpEvent(float(self.noise.sigma_share), int(self.noise.honest_parties),
                                                     float(self.l2), float(self.l1), self.dimension)


@dataclass(frozen=True)
class SecureKMeansPlan:
    """Every round's release of a secure k-means job and the composed event (RDP)."""

    kinds: tuple[str, ...]
    releases: tuple[Release, ...]   # one per distinct kind
    event: DpEvent

    def release(self, kind: str) -> Release:
        return next(r for r in self.releases if r.kind == kind)


def _geometry(kind: str, k: int, d: int, scale: int) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], int,
                                                              float, float]:
    """(layout, count scale, Delta_2, Delta_1) of one kind at ``scale`` (module docstring)."""
    if kind == "count":
        return (("count", (1,)),), 0, 1.0, 1.0
    if kind == "sizes":
        return (("counts", (k,)),), 0, 1.0, 1.0
    if kind == "aggregate":
        return (("sums", (k, d)),), 0, 2.0 * scale * math.sqrt(k * d), 2.0 * scale * k * d
    sc = max(1, int(round(scale * (d / 3.0) ** 0.25)))
    return (("sums", (k, d)), ("counts", (k,))), sc, math.sqrt(d * scale ** 2 + sc ** 2), float(d * scale + sc)


def _entry_bound(kind: str, scale: int, count_scale: int, sp: sn.SecureParams, max_blocks: int) -> float:
    """Public bound on every entry of the survivors' noiseless sum (the modulus headroom)."""
    if kind == "aggregate":
        return float(sp.parties * max_blocks * scale)
    return float(sp.records * max(scale, count_scale, 1))


@shared_cache(maxsize=64)
def _calibrated(method: str, k: int, d: int, steps: int, eps: float, delta: float, sp: sn.SecureParams,
                max_blocks: int) -> SecureKMeansPlan:
    kinds = schedule(method, steps)
    share = _shares(kinds)
    h = sp.honest
    scale = {kind: GRID if kind in ("step", "aggregate") else 1 for kind in share}
    for _ in range(4):
        geo = {kind: _geometry(kind, k, d, scale[kind]) for kind in share}

        def sigmas(s: float, geo: dict = geo) -> dict[str, float]:
            return {kind: max(0.5, s / share[kind] * geo[kind][2] / math.sqrt(h)) for kind in share}

        def event(s: float, geo: dict = geo) -> DpEvent:
            sg = sigmas(s)
            return accounting.compose([dn.DistributedDiscreteGaussianDpEvent(
                sg[kind], h, geo[kind][2], geo[kind][3], sum(math.prod(x) for _, x in geo[kind][0])) for kind in kinds])

        s = accounting.calibrate(event, eps, delta, accountant="rdp", lo=1e-6, hi=1e9, guess=1.0, rtol=1e-4)
        sg = sigmas(s)
        over = {kind for kind in share if sg[kind] > MAX_SIGMA_SHARE}
        if not over:
            break
        for kind in over:
            if kind not in ("step", "aggregate"):
                raise ValueError(f"epsilon {eps:g} is too small for a distributed {kind} release (its noise share "
                                 "would leave the exact sampler's range)")
            scale[kind] = int(scale[kind] * MAX_SIGMA_SHARE / sg[kind])
            if scale[kind] < MIN_GRID:
                raise ValueError(f"epsilon {eps:g} is too small for a distributed integer {kind} release (the RDP "
                                 "bound needs noise beyond the exact sampler's range even on a coarse grid)")
    else:  # pragma: no cover - the scales shrink geometrically, so a few passes always settle
        raise ValueError("no integer grid keeps the noise shares within the sampler's range")
    releases = []
    for kind in share:
        layout, sc, l2, l1 = geo[kind]
        dim = sum(math.prod(x) for _, x in layout)
        bits = sn.integer_bits(sp.bits, _entry_bound(kind, scale[kind], sc, sp, max_blocks), sg[kind], sp.parties, dim)
        releases.append(Release(kind, layout, scale[kind], sc, l2, l1, s / share[kind],
                                sn.integer_noise_plan(sp, sigma_share=sg[kind], l2=l2, dimension=dim, bits=bits)))
    return SecureKMeansPlan(kinds, tuple(releases), event(s))


def _d(spec: JobSpec) -> int:
    d = int(spec.schema.numeric.sum())
    if d < 1:
        raise TaskRejected("kmeans needs at least one numeric feature with public bounds in the schema")
    return d


def secure_kmeans_plan(spec: JobSpec) -> SecureKMeansPlan:
    """The plan of a secure job from its public parameters (cached); :class:`TaskRejected` with a reason."""
    if not sn.is_secure(spec.params):
        raise TaskRejected(NOT_SECURE_REFUSAL)
    o = _job_options(spec.params)
    if o["method"] == "sample-aggregate" and o["aggregator"] == "coa":
        raise TaskRejected(COA_REFUSAL)
    if spec.delta <= 0:
        raise TaskRejected("kmeans needs delta > 0 (discrete Gaussian shares)")
    steps = o["lloyd_iters"] if o["method"] == "lloyd" else o["refine_steps"]
    try:
        sp = sn.secure_params(spec.params)
        return _calibrated(o["method"], o["k"], _d(spec), int(steps), spec.epsilon, spec.delta, sp, o["max_blocks"])
    except ValueError as exc:
        raise TaskRejected(f"invalid secure kmeans parameters: {exc}") from None


def job_event(spec: JobSpec) -> DpEvent:
    """The whole job's event at a party (and the coordinator's recomputation of it): every round's
    distributed discrete Gaussian for P_min - c honest shares, composed; checked against epsilon by RDP."""
    plan = secure_kmeans_plan(spec)
    spent = accounting.epsilon(plan.event, spec.delta, accountant="rdp")
    if spent > spec.epsilon * (1.0 + 1e-9):
        raise TaskRejected(f"the job's noise gives epsilon {spent:.6g} > its stated epsilon {spec.epsilon:.6g}")
    return plan.event


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
    return sn.SecurePlan(rel.noise, rel.layout, sn.rotation_seed(spec.job_id, int(task.round)), integer=True)


def check_task(spec: JobSpec, task: Task) -> None:
    """Raise :class:`TaskRejected` unless ``task`` is the scheduled round with the expected inputs."""
    if task.job_id != spec.job_id:
        raise TaskRejected(f"task is for job {task.job_id!r}, not {spec.job_id!r}")
    kind = _kind_at(spec, task)
    if kind is None:
        raise TaskRejected(f"round {task.round} of this secure kmeans job is not a {task.kind!r} task "
                           f"(schedule: {', '.join(secure_kmeans_plan(spec).kinds)})")
    o = _job_options(spec.params)
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
    return np.argmin(_sqdist(X, C), axis=1) if len(X) else np.zeros(0, np.int64)


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
    o = _job_options(spec.params)
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
    o = _job_options(spec.params)
    size = o["block_size"] if o["block_size"] > 0 else o["per_cluster"] * o["k"]
    return int(max(3, min(o["max_blocks"], math.floor(max(n_hat, 0.0) / size))))


class SecureKMeansCoordinator(CoordinatorAlgorithm):
    """Issues the scheduled rounds and turns each decoded sum into centers (post-processing only)."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.parties = spec, list(parties)
        self.plan = secure_kmeans_plan(spec)
        self.sp = sn.secure_params(spec.params)
        self.opts = _job_options(spec.params)
        self.lower, self.upper = spec.schema.lower, spec.schema.upper
        self.mid, self.half = (self.lower + self.upper) / 2.0, (self.upper - self.lower) / 2.0
        k = self.opts["k"]
        # public start, fixed before any data: uniform in the box, keyed by the job id (as DP Lloyd's random start)
        start = np.random.default_rng([zlib.crc32(spec.job_id.encode()), self.opts["anchor_seed"]])
        self.C = self.lower + start.random((k, len(self.lower))) * (self.upper - self.lower)
        self.sizes = np.zeros(k)
        self.round = 0
        self.skipped = 0
        # the public record bound per party, until (unless) the count round says otherwise
        self.blocks = blocks_for(self.sp.records / self.sp.parties, spec)

    def next_task(self) -> Task | None:
        if self.round >= len(self.plan.kinds):
            return None
        kind, job = self.plan.kinds[self.round], self.spec.job_id
        if kind in ("step", "sizes"):
            return Task(job, self.round, kind, arrays={"centers": self.C.copy()})
        if kind == "aggregate":
            return Task(job, self.round, kind, params={"blocks": self.blocks})
        return Task(job, self.round, kind)

    def absorb(self, task: Task, combined: Aggregate) -> None:
        if task.round != self.round or task.kind != self.plan.kinds[self.round]:
            raise ValueError(f"answers for round {task.round} ({task.kind}), expected round {self.round}")
        self.round += 1
        if not combined.parties:  # an aborted round: nothing was unmasked, nothing changes
            self.skipped += 1
            return
        got = set(combined.parties)
        if not got <= set(self.parties) or len(got) < self.sp.min_survivors:
            raise ValueError(f"a secure round needs at least {self.sp.min_survivors} of the job's parties")
        rel = self.plan.release(task.kind)
        a = {name: np.asarray(combined.arrays[name], dtype=np.float64) for name, _ in rel.layout}
        if task.kind == "count":
            self.blocks = blocks_for(float(a["count"][0]) / len(got), self.spec)
        elif task.kind == "aggregate":
            mean = a["sums"] / rel.scale / (int(task.params["blocks"]) * len(got))
            self.C = np.clip(self.mid + self.half * mean, self.lower, self.upper)
        elif task.kind == "step":
            cnt = a["counts"] / rel.count_scale
            new = self.mid + self.half * (a["sums"] / rel.scale) / np.maximum(cnt, 1.0)[:, None]
            self.C = np.clip(np.where(cnt[:, None] >= 1.0, new, self.C), self.lower, self.upper)
            self.sizes = cnt
        else:
            self.sizes = a["counts"]

    @property
    def progress(self) -> float:
        return self.round / max(len(self.plan.kinds), 1)

    def model(self) -> dict[str, np.ndarray]:
        if self.round < len(self.plan.kinds):
            raise RuntimeError("the kmeans job has not finished")
        return {"algorithm": np.array("kmeans"), "cluster_centers": self.C.copy(),
                "cluster_sizes": np.maximum(self.sizes, 0.0)}

    def summary(self) -> dict[str, Any]:
        o = self.opts
        steps = o["lloyd_iters"] if o["method"] == "lloyd" else o["refine_steps"]
        out: dict[str, Any] = {"method": o["method"], "k": o["k"],
                               "aggregator": o["aggregator"] if o["method"] == "sample-aggregate" else "",
                               "dp_lloyd_steps": steps, "noise_placement": "distributed (secure aggregation)",
                               "kmeans_rounds_skipped": self.skipped}
        if o["method"] == "sample-aggregate":
            out["blocks_per_party"] = self.blocks
        for rel in self.plan.releases:
            out[f"sigma_share_{rel.kind}"] = float(rel.noise.sigma_share)
            out[f"noise_multiplier_{rel.kind}"] = float(rel.multiplier)
        return out
