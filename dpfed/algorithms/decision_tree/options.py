"""Private decision tree job parameters (:class:`~dpfed.algorithms.params.ParamTable`, with resource caps) and
command-line options.

Caps: the deepest level's released vector has 2^(D-1) S k entries (nodes x grid cells x classes) and the
structure sent with every task (2^D - 1) x (widest feature's cells) entries; both are capped on top of the
per-parameter caps (the caps live in :mod:`.depth`, which keeps the automatic depth within them)."""
from __future__ import annotations

import argparse
from typing import Any

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.decision_tree.depth import MAX_COUNTS, MAX_DEPTH, MAX_STRUCTURE
from dpfed.algorithms.decision_tree.grid import grid_for
from dpfed.algorithms.decision_tree.plan import (DEFAULT_ALPHA, DEFAULT_BINS, DEFAULT_DEPTH, DEFAULT_LEAF_SHARE,
                                                 resolved_depth)
from dpfed.algorithms.params import EPSILON, Param, ParamTable, arg_type, check_product, delta_param, noise_param
from dpfed.core.errors import TaskRejected
from dpfed.data.schema import Schema

__all__ = ["MAX_DEPTH", "MAX_BINS", "MAX_COUNTS", "MAX_STRUCTURE", "PARAMS", "check_params", "add_arguments",
           "params_from_args"]

MAX_BINS = 256

PARAMS = ParamTable((
    EPSILON, delta_param(1e-6, positive=True),
    Param("depth", int, None, lo=1, cap=MAX_DEPTH, optional=True,
          help=f"decision tree: levels grown (one release each), 2^depth leaves at most (default: automatic from "
               f"the public 'records' bound, epsilon, delta and the schema, decision_tree/depth.py; {DEFAULT_DEPTH} "
               f"without 'records')"),
    Param("bins", int, DEFAULT_BINS, lo=2, cap=MAX_BINS,
          help=f"decision tree: equal-width candidate cells per numeric feature on its public bounds (default "
               f"{DEFAULT_BINS})"),
    Param("leaf_share", float, DEFAULT_LEAF_SHARE, lo=0.0, lo_open=True, hi=1.0, hi_open=True,
          help=f"decision tree: share of the budget (of rho, zCDP) for the leaves' class counts; the levels share "
               f"the rest equally (default {DEFAULT_LEAF_SHARE:g})"),
    Param("alpha", float, DEFAULT_ALPHA, lo=0.0, hi=1e6,
          help=f"decision tree: pseudo-count added to every noisy leaf count (default {DEFAULT_ALPHA:g})"),
    Param("features", list, None, optional=True,
          help="decision tree: the names of the features splits may use (default: all)"),
    noise_param(),
    *sn.SECURE_PARAMS,
), check=lambda p, schema: check_params(p, schema))


def check_params(p: dict[str, Any], schema: Schema | None) -> None:
    if p["noise"] == "distributed" and not sn.is_secure(p):
        raise TaskRejected("decision tree distributed noise runs only under secure aggregation "
                           "(secure_aggregation = true)")
    feats = p.get("features")
    if feats is not None and (not feats or not all(isinstance(f, str) for f in feats)):
        raise TaskRejected("decision tree parameter 'features' must be a non-empty list of feature names")
    if schema is None:
        return
    if schema.n_classes < 1:
        raise TaskRejected("the decision tree needs a schema with label classes (n_classes >= 1)")
    try:
        grid = grid_for(schema, p["bins"], feats)
    except ValueError as exc:
        raise TaskRejected(str(exc).replace("random forest", "decision tree")) from None
    try:
        depth = resolved_depth(p, schema)
    except ValueError as exc:
        raise TaskRejected(f"decision tree depth: {exc}") from None
    check_product("", (1 << (depth - 1)) * grid.total * schema.n_classes, MAX_COUNTS,
                  "decision tree level counts 2^(depth-1) x grid cells x classes", ["depth", "bins"])
    check_product("", ((1 << depth) - 1) * grid.widest, MAX_STRUCTURE,
                  "decision tree structure (2^depth - 1) x widest feature's cells", ["depth", "bins"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dt-depth", type=arg_type(PARAMS, "depth"), default=None,
                        help=PARAMS.get("depth").help)
    parser.add_argument("--dt-bins", type=arg_type(PARAMS, "bins"), default=DEFAULT_BINS, help=PARAMS.get("bins").help)
    parser.add_argument("--dt-leaf-share", type=arg_type(PARAMS, "leaf_share"), default=DEFAULT_LEAF_SHARE,
                        help=PARAMS.get("leaf_share").help)
    parser.add_argument("--dt-alpha", type=arg_type(PARAMS, "alpha"), default=DEFAULT_ALPHA,
                        help=PARAMS.get("alpha").help)
    parser.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    out = {"bins": getattr(args, "dt_bins", DEFAULT_BINS), "leaf_share": getattr(args, "dt_leaf_share",
                                                                                  DEFAULT_LEAF_SHARE),
           "alpha": getattr(args, "dt_alpha", DEFAULT_ALPHA), "noise": getattr(args, "noise", "local")}
    if getattr(args, "dt_depth", None) is not None:
        out["depth"] = args.dt_depth
    return out
