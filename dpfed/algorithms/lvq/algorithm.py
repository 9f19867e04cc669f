"""The registry entries ``glvq`` and ``gmlvq``: the party halves (local, secure), one coordinator half, shared options."""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm
from dpfed.algorithms.lvq.coordinator import LVQCoordinator
from dpfed.algorithms.lvq.model import evaluate
from dpfed.algorithms.lvq.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.lvq.party import LVQParty, SecureLVQParty

__all__ = ["ALGORITHMS"]


def _algorithm(name: str) -> Algorithm:
    return Algorithm(name=name, party=LVQParty, coordinator=LVQCoordinator, evaluate=evaluate,
                     add_arguments=add_arguments, params_from_args=params_from_args, default_delta=1e-5,
                     params=PARAMS, secure=SecureLVQParty,
                     estimator=f"dpfed.algorithms.lvq.estimator:{'DPGMLVQ' if name == 'gmlvq' else 'DPGLVQ'}")


ALGORITHMS = {"glvq": _algorithm("glvq"), "gmlvq": _algorithm("gmlvq")}
