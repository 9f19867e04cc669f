"""Random forest job parameters (:class:`~dpfed.algorithms.params.ParamTable`, with resource caps) and
command-line options.

Caps: the released vector has T 2^D k entries (trees x leaves x classes) and the structure holds
T (2^D - 1) nodes (a feature, a threshold and ceil(m_max / 64) words of category bits each); both are capped
(:data:`MAX_COUNTS`, :data:`MAX_STRUCTURE`) on top of the per-parameter caps, because leaves = 2^depth explode.
"""
from __future__ import annotations

import argparse
from typing import Any

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.params import EPSILON, Param, ParamTable, arg_type, check_product, delta_param, noise_param
from dpfed.algorithms.random_forest.plan import (DEFAULT_ALPHA, DEFAULT_DEPTH, DEFAULT_TREES, MECHANISMS,
                                                 resolved_shape)
from dpfed.algorithms.random_forest.depth import MIN_AUTO_TREES
from dpfed.algorithms.random_forest.structure import usable_features
from dpfed.core.errors import TaskRejected
from dpfed.data.schema import Schema

__all__ = ["MAX_TREES", "MAX_DEPTH", "MAX_COUNTS", "MAX_STRUCTURE", "PARAMS", "check_params", "add_arguments",
           "params_from_args"]

MAX_TREES = 1024
MAX_DEPTH = 20
#: Largest released count vector (trees x 2^depth x classes): 2^22 int64 entries, 32 MB per answer.
MAX_COUNTS = 1 << 22
#: Largest structure: trees x (2^depth - 1) nodes x words of category bits (2^23: about 200 MB while drawn).
MAX_STRUCTURE = 1 << 23

PARAMS = ParamTable((
    EPSILON, delta_param(1e-6),
    Param("trees", int, None, lo=1, cap=MAX_TREES, optional=True,
          help=f"random forest: number of trees T (default: automatic with the depth from the public 'records' "
               f"bound, {MIN_AUTO_TREES}..{DEFAULT_TREES} trees, fewer when the deeper trees need the count cap, "
               f"random_forest/depth.py; {DEFAULT_TREES} without 'records' or with an explicit depth)"),
    Param("depth", int, None, lo=1, cap=MAX_DEPTH, optional=True,
          help=f"random forest: depth D of every tree, 2^D leaves (default: automatic from the public 'records' "
               f"bound, epsilon, delta and the schema, random_forest/depth.py; {DEFAULT_DEPTH} without 'records')"),
    Param("tree_seed", int, None, lo=0, hi=2 ** 62, optional=True,
          help="random forest: public seed of the trees' structure (default: the job id)"),
    Param("mechanism", str, "auto", choices=MECHANISMS,
          help="random forest local noise: auto (the smaller variance; delta 0 means discrete Laplace), laplace "
               "(pure DP) or gaussian (needs delta > 0)"),
    Param("alpha", float, DEFAULT_ALPHA, lo=0.0, hi=1e6,
          help=f"random forest: pseudo-count added to every noisy leaf count (default {DEFAULT_ALPHA:g})"),
    Param("features", list, None, optional=True,
          help="random forest: the names of the features splits may use (default: all)"),
    noise_param(),
    *sn.SECURE_PARAMS,
), check=lambda p, schema: check_params(p, schema))


def check_params(p: dict[str, Any], schema: Schema | None) -> None:
    if p["noise"] == "distributed":
        if not sn.is_secure(p):
            raise TaskRejected("random forest distributed noise runs only under secure aggregation "
                               "(secure_aggregation = true)")
        if p["mechanism"] == "laplace" or p["delta"] <= 0:
            raise TaskRejected("random forest distributed noise adds discrete Gaussian shares: it needs 'delta' > 0 "
                               "and mechanism auto or gaussian")
    if p["mechanism"] == "gaussian" and p["delta"] <= 0:
        raise TaskRejected("random forest parameter 'mechanism' gaussian needs 'delta' in (0, 0.001]; use laplace for "
                           "delta 0")
    feats = p.get("features")
    if feats is not None and (not feats or not all(isinstance(f, str) for f in feats)):
        raise TaskRejected("random forest parameter 'features' must be a non-empty list of feature names")
    trees, depth = resolved_shape(p, schema)
    leaves = 1 << depth
    k = 1 if schema is None else max(1, schema.n_classes)
    check_product("", trees * leaves * k, MAX_COUNTS, "random forest counts trees x 2^depth x classes",
                  ["trees", "depth"])
    if schema is None:
        return
    if schema.n_classes < 1:
        raise TaskRejected("random forest needs a schema with label classes (n_classes >= 1)")
    words = -(-int(max([1, *schema.domain_sizes.tolist()])) // 64)
    check_product("", trees * (leaves - 1) * words, MAX_STRUCTURE,
                  "random forest structure nodes trees x (2^depth - 1) x ceil(largest domain / 64)", ["trees", "depth"])
    try:
        usable_features(schema, feats)
    except ValueError as exc:
        raise TaskRejected(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rf-trees", type=arg_type(PARAMS, "trees"), default=None,
                        help=PARAMS.get("trees").help)
    parser.add_argument("--rf-depth", type=arg_type(PARAMS, "depth"), default=None,
                        help=PARAMS.get("depth").help)
    parser.add_argument("--rf-tree-seed", type=arg_type(PARAMS, "tree_seed"), default=None,
                        help=PARAMS.get("tree_seed").help)
    parser.add_argument("--rf-mechanism", choices=MECHANISMS, default="auto", help=PARAMS.get("mechanism").help)
    parser.add_argument("--rf-alpha", type=arg_type(PARAMS, "alpha"), default=DEFAULT_ALPHA,
                        help=PARAMS.get("alpha").help)
    parser.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    out = {"mechanism": getattr(args, "rf_mechanism", "auto"), "alpha": getattr(args, "rf_alpha", DEFAULT_ALPHA),
           "noise": getattr(args, "noise", "local")}
    if getattr(args, "rf_trees", None) is not None:
        out["trees"] = args.rf_trees
    if getattr(args, "rf_depth", None) is not None:
        out["depth"] = args.rf_depth
    if getattr(args, "rf_tree_seed", None) is not None:
        out["tree_seed"] = args.rf_tree_seed
    return out
