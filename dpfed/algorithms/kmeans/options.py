"""The k-means job parameters: defaults, the parameter table (:class:`dpfed.algorithms.params.Param`) with its
cross-checks, the options of a job read from its parameters, and the command-line options."""
from __future__ import annotations

import argparse
from typing import Any, Mapping

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, TaskRejected
from dpfed.algorithms.kmeans.plan import AGGREGATORS, METHODS, STEP_COUNT_SHARE, KMeansPlan, make_plan
from dpfed.algorithms.params import (EPSILON, MEMORY_CAP_BYTES, Param, ParamTable, arg_type, delta_param,
                                     noise_param)
from dpfed.data.schema import Schema

__all__ = ["DEFAULTS", "COA_REFUSAL", "NOT_SECURE_REFUSAL", "job_options", "spec_plan", "MEMORY_FACTOR", "PARAMS",
           "MIN_RELEASE_EPSILON", "add_arguments", "params_from_args"]

DEFAULTS: dict[str, Any] = {
    "method": "sample-aggregate", "k": 5, "aggregator": "mean", "refine_steps": 2, "lloyd_iters": 5,
    "block_size": 0, "per_cluster": 10, "max_blocks": 2000, "anchor_seed": 0,
}

COA_REFUSAL = ("kmeans under secure aggregation needs aggregator 'mean': the center of attention's noise scales with "
               "a smooth sensitivity of the party's own block answers, data-dependent, so it cannot be split into "
               "noise shares planned in advance")
NOT_SECURE_REFUSAL = "kmeans distributed noise runs only under secure aggregation (secure_aggregation = true)"


def job_options(params: Mapping[str, Any]) -> dict[str, Any]:
    """The k-means options of a job (defaults filled in); :class:`TaskRejected` on a malformed one."""
    opts = {key: params.get(key, val) for key, val in DEFAULTS.items()}
    for key in ("k", "refine_steps", "lloyd_iters", "block_size", "per_cluster", "max_blocks", "anchor_seed"):
        if not isinstance(opts[key], int) or isinstance(opts[key], bool):
            raise TaskRejected(f"kmeans option {key!r} must be an integer")
    if opts["k"] < 1 or opts["refine_steps"] < 0 or opts["lloyd_iters"] < 1 or opts["max_blocks"] < 3:
        raise TaskRejected("kmeans needs k >= 1, refine_steps >= 0, lloyd_iters >= 1, max_blocks >= 3")
    if opts["method"] not in METHODS or opts["aggregator"] not in AGGREGATORS:
        raise TaskRejected(f"kmeans method must be one of {METHODS} and aggregator one of {AGGREGATORS}")
    return opts


def spec_plan(spec: JobSpec) -> tuple[KMeansPlan, dict[str, Any]]:
    """The local-noise plan of a job and its options, from its public parameters."""
    o = job_options(spec.params)
    if spec.delta <= 0:
        raise TaskRejected("kmeans needs delta > 0 (Gaussian and smooth-sensitivity noise)")
    steps = o["lloyd_iters"] if o["method"] == "lloyd" else o["refine_steps"]
    return make_plan(o["method"], o["k"], o["aggregator"], steps, spec.epsilon, spec.delta), o


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
        if not sn.is_secure(p):
            raise TaskRejected(NOT_SECURE_REFUSAL)
        if p["method"] == "sample-aggregate" and p["aggregator"] == "coa":
            raise TaskRejected(COA_REFUSAL)
    elif steps and STEP_COUNT_SHARE * p["epsilon"] / steps < MIN_RELEASE_EPSILON:
        most = int(STEP_COUNT_SHARE * p["epsilon"] / MIN_RELEASE_EPSILON)
        raise TaskRejected(f"kmeans parameter {key!r} must be at most {most} at epsilon {p['epsilon']:g} (each step's "
                           f"counts get epsilon {STEP_COUNT_SHARE:g} * epsilon / {key} >= {MIN_RELEASE_EPSILON:g})")
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
