"""Differentially private logistic regression and linear SVM across parties.

``logistic-regression`` (binary, or multinomial / softmax) and ``linear-svm`` (the Huber-smoothed hinge of
Chaudhuri, Monteleoni & Sarwate, JMLR 2011; one-vs-rest for more than two classes) are trained by DP-SGD
(Abadi et al. 2016) on the one gradient engine :mod:`dpfed.algorithms.dpsgd` that also trains GLVQ / GMLVQ:
a count round, then T = epochs / q Poisson-subsampled Gaussian steps on per-record gradients clipped to C by
ghost clipping (a linear model's gradient is ``a x~^T``: its norm is ``|dl/ds| |x~|``); ``sampling_rate = 1``
is noisy full-batch gradient descent. Accounting as GLVQ's (PLD, or RDP under secure aggregation).
Records are encoded by the public schema (:mod:`dpfed.data.encoding`). For one party, the estimators
also offer objective perturbation (:mod:`.objective`).

=================  ======================================================================================
``defaults.py``    the job parameters' defaults, the public weight bound, the loss of each entry
``model.py``       the model maths: scores, losses and their derivatives, predictions, evaluation
``layout.py``      loss, classes, K scores and D + 1 weights from the public spec
``gradient.py``    the per-record gradient for the DP-SGD engine (ghost clipping by outer products)
``plan.py``        the privacy plan (local / float distributed noise): events, noise calibration
``secure.py``      the release under secure aggregation: its plan, its rows
``party.py``       the party halves (``LinearParty``; ``SecureLinearParty`` under secure aggregation)
``coordinator.py`` the coordinator half (``LinearCoordinator``)
``options.py``     the parameter table and command-line options (``--lm-*``)
``algorithm.py``   the registry entries ``logistic-regression`` and ``linear-svm``
``objective.py``   objective perturbation (one party, two classes)
``estimator.py``   ``DPLogisticRegression`` / ``DPLinearSVM``
=================  ======================================================================================
"""
from __future__ import annotations

from dpfed.algorithms.linear_models.algorithm import ALGORITHMS
from dpfed.algorithms.linear_models.coordinator import LinearCoordinator
from dpfed.algorithms.linear_models.defaults import DEFAULTS
from dpfed.algorithms.linear_models.estimator import DPLinearSVM, DPLogisticRegression
from dpfed.algorithms.linear_models.gradient import LinearGradient
from dpfed.algorithms.linear_models.model import evaluate
from dpfed.algorithms.linear_models.objective import fit_objective, objective_noise
from dpfed.algorithms.linear_models.options import PARAMS, add_arguments, params_from_args
from dpfed.algorithms.linear_models.party import LinearParty, SecureLinearParty
from dpfed.algorithms.linear_models.plan import LinearPlan, prepare_params, privacy_plan
from dpfed.algorithms.linear_models.secure import secure_linear_plan

__all__ = ["ALGORITHMS", "DEFAULTS", "LinearCoordinator", "LinearGradient", "LinearParty", "SecureLinearParty",
           "LinearPlan", "privacy_plan", "prepare_params", "secure_linear_plan", "evaluate", "PARAMS",
           "add_arguments", "params_from_args", "DPLogisticRegression", "DPLinearSVM", "fit_objective",
           "objective_noise"]
