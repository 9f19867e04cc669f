"""Why a party would refuse a job for its parameters or its privacy spend: the check the coordinator runs
at ``SubmitJob``, so an operator's typo (a noise multiplier far too small) is refused at once instead of
stalling every party (issue 24, item 5).

The same steps as a party's decision (``dpfed.federation.session.decide``) before its ledger: the declared
ranges and caps (:func:`dpfed.algorithms.params.validate`), the algorithm's job event and its own check
against the stated epsilon, then a cheap proven lower bound on that event's epsilon
(:func:`dpfed.core.offer_cost.exceeds`), so that nothing here builds a large PLD.
"""
from __future__ import annotations

from dpfed.algorithms.contract import Algorithm, JobSpec, TaskRejected
from dpfed.algorithms.params import validate
from dpfed.core import accounting

__all__ = ["offer_refusal"]


def offer_refusal(algo: Algorithm, spec: JobSpec) -> str | None:
    """The reason a party would refuse ``spec`` for its parameters or its spend, or None."""
    try:
        validate(algo, spec.params, spec.schema)
        event = algo.party_for(spec.params).job_event(spec)
    except (TaskRejected, ValueError, TypeError, KeyError, ArithmeticError) as exc:
        return f"bad job parameters: {exc}"
    low = accounting.exceeds(event, spec.delta, spec.epsilon) if spec.delta > 0 else None
    if low is not None:
        return f"the job's noise gives epsilon >= {low:.6g} > its stated epsilon {spec.epsilon:.6g}"
    return None
