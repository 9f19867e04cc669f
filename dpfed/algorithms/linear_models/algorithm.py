"""The registry entries ``logistic-regression`` and ``linear-svm``: the party halves (local, secure), one
coordinator half, shared options."""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.linear_models.coordinator import LinearCoordinator
from dpfed.algorithms.linear_models.model import evaluate
from dpfed.algorithms.linear_models.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.linear_models.party import LinearParty, SecureLinearParty

__all__ = ["ALGORITHMS"]


_ESTIMATORS = {"logistic-regression": "DPLogisticRegression", "linear-svm": "DPLinearSVM"}


def _algorithm(name: str) -> Algorithm:
    return Algorithm(name=name, party=LinearParty, coordinator=LinearCoordinator, evaluate=evaluate,
                     add_arguments=add_arguments, params_from_args=params_from_args, default_delta=1e-5,
                     params=PARAMS, secure=SecureLinearParty,
                     estimator=f"dpfed.algorithms.linear_models.estimator:{_ESTIMATORS[name]}")


ALGORITHMS = {"logistic-regression": _algorithm("logistic-regression"), "linear-svm": _algorithm("linear-svm")}
