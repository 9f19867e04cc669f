"""Secure aggregation on the Ray pool: 24 parties on two workers, 30% of them dropping out of the
round (simulated in their sessions), naive Bayes with distributed noise: the job completes through
SecureGather with per-party tasks routed worker by worker, each worker merging its parties' masked
inputs (the driver's SecAgg server, spied on, receives one masked partial sum per worker, never a
party's own vector), and its model, survivors and charges are exactly the in-process run's (same
seeds: masks cancel, the noise shares and dropouts coincide)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray")

from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.data.datasets import load_dataset, split_parties  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402
from dpfed.simulation.ray_runner import init_local_ray, run_ray_simulation  # noqa: E402
from masked_spy import spy_masked_parts  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    import ray

    init_local_ray(num_cpus=2)
    yield
    ray.shutdown()


def test_secure_naive_bayes_on_the_pool_with_dropouts_equals_in_process(local_ray, monkeypatch):
    ds = load_dataset("mushroom")
    data = split_parties(ds.X_train, ds.y_train, 24, "iid", np.random.default_rng(1))
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": 12, "bits": 16}
    spec = JobSpec("ray-secure-nb", "naive-bayes", params, ds.schema)
    masked_parts = spy_masked_parts(monkeypatch)
    res = run_ray_simulation(spec, data, seed=4, workers=2, dropout=0.3)
    monkeypatch.undo()
    ref = run_inprocess(spec, data, seed=4, dropout=0.3)
    hosted = [{f"party-{i}" for i in range(12)}, {f"party-{i}" for i in range(12, 24)}]  # np.array_split
    assert masked_parts and all(len(parts) == 2 for parts in masked_parts), masked_parts
    for parts in masked_parts:  # one partial sum per worker, of that worker's surviving parties
        assert all(any(set(p) <= h for h in hosted) for p in parts) and {len(p) > 1 for p in parts} == {True}
        assert sum(map(len, parts)) == 24 - res.summary["dropouts"]
    assert res.summary["secure_aggregation"] is True and res.summary["aborted_rounds"] == 0
    assert res.summary["dropouts"] == ref.summary["dropouts"] >= 3
    assert res.info["workers"] == 2 and res.info["max_partials_per_round"] == 2  # one call per worker
    assert res.party_epsilon == pytest.approx(ref.party_epsilon) and res.epsilon_spent <= 1.0 + 1e-9
    for key in ("class_count", "cat_log_prob"):
        np.testing.assert_array_equal(res.model[key], ref.model[key], err_msg=key)
