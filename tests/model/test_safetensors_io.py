"""Our safetensors reader/writer against the `safetensors` package (oracle), and every corruption error."""

import json
import struct

import numpy as np
import pytest
import safetensors.numpy as st_np
import safetensors.torch as st_torch
import torch

from tensorfold.model.errors import CheckpointError
from tensorfold.model.safetensors_io import SafetensorsFile, save_file


def _random_tensors(rng):
    return {
        "w.f32": rng.standard_normal((7, 5)).astype(np.float32),
        "w.f16": rng.standard_normal((3, 4, 2)).astype(np.float16),
        "w.bf16": rng.integers(0, 2**16, size=(6, 9), dtype=np.uint16),
        "w.u32": rng.integers(0, 2**32, size=(4, 3), dtype=np.uint64).astype(np.uint32),
        "w.i64": rng.integers(-2**40, 2**40, size=(5,), dtype=np.int64),
        "w.f64": rng.standard_normal(3),
        "w.u8": rng.integers(0, 256, size=(11,), dtype=np.uint8),
        "scalar": np.array(rng.standard_normal(), dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def test_written_file_read_by_safetensors_package(tmp_path):
    rng = np.random.default_rng(11)
    t = _random_tensors(rng)
    p = tmp_path / "ours.safetensors"
    save_file(p, t, metadata={"format": "mlx", "note": "x"})
    with st_torch.safe_open(str(p), framework="pt") as f:
        assert f.metadata() == {"format": "mlx", "note": "x"}
        assert set(f.keys()) == set(t)
        for name, a in t.items():
            ref = f.get_tensor(name)
            if name == "w.bf16":
                assert ref.dtype == torch.bfloat16
                assert np.array_equal(ref.view(torch.int16).numpy().view(np.uint16), a)
            else:
                assert np.array_equal(ref.numpy(), a), name


def test_reads_file_written_by_safetensors_package(tmp_path):
    rng = np.random.default_rng(12)
    t = _random_tensors(rng)
    bf = t.pop("w.bf16")
    p = tmp_path / "theirs.safetensors"
    pt = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in t.items()}
    pt["w.bf16"] = torch.from_numpy(bf.view(np.int16)).view(torch.bfloat16)
    st_torch.save_file(pt, str(p), metadata={"format": "pt"})
    f = SafetensorsFile(p)
    assert f.metadata == {"format": "pt"}
    assert set(f.keys()) == set(t) | {"w.bf16"}
    assert f.dtype("w.bf16") == "BF16" and f.dtype("w.f16") == "F16" and f.dtype("w.u32") == "U32"
    for name, a in t.items():
        got = f.get(name)
        assert got.shape == a.shape and got.dtype == a.dtype and np.array_equal(got, a), name
        assert f.shape(name) == a.shape
    got = f.get("w.bf16")
    assert got.dtype == np.uint16 and np.array_equal(got, bf)
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        got[0, 0] = 1


def test_get_is_memory_mapped(tmp_path):
    rng = np.random.default_rng(13)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    p = tmp_path / "m.safetensors"
    st_np.save_file({"a": a}, str(p))
    f = SafetensorsFile(p)
    v = f.get("a")
    assert not v.flags.owndata  # a view into the map, not a copy
    assert np.array_equal(v, a)


def _write_raw(path, header: dict, data: bytes, n_override=None):
    raw = json.dumps(header).encode()
    n = len(raw) if n_override is None else n_override
    path.write_bytes(struct.pack("<Q", n) + raw + data)


def _good_header():
    return {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
            "b": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]}}


def test_errors_name_file_and_tensor(tmp_path):
    p = tmp_path / "bad.safetensors"
    data = np.random.default_rng(1).bytes(24)

    p.write_bytes(b"\x01\x02\x03")
    with pytest.raises(CheckpointError, match=r"bad\.safetensors.*truncated"):
        SafetensorsFile(p)

    _write_raw(p, _good_header(), data, n_override=10_000)
    with pytest.raises(CheckpointError, match=r"bad\.safetensors.*header length 10000.*beyond"):
        SafetensorsFile(p)

    _write_raw(p, _good_header(), data[:20])  # truncated data region
    with pytest.raises(CheckpointError, match=r"bad\.safetensors.*'b'.*out of range"):
        SafetensorsFile(p)

    h = _good_header(); h["b"]["data_offsets"] = [8, 16]; h["b"]["shape"] = [4]
    _write_raw(p, h, data)
    with pytest.raises(CheckpointError, match=r"overlap"):
        SafetensorsFile(p)

    h = _good_header(); h["a"]["dtype"] = "Q7"
    _write_raw(p, h, data)
    with pytest.raises(CheckpointError, match=r"bad\.safetensors.*'a'.*unknown dtype 'Q7'"):
        SafetensorsFile(p)

    h = _good_header(); h["a"]["shape"] = [2, 3]
    _write_raw(p, h, data)
    with pytest.raises(CheckpointError, match=r"bad\.safetensors.*'a'.*needs 24 bytes.*span 16"):
        SafetensorsFile(p)

    p.write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(CheckpointError, match=r"not valid JSON"):
        SafetensorsFile(p)

    _write_raw(p, _good_header(), data)
    f = SafetensorsFile(p)  # the good one opens
    assert f.shape("a") == (2, 2)
    with pytest.raises(CheckpointError, match=r"no tensor named 'zz'"):
        f.get("zz")

    with pytest.raises(CheckpointError, match=r"missing\.safetensors"):
        SafetensorsFile(tmp_path / "missing.safetensors")
