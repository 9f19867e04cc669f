"""The statistics registry entry, assembled from the package's halves and options."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.statistics.coordinator import StatisticsCoordinator
from dpfed.algorithms.statistics.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.statistics.party import SecureStatisticsParty, StatisticsParty
from dpfed.data.schema import Schema

__all__ = ["ALGORITHMS", "evaluate"]


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """Statistics have no held-out score: the answers are the model (``results``)."""
    return {}


ALGORITHMS = {"statistics": Algorithm(name="statistics", party=StatisticsParty, coordinator=StatisticsCoordinator,
                                      evaluate=evaluate, add_arguments=add_arguments,
                                      params_from_args=params_from_args, default_delta=1e-6, needs_labels=True,
                                      params=PARAMS, secure=SecureStatisticsParty)}
