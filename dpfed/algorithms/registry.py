"""Registry of the federated algorithms, by the name used on the command line and in job specs.

Each module listed here defines ``ALGORITHMS: dict[str, dpfed.algorithms.contract.Algorithm]``; modules are
imported only when their algorithm is asked for.
"""
from __future__ import annotations

import argparse
import importlib

from dpfed.algorithms.contract import Algorithm

__all__ = ["get_algorithm", "algorithm_names", "add_algorithm_arguments"]

_MODULES = {
    "naive-bayes": "dpfed.algorithms.naive_bayes",
    "glvq": "dpfed.algorithms.lvq",
    "gmlvq": "dpfed.algorithms.lvq",
    "kmeans": "dpfed.algorithms.kmeans",
    "statistics": "dpfed.algorithms.statistics",
    "pca": "dpfed.algorithms.pca",
    "linear-regression": "dpfed.algorithms.linear_regression",
    "random-forest": "dpfed.algorithms.random_forest",
    "decision-tree": "dpfed.algorithms.decision_tree",
    "logistic-regression": "dpfed.algorithms.linear_models",
    "linear-svm": "dpfed.algorithms.linear_models",
}


def algorithm_names() -> list[str]:
    return sorted(_MODULES)


def get_algorithm(name: str) -> Algorithm:
    if name.startswith("pca+"):  # PCA as the first step of a job (dpfed.algorithms.pipeline)
        from dpfed.algorithms.pipeline import compose

        return compose(get_algorithm("pca"), get_algorithm(name[len("pca+"):]))
    if name not in _MODULES:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {', '.join(algorithm_names())}")
    module = importlib.import_module(_MODULES[name])
    return module.ALGORITHMS[name]


def add_algorithm_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every algorithm's own options to ``parser``, one argument group per algorithm.

    Algorithms that share an options function (GLVQ and GMLVQ) add it once; the parser should use
    ``conflict_handler="resolve"`` so that two algorithms may both define an option.
    """
    seen = set()
    for name in algorithm_names():
        algo = get_algorithm(name)
        if algo.add_arguments is not None and algo.add_arguments not in seen:
            seen.add(algo.add_arguments)
            algo.add_arguments(parser.add_argument_group(f"{name} options"))
