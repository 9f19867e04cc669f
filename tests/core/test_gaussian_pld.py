"""dpfed.core.gaussian_pld against dp-accounting's own ``from_gaussian_mechanism``: the same PMF, bit for bit
(dpfed's calibration and the independent checks of tests/algorithms/test_release_path.py must agree exactly)."""
from __future__ import annotations

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpfed.core import accounting as A
from dpfed.core.gaussian_pld import gaussian_pld


def _pmfs(pld):
    dense = [p.to_dense_pmf() for p in (pld._pmf_remove, pld._pmf_add)]
    return [(p._lower_loss, p._infinity_mass, p._probs) for p in dense]


@pytest.mark.parametrize("sd, q, grid", [
    (0.8, 0.05, 1e-4), (0.3, 0.01, 1e-3), (1.2, 0.5, 2e-4), (0.5, 0.999, 1e-4), (2.0, 1e-5, 1e-4),
    (0.4, 1.0, 1e-4), (3.7, 1.0, 1e-4), (250.0, 1.0, 1e-4), (60.0, 0.001, 1e-4),
])
def test_the_pmf_is_dp_accountings(sd, q, grid):
    ours, theirs = _pmfs(gaussian_pld(sd, grid, q)), _pmfs(pld_lib.from_gaussian_mechanism(
        sd, value_discretization_interval=grid, sampling_prob=q))
    for (lo_a, inf_a, p_a), (lo_b, inf_b, p_b) in zip(ours, theirs, strict=True):
        assert lo_a == lo_b and inf_a == inf_b and np.array_equal(p_a, p_b)


def test_a_composed_plan_has_dp_accountings_epsilon():
    """The accountant dpfed charges with, on a DP-SGD plan with a Gaussian initialisation: the same epsilon."""
    event = dpa.ComposedDpEvent([dpa.GaussianDpEvent(7.0), A.dp_sgd_event(0.9, 0.05, 60)])
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    assert A.epsilon(event, 1e-5) == acc.get_epsilon(1e-5)
