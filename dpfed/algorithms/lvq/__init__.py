"""Differentially private GLVQ / GMLVQ across parties (Brinkrolf, Berger & Hammer, ESANN 2018).

A job is one initialisation round and T = epochs / q DP-SGD rounds.

* Round 0 (``init``, budget epsilon_1 = ``init_fraction`` * epsilon): each party releases noised
  per-class counts (sensitivity 1: exact rounded Gaussian round(sigma Z), charged exactly as the
  Gaussian -- discrete Gaussian shares under distributed noise -- or exact discrete Laplace) and
  per-class coordinate sums of its records rescaled by the public bounds into [-1, 1]^d (rounded to a
  public grid, exact integer noise: :func:`dpfed.core.mechanisms.gaussian` / ``laplace``). ``gaussian``: L2
  sensitivity sqrt(d), one Gaussian mechanism split between counts and sums (the two noise
  multipliers compose to exactly the one calibrated for epsilon_1). ``laplace``: the paper's
  mechanism, L1 sensitivity d, pure epsilon split. ``zero``: only counts are released (for the
  expected batch size); prototypes start at the centre of the box, no budget spent on sums.
  The coordinator sets each class's prototypes to centre + sum / count. The sums may be taken
  around a public centre (``init_center``: box centre, or the lower corner for sparse data such as
  pixels) with each centred record L2-clipped to ``init_clip`` (clip, then noise): the sensitivity
  drops from sqrt(d) to ``init_clip``, which on MNIST cuts the initialisation noise ~1.75x.
* Rounds 1..T (``step``): the coordinator broadcasts the model; each party Poisson-samples (rate q),
  clips every record's joint gradient (prototypes and Omega) to L2 norm C with ghost norms
  (:mod:`dpfed.algorithms.lvq.gradient`, through the DP-SGD engine :mod:`dpfed.algorithms.dpsgd`),
  adds Gaussian noise and returns the sum. The coordinator adds the sums, divides by the expected
  batch size q * n (n from the noisy counts) and steps (SGD with rate ``lr / (1 + lr_decay * t / T)``,
  or Adam). Omega is renormalised to Frobenius norm ``omega_scale``
  after each step (post-processing).
* sigma (``noise_multiplier``) is the smallest one for which the PLD composition of the
  initialisation and the T subsampled Gaussian steps meets (epsilon, delta)
  (:mod:`dpfed.algorithms.lvq.plan`); it is computed once when the job is
  created, stored in the job's public params, and re-checked by every party before it charges.

Noise placement (``noise``): ``local`` (every party adds the full noise: private even against the
coordinator), ``distributed`` with ``secure_aggregation`` (per-record rows encoded with the distributed
discrete Gaussian and masked by SecAgg, :mod:`dpfed.algorithms.lvq.secure`), or ``distributed`` without
it (1/P of the variance per party: simulation only); details in :mod:`dpfed.algorithms.lvq.party`.

Package layout (one role per module; a new learner copies this shape):

=================  ======================================================================================
``defaults.py``    the job parameters' defaults, the public prototype bound
``layout.py``      classes, d, prototypes and Omega's rank from the public spec
``model.py``       the model maths: rescaling, distances, cost terms, predictions, initialisation rows,
                   evaluation
``gradient.py``    the per-record joint gradient with ghost norms, for the shared DP-SGD engine
``plan.py``        the privacy plan (local / float distributed noise): events, noise calibration
``secure.py``      the release under secure aggregation: its plan, its rows, the decode
``party.py``       the party halves (``LVQParty``; ``SecureLVQParty`` under secure aggregation)
``coordinator.py`` the coordinator half (``LVQCoordinator``)
``options.py``     the parameter table and command-line options
``algorithm.py``   the registry entries ``glvq`` and ``gmlvq``
``estimator.py``   ``DPGLVQ`` / ``DPGMLVQ`` and the local driver
=================  ======================================================================================
"""
from __future__ import annotations

from dpfed.algorithms.lvq.algorithm import ALGORITHMS
from dpfed.algorithms.lvq.coordinator import LVQCoordinator
from dpfed.algorithms.lvq.defaults import DEFAULTS, PROTOTYPE_BOUND
from dpfed.algorithms.lvq.estimator import DPGLVQ, DPGMLVQ, run_local
from dpfed.algorithms.lvq.gradient import gradient_release, noisy_gradient_sum
from dpfed.algorithms.lvq.model import evaluate
from dpfed.algorithms.lvq.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.lvq.party import LVQParty, SecureLVQParty
from dpfed.algorithms.lvq.plan import PrivacyPlan, prepare_params, privacy_plan
from dpfed.algorithms.lvq.secure import SecureLVQPlan, secure_lvq_plan

__all__ = ["PrivacyPlan", "privacy_plan", "prepare_params", "LVQParty", "SecureLVQParty", "LVQCoordinator", "evaluate",
           "noisy_gradient_sum", "gradient_release", "DPGLVQ", "DPGMLVQ", "ALGORITHMS", "DEFAULTS", "PROTOTYPE_BOUND",
           "PARAMS", "add_arguments", "params_from_args", "SecureLVQPlan", "secure_lvq_plan", "run_local"]
