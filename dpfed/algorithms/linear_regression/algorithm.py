"""The linear-regression registry entry, assembled from the package's halves and options."""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.linear_regression.coordinator import LinearRegressionCoordinator
from dpfed.algorithms.linear_regression.model import evaluate
from dpfed.algorithms.linear_regression.options import DEFAULT_DELTA, PARAMS, add_arguments, params_from_args
from dpfed.algorithms.linear_regression.party import LinearRegressionParty, SecureLinearRegressionParty

__all__ = ["ALGORITHMS"]

ALGORITHMS = {"linear-regression": Algorithm(
    name="linear-regression", party=LinearRegressionParty, coordinator=LinearRegressionCoordinator,
    evaluate=evaluate, add_arguments=add_arguments, params_from_args=params_from_args, default_delta=DEFAULT_DELTA,
    label_kind="numeric", params=PARAMS, secure=SecureLinearRegressionParty,
    estimator="dpfed.algorithms.linear_regression.estimator:DPLinearRegression")}
