"""Linear-regression job parameters (:class:`~dpfed.algorithms.params.ParamTable`) and command-line options."""
from __future__ import annotations

import argparse
from typing import Any

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.linear_regression.plan import METHODS, Layout
from dpfed.algorithms.params import EPSILON, Param, ParamTable, delta_param, noise_param
from dpfed.core.errors import TaskRejected
from dpfed.data.schema import Schema

__all__ = ["DEFAULT_DELTA", "PARAMS", "check_params", "add_arguments", "params_from_args"]

DEFAULT_DELTA = 1e-5

PARAMS = ParamTable((
    EPSILON, delta_param(DEFAULT_DELTA),
    Param("method", str, "adassp", choices=METHODS,
          help="linear regression: adassp (sufficient statistics with Gaussian noise and AdaSSP's data-adaptive "
               "ridge, Wang 2018; needs delta > 0) or functional (the functional mechanism, Zhang et al. 2012: "
               "Laplace noise, pure epsilon-DP)"),
    noise_param(),
    *sn.SECURE_PARAMS,
), check=lambda p, schema: check_params(p, schema))


def check_params(p: dict[str, Any], schema: Schema | None) -> None:
    if p["method"] == "adassp" and p["delta"] <= 0:
        raise TaskRejected("linear-regression method adassp adds Gaussian noise: it needs 'delta' in (0, 0.001]; use "
                           "method functional for delta 0")
    if p["noise"] == "distributed":
        if not sn.is_secure(p):
            raise TaskRejected("linear-regression distributed noise runs only under secure aggregation "
                               "(secure_aggregation = true)")
        if p["method"] != "adassp":
            raise TaskRejected("linear-regression distributed noise adds discrete Gaussian shares: it needs method "
                               "adassp")
    if schema is not None:
        if schema.target is None:
            raise TaskRejected("linear-regression needs a schema with a numeric target (\"target\": {\"name\", "
                               "\"lower\", \"upper\"})")
        try:
            Layout.from_schema(schema, p["method"])
        except ValueError as exc:
            raise TaskRejected(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lr-method", choices=METHODS, default="adassp", help=PARAMS.get("method").help)
    parser.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"method": getattr(args, "lr_method", "adassp"), "noise": getattr(args, "noise", "local")}
