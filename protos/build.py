"""Regenerate the gRPC stubs from ``protos/*.proto`` with grpcio-tools.

``python -m protos.build`` rewrites ``protos/dpfed_pb2.py``, ``dpfed_pb2.pyi`` and
``dpfed_pb2_grpc.py`` (committed); ``generate(out_dir)`` writes them elsewhere, which
``tests/test_protos.py`` uses to fail when the committed stubs are stale.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_FILES = ("dpfed.proto",)


def generate(out_dir: str | Path = HERE) -> list[Path]:
    """Compile the .proto files into ``out_dir``; return the generated files."""
    from grpc_tools import protoc  # build-time dependency only

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Import path "protos" so the generated module imports itself as ``protos.dpfed_pb2``.
    args = ["grpc_tools.protoc", f"-I{HERE.parent}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}"] + [str(HERE / name) for name in PROTO_FILES]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    gen = out / "protos"
    produced = sorted(gen.glob("*_pb2*.py*"))
    for f in produced:  # flatten protos/ written under out/
        f.replace(out / f.name)
    gen.rmdir()
    return sorted(out.glob("*_pb2*.py*"))


if __name__ == "__main__":
    for path in generate(sys.argv[1] if len(sys.argv) > 1 else HERE):
        print(path)
