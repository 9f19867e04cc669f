"""Statistics job parameters (:class:`~dpfed.algorithms.params.ParamTable`) and the ``job submit`` options."""
from __future__ import annotations

import argparse
from typing import Any

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.params import EPSILON, Param, ParamTable, arg_type, delta_param, noise_param
from dpfed.algorithms.statistics.plan import CONFIDENCE, MECHANISMS, job_layout
from dpfed.algorithms.statistics.queries import check_size, parse_queries
from dpfed.algorithms.contract import JobSpec
from dpfed.core.errors import TaskRejected
from dpfed.data.schema import Schema

__all__ = ["MAX_STATISTICS", "PARAMS", "check_params", "add_arguments", "params_from_args"]

#: Largest released vector (every block's groups x cells).
MAX_STATISTICS = 1 << 22

PARAMS = ParamTable((
    EPSILON, delta_param(1e-6),
    Param("queries", list, None, optional=True,
          help="statistics to release, e.g. [\"mean:age\", \"quantile:age:0.9\", \"histogram:age:bins=20\", "
               "\"table:sex:race\", \"count\"] (default: the count and every numeric column's mean)"),
    Param("group_by", str, None, optional=True,
          help="answer every query per group of this categorical column (or 'class': the label)"),
    Param("mechanism", str, "auto", choices=MECHANISMS,
          help="statistics noise: auto (the smaller variance; delta 0 means discrete Laplace), laplace, gaussian "
               "(with distributed noise: Polya shares summing to a discrete Laplace, or discrete Gaussian shares)"),
    Param("confidence", float, CONFIDENCE, lo=0.5, hi=0.999999,
          help=f"statistics: level of the reported confidence intervals (default {CONFIDENCE:g})"),
    noise_param(),
    *sn.SECURE_PARAMS,
), check=lambda p, schema: check_params(p, schema))


def check_params(p: dict[str, Any], schema: Schema | None) -> None:
    if p["noise"] == "distributed":
        if not sn.is_secure(p):
            raise TaskRejected("statistics distributed noise runs only under secure aggregation "
                               "(secure_aggregation = true)")
    if p["mechanism"] == "gaussian" and p["delta"] <= 0:
        raise TaskRejected("statistics mechanism gaussian needs 'delta' in (0, 0.001]; use laplace for delta 0")
    try:
        if p.get("queries") is not None:
            parse_queries(p["queries"], p.get("group_by"))
    except ValueError as exc:
        raise TaskRejected(f"statistics: {exc}") from None
    if schema is not None:
        try:
            check_size(job_layout(JobSpec("check", "statistics", p, schema)), MAX_STATISTICS)
        except ValueError as exc:
            raise TaskRejected(f"statistics: {exc}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stats-query", action="append", default=None, metavar="QUERY",
                        help="statistics query, repeatable: count | sum|mean|var|std:COL | histogram:COL[:bins=K] | "
                             "median:COL | quantile:COL:Q | table:COL:COL2")
    parser.add_argument("--stats-group-by", default=None, metavar="COL", help=PARAMS.get("group_by").help)
    parser.add_argument("--stats-mechanism", choices=MECHANISMS, default="auto", help=PARAMS.get("mechanism").help)
    parser.add_argument("--stats-confidence", type=arg_type(PARAMS, "confidence"), default=CONFIDENCE,
                        help=PARAMS.get("confidence").help)
    parser.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"mechanism": getattr(args, "stats_mechanism", "auto"),
                           "confidence": getattr(args, "stats_confidence", CONFIDENCE),
                           "noise": getattr(args, "noise", "local")}
    if getattr(args, "stats_query", None):
        out["queries"] = list(args.stats_query)
    if getattr(args, "stats_group_by", None):
        out["group_by"] = args.stats_group_by
    return out
