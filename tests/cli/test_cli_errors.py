"""Every bad input to a ``dpfed`` command is one line on stderr and exit code 2, never a traceback
(issue 13), and a record value never appears in the message (issue 10 item 6). Each row runs
``dpfed.cli.main`` in-process (argparse errors included); a few rows also run the real entry point
as a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dpfed.cli import main

SIM = ["simulate", "--transport", "inproc"]
NB = SIM + ["--algorithm", "naive-bayes", "--dataset", "nursery", "--epsilon", "1"]
KM = SIM + ["--algorithm", "kmeans", "--dataset", "segmentation", "--epsilon", "1"]
LVQ = SIM + ["--algorithm", "glvq", "--dataset", "segmentation", "--epsilon", "1"]
PRIV = ["privacy", "epsilon", "--sampling-rate", "0.01", "--steps", "100", "--delta", "1e-5"]


def _files(d: Path) -> dict[str, Path]:
    """Small bad files, made fresh in the test's folder."""
    good = d / "good.npz"
    rng = np.random.default_rng(0)
    np.savez(good, X=rng.integers(0, 5, (60, 3)), y=rng.integers(0, 2, 60), class_names=np.array(["a", "b"]),
             n_categories=np.array([5, 5, 5]))
    raw = good.read_bytes()
    out = {"good": good}
    (d / "empty.npz").write_bytes(b"")
    (d / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    (d / "fakezip.npz").write_bytes(b"PK\x03\x04" + b"\x00" * 200)
    (d / "random.npz").write_bytes(rng.bytes(4096))
    np.savez(d / "strlabels.npz", X=np.zeros((4, 3)), y=np.array(["SECRETLABEL"] * 4),
             class_names=np.array(["a", "b"]), n_categories=np.array([5, 5, 5]))
    np.savez(d / "complex.npz", X=np.zeros((4, 3), complex), y=np.zeros(4, int), class_names=np.array(["a", "b"]),
             n_categories=np.array([5, 5, 5]))
    (d / "extra.csv").write_text("a,b,label\n1,2,0\n3,4,1,777\n")
    (d / "header.csv").write_text("a,b,label\n")
    (d / "binary.csv").write_bytes(b"a,b,label\n\x00\xff\xfe1,2,0\n")
    (d / "schema.json").write_text('{"features": [{"name": "a", "kind": "numeric", "lower": 0, "upper": 9}, '
                                   '{"name": "b", "kind": "numeric", "lower": 0, "upper": 9}], "n_classes": 2}')
    (d / "placeholder.json").write_text('{"features": [{"name": "a", "kind": "numeric", "lower": null, '
                                        '"upper": null}], "n_classes": 2}')
    (d / "badjson.json").write_text('{"features": [')
    with zipfile.ZipFile(d / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as zf:  # 0.6 MB expanding to 0.6 GB
        with zf.open("X.npy", "w", force_zip64=True) as fh:
            header = b"\x93NUMPY\x01\x00" + b"{'descr': '|u1', 'fortran_order': False, 'shape': (600000000,), }"
            fh.write(header.ljust(118) + b"\n")
            block = b"\x00" * (1 << 24)
            for _ in range(600000000 // len(block) + 1):
                fh.write(block)
    return {p.stem: p for p in d.iterdir()} | out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(tmp_path_factory.mktemp("bad"))


CASES = [  # (id, argv with {name} placeholders for files, words the one line must contain)
    ("empty-npz", SIM + ["--algorithm", "naive-bayes", "--dataset", "{empty}", "--epsilon", "1"], ["empty.npz"]),
    ("truncated-npz", SIM + ["--algorithm", "naive-bayes", "--dataset", "{truncated}", "--epsilon", "1"],
     ["truncated.npz"]),
    ("fake-zip-npz", SIM + ["--algorithm", "naive-bayes", "--dataset", "{fakezip}", "--epsilon", "1"], ["fakezip"]),
    ("random-bytes-npz", SIM + ["--algorithm", "naive-bayes", "--dataset", "{random}", "--epsilon", "1"],
     ["random.npz", "not a readable"]),
    ("string-labels-npz", SIM + ["--algorithm", "naive-bayes", "--dataset", "{strlabels}", "--epsilon", "1"],
     ["'y'", "string"]),
    ("complex-npz", SIM + ["--algorithm", "naive-bayes", "--dataset", "{complex}", "--epsilon", "1"], ["complex"]),
    ("decompression-bomb", SIM + ["--algorithm", "naive-bayes", "--dataset", "{bomb}", "--epsilon", "1"],
     ["decompress", "cap"]),
    ("csv-extra-field", SIM + ["--algorithm", "naive-bayes", "--dataset", "{extra}", "--schema", "{schema}",
                               "--epsilon", "1"], ["1 of 2", "more"]),
    ("csv-header-only", SIM + ["--algorithm", "naive-bayes", "--dataset", "{header}", "--schema", "{schema}",
                               "--epsilon", "1"], ["no records"]),
    ("csv-binary", SIM + ["--algorithm", "naive-bayes", "--dataset", "{binary}", "--schema", "{schema}",
                          "--epsilon", "1"], ["binary.csv"]),
    ("csv-without-schema", SIM + ["--algorithm", "naive-bayes", "--dataset", "{extra}", "--epsilon", "1"],
     ["needs a schema"]),
    ("schema-placeholder", NB[:-2] + ["--dataset", "{extra}", "--schema", "{placeholder}", "--epsilon", "1"],
     ["placeholder"]),
    ("schema-bad-json", NB + ["--schema", "{badjson}"], ["not valid JSON"]),
    ("schema-missing", NB + ["--schema", "nonexistent.json"], ["schema file not found"]),
    ("dataset-not-found", SIM + ["--algorithm", "naive-bayes", "--dataset", "nosuchset", "--epsilon", "1"],
     ["not found in", "dpfed/data"]),
    ("bounds-reversed", NB + ["--bounds", "5:1"], ["--bounds"]),
    ("test-fraction", NB + ["--test-fraction", "1.5"], ["--test-fraction"]),
    ("test-fraction-official", LVQ + ["--test-fraction", "0.2"], ["official test split"]),
    ("sampling-rate-0", LVQ + ["--sampling-rate", "0"], ["--sampling-rate", "(0, 1]"]),
    ("epochs-inf", LVQ + ["--epochs", "inf"], ["--epochs"]),
    ("lvq-1e9-steps", LVQ + ["--epochs", "10000", "--sampling-rate", "0.00001"], ["steps"]),
    ("lr-negative", LVQ + ["--lr", "-1"], ["--lr"]),
    ("lr-decay-negative", LVQ + ["--lr-decay", "-1"], ["--lr-decay"]),
    ("beta-negative", LVQ + ["--beta", "-1"], ["--beta"]),
    ("prototypes-huge", LVQ + ["--prototypes-per-class", "1000000000"], ["--prototypes-per-class"]),
    ("blocks-per-cluster-0", KM + ["--blocks-per-cluster", "0"], ["--blocks-per-cluster"]),
    ("kmeans-eps-1e-4", KM[:-1] + ["1e-4"], ["epsilon", "[0.001, 100]"]),
    ("kmeans-eps-1e-12", KM[:-1] + ["1e-12"], ["epsilon"]),
    ("kmeans-k-20001-lloyd", KM + ["--k", "20001", "--method", "lloyd"], ["--k"]),
    ("kmeans-k-above-records", KM + ["--k", "900", "--method", "lloyd"], ["--k 900", "records"]),
    ("kmeans-lloyd-iters", KM + ["--lloyd-iters", "1000000"], ["--lloyd-iters"]),
    ("kmeans-refine-steps", KM + ["--refine-steps", "100000"], ["--refine-steps"]),
    ("lvq-distributed-colluders", LVQ + ["--noise", "distributed", "--parties", "5", "--colluders", "4"],
     ["colluders + 2 <= min_survivors <= parties", "4 + 2 <= 5 <= 5"]),
    ("lvq-distributed-colluders-grpc",  # refused before any party process starts
     ["simulate", "--transport", "grpc"] + LVQ[3:] + ["--noise", "distributed", "--parties", "5", "--colluders", "5"],
     ["the parties would refuse this job", "5 + 2 <= 5 <= 5"]),
    ("nb-eps-1e-5", NB[:-1] + ["1e-5"], ["epsilon"]),
    ("nb-eps-1e-20", NB[:-1] + ["1e-20"], ["epsilon"]),
    ("nb-eps-10000", NB[:-1] + ["10000"], ["epsilon"]),
    ("nb-alpha-negative", NB + ["--nb-alpha", "-1"], ["--nb-alpha"]),
    ("delta-1", NB + ["--delta", "1"], ["delta"]),
    ("parties-0", NB + ["--parties", "0"], ["--parties"]),
    ("cv-1", NB + ["--cv", "1"], ["--cv"]),
    ("not-a-number", NB[:-1] + ["one"], ["--epsilon"]),
    ("privacy-noise-multiplier-0", PRIV + ["--noise-multiplier", "0"], ["--noise-multiplier"]),
    ("privacy-steps-0", ["privacy", "epsilon", "--noise-multiplier", "1", "--sampling-rate", "0.01", "--steps", "0",
                         "--delta", "1e-5"], ["--steps"]),
    ("privacy-delta-1", ["privacy", "noise", "--epsilon", "1", "--sampling-rate", "0.01", "--steps", "10",
                         "--delta", "1"], ["--delta"]),
    ("job-submit-lloyd-iters", ["job", "submit", "--algorithm", "kmeans", "--epsilon", "1", "--coordinator",
                                "127.0.0.1:1", "--insecure", "--param", "lloyd_iters=1000000"], ["lloyd_iters"]),
    ("job-submit-epsilon", ["job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1e-20", "--coordinator",
                            "127.0.0.1:1", "--insecure"], ["epsilon"]),
    ("schema-template-missing", ["schema", "template", "nonexistent.npz"], ["not found"]),
]


def _argv(argv: list[str], files: dict[str, Path]) -> list[str]:
    return [a.format(**{k: str(v) for k, v in files.items()}) if "{" in a else a for a in argv]


@pytest.mark.parametrize("argv,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(argv, words, files, capsys):
    try:
        code = main(_argv(argv, files))
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[")]  # progress lines start "["
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err and "SECRETLABEL" not in err
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("case", ["random-bytes-npz", "string-labels-npz", "sampling-rate-0"])
def test_real_entry_point(case, files):
    argv = _argv(dict((c[0], c[1]) for c in CASES)[case], files)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    res = subprocess.run([sys.executable, "-m", "dpfed.cli", *argv], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "SECRETLABEL" not in res.stderr


def test_an_unexpected_exception_keeps_its_traceback(monkeypatch):
    """Real bugs are not swallowed: only DpfedError becomes a one-line exit 2."""
    import dpfed.cli.simulate as sim

    def boom(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(sim, "run_simulation", boom)
    with pytest.raises(ZeroDivisionError):
        main(NB)
