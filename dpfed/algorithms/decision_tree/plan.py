"""The private decision tree's privacy plan, from the job's public parameters and schema alone.

Rounds (fixed before any data): round r = 0 .. D-1 (kind ``dt-level``) releases, in ONE integer vector, the
class counts per (node of level r, grid feature, cell) (:func:`.model.level_counts`, length 2^r S k); round D
(kind ``dt-leaves``) releases the class counts of every node a record ends in (:func:`.model.leaf_counts`,
length (2^(D+1) - 1) k). A record reaches at most one node of a level and lies in one cell per feature, so a
level's vector moves by at most F entries of 1 when one record is added or removed: L1 sensitivity F, L2
sensitivity sqrt(F); the leaves' vector moves by one entry: L1 = L2 = 1. The splits each round sees were
chosen from earlier rounds' noisy counts (adaptive composition).

Budget split (zCDP shares: a Gaussian with multiplier z costs rho = 1 / (2 z^2), and compositions add rho):
the leaves get ``leaf_share`` of rho, each of the D levels (1 - leaf_share) / D, i.e. z_r = s / sqrt(share_r).
Local noise (every party adds the full noise, rounded Gaussian, dpfed.core.mechanisms.rounded_gaussian):
round r adds round(N(0, (z_r Delta_2,r)^2)) per entry and is charged ``GaussianDpEvent(z_r)``; the job is the
composition of the D + 1 rounds, the one scale s calibrated so that it meets the job's (epsilon, delta) by the
ledger's PLD accountant (:func:`_local`). Distributed noise: :mod:`.secure`. The depth D is the explicit
``depth`` parameter, else the automatic depth of :mod:`.depth` from the public ``records`` bound, epsilon, delta,
``leaf_share`` and the grid (:func:`resolved_depth`). The party computes all of this from the public parameters
before its first charge; the coordinator recomputes the same.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.decision_tree.depth import auto_depth
from dpfed.algorithms.decision_tree.grid import Grid, grid_for
from dpfed.core import accounting
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["LEVEL", "LEAVES", "DEFAULT_DEPTH", "DEFAULT_BINS", "DEFAULT_LEAF_SHARE", "DEFAULT_ALPHA", "TreeOptions",
           "Round", "TreePlan", "job_options", "resolved_depth", "job_grid", "schedule", "shares", "round_geometry", "local_plan"]

LEVEL, LEAVES = "dt-level", "dt-leaves"
DEFAULT_DEPTH = 5
DEFAULT_BINS = 16
DEFAULT_LEAF_SHARE = 0.2
DEFAULT_ALPHA = 1.0


@dataclass(frozen=True)
class TreeOptions:
    depth: int
    bins: int
    leaf_share: float
    alpha: float
    features: tuple[str, ...] | None


@dataclass(frozen=True)
class Round:
    """One round's release: kind, sensitivities, length, central noise multiplier and noise std.

    ``noise`` is the std a party adds per entry under local noise (z Delta_2), or ONE share's std under
    distributed noise; ``event`` is what the round is charged."""

    kind: str
    l1: float
    l2: float
    dimension: int
    multiplier: float
    noise: float
    event: dp_event.DpEvent


@dataclass(frozen=True)
class TreePlan:
    mechanism: str                 # "gaussian" (local) or "ddgauss" (distributed, secure aggregation)
    rounds: tuple[Round, ...]
    event: dp_event.DpEvent        # the composition of every round's event: the job's


def job_options(spec: JobSpec) -> TreeOptions:
    """The job's tree options (ValueError with a reason when malformed)."""
    p: dict[str, Any] = dict(spec.params)
    bins, share = int(p.get("bins", DEFAULT_BINS)), float(p.get("leaf_share", DEFAULT_LEAF_SHARE))
    if bins < 2 or not 0.0 < share < 1.0:
        raise ValueError("decision tree needs bins >= 2 and 0 < leaf_share < 1")
    if spec.delta <= 0:
        raise ValueError("the private decision tree adds Gaussian noise: it needs delta > 0")
    depth = resolved_depth(p, spec.schema)
    if depth < 1:
        raise ValueError("decision tree needs depth >= 1")
    feats = p.get("features")
    return TreeOptions(depth, bins, share, float(p.get("alpha", DEFAULT_ALPHA)),
                       None if feats is None else tuple(str(f) for f in feats))


def resolved_depth(p: dict[str, Any], schema: Schema | None) -> int:
    """The job's depth: the explicit ``depth`` parameter, else :func:`.depth.auto_depth` of the public
    ``records`` bound, epsilon, delta, ``leaf_share`` and the schema's grid (the same at every party and at the
    coordinator); :data:`DEFAULT_DEPTH` without ``records`` or a schema."""
    if p.get("depth") is not None:
        return int(p["depth"])
    records, eps, delta = p.get("records"), float(p.get("epsilon", 1.0)), float(p.get("delta", 0.0))
    share = float(p.get("leaf_share", DEFAULT_LEAF_SHARE))
    if records is None or schema is None or not (eps > 0 and 0 < delta < 1 and 0 < share < 1):
        return DEFAULT_DEPTH
    feats = p.get("features")
    grid = grid_for(schema, int(p.get("bins", DEFAULT_BINS)), None if feats is None else [str(f) for f in feats])
    return auto_depth(int(records), schema.n_classes, grid.features, grid.total, grid.widest, eps, delta, share)


def job_grid(spec: JobSpec) -> Grid:
    o = job_options(spec)
    return grid_for(spec.schema, o.bins, o.features)


def schedule(depth: int) -> tuple[str, ...]:
    """The kinds of the rounds 0 .. D: D levels, then the leaves."""
    return (LEVEL,) * int(depth) + (LEAVES,)


def shares(depth: int, leaf_share: float) -> tuple[float, ...]:
    """Each round's share of rho (module docstring)."""
    return (*((1.0 - leaf_share) / depth,) * depth, float(leaf_share))


def round_geometry(r: int, depth: int, features: int, cells: int, k: int) -> tuple[float, float, int]:
    """(L1, L2, length) of round ``r``'s integer vector for F = ``features`` grid features with S = ``cells``
    cells in all (module docstring)."""
    if r < depth:
        return float(features), math.sqrt(features), (1 << r) * cells * k
    return 1.0, 1.0, ((2 << depth) - 1) * k


def local_plan(spec: JobSpec) -> TreePlan:
    """The local-noise plan of ``spec`` (module docstring)."""
    o = job_options(spec)
    grid = job_grid(spec)
    return _local(o.depth, o.leaf_share, grid.features, grid.total, max(1, spec.schema.n_classes),
                  spec.epsilon, spec.delta)


@shared_cache(maxsize=64)
def _local(depth: int, leaf_share: float, features: int, total: int, k: int, eps: float, delta: float) -> TreePlan:
    w = shares(depth, leaf_share)

    def event(s: float) -> dp_event.DpEvent:
        return accounting.compose([dp_event.GaussianDpEvent(s / math.sqrt(x)) for x in w])

    # Gaussians compose exactly into one Gaussian: multipliers z_r with sum z_r^-2 = s^-2 (the shares sum to 1)
    # are GaussianDpEvent(s) (Dong, Roth & Su 2019, Cor. 3.3), so s is the exact single-Gaussian multiplier
    # (Balle & Wang 2018); the ledger's own PLD conversion of the composition then decides, s raised until it
    # accepts (it usually does at once)
    s = accounting.gaussian_noise_multiplier(eps, delta, accountant="analytic")
    while accounting.epsilon(event(s), delta) > eps:
        s *= 1.0 + 1e-5
    rounds = []
    for r, x in enumerate(w):
        l1, l2, dim = round_geometry(r, depth, features, total, k)
        z = s / math.sqrt(x)
        # rounded_gaussian reports GaussianDpEvent(noise / l2): keep it >= z (1e-12 absorbs the ulp)
        rounds.append(Round(schedule(depth)[r], l1, l2, dim, z, z * l2 * (1.0 + 1e-12), dp_event.GaussianDpEvent(z)))
    return TreePlan("gaussian", tuple(rounds), event(s))
