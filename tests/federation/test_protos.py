"""Protocol stubs are fresh; arrays survive the wire; malformed chunks are rejected with a reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from protos import build
from protos import dpfed_pb2 as pb
from protos.codec import ArrayAssembler, ProtocolError, chunk_groups, encode_arrays

HERE = Path(build.__file__).resolve().parent


def test_committed_stubs_match_the_proto(tmp_path):
    produced = build.generate(tmp_path)
    names = sorted(p.name for p in produced)
    assert names == ["dpfed_pb2.py", "dpfed_pb2.pyi", "dpfed_pb2_grpc.py"]
    stale = [n for n in names if (tmp_path / n).read_bytes() != (HERE / n).read_bytes()]
    assert not stale, f"stubs are stale, run 'python -m protos.build': {stale}"


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_arrays_round_trip_in_bounded_chunks(chunk):
    rng = np.random.default_rng(0)
    arrays = {"f8": rng.normal(size=(37, 5)), "f4": rng.normal(size=11).astype(np.float32),
              "i8": rng.integers(-5, 5, size=(3, 2, 2)), "big_endian": np.arange(6, dtype=">i4"),
              "u1": np.arange(9, dtype=np.uint8), "b": np.array([True, False, True]),
              "s": np.array("naive-bayes"), "empty": np.zeros((0, 4)), "scalar": np.array(2.5)}
    chunks = list(encode_arrays(arrays, chunk))
    assert all(len(c.data) <= chunk for c in chunks)
    for c in chunks:  # every chunk crosses the wire as a serialised message
        assert len(pb.ArrayChunk.FromString(c.SerializeToString()).data) == len(c.data)
    asm = ArrayAssembler()
    for group in chunk_groups(chunks, chunk):
        assert sum(len(c.data) for c in group) <= max(chunk, max(len(c.data) for c in group))
        asm.add_all(group)
    out = asm.finish()
    assert set(out) == set(arrays)
    for k, v in arrays.items():
        assert out[k].shape == v.shape and out[k].dtype == v.dtype.newbyteorder("=")
        np.testing.assert_array_equal(out[k], v)


def _chunk(**kw) -> pb.ArrayChunk:
    base = dict(name="a", dtype="<f8", shape=[2], total_bytes=16, offset=0, data=b"\0" * 16)
    base.update(kw)
    return pb.ArrayChunk(**base)


@pytest.mark.parametrize("chunk, message", [
    (dict(dtype="|O"), "not allowed"),
    (dict(dtype=">f8"), "not allowed"),
    (dict(dtype="nonsense"), "unknown dtype"),
    (dict(total_bytes=8, data=b"\0" * 8), "needs 16"),
    (dict(shape=[-2]), "negative"),
    (dict(offset=8, data=b"\0" * 8), "offset 8, expected 0"),
    (dict(name=""), "without a name"),
])
def test_malformed_chunks_are_rejected(chunk, message):
    with pytest.raises(ProtocolError, match=message):
        ArrayAssembler().add(_chunk(**chunk))


def test_duplicated_missing_oversized_and_incomplete_chunks():
    asm = ArrayAssembler()
    first = _chunk(data=b"\0" * 8)
    asm.add(first)
    with pytest.raises(ProtocolError, match="duplicated, missing or out-of-order"):
        asm.add(first)
    with pytest.raises(ProtocolError, match="8 of 16 bytes"):
        asm.finish()
    with pytest.raises(ProtocolError, match="more bytes than announced"):
        asm.add(_chunk(offset=8, data=b"\0" * 16))
    with pytest.raises(ProtocolError, match="disagree"):
        asm.add(_chunk(offset=8, shape=[1, 2], data=b"\0" * 8))
    with pytest.raises(ProtocolError, match="exceed the limit"):
        ArrayAssembler(max_total_bytes=100).add(_chunk(shape=[1000], total_bytes=8000, data=b""))
