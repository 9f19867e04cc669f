"""DP-SGD steps under secure aggregation: the rounding option and the per-step noise plan.

Each party encodes its sampled records' clipped gradients with the distributed discrete Gaussian
(Kairouz, Liu & Steinke, ICML 2021) and masks them with SecAgg (:mod:`dpfed.algorithms.secure_noise`).
``secure_rounding``: ``record`` rounds every record's clipped row (the rows are
:func:`dpfed.algorithms.dpsgd.gradient.clipped_row_chunks`); ``party`` rounds each party's clipped sum
once (:func:`dpfed.algorithms.dpsgd.gradient.clipped_sum`, ghost clipping where the learner offers it);
``auto`` picks by the dimension of the step's release, resolved once per job so that every release of
the job (an initialisation included) uses the same encoding.
"""
from __future__ import annotations

from dataclasses import replace

from dp_accounting import DpEvent

from dpfed.algorithms import secure_noise as sn
from dpfed.core import distributed_noise as dn

__all__ = ["secure_step_params", "secure_step_release"]


def secure_step_params(sp: sn.SecureParams, dimension: int) -> sn.SecureParams:
    """``sp`` with ``secure_rounding`` resolved for a job whose DP-SGD step releases ``dimension`` numbers."""
    return replace(sp, rounding=sn.resolve_rounding(sp.rounding, dimension))


def secure_step_release(sp: sn.SecureParams, *, epsilon: float, delta: float, clip: float, dimension: int,
                        sampling_rate: float, steps: int, prior: DpEvent | None = None) -> dn.DistributedNoisePlan:
    """The noise plan of T Poisson(q) steps of per-record gradients clipped to ``clip``, calibrated so that
    ``prior`` composed with them meets (epsilon, delta) by RDP; the headroom counts a step's sampled rows
    (:func:`dpfed.algorithms.secure_noise.batch_bound`)."""
    return sn.calibrate_release(sp, epsilon=epsilon, delta=delta, clip=clip, dimension=dimension,
                                vectors=sn.batch_bound(sp.records, sampling_rate), sampling_rate=sampling_rate,
                                steps=steps, prior=prior)
