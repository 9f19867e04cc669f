"""The PCA registry entry, assembled from the package's halves and options."""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.pca.coordinator import PCACoordinator
from dpfed.algorithms.pca.model import evaluate
from dpfed.algorithms.pca.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.pca.party import PCAParty, SecurePCAParty

__all__ = ["ALGORITHMS"]

ALGORITHMS = {"pca": Algorithm(name="pca", party=PCAParty, coordinator=PCACoordinator, evaluate=evaluate,
                               add_arguments=add_arguments, params_from_args=params_from_args, default_delta=1e-6,
                               needs_labels=False, params=PARAMS, secure=SecurePCAParty,
                               estimator="dpfed.algorithms.pca.estimator:DPPCA")}
