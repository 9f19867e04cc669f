"""Federated differentially private statistics (issue 27): counts, sums, means, variances, standard
deviations, histograms, contingency tables, quantiles and medians of bounded columns, optionally per group,
several in one job with ONE composed plan, each with the standard error its noise implies and a confidence
interval.

Modules, by role: :mod:`.queries` (the queries and the layout of the one released vector), :mod:`.plan` (block
weights, mechanism, the charged event), :mod:`.encode` (the party's integer vector), :mod:`.secure`
(distributed noise under secure aggregation), :mod:`.release` (the job's one plan, local or secure),
:mod:`.party` and :mod:`.coordinator` (the two halves), :mod:`.tree` (the hierarchical histogram of quantiles),
:mod:`.estimate` (answers, standard errors, intervals), :mod:`.tools` (diffprivlib-style one-party functions),
:mod:`.options` (parameters and command-line options), :mod:`.algorithm` (the registry entry).
"""
from __future__ import annotations

from dpfed.algorithms.statistics.algorithm import ALGORITHMS
from dpfed.algorithms.statistics.coordinator import StatisticsCoordinator
from dpfed.algorithms.statistics.encode import party_statistics
from dpfed.algorithms.statistics.estimate import Answer
from dpfed.algorithms.statistics.options import PARAMS
from dpfed.algorithms.statistics.party import SecureStatisticsParty, StatisticsParty
from dpfed.algorithms.statistics.plan import StatsPlan, job_layout
from dpfed.algorithms.statistics.queries import Layout, Query, parse_queries
from dpfed.algorithms.statistics.release import plan_release
from dpfed.algorithms.statistics.tools import Estimate, count, histogram, mean, median, quantile, std, var
from dpfed.algorithms.statistics.tools import sum as sum  # noqa: A004 - diffprivlib's name

__all__ = ["ALGORITHMS", "PARAMS", "StatsPlan", "Layout", "Query", "Answer", "Estimate", "parse_queries",
           "job_layout", "plan_release", "party_statistics", "StatisticsParty", "SecureStatisticsParty",
           "StatisticsCoordinator", "count", "sum", "mean", "var", "std", "histogram", "quantile", "median"]
