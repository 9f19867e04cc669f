"""GLVQ / GMLVQ job defaults and public constants (the bottom of the package: imports nothing of it)."""
from __future__ import annotations

from typing import Any

__all__ = ["DEFAULTS", "PROTOTYPE_BOUND"]

#: Defaults of the job parameters (the paper's q, C, E, epsilon_1 share; our initialisation and optimiser).
DEFAULTS: dict[str, Any] = {
    "epochs": 50, "sampling_rate": 0.01, "clip": 0.5, "noise": "local", "parties": 1,
    "init": "gaussian", "init_fraction": 0.2, "count_fraction": 0.05, "init_center": "mid", "init_clip": 0.0,
    "optimizer": "sgd", "lr": 0.05, "lr_decay": 9.0, "adam_betas": [0.9, 0.999],
    "prototypes_per_class": 1, "omega_rank": 0, "omega_scale": 1.0,
    "phi": "identity", "beta": 1.0, "private": True, "allow_missing_classes": False, "exact_noise": False,
}
#: Public bound on a broadcast prototype's coordinates, in rescaled units (the data box is [-1, 1]^d). The
#: coordinator keeps its prototypes inside (post-processing); a party refuses a broadcast outside.
PROTOTYPE_BOUND = 2.0
