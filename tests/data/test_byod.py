"""Bring your own data (issue 13): a dataset known only through a schema file trains end to end, the
split used is reported, and loading failures are clear errors that never show a value (issue 10 item 9)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dpfed.cli import main
from dpfed.data.datasets import load_dataset
from dpfed.data.files import load_table
from dpfed.data.schema import DataValidationError, Schema


def _letters(d: Path, n: int = 2000) -> tuple[Path, Path]:
    """A 16-feature integer table with 26 classes in a CSV file no one told dpfed about, and its schema
    written the way a user would: `dpfed schema template`, then the placeholders filled in."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 26, n)
    X = np.clip(np.rint(y[:, None] * 0.6 + rng.normal(0, 0.7, (n, 16))), 0, 15).astype(int)
    csv = d / "letters.csv"
    csv.write_text(",".join([f"f{i}" for i in range(16)] + ["letter"]) + "\n"
                   + "".join(",".join(map(str, r)) + f",{c}\n" for r, c in zip(X, y, strict=True)))
    schema = d / "letters.schema.json"
    assert main(["schema", "template", str(csv), "--label", "letter", "--out", str(schema)]) == 0
    text = schema.read_text()
    assert '"lower": null' in text and '"n_classes": null' in text  # placeholders, nothing derived
    schema.write_text(text.replace('"lower": null, "upper": null', '"lower": 0, "upper": 15')
                      .replace('"n_classes": null', '"n_classes": 26'))
    return csv, schema


@pytest.mark.parametrize("transport", ["inproc", "grpc"])
def test_schema_only_csv_trains_end_to_end(tmp_path, transport, capsys):
    csv, schema = _letters(tmp_path)
    code = main(["simulate", "--algorithm", "naive-bayes", "--dataset", str(csv), "--schema", str(schema),
                 "--epsilon", "2", "--parties", "2", "--transport", transport, "--json", "--seed", "3"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["split_source"] == "random" and out["test_fraction"] == pytest.approx(1 / 3)
    assert out["test_accuracy"] > 3 / 26  # learnt something (chance is 1/26)


def test_mnist_shaped_file_under_another_name_with_bounds(tmp_path, capsys):
    """Pixel bounds are no longer tied to the dataset's name: any file works with --bounds or a schema."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, (300, 784)).astype(np.uint8)
    y = rng.integers(0, 10, 300)
    path = tmp_path / "digits.npz"
    np.savez(path, X_train=X[:200], y_train=y[:200], X_test=X[200:], y_test=y[200:],
             class_names=np.array([str(i) for i in range(10)]))
    assert main(["simulate", "--algorithm", "naive-bayes", "--dataset", str(path), "--bounds", "0:255",
                 "--epsilon", "1", "--parties", "2", "--transport", "inproc", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["split_source"] == "official"
    ds = load_dataset(str(path), bounds=(0.0, 255.0))
    assert ds.schema.n_features == 784 and float(ds.schema.upper.max()) == 255.0


def test_split_reporting(tmp_path):
    assert load_dataset("segmentation").split == {"split_source": "official"}
    assert load_dataset("nursery").split == {"split_source": "random", "split_seed": 20180425,
                                             "test_fraction": pytest.approx(1 / 3)}
    ds = load_dataset("nursery", test_fraction=0.25, split_seed=7)
    assert ds.split == {"split_source": "random", "split_seed": 7, "test_fraction": 0.25}
    assert len(ds.X_test) == round(0.25 * 12960)
    # a given split: the first 16,000 / last 4,000 style, as two files
    full = load_dataset("nursery")
    tr, te = tmp_path / "tr.npz", tmp_path / "te.npz"
    extra = {"n_categories": np.array([f.categories for f in full.schema.features]),
             "class_names": np.array(full.schema.class_names), "feature_names": np.array(full.schema.names)}
    np.savez(tr, X=full.X[:9000], y=full.y[:9000], **extra)
    np.savez(te, X=full.X[9000:], y=full.y[9000:], **extra)
    given = load_dataset(str(tr), test_data=str(te))
    assert given.split == {"split_source": "given", "test_data": str(te)}
    assert np.array_equal(given.X_test, full.X[9000:]) and np.array_equal(given.X_train, full.X[:9000])


def test_dataset_search_lists_every_place(tmp_path, monkeypatch):
    monkeypatch.setenv("DPFED_DATA_DIR", str(tmp_path / "env"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        load_dataset("nosuch", data_dir=tmp_path / "given")
    msg = str(err.value)
    for where in (tmp_path / "given", tmp_path / "env", tmp_path, Path(load_dataset.__code__.co_filename).parent):
        assert str(where) in msg
    shutil.copy(Path(load_dataset.__code__.co_filename).parent / "nursery.npz", tmp_path / "mine.npz")
    assert load_dataset("mine").schema.n_classes == 5  # found in the current directory


SCHEMA = Schema.from_dict({"features": [{"name": "a", "kind": "numeric", "lower": 0, "upper": 9},
                                        {"name": "b", "kind": "numeric", "lower": 0, "upper": 9}], "n_classes": 2})


@pytest.mark.parametrize("text,words", [
    ("a,b,label\n1,2,0\n3,4,1,777\n", ["1 of 2 record(s)", "1 with more"]),
    ("a,b,label\n", ["no records"]),
    ("a,b,label\n1,x777x,0\n", ["non-numeric", "'b': 1"]),
    ("a,label\n1,0\n", ["missing column(s): b"]),
])
def test_csv_failures_name_columns_and_counts_never_values(tmp_path, text, words):
    p = tmp_path / "d.csv"
    p.write_text(text)
    with pytest.raises(DataValidationError) as err:
        load_table(p, SCHEMA)
    msg = str(err.value)
    assert all(w in msg for w in words), msg
    assert "777" not in msg


def test_caps_on_rows_and_bytes(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("a,b,label\n" + "1,2,0\n" * 50)
    assert load_table(p, SCHEMA)[0].shape == (50, 2)
    with pytest.raises(DataValidationError, match="more than the cap of 10"):
        load_table(p, SCHEMA, max_rows=10)
    with pytest.raises(DataValidationError, match="more than the cap of 100 bytes"):
        load_table(p, SCHEMA, max_bytes=100)
    z = tmp_path / "d.npz"
    np.savez_compressed(z, X=np.zeros((100_000, 2)), y=np.zeros(100_000, int))  # 1.6 MB in ~10 KB
    assert z.stat().st_size < 50_000
    with pytest.raises(DataValidationError, match="decompress to"):
        load_table(z, SCHEMA, max_bytes=1_000_000)


def test_string_labels_never_shown(tmp_path):
    """Issue 10 item 6: a label value must not reach an error (nor, therefore, a log or traceback)."""
    p = tmp_path / "d.npz"
    np.savez(p, X=np.zeros((3, 2)), y=np.array(["alice-has-cancer"] * 3))
    with pytest.raises(DataValidationError) as err:
        load_table(p, SCHEMA)
    assert "alice" not in str(err.value) and "string" in str(err.value)
    assert err.value.__cause__ is None and err.value.__context__ is None  # no chained numpy error either


def test_grpc_party_error_is_one_line_and_logs_are_kept(tmp_path, monkeypatch):
    """Under the gRPC simulation a party's refusal reaches the user as one line with the party's own
    message, and the parties' logs are kept and named; the simulation's folder itself (the CA key, every
    endpoint's key, copies of the parties' data) is removed (issue 29: it was kept whole on failure)."""
    import tempfile

    from dpfed.algorithms.contract import JobSpec
    from dpfed.simulation.grpc_local import SimulationError, run_grpc_simulation

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ds = load_dataset("nursery")
    spec = JobSpec("refused-job", "naive-bayes", {"epsilon": 1.0, "delta": 1e-6}, ds.schema)
    with pytest.raises(SimulationError) as err:
        run_grpc_simulation(spec, [(ds.X_train[:500], ds.y_train[:500])], seed=None, epsilon_limit=0.5,
                            timeout=120)
    msg = " ".join(str(err.value).split())
    assert "party logs kept in" in msg and "p" in msg
    folder = Path(msg.rsplit("party logs kept in ", 1)[1].strip())
    try:
        assert folder.is_dir() and any(folder.glob("*/party.log"))
        assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # the simulation's own folder is gone
        assert not [p for p in folder.rglob("*") if p.is_file() and p.suffix != ".log"]  # logs only
        assert "budget" in msg.lower() or "limit" in msg.lower(), msg
    finally:
        shutil.rmtree(folder, ignore_errors=True)
