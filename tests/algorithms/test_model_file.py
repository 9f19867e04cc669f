"""Models that predict (issue 29 item 3): a model file holds the released arrays with the algorithm, the public
parameters and the public schema, and loads as a fitted scikit-learn-style estimator that scores on RAW
features exactly as the job's own evaluation (``Algorithm.evaluate``, what ``dpfed simulate`` reports) does,
for every registered algorithm (``dpfed.algorithms.load_model``). Before, a fetched GMLVQ model scored 8.5 %
on raw features (its prototypes live in the schema's rescaled box)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dpfed.algorithms import get_algorithm, load_model
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.lvq.estimator import DPGLVQ, DPGMLVQ
from dpfed.algorithms.lvq.model import predict as lvq_predict
from dpfed.algorithms.model_file import ModelFileError, read_model_file, write_model_file
from dpfed.cli import main
from dpfed.data.datasets import load_dataset, split_parties
from dpfed.simulation.inprocess import run_inprocess

CASES = {
    "naive-bayes": ("adult", {"epsilon": 1.0, "delta": 1e-6}),
    "glvq": ("segmentation", {"epsilon": 2.0, "delta": 1e-5}),
    "gmlvq": ("segmentation", {"epsilon": 2.0, "delta": 1e-5}),
    "kmeans": ("segmentation", {"epsilon": 1.0, "delta": 1e-6, "k": 4}),
    "logistic-regression": ("adult", {"epsilon": 1.0, "delta": 1e-5, "epochs": 2}),
    "random-forest": ("adult", {"epsilon": 1.0, "delta": 1e-6, "trees": 8}),
    "decision-tree": ("adult", {"epsilon": 1.0, "delta": 1e-6, "depth": 4}),
    "pca+naive-bayes": ("satimage", {"epsilon": 4.0, "delta": 1e-5, "pca_k": 5}),
    "pca+kmeans": ("segmentation", {"epsilon": 2.0, "delta": 1e-6, "pca_k": 3, "k": 4}),
    "pca": ("segmentation", {"epsilon": 1.0, "delta": 1e-6, "k": 3}),
    "linear-svm": ("adult", {"epsilon": 1.0, "delta": 1e-5, "epochs": 2}),
}


def _released_model(algorithm: str, ds, params) -> dict:
    """The coordinator's released model: a 3-party in-process job; for LVQ the same halves' non-private
    baseline (one party; the released arrays have the same layout and box), which trains in a second where a
    private DP-SGD job spends most of a minute calibrating on a shared machine."""
    if algorithm in ("glvq", "gmlvq"):
        cls = DPGMLVQ if algorithm == "gmlvq" else DPGLVQ
        est = cls(private=False, epochs=20, sampling_rate=0.2, random_state=0,
                  bounds=(ds.schema.lower, ds.schema.upper), classes=list(range(ds.schema.n_classes)))
        return est.fit(ds.X_train, ds.y_train).model_
    data = split_parties(ds.X_train, ds.y_train, 3, "iid", np.random.default_rng(0))
    return run_inprocess(JobSpec(f"mf-{algorithm.replace('+', '-')}", algorithm, params, ds.schema), data, seed=3).model


@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_model_file_scores_as_the_job_on_raw_features(algorithm, tmp_path, capsys):
    name, params = CASES[algorithm]
    ds = load_dataset(name)
    algo = get_algorithm(algorithm)
    model = _released_model(algorithm, ds, params)
    job_eval = algo.evaluate(model, ds.X_test, ds.y_test if algo.needs_labels else None, ds.schema)
    path = write_model_file(tmp_path / "model", model, algorithm=algorithm, params=params,
                            schema=ds.schema.to_dict(), job_id=f"mf-{algorithm}")
    est = load_model(path)
    Xraw = np.asarray(ds.X_test, dtype=np.float64)
    if algo.needs_labels:
        assert est.score(Xraw, ds.y_test) == pytest.approx(job_eval["test_accuracy"], abs=1e-12)
        # pca+naive-bayes on satimage at epsilon 4: 0.71 here, 0.68 to 0.80 over six other splits and noise seeds
        # (all seven: mean 0.75, std 0.04; non-private PCA + GaussianNB 0.83, naive Bayes on the raw features
        # 0.70); 0.6 is 3.7 std below the mean, a chance failure ~1e-4 under a normal approximation (the noise
        # here is seeded: the outcome is reproducible). With the old defaults (the PCA clip the box's diameter, the
        # learner's bounds the box [-C, C]) this job scored 0.43 (0.24-0.43 over seeds): test_pca_pipeline_bounds
        assert est.score(Xraw, ds.y_test) > (0.6 if algorithm == "pca+naive-bayes" else 0.5)
    elif algorithm == "pca":  # its score is its evaluation's captured variance
        assert est.score(Xraw) == pytest.approx(job_eval["captured_variance"], rel=1e-12)
    else:
        assert -est.score(Xraw) == pytest.approx(job_eval["inertia"], rel=1e-12)
    # the CLI: the same number from the file, on a data file
    np.savez(tmp_path / "test.npz", X=ds.X_test, y=ds.y_test)
    assert main(["model", "evaluate", str(tmp_path / "test.npz"), "--model", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    key = "test_accuracy" if algo.needs_labels else "captured_variance" if algorithm == "pca" else "inertia"
    assert out[key] == pytest.approx(job_eval[key], rel=1e-12)
    assert main(["model", "predict", str(tmp_path / "test.npz"), "--model", str(path), "-o",
                 str(tmp_path / "pred.csv")]) == 0
    lines = (tmp_path / "pred.csv").read_text().splitlines()
    assert lines[0] == ("pc0,pc1,pc2" if algorithm == "pca" else "prediction") and len(lines) == len(ds.X_test) + 1
    if algorithm == "gmlvq":  # the finding: the bare arrays on raw features, without the schema's rescale
        m = model
        bare = lvq_predict(Xraw, m["prototypes"], m["prototype_labels"], m["omega"])
        assert np.mean(bare == ds.y_test) < est.score(Xraw, ds.y_test) - 0.2


def test_bare_arrays_are_refused_with_a_reason(tmp_path):
    np.savez(tmp_path / "bare.npz", prototypes=np.zeros((2, 2)))
    with pytest.raises(ModelFileError, match="bare arrays"):
        read_model_file(tmp_path / "bare.npz")
    with pytest.raises(ModelFileError, match="not found"):
        load_model(tmp_path / "missing.npz")
