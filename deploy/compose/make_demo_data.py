"""Write the compose demo's party data: the bundled UCI Adult training set split over 3 parties.

    python deploy/compose/make_demo_data.py deploy/compose/data

Each party gets ``party-X.npz`` (arrays X, y) and the shared public ``schema.json``.
"""
import sys
from pathlib import Path

import numpy as np

from dpfed.data.datasets import load_dataset, split_parties

PARTIES = ("party-a", "party-b", "party-c")


def main(out: str) -> None:
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    ds = load_dataset("adult")
    for name, (X, y) in zip(PARTIES, split_parties(ds.X_train, ds.y_train, len(PARTIES), "iid"), strict=True):
        np.savez_compressed(dest / f"{name}.npz", X=X, y=y)
    (dest / "schema.json").write_text(ds.schema.to_json())
    print(f"wrote {len(PARTIES)} party files and schema.json to {dest}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data")
