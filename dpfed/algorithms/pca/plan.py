"""The PCA release plan, from the job's public parameters and schema alone: the fixed-point layout of the
two released vectors, their exact integer sensitivities, the noise and the events the party charges.

Two rounds ("Analyze Gauss", Dwork, Talwar, Thakurta & Zhang, STOC 2014, Alg. 1, with each party releasing
its share of the sum, centred around a noisy mean released first). Every record x is mapped to
u = (x - o) / s, s the largest public feature range (one scale for every feature, so directions in u are
directions in x), clipped to ||u||_2 <= C, and put on a fixed-point grid q = round(K' u / C) with
K' = K - ceil(sqrt(d) / 2), so ||q||_2 <= K' + sqrt(d)/2 <= K exactly (K = :data:`GRID` units per clip).

* Round 0, the mean: o the public origin (``origin``: the midpoints or the lower bounds), C = ``mean_clip``
  (default the public box's radius: nothing clipped, so the mean is unbiased); the party releases
  (sum q, K n), d + 1 integers, Delta_2 = sqrt(2) K, Delta_1 = sqrt(d) K + K.
* Round 1, the second moment: o = the noisy mean m0 of round 0 (public, sent with the task; any value is
  safe, the clip bounds every record), C = ``clip`` (default :data:`DEFAULT_CLIP` of the public box's diameter,
  below); the record's vector is augmented to z = (q, a) with
  a = round(rho K) (``mean_weight`` rho) and the party releases the upper triangle (diagonal included) of
  sum z z^T (sum q q^T, a sum q, a^2 n): L = (d + 1)(d + 2) / 2 integers. The a-block re-centres exactly
  around the clipped records' own mean (m0 is only approximately it) and gives n. Centring before the
  clip matters: on MNIST ||x|| is ~9.2 around 0 but ~7.0 around the mean, and the noise grows with C^2.

Default clip: a quarter of the box's diameter D (public). The diameter clips nothing but is far from the
records: their root-mean-square distance from the mean is 0.07 D on satimage and segmentation, 0.26 D on
MNIST, so at C = D the noise (~C^2) swamps the covariance of a few thousand records (satimage, 4,435 records,
epsilon 1: the released top-5 subspace captured 0.22-0.27 of the variance non-private PCA captures; 0.87 at
C = D / 4, 0.93 at D / 6, 0.97 at D / 12; on MNIST the benchmark's C = 6 ~ D / 4.7 captures 0.97). D / 4 is
3.5 root-mean-square distances on the first two and one on MNIST (whose directions survive that clip, see
bench/results/pca.md). The best C depends on the data and n: set ``clip`` when a public bound is known.

Sensitivity of round 1 (add/remove one record adds or removes exactly its own integer vector v):
||v||_2^2 = sum_{i<=j} (z_i z_j)^2 = (||q||^4 + sum_i q_i^4) / 2 + a^2 ||q||^2 + a^4 <= K^4 + a^2 K^2 + a^4
(sum q_i^4 <= ||q||^4), so Delta_2 = sqrt(K^4 + a^2 K^2 + a^4); ||v||_1 = (||z||_1^2 + ||z||_2^2) / 2 <=
((sqrt(d) K + a)^2 + K^2 + a^2) / 2 = Delta_1 (the distributed event needs it).

Budget split: local noise is the exactly sampled rounded Gaussian round(sigma Z) on each integer vector,
charged as ``GaussianDpEvent``: with z the multiplier of ONE Gaussian meeting (epsilon, delta), round 0 gets
z / sqrt(f) and round 1 z / sqrt(1 - f), f = ``mean_share`` (default 0.1): two Gaussians compose to one of
multiplier (1/z0^2 + 1/z1^2)^(-1/2) = z, and the ledger's PLD accountant checks the composition (z is
raised by 1e-4 steps if it does not meet the target). Inside round 1, rho weights the mean block (rho = 0.25:
Delta_2 grows 3 %). Distributed noise under secure aggregation: :mod:`.secure`. PCA needs delta > 0
(Gaussian noise on ~d^2/2 entries). Chaudhuri, Sarwate & Sinha 2012 (PPCA, the exponential mechanism on
the Bingham distribution) is the pure-DP alternative; it samples a d x k matrix by MCMC, is not a sum of
per-record statistics and does not split across parties: not implemented.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec
from dpfed.core import accounting
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["MEAN_KIND", "TASK_KIND", "KINDS", "ARRAYS", "GRID", "ORIGINS", "DEFAULT_MEAN_WEIGHT", "DEFAULT_MEAN_SHARE",
           "DEFAULT_CLIP", "MAX_FEATURES", "Geometry", "RoundPlan", "PCAPlan", "Options", "geometries", "job_options",
           "sensitivities", "local_plan", "release_length", "plan_key"]

MEAN_KIND = "pca-mean"
TASK_KIND = "pca-covariance"
KINDS = (MEAN_KIND, TASK_KIND)  # round 0, round 1
ARRAYS = ("mean", "cov")        # the array each round releases
#: Grid units per clip norm (K): sigma = z Delta_2 ~ z K^2 stays far below the exact sampler's 2^40.
GRID = 1 << 10
ORIGINS = ("midpoint", "lower")
DEFAULT_MEAN_WEIGHT = 0.25
DEFAULT_MEAN_SHARE = 0.1
#: Round 1's clip, as a share of the public box's diameter, when ``clip`` is not given (module docstring).
DEFAULT_CLIP = 0.25
#: Largest number of features (the released vector has (d + 1)(d + 2) / 2 entries: 2.1 million at 2048).
MAX_FEATURES = 2048


def release_length(d: int) -> int:
    """Entries of round 1's released upper triangle of the (d + 1) x (d + 1) augmented matrix."""
    return (d + 1) * (d + 2) // 2


@dataclass(frozen=True)
class Options:
    k: int
    clip: float | None
    mean_clip: float | None
    origin: str
    mean_weight: float
    mean_share: float


@dataclass(frozen=True)
class Geometry:
    """A round's public map from records to grid vectors: u = (x - origin) / scale, ||u|| <= clip,
    q = round(k_in u / clip); ``a`` the augmented entry (round 1) or the count weight (round 0)."""

    d: int
    origin: np.ndarray
    scale: float
    clip: float
    k_in: int          # K': grid units per clip norm before rounding (||q|| <= GRID after rounding)
    a: int

    def at(self, origin: np.ndarray) -> "Geometry":
        """The same geometry around another origin (round 1: the noisy mean of round 0)."""
        return replace(self, origin=np.asarray(origin, dtype=np.float64))


def job_options(params: Mapping[str, Any]) -> Options:
    """The PCA options of validated params (ValueError on a bad value)."""
    o = Options(int(params.get("k", 2)), params.get("clip"), params.get("mean_clip"),
                str(params.get("origin", "midpoint")), float(params.get("mean_weight", DEFAULT_MEAN_WEIGHT)),
                float(params.get("mean_share", DEFAULT_MEAN_SHARE)))
    if o.origin not in ORIGINS:
        raise ValueError(f"PCA origin must be one of {', '.join(ORIGINS)}, got {o.origin!r}")
    for name in ("clip", "mean_clip"):
        c = getattr(o, name)
        if c is not None and not (math.isfinite(float(c)) and float(c) > 0):
            raise ValueError(f"PCA {name} must be a finite number > 0")
    if not (math.isfinite(o.mean_weight) and 0 < o.mean_weight <= 4):
        raise ValueError("PCA mean_weight must lie in (0, 4]")
    if not 0 < o.mean_share < 1:
        raise ValueError("PCA mean_share must lie in (0, 1)")
    return o


def geometries(schema: Schema, params: Mapping[str, Any]) -> tuple[Geometry, Geometry]:
    """Round 0's and round 1's geometry (round 1's origin is a placeholder, replaced by the noisy mean);
    ValueError for a schema or parameters PCA cannot take."""
    if schema.categorical.any():
        raise ValueError("PCA needs an all-numeric schema (categorical columns have no public geometry)")
    d = schema.n_features
    if not 1 <= d <= MAX_FEATURES:
        raise ValueError(f"PCA takes 1 to {MAX_FEATURES} features, got {d}")
    o = job_options(params)
    if not 1 <= o.k <= d:
        raise ValueError(f"PCA k must lie in [1, {d}] (the number of features), got {o.k}")
    lo, hi = schema.lower, schema.upper
    scale = float(np.max(hi - lo))
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError("PCA needs public bounds with upper > lower")
    origin = lo if o.origin == "lower" else (lo + hi) / 2.0
    box = float(np.linalg.norm(np.maximum(np.abs(lo - origin), np.abs(hi - origin)) / scale))  # nobody farther
    diameter = float(np.linalg.norm((hi - lo) / scale))  # from any centre inside the box
    k_in = GRID - math.ceil(math.sqrt(d) / 2.0)
    mean = Geometry(d, origin.astype(np.float64), scale, box if o.mean_clip is None else min(o.mean_clip, box),
                    k_in, GRID)
    cov = Geometry(d, origin.astype(np.float64), scale, DEFAULT_CLIP * diameter if o.clip is None else min(o.clip, diameter),
                   k_in, max(1, round(o.mean_weight * GRID)))
    return mean, cov


def sensitivities(g: Geometry, kind: str) -> tuple[float, float, int]:
    """(Delta_2, Delta_1, length) of one record's integer vector in round ``kind`` (module docstring)."""
    K, a = float(GRID), float(g.a)
    if kind == MEAN_KIND:
        return math.sqrt(K * K + a * a), math.sqrt(g.d) * K + a, g.d + 1
    l2 = math.sqrt(K ** 4 + a * a * K * K + a ** 4)
    l1 = ((math.sqrt(g.d) * K + a) ** 2 + K * K + a * a) / 2.0
    return l2, l1, release_length(g.d)


@dataclass(frozen=True)
class RoundPlan:
    """One round's release: its geometry, sensitivities, per-party noise (grid units) and event."""

    kind: str
    geometry: Geometry
    l2: float
    l1: float
    length: int
    sigma: float            # local: the whole noise; ddgauss: one party's share
    event: dp_event.DpEvent


@dataclass(frozen=True)
class PCAPlan:
    """The job's plan: the two rounds and their composition (the charged event)."""

    mechanism: str          # "gaussian" (local) or "ddgauss" (distributed shares)
    rounds: tuple[RoundPlan, RoundPlan]
    k: int

    @property
    def event(self) -> dp_event.DpEvent:
        return dp_event.ComposedDpEvent([r.event for r in self.rounds])

    @property
    def geometry(self) -> Geometry:
        """Round 1's geometry (origin: the public placeholder until the noisy mean is known)."""
        return self.rounds[1].geometry

    @property
    def length(self) -> int:
        return self.rounds[1].length


def plan_key(spec: JobSpec) -> str:
    """The PCA options of ``spec`` as one JSON text (the plans' cache key)."""
    keys = ("k", "clip", "mean_clip", "origin", "mean_weight", "mean_share")
    return json.dumps({k: spec.params[k] for k in keys if spec.params.get(k) is not None}, sort_keys=True)


@shared_cache(maxsize=64)
def _local(schema_json: str, params_json: str, eps: float, delta: float) -> PCAPlan:
    params = json.loads(params_json)
    geoms = geometries(Schema.from_json(schema_json), params)
    if delta <= 0:
        raise ValueError("PCA adds Gaussian noise: it needs delta > 0")
    f = job_options(params).mean_share
    z = accounting.gaussian_noise_multiplier(eps, delta, rtol=1e-5)
    while True:  # the ledger's PLD accountant decides on the composition of the two rounds
        zs = (z / math.sqrt(f), z / math.sqrt(1.0 - f))
        events = [dp_event.GaussianDpEvent(float(zz)) for zz in zs]
        if accounting.epsilon(dp_event.ComposedDpEvent(events), delta) <= eps:
            break
        z *= 1.0 + 1e-4
    rounds = []
    for kind, g, zz, ev in zip((MEAN_KIND, TASK_KIND), geoms, zs, events):
        l2, l1, length = sensitivities(g, kind)
        # rounded_gaussian charges GaussianDpEvent(sigma / l2) >= zz (the 1e-12 absorbs its ulp rounding)
        rounds.append(RoundPlan(kind, g, l2, l1, length, zz * l2 * (1.0 + 1e-12), ev))
    return PCAPlan("gaussian", (rounds[0], rounds[1]), job_options(params).k)


def local_plan(spec: JobSpec) -> PCAPlan:
    """The local-noise plan of ``spec`` (public parameters and schema only; cached)."""
    return _local(spec.schema.to_json(), plan_key(spec), spec.epsilon, spec.delta)
