"""Estimators follow scikit-learn's conventions, and the product runs without the test extras."""
import subprocess
import sys

import numpy as np
import pytest
from sklearn.base import clone

from dpfed.algorithms.decision_tree import DPDecisionTreeClassifier
from dpfed.algorithms.kmeans import DPKMeans
from dpfed.algorithms.lvq import DPGLVQ, DPGMLVQ
from dpfed.algorithms.naive_bayes import DPNaiveBayes
from dpfed.algorithms.random_forest import DPRandomForestClassifier


@pytest.mark.parametrize("cls", [DPNaiveBayes, DPKMeans, DPGLVQ, DPGMLVQ, DPRandomForestClassifier,
                                 DPDecisionTreeClassifier])
def test_get_set_params_and_clone(cls):
    est = cls()
    params = est.get_params()
    assert "epsilon" in params and "random_state" in params
    est.set_params(epsilon=0.25)
    twin = clone(est)
    assert twin is not est and twin.get_params()["epsilon"] == 0.25
    assert "epsilon=0.25" in repr(est)
    with pytest.raises(ValueError, match="invalid parameter 'no_such'"):
        est.set_params(no_such=1)


def test_classifier_score_is_accuracy():
    from dpfed.data.datasets import load_dataset

    ds = load_dataset("nursery")
    clf = DPNaiveBayes(epsilon=5.0, schema=ds.schema, random_state=0).fit(ds.X_train, ds.y_train)
    assert clf.score(ds.X_test, ds.y_test) == pytest.approx(np.mean(clf.predict(ds.X_test) == ds.y_test))


def test_runtime_needs_no_test_extras():
    """scikit-learn, diffprivlib and matplotlib are comparison/plot extras: the product must not import them."""
    code = (
        "import sys\n"
        "for m in ('sklearn', 'diffprivlib', 'matplotlib', 'pytest', 'hypothesis'):\n"
        "    sys.modules[m] = None  # importing it now raises ImportError\n"
        "import dpfed.algorithms.naive_bayes, dpfed.algorithms.lvq, dpfed.algorithms.kmeans\n"
        "import dpfed.algorithms.random_forest, dpfed.algorithms.decision_tree\n"
        "import dpfed.core.mechanisms, dpfed.core.ledger\n"
        "import coordinator.server, dpfed.simulation.grpc_local, party.daemon\n"
        "from dpfed.cli import main\n"
        "assert main(['privacy', 'epsilon', '--noise-multiplier', '2', '--sampling-rate', '0.01',"
        " '--steps', '100', '--delta', '1e-5']) == 0\n"
        "from dpfed.data.datasets import load_dataset\n"
        "from dpfed.algorithms.kmeans import evaluate\n"
        "import numpy as np\n"
        "ds = load_dataset('blobs:n=600,d=2,k=3,seed=0')\n"
        "print(evaluate({'cluster_centers': np.zeros((3, 2))}, ds.X, None, ds.schema)['nonprivate_impl'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] != "sklearn"
