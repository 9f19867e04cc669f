"""The registry entry of k-means (name "kmeans"), assembled from the package's halves and options."""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.kmeans.coordinator import combine, make_coordinator
from dpfed.algorithms.kmeans.evaluate import evaluate
from dpfed.algorithms.kmeans.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.kmeans.party import KMeansParty, SecureKMeansParty

__all__ = ["ALGORITHMS"]

ALGORITHMS = {
    "kmeans": Algorithm(name="kmeans", party=KMeansParty, coordinator=make_coordinator, evaluate=evaluate,
                        add_arguments=add_arguments, params_from_args=params_from_args,
                        default_delta=1e-6, needs_labels=False, combine=combine, params=PARAMS,
                        secure=SecureKMeansParty, estimator="dpfed.algorithms.kmeans.estimator:DPKMeans"),
}
