"""The linear-regression party halves, chosen once by the registry entry from the job's parameters:
:class:`LinearRegressionParty` answers its one task with the noisy weighted statistics vector (Gaussian for
AdaSSP, discrete Laplace for the functional mechanism); :class:`SecureLinearRegressionParty`, under
distributed noise with secure aggregation, releases the integer vector of :mod:`.secure`."""
from __future__ import annotations


import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec, Released, Task
from dpfed.algorithms.linear_regression import secure
from dpfed.algorithms.linear_regression.plan import TASK_KIND, Layout
from dpfed.algorithms.linear_regression.release import plan_release
from dpfed.algorithms.linear_regression.statistics import party_records, sufficient_statistics
from dpfed.algorithms.one_release import OneReleaseParty, noisy_vector
from dpfed.algorithms.secure_release import PlainAnswerRefused, VectorRelease
from dpfed.core.rng import SecureRNG

__all__ = ["LinearRegressionParty", "SecureLinearRegressionParty"]


class LinearRegressionParty(OneReleaseParty):
    """The party half: one task, the noisy weighted statistics vector."""

    builtin = True
    task_kind, learner = TASK_KIND, "linear-regression"

    def release_event(self, spec: JobSpec) -> dp_event.DpEvent:
        return plan_release(spec).event

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        plan = plan_release(spec)
        X, yv = party_records(spec, X, y)
        stats = sufficient_statistics(X, yv, Layout.from_schema(spec.schema, plan.method), plan.weights)
        return noisy_vector("stats", stats, plan.method == "functional", l1=int(plan.l1), epsilon=spec.epsilon,
                            l2=plan.l2, sigma=plan.noise, rng=rng)


class SecureLinearRegressionParty(PlainAnswerRefused, LinearRegressionParty, VectorRelease):
    """Distributed noise under secure aggregation: the same one task, released as the integer vector plus one
    noise share (never by :meth:`answer`)."""

    builtin = True
    vector_module = secure  # the plan and the party's integer statistics vector as one row
