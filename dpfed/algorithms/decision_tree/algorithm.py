"""The private decision tree registry entry ("decision-tree"), assembled from the package's halves and options."""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.decision_tree.coordinator import TreeCoordinator
from dpfed.algorithms.decision_tree.model import evaluate
from dpfed.algorithms.decision_tree.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.decision_tree.party import SecureTreeParty, TreeParty

__all__ = ["ALGORITHMS"]

ALGORITHMS = {"decision-tree": Algorithm(name="decision-tree", party=TreeParty, coordinator=TreeCoordinator,
                                         evaluate=evaluate, add_arguments=add_arguments,
                                         params_from_args=params_from_args, default_delta=1e-6, params=PARAMS,
                                         secure=SecureTreeParty,
                                         estimator="dpfed.algorithms.decision_tree.estimator:DPDecisionTreeClassifier")}
