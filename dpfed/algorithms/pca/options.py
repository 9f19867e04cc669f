"""PCA job parameters (:class:`~dpfed.algorithms.params.ParamTable`) and command-line options."""
from __future__ import annotations

import argparse
from typing import Any

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.params import EPSILON, Param, ParamTable, arg_type, delta_param, noise_param
from dpfed.algorithms.pca.plan import DEFAULT_MEAN_SHARE, DEFAULT_MEAN_WEIGHT, MAX_FEATURES, ORIGINS, geometries
from dpfed.core.errors import TaskRejected
from dpfed.data.schema import Schema

__all__ = ["PARAMS", "PCA_PARAMS", "check_params", "add_arguments", "params_from_args", "pca_args", "pipeline_name"]

#: The PCA release's own parameters (also those of the PCA step of a pipeline, prefixed ``pca_`` there).
PCA_PARAMS = (
    Param("k", int, 2, lo=1, hi=MAX_FEATURES, help="number of principal components (default 2)"),
    Param("clip", float, None, lo=0.0, lo_open=True, hi=1e9, optional=True,
          help="PCA clip norm of a record around the noisy mean, in units of the largest public feature range "
               "(default: a quarter of the public box's diameter)"),
    Param("mean_clip", float, None, lo=0.0, lo_open=True, hi=1e9, optional=True,
          help="PCA clip norm of a record around the origin for the noisy mean (default: the box's radius)"),
    Param("origin", str, "midpoint", choices=ORIGINS,
          help="PCA origin of the mean round: the midpoints of the public bounds or the lower bounds"),
    Param("mean_share", float, DEFAULT_MEAN_SHARE, lo=0.0, lo_open=True, hi=1.0, hi_open=True,
          help=f"PCA share of the budget for the noisy mean (1/z^2 split; default {DEFAULT_MEAN_SHARE:g})"),
    Param("mean_weight", float, DEFAULT_MEAN_WEIGHT, lo=0.0, lo_open=True, hi=4.0,
          help="PCA weight rho of the mean and count block in the one release (the budget split; default "
               f"{DEFAULT_MEAN_WEIGHT:g})"),
)

PARAMS = ParamTable((EPSILON, delta_param(1e-6), *PCA_PARAMS, noise_param(), *sn.SECURE_PARAMS),
                    check=lambda p, schema: check_params(p, schema))


def check_params(p: dict[str, Any], schema: Schema | None) -> None:
    if p["delta"] <= 0:
        raise TaskRejected("PCA adds Gaussian noise: it needs 'delta' in (0, 0.001]")
    if p["noise"] == "distributed" and not sn.is_secure(p):
        raise TaskRejected("PCA distributed noise runs only under secure aggregation (secure_aggregation = true)")
    if schema is not None:
        try:
            geometries(schema, p)
        except ValueError as exc:
            raise TaskRejected(str(exc)) from None


def pca_args(args: argparse.Namespace) -> dict[str, Any]:
    """The PCA release's parameters from the command line (``--pca K``, ``--pca-clip``, ...)."""
    out: dict[str, Any] = {"k": getattr(args, "pca", None) or 2, "origin": getattr(args, "pca_origin", "midpoint"),
                           "mean_weight": getattr(args, "pca_mean_weight", DEFAULT_MEAN_WEIGHT)}
    for key in ("clip", "mean_clip"):
        if getattr(args, f"pca_{key}", None) is not None:
            out[key] = getattr(args, f"pca_{key}")
    if getattr(args, "pca_mean_share", None) is not None:
        out["mean_share"] = args.pca_mean_share
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pca", type=arg_type(PARAMS, "k"), default=None, metavar="K",
                        help="principal components: with --algorithm pca the model's k (default 2); with another "
                             "learner, a private PCA to K dimensions runs first and the learner trains on the "
                             "projected records, both in one composed privacy plan")
    parser.add_argument("--pca-clip", type=arg_type(PARAMS, "clip"), default=None, help=PARAMS.get("clip").help)
    parser.add_argument("--pca-mean-clip", type=arg_type(PARAMS, "mean_clip"), default=None,
                        help=PARAMS.get("mean_clip").help)
    parser.add_argument("--pca-mean-share", type=arg_type(PARAMS, "mean_share"), default=None,
                        help=PARAMS.get("mean_share").help)
    parser.add_argument("--pca-origin", choices=ORIGINS, default="midpoint", help=PARAMS.get("origin").help)
    parser.add_argument("--pca-mean-weight", type=arg_type(PARAMS, "mean_weight"), default=DEFAULT_MEAN_WEIGHT,
                        help=PARAMS.get("mean_weight").help)
    parser.add_argument("--pca-share", type=float, default=None, metavar="F",
                        help="with --pca and another learner: the PCA step's share of epsilon and delta (default 0.25)")
    parser.add_argument("--pca-bound", type=float, default=None, metavar="S",
                        help="with --pca and another learner: a projected component's public bound in its released "
                             "standard deviations (default 3)")
    parser.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {**pca_args(args), "noise": getattr(args, "noise", "local")}


def pipeline_name(algorithm: str, args: argparse.Namespace) -> str:
    """``pca+ALGORITHM`` when ``--pca K`` asks for PCA as the first step of another learner's job."""
    if getattr(args, "pca", None) and algorithm != "pca" and not algorithm.startswith("pca+"):
        return f"pca+{algorithm}"
    return algorithm
