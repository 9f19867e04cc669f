"""Public schemas, dataset resolution, splits across parties and folds."""
import numpy as np
import pytest

from dpfed.data.datasets import kfold_indices, load_dataset, make_blobs, split_parties
from dpfed.data.schema import DataValidationError, Feature, Schema


def _schema():
    return Schema((Feature("colour", "categorical", categories=3), Feature("age", "numeric", lower=0, upper=100)),
                  n_classes=2)


def test_schema_roundtrip_and_views():
    s = _schema()
    assert Schema.from_json(s.to_json()) == s
    assert s.categorical.tolist() == [True, False] and s.domain_sizes.tolist() == [3]
    assert s.lower.tolist() == [0.0] and s.upper.tolist() == [100.0]


def test_validation_names_columns_and_counts_never_values():
    s = _schema()
    X = np.array([[0, 31.5], [3, np.nan], [1, 123456.0], [2, 40.0]])
    with pytest.raises(DataValidationError) as info:
        s.validate(X, np.array([0, 1, 2, 1]))
    msg = str(info.value)
    assert "'colour': 1 value(s) outside" in msg and "'age': 1 NaN/Inf" in msg and "labels: 1 value(s)" in msg
    assert "123456" not in msg and "31.5" not in msg  # values never appear
    with pytest.raises(DataValidationError, match="expected 2 columns"):
        s.validate(np.zeros((3, 3)))
    clipped = s.validate(np.array([[0, 150.0]]), clip_numeric=True)
    assert clipped[0, 1] == 100.0


def test_bad_schemas_rejected():
    with pytest.raises(ValueError):
        Feature("x", "numeric")  # no public bounds
    with pytest.raises(ValueError):
        Feature("x", "categorical", categories=0)
    with pytest.raises(ValueError, match="public bounds"):  # a name is optional, bounds are not
        Schema.from_dict({"features": [{"kind": "numeric"}]})
    with pytest.raises(ValueError, match="malformed schema"):
        Schema.from_dict({"features": [{"name": "x"}]})


@pytest.mark.parametrize("name,n_features,n_classes", [("adult", 14, 2), ("nursery", 8, 5), ("mushroom", 22, 2),
                                                        ("segmentation", 19, 7), ("satimage", 36, 6)])
def test_bundled_datasets_validate_against_public_schema(name, n_features, n_classes):
    ds = load_dataset(name, data_dir="/nonexistent-dir-so-bundled-copies-are-used")
    assert ds.schema.n_features == n_features and ds.schema.n_classes == n_classes
    ds.schema.validate(ds.X, ds.y)  # the public bounds and domains cover every record


def test_unknown_dataset_and_blobs_spec():
    with pytest.raises(FileNotFoundError):
        load_dataset("no-such-dataset")
    ds = load_dataset("blobs:n=1000,d=3,k=4,seed=1")
    assert ds.X.shape == (1000, 3) and np.abs(ds.X).max() <= 15
    with pytest.raises(ValueError):
        load_dataset("blobs:n=10,q=3")
    X, y, c = make_blobs(400, 2, 4, seed=0)
    assert np.bincount(y).tolist() == [100] * 4 and np.abs(c).max() <= 10


def test_splits_are_disjoint_and_complete():
    X = np.arange(1000, dtype=float)[:, None]
    y = np.repeat(np.arange(4), 250)
    for how in ("iid", "dirichlet:0.5"):
        parts = split_parties(X, y, 5, how, np.random.default_rng(0))
        rows = np.concatenate([p[0][:, 0] for p in parts])
        assert len(parts) == 5 and np.array_equal(np.sort(rows), X[:, 0])
    with pytest.raises(ValueError):
        split_parties(X, y, 3, "random")
    folds = kfold_indices(103, 5)
    tests = np.concatenate([te for _, te in folds])
    assert np.array_equal(np.sort(tests), np.arange(103))
    assert all(np.intersect1d(tr, te).size == 0 for tr, te in folds)
