"""Naive Bayes job parameters (:class:`~dpfed.algorithms.params.ParamTable`) and command-line options."""
from __future__ import annotations

import argparse
from typing import Any

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.naive_bayes.plan import DEFAULT_ALPHA, DEFAULT_VAR_FLOOR, MECHANISMS, Layout
from dpfed.algorithms.params import EPSILON, Param, ParamTable, arg_type, delta_param, noise_param
from dpfed.core.errors import TaskRejected
from dpfed.data.schema import Schema

__all__ = ["MAX_STATISTICS", "PARAMS", "check_params", "add_arguments", "params_from_args"]


#: Largest released vector (counts, histograms, sums): k * (1 + sum m_j + 2 P) entries.
MAX_STATISTICS = 1 << 24

PARAMS = ParamTable((
    EPSILON, delta_param(1e-6),
    Param("mechanism", str, "auto", choices=MECHANISMS,
          help="naive Bayes noise: auto (least noisy for the job's epsilon, delta; delta 0 means discrete Laplace), "
               "laplace (pure DP) or gaussian (needs delta > 0)"),
    Param("alpha", float, DEFAULT_ALPHA, lo=0.0, hi=1e6,
          help=f"naive Bayes Laplace smoothing pseudo-count (default {DEFAULT_ALPHA:g})"),
    Param("var_floor", float, DEFAULT_VAR_FLOOR, lo=0.0, lo_open=True, hi=1.0,
          help="naive Bayes variance floor of numeric features, in units of the squared half range "
               f"(default {DEFAULT_VAR_FLOOR:g})"),
    noise_param(),
    *sn.SECURE_PARAMS,
), check=lambda p, schema: check_params(p, schema))


def check_params(p: dict[str, Any], schema: Schema | None) -> None:
    if p["noise"] == "distributed":
        if not sn.is_secure(p):
            raise TaskRejected("naive Bayes distributed noise runs only under secure aggregation "
                               "(secure_aggregation = true)")
        if p["mechanism"] == "laplace" or p["delta"] <= 0:
            raise TaskRejected("naive Bayes distributed noise adds discrete Gaussian shares: it needs 'delta' > 0 "
                               "and mechanism auto or gaussian")
    if p["mechanism"] == "gaussian" and p["delta"] <= 0:
        raise TaskRejected("naive Bayes parameter 'mechanism' gaussian needs 'delta' in (0, 0.001]; use laplace for "
                           "delta 0")
    if schema is not None:
        if schema.n_classes < 1:
            raise TaskRejected("naive Bayes needs a schema with label classes (n_classes >= 1)")
        length = Layout.from_schema(schema).length
        if length > MAX_STATISTICS:
            raise TaskRejected(f"naive Bayes would release {length} statistics, more than the cap {MAX_STATISTICS}; "
                               "use fewer classes, features or categories")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nb-mechanism", choices=MECHANISMS, default="auto", help=PARAMS.get("mechanism").help)
    parser.add_argument("--nb-alpha", type=arg_type(PARAMS, "alpha"), default=DEFAULT_ALPHA,
                        help=PARAMS.get("alpha").help)
    parser.add_argument("--nb-var-floor", type=arg_type(PARAMS, "var_floor"), default=DEFAULT_VAR_FLOOR,
                        help=PARAMS.get("var_floor").help)
    parser.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"mechanism": getattr(args, "nb_mechanism", "auto"), "alpha": getattr(args, "nb_alpha", DEFAULT_ALPHA),
            "var_floor": getattr(args, "nb_var_floor", DEFAULT_VAR_FLOOR), "noise": getattr(args, "noise", "local")}
