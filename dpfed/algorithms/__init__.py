"""Layer 3, algorithms: the party/coordinator contract, the registry, one module per algorithm, and
the scikit-learn-style estimators (``DPNaiveBayes``, ``DPGLVQ``, ``DPGMLVQ``, ``DPKMeans``, ``DPPCA``,
``DPLinearRegression``, ``DPRandomForestClassifier``, ``DPDecisionTreeClassifier``, ``DPLogisticRegression``,
``DPLinearSVM``).

Imports only :mod:`dpfed.core` and :mod:`dpfed.data`; neither grpc nor ray.
"""
from __future__ import annotations

from typing import Any

from dpfed.algorithms.model_file import load_model
from dpfed.algorithms.registry import add_algorithm_arguments, algorithm_names, get_algorithm

__all__ = ["get_algorithm", "algorithm_names", "add_algorithm_arguments", "load_model",
           "DPNaiveBayes", "DPGLVQ", "DPGMLVQ", "DPKMeans", "DPPCA", "DPLinearRegression",
           "DPRandomForestClassifier", "DPDecisionTreeClassifier", "DPLogisticRegression", "DPLinearSVM"]

_ESTIMATORS = {"DPNaiveBayes": "naive_bayes", "DPGLVQ": "lvq", "DPGMLVQ": "lvq", "DPKMeans": "kmeans", "DPPCA": "pca",
               "DPLinearRegression": "linear_regression", "DPRandomForestClassifier": "random_forest",
               "DPDecisionTreeClassifier": "decision_tree",
               "DPLogisticRegression": "linear_models", "DPLinearSVM": "linear_models"}


def __getattr__(name: str) -> Any:  # estimators load their module only when asked for
    if name in _ESTIMATORS:
        import importlib

        return getattr(importlib.import_module(f"dpfed.algorithms.{_ESTIMATORS[name]}"), name)
    raise AttributeError(f"module 'dpfed.algorithms' has no attribute {name!r}")
