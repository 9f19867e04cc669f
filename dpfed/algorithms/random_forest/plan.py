"""The random forest's privacy plan, from the job's public parameters and schema alone.

Release: the per-leaf class counts of all T trees as ONE integer vector of length T 2^D k. Every record
falls in exactly one leaf of every tree, so adding or removing one record changes exactly T entries, each by
1: L1 sensitivity T, L2 sensitivity sqrt(T).

Records in every tree, the budget split (not disjoint subsets per tree). Jagannathan, Pillaipakkamnatt &
Wright (2012) grow every tree on all the records and divide epsilon among the trees; the alternative, each
tree on a disjoint 1/T of the records (parallel composition, sensitivity 1 overall), has counts T times
smaller under the same per-entry noise. With the Gaussian the budget split costs only sqrt(T) in noise std
(the L2 sensitivity), so the split has sqrt(T) times the signal-to-noise ratio of disjoint subsets; with
Laplace the two tie (noise T / epsilon against counts n / T). Hence: all records in every tree, ONE vector
release with the sensitivities above.

Mechanism (local noise: every party adds the full noise): discrete Laplace with scale T / epsilon (exact, CKS20,
charged as pure epsilon-DP, ``DiscreteLaplaceDpEvent(epsilon, 1)``, the binary randomized-response pair that
dominates every epsilon-DP mechanism) or the rounded Gaussian round(sigma Z) with sigma = z(epsilon, delta)
sqrt(T), charged ``GaussianDpEvent(z)`` (a post-processing of the Gaussian mechanism on integer counts);
``auto`` picks the one with the smaller noise variance (delta = 0: Laplace). Distributed noise under secure
aggregation: :mod:`.secure`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.random_forest.depth import MAX_AUTO_TREES, auto_depth, auto_shape
from dpfed.algorithms.random_forest.structure import Forest, forest_for, seed_material
from dpfed.core import accounting
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["TASK_KIND", "MECHANISMS", "DEFAULT_TREES", "DEFAULT_DEPTH", "DEFAULT_ALPHA", "ForestPlan",
           "ForestOptions", "job_options", "job_forest", "local_plan", "resolved_shape"]

TASK_KIND = "rf-leaf-counts"
MECHANISMS = ("auto", "laplace", "gaussian")
#: Trees when ``trees`` is not set and there is no ``records`` bound (or the depth is set): 30.
DEFAULT_TREES = MAX_AUTO_TREES
DEFAULT_DEPTH = 8
DEFAULT_ALPHA = 1.0


@dataclass(frozen=True)
class ForestOptions:
    trees: int
    depth: int
    tree_seed: int | None
    mechanism: str
    alpha: float
    features: tuple[str, ...] | None


@dataclass(frozen=True)
class ForestPlan:
    """The release plan: mechanism, sensitivities, noise (Laplace scale or Gaussian sigma of the sum; for
    ``ddgauss`` the sigma of ONE share), per-entry noise variance of the released sum, the charged event."""

    mechanism: str            # "laplace", "gaussian" or "ddgauss"
    l1: int                   # = trees
    l2: float                 # = sqrt(trees)
    noise: float
    noise_var: float
    event: dp_event.DpEvent


def job_options(spec: JobSpec) -> ForestOptions:
    """The job's forest options (ValueError with a reason when malformed)."""
    p: dict[str, Any] = dict(spec.params)
    trees, depth = resolved_shape(p, spec.schema)
    if trees < 1 or depth < 1:
        raise ValueError("random forest needs trees >= 1 and depth >= 1")
    mech = str(p.get("mechanism", "auto"))
    if mech not in MECHANISMS:
        raise ValueError(f"random forest mechanism must be one of {', '.join(MECHANISMS)}, got {mech!r}")
    alpha = float(p.get("alpha", DEFAULT_ALPHA))
    if not (alpha >= 0 and math.isfinite(alpha)):
        raise ValueError("random forest alpha (pseudo-count) must be a finite number >= 0")
    seed = p.get("tree_seed")
    feats = p.get("features")
    return ForestOptions(trees, depth, None if seed is None else int(seed), mech, alpha,
                         None if feats is None else tuple(str(f) for f in feats))


def resolved_shape(p: dict[str, Any], schema: Schema | None) -> tuple[int, int]:
    """The job's (trees, depth): the explicit ``trees`` and ``depth`` parameters where given; the missing ones
    from the public parameters (``records``, epsilon, delta, noise, mechanism) and the schema
    (:func:`.depth.auto_shape`, or :func:`.depth.auto_depth` for a given number of trees); without ``records``
    (or with an explicit depth) :data:`DEFAULT_TREES` and :data:`DEFAULT_DEPTH`. The same at every party."""
    trees, depth, records = p.get("trees"), p.get("depth"), p.get("records")
    eps, delta = float(p.get("epsilon", 1.0)), float(p.get("delta", 0.0))
    if depth is not None or records is None or schema is None or eps <= 0:
        return (DEFAULT_TREES if trees is None else int(trees)), (DEFAULT_DEPTH if depth is None else int(depth))
    mech = "laplace" if delta <= 0 else "gaussian" if p.get("noise") == "distributed" else str(p.get("mechanism",
                                                                                                       "auto"))

    def sigma_for(t: int) -> float:
        return math.sqrt(local_plan(t, eps, delta, mech).noise_var)

    if trees is not None:
        return int(trees), auto_depth(schema, int(records), int(trees), sigma_for(int(trees)), p.get("features"))
    return auto_shape(schema, int(records), sigma_for, p.get("features"))


def job_forest(spec: JobSpec) -> Forest:
    """The job's public structure (the same at every party and at the coordinator)."""
    o = job_options(spec)
    if spec.schema.n_classes < 1:
        raise ValueError("random forest needs a labelled schema (n_classes >= 1)")
    return forest_for(spec.schema, o.trees, o.depth, seed_material(spec.job_id, o.tree_seed), o.features)


def laplace_var(t: float) -> float:
    """Variance of P(x) ∝ exp(-|x|/t) on Z: 2 e^(-1/t) / (1 - e^(-1/t))^2."""
    q = math.exp(-1.0 / t)
    return 2.0 * q / (1.0 - q) ** 2


@shared_cache(maxsize=64)
def local_plan(trees: int, eps: float, delta: float, mech: str) -> ForestPlan:
    """The local-noise plan (module docstring)."""
    if mech == "gaussian" and delta <= 0:
        raise ValueError("the Gaussian mechanism needs delta > 0; use mechanism 'laplace' for pure DP")
    l2 = math.sqrt(trees)
    t = trees / eps   # dpfed.core.mechanisms.discrete_laplace's scale for sensitivity T (exact event up to 2^12)
    lap = ForestPlan("laplace", trees, l2, t, laplace_var(t), dp_event.DiscreteLaplaceDpEvent(float(eps), 1))
    if mech == "laplace" or delta <= 0:
        return lap
    z = accounting.gaussian_noise_multiplier(eps, delta, rtol=1e-5)
    # rounded_gaussian charges GaussianDpEvent(sigma / l2): keep that multiplier >= z (1e-12 absorbs the ulp)
    sigma = z * l2 * (1.0 + 1e-12)
    gauss = ForestPlan("gaussian", trees, l2, sigma, sigma ** 2 + 1.0 / 12.0, dp_event.GaussianDpEvent(float(z)))
    if mech == "gaussian":
        return gauss
    return gauss if gauss.noise_var < lap.noise_var else lap
