"""Every release path of every learner in the registry, as small jobs for tests that must cover them all.

A *release path* is a learner under one noise mode: ``local`` (the plain party half, every party adds its
full noise) and ``secure`` (distributed noise under secure aggregation: the learner's secure half,
:class:`dpfed.algorithms.secure_release.SecureRelease`). :func:`release_paths` walks the registry, so a new
learner is covered automatically; :func:`cases` fails for a learner that has no small job here yet (add one
to ``_JOBS``), so a new learner cannot slip past the tests that use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpfed.algorithms import algorithm_names, get_algorithm
from dpfed.algorithms.contract import Aggregate, Algorithm, JobSpec, Task
from dpfed.algorithms.params import validate
from dpfed.algorithms.secure_release import release_of
from dpfed.data.schema import Feature, Schema
from dpfed.simulation.inprocess import secure_spec

PARTIES = ("p0", "p1", "p2")
MODES = ("local", "secure")

_NB = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
              Feature("v", "numeric", lower=-5.0, upper=5.0)), n_classes=2)
_BOX4 = Schema.numeric_box(4, 0.0, 1.0, n_classes=2)
_BOX3 = Schema.numeric_box(3, 0.0, 1.0)
_LR = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
              Feature("v", "numeric", lower=-5.0, upper=5.0)), target=Feature("t", "numeric", lower=-2.0, upper=2.0))
_SECURE = {"noise": "distributed", "secure_aggregation": True}

#: learner -> (schema, labelled, [job params per case]); the secure mode adds ``_SECURE``.
_JOBS: dict[str, tuple[Schema, bool, list[dict[str, Any]]]] = {
    "naive-bayes": (_NB, True, [{"epsilon": 1.0, "delta": 1e-6}]),
    "glvq": (_BOX4, True, [{"epsilon": 2.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.5}]),
    "gmlvq": (_BOX4, True, [{"epsilon": 2.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.5, "omega_rank": 2}]),
    "kmeans": (_BOX3, False, [{"epsilon": 1.0, "delta": 1e-6, "k": 2, "method": "sample-aggregate", "refine_steps": 1},
                              {"epsilon": 1.0, "delta": 1e-6, "k": 2, "method": "sample-aggregate", "refine_steps": 0},
                              {"epsilon": 1.0, "delta": 1e-6, "k": 2, "method": "lloyd", "lloyd_iters": 2}]),
    "statistics": (_NB, True, [{"epsilon": 1.0, "delta": 1e-6, "group_by": "class",
                                "queries": ["count", "var:u", "median:v:bins=16", "histogram:a", "mean:v"]},
                               {"epsilon": 1.0, "delta": 1e-6, "queries": ["table:a:a", "sum:u"]}]),
    "pca": (_BOX3, False, [{"epsilon": 1.0, "delta": 1e-6, "k": 2, "clip": 0.8}]),
    "linear-regression": (_LR, True, [{"epsilon": 1.0, "delta": 1e-5}]),
    "random-forest": (_NB, True, [{"epsilon": 1.0, "delta": 1e-6, "trees": 5, "depth": 3}]),
    "decision-tree": (_NB, True, [{"epsilon": 1.0, "delta": 1e-6, "depth": 2, "bins": 4}]),
    "logistic-regression": (_NB, True, [{"epsilon": 2.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.5}]),
    "linear-svm": (_NB, True, [{"epsilon": 2.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.5}]),
}


@dataclass(frozen=True)
class Case:
    """One small job of one learner under one noise mode, with every party's records."""

    name: str
    mode: str
    spec: JobSpec
    data: tuple[tuple[np.ndarray, np.ndarray | None], ...]

    @property
    def algo(self) -> Algorithm:
        return get_algorithm(self.spec.algorithm)


def _records(schema: Schema, labelled: bool, n: int, seed: int) -> tuple[np.ndarray, np.ndarray | None]:
    g = np.random.default_rng(seed)
    cols = [g.integers(0, f.categories, n).astype(float) if f.kind == "categorical"
            else g.uniform(f.lower, f.upper, n) for f in schema.features]
    if labelled and schema.target is not None:  # a regression target within its public bounds
        return np.column_stack(cols), g.uniform(schema.target.lower, schema.target.upper, n)
    return np.column_stack(cols), (g.integers(0, schema.n_classes, n) if labelled else None)


def release_paths() -> list[tuple[str, str]]:
    """(learner, mode) for every learner of the registry and every mode it has (``secure`` when its entry
    names a secure half)."""
    return [(n, m) for n in algorithm_names() for m in MODES if m == "local" or get_algorithm(n).secure is not None]


def cases(name: str, mode: str, tag: str = "case") -> list[Case]:
    """The small jobs of ``name`` under ``mode`` (validated params, roster and record bound filled in)."""
    if name not in _JOBS:
        raise AssertionError(f"learner {name!r} has no small job in tests/support/release_paths.py: add one")
    schema, labelled, jobs = _JOBS[name]
    data = tuple(_records(schema, labelled, 120, i) for i in range(len(PARTIES)))
    out = []
    for i, params in enumerate(jobs):
        p = validate(get_algorithm(name), {**params, **(_SECURE if mode == "secure" else {})}, schema)
        spec = JobSpec(f"{tag}-{name}-{mode}-{i}", name, p, schema)
        out.append(Case(name, mode, secure_spec(spec, PARTIES, sum(len(x) for x, _ in data)), data))
    return out


def secure_rounds(case: Case, rounds: int = 4) -> list[Task]:
    """Up to ``rounds`` secure tasks of ``case`` as its coordinator issues them, each round absorbed as an
    all-zero decoded sum (the tasks are what matter here, not the model)."""
    algo = case.algo
    release = release_of(algo.party_for(case.spec.params))
    assert release is not None
    coord = algo.coordinator(case.spec, PARTIES)
    out: list[Task] = []
    while len(out) < rounds:
        task = coord.next_task()
        if task is None:
            break
        out.append(task)
        plan = release.plan(case.spec, task)
        assert plan is not None, f"{case.name}: round {task.round} ({task.kind}) has no secure plan"
        zero = release.decode(case.spec, task, plan, np.zeros(plan.length, dtype=np.uint64))
        coord.absorb(task, algo.combine(task, [Aggregate(zero, PARTIES)]))
    return out
