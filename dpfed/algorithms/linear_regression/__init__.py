"""Differentially private linear (ridge) regression from noisy sufficient statistics, one release per party.

Methods: ``adassp`` (Wang, AISTATS 2018, Alg. 2: noisy X^T X, X^T y, y^T y, n and a noisy lower bound of
lambda_min(X^T X) that picks the ridge penalty; Gaussian noise, local or distributed under secure aggregation)
and ``functional`` (the functional mechanism, Zhang et al., VLDB 2012: Laplace noise on the coefficients of the
quadratic objective, pure epsilon-DP). Features and target are clamped to the schema's public bounds.

Modules, by role: :mod:`.plan` (encoding, layout, weights, sensitivities, the charged event), :mod:`.statistics`
(the party's integer vector), :mod:`.secure` (distributed noise under secure aggregation), :mod:`.release` (the
job's one plan, local or secure), :mod:`.party` and :mod:`.coordinator` (the two halves), :mod:`.model`
(post-processing, prediction, RMSE and R^2), :mod:`.estimator` (``DPLinearRegression``), :mod:`.options`
(parameters and command-line options), :mod:`.algorithm` (the registry entry).
"""
from __future__ import annotations

from dpfed.algorithms.linear_regression.algorithm import ALGORITHMS
from dpfed.algorithms.linear_regression.coordinator import LinearRegressionCoordinator
from dpfed.algorithms.linear_regression.estimator import DPLinearRegression
from dpfed.algorithms.linear_regression.model import (adassp_solve, evaluate, functional_solve, postprocess, predict,
                                                      regression_metrics)
from dpfed.algorithms.linear_regression.options import PARAMS
from dpfed.algorithms.linear_regression.party import LinearRegressionParty, SecureLinearRegressionParty
from dpfed.algorithms.linear_regression.plan import Layout, LRPlan, sensitivities
from dpfed.algorithms.linear_regression.release import plan_release
from dpfed.algorithms.linear_regression.secure import secure_release
from dpfed.algorithms.linear_regression.statistics import encode, encode_target, sufficient_statistics

__all__ = ["ALGORITHMS", "PARAMS", "DPLinearRegression", "Layout", "LRPlan", "sensitivities", "plan_release",
           "secure_release", "sufficient_statistics", "encode", "encode_target", "postprocess", "adassp_solve",
           "functional_solve", "predict", "evaluate", "regression_metrics", "LinearRegressionParty",
           "SecureLinearRegressionParty", "LinearRegressionCoordinator"]
