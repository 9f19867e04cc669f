"""The DP-SGD gradient engine, shared by every learner trained with noisy clipped gradients.

DP-SGD (Abadi et al., CCS 2016, Alg. 1): each step Poisson-samples the records (rate q), clips every
sampled record's gradient to L2 norm C, sums, and adds Gaussian noise N(0, (z C)^2) to every
coordinate; T such steps are T Poisson-subsampled Gaussian mechanisms, accounted by PLD (or RDP under
secure aggregation). dpfed's GLVQ / GMLVQ (Brinkrolf, Berger & Hammer, ESANN 2018) train this way; a
logistic-regression or linear-SVM learner reuses the same engine by supplying only its gradient.

What a learner supplies (:mod:`.gradient`): an object with

* ``dimension``: the length of one record's flat gradient (every learned parameter, in a fixed order);
* ``rows(X, y)``: the per-record gradients, shape (B, dimension), not clipped (the engine zeroes a row
  whose norm is not finite: a NaN would survive clipping and noise and tell whether the record was sampled);
* ``ghost(X, y)``: None, or a :class:`GhostBatch` for *ghost clipping*: the per-record gradient norms
  from dot products (``norms()``) and the weighted sum ``sum_i w_i g_i`` (``weighted_sum(w)``) without
  materialising one row per record (the learner zeroes a non-finite record's terms: its weight is 0,
  and 0 * inf is NaN). Use it when the model allows it (a linear model's gradient is
  ``l'(x.w, y) x``, so its norm is ``|l'| |x|`` and the weighted sum is ``X^T (w l')``).

What the engine does with it:

* :func:`poisson_sample` (:mod:`.release`): the step's sample, from the party's secure generator;
* :func:`clipped_sum` / :func:`clipped_rows` / :func:`clipped_row_chunks` (:mod:`.gradient`):
  per-record clipping by :func:`dpfed.core.clipping.l2_clip_factors` (ghost clipping when offered);
* :class:`OuterGhost` / :func:`outer_rows` (:mod:`.outer`): the ghost batch and the rows of a gradient that
  is one outer product ``a x^T`` per record (logistic regression, linear SVM: any generalised linear model);
* :func:`noisy_sum` (:mod:`.release`): the Gaussian noise on the clipped sum (float Gaussian from the
  ChaCha20 keystream, or ``exact`` rounded Gaussian on a public grid; ``parties`` = P gives each party
  1/P of the variance for distributed noise) and the release's event; :func:`step_event` is what a
  party declares for one step (``task_event``) and reports (``Released``);
* :func:`calibrate` (:mod:`.plan`): the noise multiplier z (``sampling_rate = 1``: noisy full-batch gradient
  descent, every record in every step, the same events with q = 1) for which an optional earlier release
  (``prior``, e.g. an initialisation) composed with T steps meets (epsilon, delta), and the job's event;
* :func:`secure_step_params` / :func:`secure_step_release` (:mod:`.secure`): the same steps under
  secure aggregation (distributed discrete Gaussian, :mod:`dpfed.algorithms.secure_noise`): the
  rounding option resolved once by the release's dimension, and the calibrated per-step noise plan.
  A party's secure rows are :func:`clipped_row_chunks`; for ``secure_rounding = "party"`` its one row
  sum is :func:`clipped_sum` (ghost clipping, no per-record rows).
* :func:`check_schedule` / :func:`check_release` (:mod:`.checks`): the public parameters every DP-SGD job is
  refused for (steps, Adam's betas, noise placement, clip norm), named for the learner;
* :func:`schedule_params` / :func:`optimizer_params` / :func:`noise_params` (:mod:`.options`): the job
  parameters every DP-SGD learner's table lists, ranged once (the learner gives defaults and help texts);
* :func:`charged_event` / :func:`check_round` / :class:`JobCache` / :class:`RecordCache` (:mod:`.party`): what
  every DP-SGD party half does alike (the charge check, a round's refusals, the per-job caches);
* :func:`check_round_parties` / :func:`noise_placement` / :func:`central_noise_multiplier` (:mod:`.coordinator`):
  what every DP-SGD coordinator half does alike (who is in a round's sum; the summary's noise facts);
* :func:`decayed_rate` / :func:`direction` (:mod:`.optimizer`): the coordinator's step on the summed
  noisy gradients divided by the expected batch size (SGD with a decaying rate, or Adam): post-processing.

A party's step, whole (``grad`` built from the broadcast model)::

    mask = poisson_sample(rng, len(X), q)
    g = clipped_sum(grad, X[mask], y[mask], clip)
    noisy, event = noisy_sum(g.vector, clip, plan.noise_multiplier, rng)
    return Released({"grad": noisy}, (subsampled(q, event),))
"""
from __future__ import annotations

from dpfed.algorithms.dpsgd.checks import MAX_STEPS, check_release, check_schedule
from dpfed.algorithms.dpsgd.gradient import (ClippedSum, GhostBatch, PerRecordGradient, clip_rows, clipped_row_chunks,
                                             clipped_rows, clipped_sum, ghost_clipped_sum,
                                             rows_per_chunk)
from dpfed.algorithms.dpsgd.optimizer import OPTIMIZERS, decayed_rate, direction
from dpfed.algorithms.dpsgd.outer import OuterGhost, outer_rows
from dpfed.algorithms.dpsgd.plan import DpSgdPlan, calibrate, plan_key, prepared, spent, steps_for
from dpfed.algorithms.dpsgd.release import noisy_sum, poisson_sample, step_event, subsampled
from dpfed.algorithms.dpsgd.secure import secure_step_params, secure_step_release

__all__ = ["PerRecordGradient", "GhostBatch", "ClippedSum", "clip_rows", "clipped_rows", "clipped_row_chunks",
           "clipped_sum", "ghost_clipped_sum", "rows_per_chunk", "DpSgdPlan", "calibrate", "steps_for", "spent", "plan_key", "prepared", "noisy_sum",
           "poisson_sample", "step_event", "subsampled", "secure_step_params", "secure_step_release", "OPTIMIZERS",
           "decayed_rate", "direction", "OuterGhost", "outer_rows", "MAX_STEPS", "check_schedule", "check_release"]
