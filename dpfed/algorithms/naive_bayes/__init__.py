"""Differentially private naive Bayes: one noisy release of sufficient statistics per party.

Statistics (per class c; Vaidya et al. 2013 "Differentially private naive Bayes classification"):
class counts n_c; for each categorical feature j the class x value histogram n_{c,j,v}; for each
numeric feature the sums S_c = sum x~ and sums of squares Q_c = sum x~^2 of the value clamped to its
public bounds [lo, hi] and rescaled to x~ = 2 (x - lo) / (hi - lo) - 1 in [-1, 1] (centred, so
Q/n - (S/n)^2 cancels little and every group has per-record sensitivity 1).

Modules, by role: :mod:`.plan` (layout, weights, mechanism, the charged event), :mod:`.statistics` (the
party's integer vector), :mod:`.secure` (distributed noise under secure aggregation), :mod:`.release` (the
job's one plan, local or secure), :mod:`.party` and :mod:`.coordinator` (the two halves), :mod:`.model`
(post-processing, prediction), :mod:`.estimator` (``DPNaiveBayes``), :mod:`.options` (parameters and
command-line options), :mod:`.algorithm` (the registry entry).
"""
from __future__ import annotations

from dpfed.algorithms.naive_bayes.algorithm import ALGORITHMS
from dpfed.algorithms.naive_bayes.coordinator import NaiveBayesCoordinator
from dpfed.algorithms.naive_bayes.estimator import DataDerivedSchemaWarning, DPNaiveBayes
from dpfed.algorithms.naive_bayes.model import evaluate, joint_log_likelihood, postprocess, predict, simplex_rows
from dpfed.algorithms.naive_bayes.options import PARAMS
from dpfed.algorithms.naive_bayes.party import NaiveBayesParty, SecureNaiveBayesParty
from dpfed.algorithms.naive_bayes.plan import Layout, NBPlan, gaussian_multiplier
from dpfed.algorithms.naive_bayes.release import plan_release
from dpfed.algorithms.naive_bayes.secure import secure_release
from dpfed.algorithms.naive_bayes.statistics import sufficient_statistics

__all__ = ["ALGORITHMS", "PARAMS", "DPNaiveBayes", "NBPlan", "Layout", "plan_release", "secure_release",
           "sufficient_statistics", "postprocess", "simplex_rows", "joint_log_likelihood", "predict", "evaluate",
           "NaiveBayesParty", "SecureNaiveBayesParty", "NaiveBayesCoordinator", "DataDerivedSchemaWarning", "gaussian_multiplier"]
