"""The naive Bayes party halves, chosen once by the registry entry from the job's parameters
(:meth:`dpfed.algorithms.contract.Algorithm.party_for`): :class:`NaiveBayesParty` answers its one task
with the noisy weighted statistics vector; :class:`SecureNaiveBayesParty`, under distributed noise with
secure aggregation, releases the integer vector of :mod:`.secure` (a
:class:`~dpfed.algorithms.secure_release.SecureRelease`)."""
from __future__ import annotations


import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec, Released, Task
from dpfed.algorithms.naive_bayes import secure
from dpfed.algorithms.naive_bayes.plan import TASK_KIND
from dpfed.algorithms.naive_bayes.release import plan_release
from dpfed.algorithms.naive_bayes.statistics import party_records, sufficient_statistics
from dpfed.algorithms.one_release import OneReleaseParty, noisy_vector
from dpfed.algorithms.secure_release import PlainAnswerRefused, VectorRelease
from dpfed.core.rng import SecureRNG

__all__ = ["NaiveBayesParty", "SecureNaiveBayesParty"]


class NaiveBayesParty(OneReleaseParty):
    """The party half: one task, the noisy weighted statistics vector."""

    builtin = True
    task_kind, learner = TASK_KIND, "naive Bayes"

    def release_event(self, spec: JobSpec) -> dp_event.DpEvent:
        return plan_release(spec).event

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        plan = plan_release(spec)
        layout, X, y = party_records(spec, X, y)
        stats = sufficient_statistics(X, y, layout, plan.weights)
        return noisy_vector("stats", stats, plan.mechanism == "laplace", l1=plan.l1, epsilon=spec.epsilon,
                            l2=plan.l2, sigma=plan.noise, rng=rng)


class SecureNaiveBayesParty(PlainAnswerRefused, NaiveBayesParty, VectorRelease):
    """Distributed noise under secure aggregation: the same one task and plan (:func:`.release.plan_release`
    picks the distributed one), released as the integer vector plus one noise share (never by :meth:`answer`)."""

    builtin = True
    vector_module = secure  # the plan and the party's integer statistics vector as one row
