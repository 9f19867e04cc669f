"""One Table-1 cell under secure aggregation, in process (Segmentation GMLVQ, epsilon 1.5, 5 parties,
P_min 5, tuned lr 0.2 / clip 0.1). Run: ``python bench/bench_secure_cell.py BITS FOLD``; prints one JSON line.
Results: bench/results/secure_table1_session4.md (superseded by ``bench_lvq.py table --settings s16 ...``,
which uses the Table-1 folds, seeds and hyperparameters of the other columns: bench/results/secure_table1.md)."""
import json
import sys
import time
import warnings

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.lvq import DEFAULTS, evaluate
from dpfed.data.datasets import load_dataset, kfold_indices, split_parties
from dpfed.simulation.inprocess import run_inprocess

warnings.simplefilter("ignore")
ds = load_dataset("segmentation")
bits, fold = int(sys.argv[1]), int(sys.argv[2])
tr, te = list(kfold_indices(len(ds.X), 5, seed=0))[fold]
params = {**DEFAULTS, "init": "gaussian", "lr": 0.2, "clip": 0.1, "epsilon": 1.5, "delta": 1e-5, "parties": 5,
          "noise": "distributed", "secure_aggregation": True, "bits": bits, "min_survivors": 5}
spec = JobSpec(f"cell-b{bits}-f{fold}", "gmlvq", params, ds.schema)
data = split_parties(ds.X[tr], ds.y[tr], 5, "iid", np.random.default_rng(fold))
t = time.time()
res = run_inprocess(spec, data, seed=fold)
err = evaluate(res.model, ds.X[te], ds.y[te], ds.schema)["test_error"]
print(json.dumps({"bits": bits, "fold": fold, "test_error": err, "eps": res.epsilon_spent, "rounds": res.rounds,
                  "bits_per_round": res.summary.get("bits_per_round"), "wall": time.time() - t}), flush=True)
