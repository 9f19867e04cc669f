"""The secure DP-SGD jobs on one segmentation split that ``tests/daemons/test_net_secure_lvq.py`` and
``test_net_secure_linear.py`` run over real gRPC with mutual TLS and five real party daemon processes.

One federation (a coordinator and the five party processes, started once) runs all four jobs one after the other
(:func:`dpfed.simulation.grpc_local.run_grpc_simulations`, the conftest fixture ``secure_segmentation_runs``);
each test compares its job's result with the in-process run of the same job. A party's noise stream is seeded
per job (``{seed}:{job}:{party}``) and the ledgers read every spend at the jobs' common delta, so each job's
model and spend are those of a federation of its own. Starting the federation once instead of four times saves
15 party process start-ups (each imports the learners and the accountants)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.datasets import Dataset, kfold_indices, split_parties

SEED = 11
#: (algorithm, secure_rounding) -> (job id, params); one encoding per job
JOBS: dict[tuple[str, str], tuple[str, dict]] = {
    ("glvq", "record"): ("secure-grpc-record", {"epsilon": 1.5, "epochs": 0.5, "sampling_rate": 0.05}),
    ("glvq", "party"): ("secure-grpc-party", {"epsilon": 1.5, "epochs": 0.5, "sampling_rate": 0.05}),
    ("logistic-regression", "record"): ("secure-grpc-logistic-regression",
                                        {"epsilon": 2.0, "epochs": 0.3, "sampling_rate": 0.1}),
    ("linear-svm", "party"): ("secure-grpc-linear-svm", {"epsilon": 2.0, "epochs": 0.3, "sampling_rate": 0.1}),
}
SECURE = {"delta": 1e-5, "noise": "distributed", "secure_aggregation": True, "min_survivors": 3, "bits": 16}


def party_data(ds: Dataset) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """The first of 5 folds' training part, split iid over 5 parties."""
    tr, _ = next(iter(kfold_indices(len(ds.X), 5, seed=0)))
    return split_parties(ds.X[tr], ds.y[tr], 5, "iid", np.random.default_rng(0))


def spec(ds: Dataset, algorithm: str, rounding: str) -> JobSpec:
    job_id, params = JOBS[(algorithm, rounding)]
    return JobSpec(job_id, algorithm, {**params, **SECURE, "secure_rounding": rounding}, ds.schema)
