"""A party refuses jobs that are private against the coordinator only under secure aggregation
(LVQ's distributed noise) unless it runs in a simulation, and charges nothing when it refuses."""
from dataclasses import replace

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.datasets import load_dataset
from dpfed.federation.session import decide
from party.config import PartyConfig
from party.daemon import PartyDaemon


def _daemon(tmp_path, simulation: bool) -> tuple[PartyDaemon, JobSpec, JobSpec]:
    ds = load_dataset("segmentation")
    cfg = PartyConfig(name="p0", coordinator="127.0.0.1:1", data=tmp_path / "unused.npz",
                      ledger=tmp_path / f"ledger-{simulation}.sqlite", schema=ds.schema, epsilon_limit=10.0,
                      delta_limit=1e-5, insecure=True)
    cfg = replace(cfg, simulation=simulation)
    daemon = PartyDaemon(cfg, ds.X_train, ds.y_train)
    params = {"epsilon": 1.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.1, "parties": 2}
    spec_local = JobSpec("job-local", "gmlvq", {**params, "noise": "local"}, ds.schema)
    spec_dist = JobSpec("job-dist", "gmlvq", {**params, "noise": "distributed"}, ds.schema)
    return daemon, spec_local, spec_dist


def _prepared(spec: JobSpec) -> JobSpec:
    from dpfed.algorithms.lvq import prepare_params  # fills the calibrated noise multiplier into the public params

    return JobSpec(spec.job_id, spec.algorithm, prepare_params(dict(spec.params)), spec.schema)


def test_deployed_party_refuses_distributed_noise(tmp_path):
    daemon, local, dist = _daemon(tmp_path, simulation=False)
    try:
        d = decide(daemon.party, _prepared(dist).to_json())
        assert not d.accept and d.session is None and "secure aggregation" in d.reason
        assert daemon.ledger.spent() == 0.0  # refused before any charge
        d = decide(daemon.party, _prepared(local).to_json())
        # charged on the ledger's own grid (accounting.pld_grid of its limit 10): PLD rounds up by its grid
        assert d.accept and d.session is not None and 0.99 <= daemon.ledger.spent() <= 1.0 + 1e-5
    finally:
        daemon.close()


def test_simulated_party_accepts_distributed_noise(tmp_path):
    daemon, _, dist = _daemon(tmp_path, simulation=True)
    try:
        d = decide(daemon.party, _prepared(dist).to_json())
        assert d.accept and d.session is not None
        assert np.isclose(daemon.ledger.spent(), 1.0, rtol=1e-3)
    finally:
        daemon.close()
