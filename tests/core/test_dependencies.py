"""The dp-accounting dependency: the installed version lies in the range pyproject.toml declares, and
every part of its API that dpfed uses or extends is there, with dpfed's event names free.

dpfed subclasses dp-accounting's PLD and RDP accountants and reads some of their attributes, so a
release outside the tested range may break accounting silently; this test fails first. Raise the
upper bound only after this file and tests/core pass with the new release.
"""
from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from dp_accounting import dp_event, privacy_accountant
from dp_accounting.pld import common, pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant

from dpfed.core import events

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [Requirement(d) for d in deps if Requirement(d).name == "dp-accounting"]
    assert len(found) == 1, deps
    return found[0]


def test_dp_accounting_has_a_tested_upper_bound_and_the_installed_version_is_inside():
    req = _declared()
    assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), f"no upper bound: {req}"
    installed = Version(metadata.version("dp-accounting"))
    assert req.specifier.contains(installed, prereleases=True), f"dp-accounting {installed} outside {req.specifier}"


def test_the_dp_accounting_api_dpfed_uses_exists():
    for name in ("GaussianDpEvent", "LaplaceDpEvent", "DiscreteLaplaceDpEvent", "RandomizedResponseDpEvent",
                 "PoissonSampledDpEvent", "SelfComposedDpEvent", "ComposedDpEvent", "NoOpDpEvent", "ZCDpEvent"):
        assert issubclass(getattr(dp_event, name), dp_event.DpEvent), name
    assert {"ADD_OR_REMOVE_ONE", "REPLACE_ONE"} <= set(privacy_accountant.NeighboringRelation.__members__)
    assert privacy_accountant.PrivacyAccountant.CompositionErrorDetails
    assert issubclass(privacy_accountant.UnsupportedEventError, Exception)
    assert callable(rdp_privacy_accountant.compute_epsilon)
    assert callable(privacy_loss_distribution.from_privacy_parameters)
    assert callable(privacy_loss_distribution.from_discrete_gaussian_mechanism)
    assert common.DifferentialPrivacyParameters(1.0, 1e-6).delta == 1e-6
    # dpfed's accountants override _maybe_compose and read these attributes of dp-accounting's own
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    assert hasattr(pld, "_maybe_compose") and hasattr(pld, "_pld") and pld._value_discretization_interval == 1e-3
    rdp = rdp_privacy_accountant.RdpAccountant(orders=[2.0, 3.0])
    assert hasattr(rdp, "_maybe_compose") and len(rdp._rdp) == 2 and list(rdp._orders) == [2.0, 3.0]
    assert rdp._neighboring_relation is privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE


def test_dpfed_event_names_are_not_dp_accounting_names():
    """dpfed's events serialise by class name beside dp-accounting's: a name in both would make a stored
    event ambiguous (the reason EpsilonDeltaDpEvent and DiscreteGaussianDpEvent were renamed)."""
    taken = {n for n, c in vars(dp_event).items() if isinstance(c, type) and issubclass(c, dp_event.DpEvent)}
    assert not taken & set(events.DPFED_EVENTS), taken & set(events.DPFED_EVENTS)
    assert set(events.DPFED_EVENTS) == {"EpsilonDeltaBoundDpEvent", "ScalarDiscreteGaussianDpEvent",
                                        "DistributedDiscreteGaussianDpEvent"}
