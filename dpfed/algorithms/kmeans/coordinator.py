"""The coordinator half of k-means: with local noise it issues the one fit task and merges the parties'
released centers (post-processing); with distributed noise it issues the scheduled secure rounds and turns
each decoded sum into centers (:func:`dpfed.algorithms.kmeans.secure.decode`, post-processing only)."""
from __future__ import annotations

import zlib
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task, stack_combine, sum_combine
from dpfed.algorithms.kmeans.model import merge_centers, sqdist
from dpfed.algorithms.kmeans.options import job_options, spec_plan
from dpfed.algorithms.kmeans.secure import blocks_for, decode
from dpfed.algorithms.kmeans.secure_plan import secure_kmeans_plan

__all__ = ["KMeansCoordinator", "SecureKMeansCoordinator", "make_coordinator", "combine"]


class KMeansCoordinator(CoordinatorAlgorithm):
    """Issues the single fit task, then merges the parties' released centers."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec = spec
        self.plan, self.opts = spec_plan(spec)
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
        lab = np.argmin(sqdist(np.concatenate(cs), self._centers), axis=1)
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


class SecureKMeansCoordinator(CoordinatorAlgorithm):
    """Issues the scheduled rounds and turns each decoded sum into centers (post-processing only)."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.parties = spec, list(parties)
        self.plan = secure_kmeans_plan(spec)
        self.sp = sn.secure_params(spec.params)
        self.opts = job_options(spec.params)
        self.lower, self.upper = spec.schema.lower, spec.schema.upper
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
        self.C, self.sizes, self.blocks = decode(self.spec, task, self.plan.release(task.kind), combined.arrays,
                                                 len(got), self.C, self.sizes, self.blocks)

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


def make_coordinator(spec: JobSpec, parties: Sequence[str]) -> CoordinatorAlgorithm:
    """The local-noise merge, or the secure rounds of a distributed-noise job."""
    if sn.is_secure(spec.params):
        return SecureKMeansCoordinator(spec, parties)
    return KMeansCoordinator(spec, parties)


def combine(task: Task, parts: Sequence[Aggregate]) -> Aggregate:
    """Local noise ("fit"): the parties' centers stacked; a secure round: its decoded sum as it is."""
    return stack_combine(task, parts) if task.kind == "fit" else sum_combine(task, parts)
