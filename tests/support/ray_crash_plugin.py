"""Test plugin: ``net_noisy_mean``'s Laplace mean, whose Ray worker process dies once, mid-round.

The party half cannot see its party's name, so the tests give every party a different number of
records and a party is known by ``len(X)``. ``crash-mean`` answers as ``noisy-mean`` does, and:

* every answer it computes (a replayed answer is not computed again) appends ``ROWS ROUND`` to the
  file named by the public job parameter ``answer_log``, so a test counts the noise draws per
  party and round;
* it runs at 0.99 of the job's epsilon (noise a little larger than ``noisy-mean``'s) so that the
  PLD accountant's discretisation keeps the composed rounds within the job's own epsilon;
* the party with ``crash_rows`` records, answering round ``crash_round`` while the file
  ``crash_marker`` does not exist, creates that file and kills its own process with SIGKILL: a real
  crash (no exception, no clean-up), once.
"""
from __future__ import annotations

import dataclasses
import os
import signal

from dpfed.algorithms.contract import Algorithm
from net_noisy_mean import NoisyMeanCoordinator, NoisyMeanParty, evaluate

NAME = "crash-mean"


def _inner(spec):
    return dataclasses.replace(spec, params={**spec.params, "epsilon": 0.99 * spec.epsilon})


class CrashMeanParty(NoisyMeanParty):
    def job_event(self, spec):
        return super().job_event(_inner(spec))

    def answer(self, spec, task, X, y, rng):
        p = spec.params
        if (len(X) == int(p.get("crash_rows", -1)) and task.round == int(p.get("crash_round", -1))
                and not os.path.exists(p["crash_marker"])):
            open(p["crash_marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        out = super().answer(_inner(spec), task, X, y, rng)
        with open(p["answer_log"], "a") as fh:
            fh.write(f"{len(X)} {task.round}\n")
        return out


ALGORITHMS = {NAME: Algorithm(NAME, CrashMeanParty, NoisyMeanCoordinator, evaluate, default_delta=0.0,
                              needs_labels=False)}
