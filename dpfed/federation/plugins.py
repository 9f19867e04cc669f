"""Algorithm lookup for the daemons: the dpfed registry plus optional plugin modules.

A plugin is an importable module defining ``ALGORITHMS: dict[str, dpfed.algorithms.contract.Algorithm]``
(the same shape as the registry's modules); party and coordinator configs may list plugins so a
deployment can run an algorithm that is not in :mod:`dpfed.algorithms`. Both ends must agree.
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import Algorithm

__all__ = ["load_algorithm"]


def load_algorithm(name: str, plugins: Sequence[str] = ()) -> Algorithm:
    """The algorithm ``name`` from the plugins (first match) or else from the dpfed registry."""
    for module_name in plugins:
        module = importlib.import_module(module_name)
        table = getattr(module, "ALGORITHMS", {})
        if name in table:
            return table[name]
    return get_algorithm(name)
