"""The random forest registry entry, assembled from the package's halves and options."""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.random_forest.coordinator import ForestCoordinator
from dpfed.algorithms.random_forest.model import evaluate
from dpfed.algorithms.random_forest.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.random_forest.party import ForestParty, SecureForestParty

__all__ = ["ALGORITHMS"]

ALGORITHMS = {"random-forest": Algorithm(name="random-forest", party=ForestParty, coordinator=ForestCoordinator,
                                         evaluate=evaluate, add_arguments=add_arguments,
                                         params_from_args=params_from_args, default_delta=1e-6, params=PARAMS,
                                         secure=SecureForestParty,
                                         estimator="dpfed.algorithms.random_forest.estimator:DPRandomForestClassifier")}
