"""Secure aggregation on the Ray pool: 24 parties on two workers, 30% of them dropping out of the
round (simulated in their sessions), naive Bayes with distributed noise: the job completes through
SecureGather with per-party answers routed worker by worker, and its model, survivors and charges
are exactly the in-process run's (same seeds: masks cancel, the noise shares and dropouts coincide)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray")

from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.data.datasets import load_dataset, split_parties  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402
from dpfed.simulation.ray_runner import init_local_ray, run_ray_simulation  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    import ray

    init_local_ray(num_cpus=2)
    yield
    ray.shutdown()


def test_secure_naive_bayes_on_the_pool_with_dropouts_equals_in_process(local_ray):
    ds = load_dataset("mushroom")
    data = split_parties(ds.X_train, ds.y_train, 24, "iid", np.random.default_rng(1))
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": 12, "bits": 16}
    spec = JobSpec("ray-secure-nb", "naive-bayes", params, ds.schema)
    res = run_ray_simulation(spec, data, seed=4, workers=2, dropout=0.3)
    ref = run_inprocess(spec, data, seed=4, dropout=0.3)
    assert res.summary["secure_aggregation"] is True and res.summary["aborted_rounds"] == 0
    assert res.summary["dropouts"] == ref.summary["dropouts"] >= 3
    assert res.info["workers"] == 2 and res.info["max_partials_per_round"] == 2  # one call per worker
    assert res.party_epsilon == pytest.approx(ref.party_epsilon) and res.epsilon_spent <= 1.0 + 1e-9
    for key in ("class_count", "cat_log_prob"):
        np.testing.assert_array_equal(res.model[key], ref.model[key], err_msg=key)
