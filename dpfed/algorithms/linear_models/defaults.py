"""Logistic-regression / linear-SVM job defaults and public constants (the bottom of the package)."""
from __future__ import annotations

from typing import Any

__all__ = ["DEFAULTS", "WEIGHT_BOUND", "LOSSES"]

#: The loss of each registry entry: the binary / multinomial logistic loss, and the Huber-smoothed hinge
#: (Chaudhuri, Monteleoni & Sarwate 2011, Sec. 3.4.2), one-vs-rest for more than two classes.
LOSSES = {"logistic-regression": "logistic", "linear-svm": "huber"}

#: Defaults of the job parameters (DP-SGD with Poisson rate q; ``sampling_rate = 1``: noisy full-batch GD).
DEFAULTS: dict[str, Any] = {
    "epochs": 10, "sampling_rate": 0.05, "clip": 1.0, "noise": "local", "parties": 1, "count_fraction": 0.01,
    "optimizer": "adam", "lr": 0.1, "lr_decay": 0.0, "adam_betas": [0.9, 0.999], "l2": 1e-5, "huber": 0.5,
    "private": True, "exact_noise": False,
}
#: Public bound on a broadcast weight (in units of the encoded features, which lie in [0, 1]); the coordinator
#: keeps its weights inside (post-processing), a party refuses a broadcast outside.
WEIGHT_BOUND = 1e3
