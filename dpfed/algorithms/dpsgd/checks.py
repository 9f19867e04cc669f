"""The checks every DP-SGD job's public parameters get, whatever the learner (both halves run them).

:func:`check_schedule`: T = epochs / q steps within [1, :data:`MAX_STEPS`] and Adam's betas in [0, 1);
:func:`check_release`: a private job with a known noise placement, a finite clip norm > 0, parties >= 1.
Refusals name the learner (``what``) and the parameter, in one line (:class:`TaskRejected`).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from dpfed.algorithms.dpsgd.plan import steps_for
from dpfed.core.errors import TaskRejected

__all__ = ["MAX_STEPS", "check_schedule", "check_release"]

#: DP-SGD steps T = epochs / sampling_rate at most (the GLVQ paper's settings: 5,000).
MAX_STEPS = 100_000


def check_schedule(p: Mapping[str, Any], what: str) -> None:
    """T = epochs / sampling_rate in [1, MAX_STEPS] and ``adam_betas`` two numbers in [0, 1)."""
    steps = steps_for(p["epochs"], p["sampling_rate"])
    if steps < 1 or steps > MAX_STEPS:
        raise TaskRejected(f"{what} steps = epochs / sampling_rate = {p['epochs']:g} / {p['sampling_rate']:g} = {steps} "
                           f"must lie in [1, {MAX_STEPS}]")
    betas = p["adam_betas"]
    if not (len(betas) == 2 and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                                    for b in betas)):
        raise TaskRejected(f"{what} parameter 'adam_betas' must be two numbers in [0, 1)")


def check_release(p: Mapping[str, Any], what: str) -> None:
    """The release parameters a party refuses: a non-private job, an unknown noise placement, a clip norm that
    is not a finite number > 0, fewer than one party."""
    if not p["private"]:
        raise TaskRejected(f"a non-private {what} job can only run inside a local estimator, never at a party")
    if p["noise"] not in ("local", "distributed"):
        raise TaskRejected("noise must be 'local' or 'distributed'")
    if not (isinstance(p["clip"], (int, float)) and p["clip"] > 0 and math.isfinite(p["clip"])):
        raise TaskRejected("clip must be a finite number > 0")
    if int(p["parties"]) < 1:
        raise TaskRejected("parties must be >= 1")
