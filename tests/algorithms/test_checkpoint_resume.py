"""Every algorithm's coordinator half can be checkpointed mid-job and resumed (issue 10).

The coordinator daemon pickles the coordinator half together with the task it is about to send
before every round, and after a crash continues with ``drive(..., first=task)``. Here, for every
registered algorithm, a job is stopped at several rounds, pickled, unpickled and finished; its model
must equal the uninterrupted run's exactly. The parties' answers are made reproducible per round
(a seeded generator keyed by the round), so any state lost or changed by the checkpoint shows.
"""
from __future__ import annotations

import argparse
import pickle

import numpy as np
import pytest

from dpfed.algorithms import add_algorithm_arguments, algorithm_names, get_algorithm
from dpfed.algorithms.contract import Aggregate, JobSpec, Released, Task
from dpfed.algorithms.driver import drive
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Feature, Schema

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
#: learners of a numeric target: the same box with a regression target (the labels 0/1 as its values)
REGRESSION = Schema(SCHEMA.features, target=Feature("t", "numeric", lower=0.0, upper=1.0))
PARTIES = ("p0", "p1")
SMALL = {"glvq": ["--epochs", "1", "--sampling-rate", "0.1"], "gmlvq": ["--epochs", "1", "--sampling-rate", "0.1"],
         "kmeans": ["--k", "2"], "logistic-regression": ["--lm-epochs", "1", "--lm-sampling-rate", "0.2"],
         "linear-svm": ["--lm-epochs", "1", "--lm-sampling-rate", "0.2"]}


class _Stop(Exception):
    pass


def _spec(name: str) -> JobSpec:
    algo = get_algorithm(name)
    ap = argparse.ArgumentParser(conflict_handler="resolve")
    add_algorithm_arguments(ap)
    args = ap.parse_args(SMALL.get(name, []))
    args.epsilon, args.delta, args.parties = 2.0, 1e-5, len(PARTIES)
    params = {"epsilon": 2.0, "delta": 1e-5, **(algo.params_from_args(args) if algo.params_from_args else {})}
    return JobSpec(f"job-{name}", name, params, REGRESSION if algo.label_kind == "numeric" else SCHEMA)


def _data(i: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(i)
    y = rng.integers(0, 2, 300)
    return np.clip(0.3 + 0.4 * y[:, None] + rng.normal(0, 0.08, (300, 3)), 0, 1), y


def _gather(algo, spec):
    halves, data = [algo.party() for _ in PARTIES], [_data(i) for i in range(len(PARTIES))]

    def gather(task: Task) -> list[Aggregate]:
        out = []
        for i, name in enumerate(PARTIES):
            halves[i].check_task(spec, task)
            ans = halves[i].answer(spec, task, *data[i], SecureRNG.from_seed(f"{name}:{task.round}"))
            out.append(Aggregate(ans.arrays if isinstance(ans, Released) else ans, (name,)))
        return out
    return gather


def _models_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", algorithm_names())
def test_checkpointed_job_resumes_to_the_same_model(name):
    algo, spec = get_algorithm(name), _spec(name)
    ref = algo.coordinator(spec, PARTIES)
    total = drive(ref, _gather(algo, spec), algo.combine)
    for stop_at in sorted({0, total // 2, total - 1}):
        state = _interrupted(algo, spec, stop_at)
        assert state["task"].round == stop_at
        done = drive(state["coordinator"], _gather(algo, spec), algo.combine, first=state["task"])
        assert done == total - stop_at
        _models_equal(state["coordinator"].model(), ref.model())


def _interrupted(algo, spec: JobSpec, stop_at: int) -> dict:
    """Run a job, checkpointing before each round as the daemon does, and stop it at ``stop_at``;
    return the last checkpoint, unpickled."""
    coord, saved, gather = algo.coordinator(spec, PARTIES), {}, _gather(algo, spec)

    def checkpointing(task: Task) -> list[Aggregate]:
        saved["blob"] = pickle.dumps({"coordinator": coord, "task": task})
        if task.round == stop_at:
            raise _Stop
        return gather(task)

    with pytest.raises(_Stop):
        drive(coord, checkpointing, algo.combine)
    return pickle.loads(saved["blob"])
