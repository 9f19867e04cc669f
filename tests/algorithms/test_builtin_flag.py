"""``PartyAlgorithm.builtin``: dpfed's own party halves say so in their class (strict release checking,
:func:`dpfed.algorithms.contract.is_builtin`); a plugin is not builtin, not even one deriving from a builtin
half, unless its own class body says so."""
from __future__ import annotations

import numpy as np
import pytest

from dpfed.algorithms.contract import Task, TaskRejected, is_builtin, released_arrays
from dpfed.algorithms.naive_bayes import NaiveBayesParty
from dpfed.algorithms.registry import algorithm_names, get_algorithm
from net_noisy_mean import NoisyMeanParty


class DerivedPlugin(NaiveBayesParty):
    """A third party's variant of a builtin half."""


class DeclaredBuiltin(NaiveBayesParty):
    builtin = True


@pytest.mark.parametrize("name", algorithm_names())
def test_every_registered_party_half_is_builtin(name):
    algo = get_algorithm(name)
    assert is_builtin(algo.party())
    assert algo.secure is None or is_builtin(algo.secure())  # the secure half too (not inherited)


def test_plugins_are_not_builtin_even_when_derived():
    assert not is_builtin(NoisyMeanParty())
    assert not is_builtin(DerivedPlugin())
    assert is_builtin(DeclaredBuiltin())


def test_a_bare_answer_is_refused_from_a_builtin_half_only():
    task = Task("j", 0, "nb-statistics")
    bare = {"stats": np.zeros(3, np.int64)}
    with pytest.raises(TaskRejected, match="without reporting its releases"):
        released_arrays(NaiveBayesParty(), task, bare, None)
    assert released_arrays(DerivedPlugin(), task, bare, None) is bare


def test_the_flag_is_a_class_attribute_not_a_module_name():
    Moved = type("Moved", (NoisyMeanParty,), {"__module__": "dpfed.algorithms.fake", "builtin": False})
    assert not is_builtin(Moved())  # the old rule (module under dpfed.) would have called it builtin
