"""Registry of the federated algorithms, by the name used on the command line and in job specs.

Each module listed here defines ``ALGORITHMS: dict[str, dpfed.federated.Algorithm]``; modules are
imported only when their algorithm is asked for.
"""
from __future__ import annotations

import importlib

from dpfed.federated import Algorithm

__all__ = ["get_algorithm", "algorithm_names"]

_MODULES = {
    "naive-bayes": "dpfed.naive_bayes",
    "glvq": "dpfed.lvq",
    "gmlvq": "dpfed.lvq",
    "kmeans": "dpfed.kmeans",
}


def algorithm_names() -> list[str]:
    return sorted(_MODULES)


def get_algorithm(name: str) -> Algorithm:
    if name not in _MODULES:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {', '.join(algorithm_names())}")
    module = importlib.import_module(_MODULES[name])
    return module.ALGORITHMS[name]
