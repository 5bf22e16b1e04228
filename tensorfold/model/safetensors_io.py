"""Our own safetensors reader and writer (no dependency on the `safetensors` package at run time).

File layout: 8 bytes little-endian unsigned header length N; N bytes of UTF-8 JSON mapping each tensor name to
``{"dtype": str, "shape": [int...], "data_offsets": [begin, end]}`` (offsets relative to the byte after the
header) plus an optional ``"__metadata__": {str: str}``; then the data bytes, little-endian, row-major.

Reading is lazy: the header is parsed and fully validated at open time, the data region is memory-mapped read-only
and ``get`` returns a zero-copy read-only view. BF16 tensors are returned as ``np.uint16`` raw bits (see
``tensorfold.model.bf16``); F8 tensors as ``np.uint8`` raw bits. Writing maps ``np.uint16`` to BF16.
Every structural problem raises ``CheckpointError`` naming the file and, where it applies, the tensor.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path
from typing import Mapping

import numpy as np

from .errors import CheckpointError

__all__ = ["SafetensorsFile", "save_file", "DTYPES", "dtype_of"]

# safetensors dtype string -> numpy dtype used to hold it (bf16 / fp8 as raw bits)
DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "F8_E4M3": np.dtype(np.uint8),
    "F8_E5M2": np.dtype(np.uint8),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
}

# numpy dtype -> safetensors string for writing; uint16 means bf16 bits in this package
_WRITE: dict[np.dtype, str] = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "U8",
    np.dtype(np.int8): "I8",
    np.dtype(np.int16): "I16",
    np.dtype(np.uint16): "BF16",
    np.dtype(np.float16): "F16",
    np.dtype(np.int32): "I32",
    np.dtype(np.uint32): "U32",
    np.dtype(np.float32): "F32",
    np.dtype(np.int64): "I64",
    np.dtype(np.uint64): "U64",
    np.dtype(np.float64): "F64",
}

_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit


def dtype_of(array: np.ndarray) -> str:
    """The safetensors dtype string ``save_file`` writes for this array (uint16 -> "BF16")."""
    dt = np.dtype(array.dtype).newbyteorder("=")
    try:
        return _WRITE[dt]
    except KeyError:
        raise CheckpointError(f"cannot write numpy dtype {array.dtype} to safetensors") from None


class SafetensorsFile:
    """A validated, memory-mapped safetensors file.

    ``keys()``, ``dtype(name)`` (safetensors string), ``shape(name)`` (tuple), ``get(name)`` (read-only ndarray
    view into the map), ``metadata`` (dict or {}), ``nbytes(name)``, ``path``.
    """

    def __init__(self, path):
        self.path = Path(path)
        p = self.path
        try:
            size = os.path.getsize(p)
        except OSError as e:
            raise CheckpointError(f"{p}: cannot open safetensors file ({e.strerror or e})") from None
        if size < 8:
            raise CheckpointError(f"{p}: truncated safetensors file ({size} bytes, shorter than the 8-byte header length)")
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                raise CheckpointError(
                    f"{p}: header length {n} goes beyond the end of the file ({size} bytes): truncated or not safetensors")
            if n > _MAX_HEADER:
                raise CheckpointError(f"{p}: header length {n} is larger than the {_MAX_HEADER}-byte limit")
            raw = f.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{p}: header is not valid JSON ({e})") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"{p}: header is a JSON {type(header).__name__}, expected an object")
        meta = header.pop("__metadata__", None)
        if meta is not None and not isinstance(meta, dict):
            raise CheckpointError(f"{p}: __metadata__ is a {type(meta).__name__}, expected an object of strings")
        self.metadata: dict = dict(meta or {})
        self._data_start = 8 + n
        data_size = size - self._data_start
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        spans = []
        for name, info in header.items():
            if not isinstance(info, dict):
                raise CheckpointError(f"{p}: tensor {name!r}: header entry is not an object")
            dt = info.get("dtype")
            if dt not in DTYPES:
                raise CheckpointError(f"{p}: tensor {name!r}: unknown dtype {dt!r}")
            shape = info.get("shape")
            if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                      for d in shape):
                raise CheckpointError(f"{p}: tensor {name!r}: invalid shape {shape!r}")
            offs = info.get("data_offsets")
            if (not isinstance(offs, list) or len(offs) != 2
                    or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)):
                raise CheckpointError(f"{p}: tensor {name!r}: invalid data_offsets {offs!r}")
            b, e = offs
            if not 0 <= b <= e or e > data_size:
                raise CheckpointError(
                    f"{p}: tensor {name!r}: data_offsets [{b}, {e}] out of range for a data region of {data_size} "
                    f"bytes (file truncated?)")
            want = int(np.prod(shape, dtype=np.int64)) * DTYPES[dt].itemsize
            if e - b != want:
                raise CheckpointError(
                    f"{p}: tensor {name!r}: shape {shape} of {dt} needs {want} bytes but data_offsets span {e - b}")
            self._entries[name] = (dt, tuple(shape), b, e)
            if e > b:
                spans.append((b, e, name))
        spans.sort()
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise CheckpointError(f"{p}: tensors {n0!r} [{b0}, {e0}] and {n1!r} [{b1}, {e1}] overlap")
        self._map = None
        if data_size > 0:
            with open(p, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    # -- queries -------------------------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, name):
        try:
            return self._entries[name]
        except KeyError:
            raise CheckpointError(f"{self.path}: no tensor named {name!r}") from None

    def dtype(self, name) -> str:
        return self._entry(name)[0]

    def shape(self, name) -> tuple[int, ...]:
        return self._entry(name)[1]

    def nbytes(self, name) -> int:
        _, _, b, e = self._entry(name)
        return e - b

    def get(self, name) -> np.ndarray:
        """Zero-copy read-only view of the tensor (BF16 as uint16 bits)."""
        dt, shape, b, e = self._entry(name)
        npdt = DTYPES[dt]
        if e == b:
            return np.zeros(shape, dtype=npdt)
        arr = np.ndarray(shape, dtype=npdt, buffer=self._map, offset=self._data_start + b)
        arr.flags.writeable = False
        return arr

    def close(self):
        # views handed out keep the map alive through their buffer reference; dropping ours is enough
        self._map = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"SafetensorsFile({str(self.path)!r}, {len(self._entries)} tensors)"


def save_file(path, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    """Write ``tensors`` (name -> array; np.uint16 is written as BF16) to ``path`` in safetensors format.

    Tensors are written in name order, each 8-byte aligned like the reference writer; arrays are streamed to the
    file one at a time (memory-mapped inputs are not loaded whole).
    """
    path = Path(path)
    header: dict = {}
    if metadata:
        bad = {k: v for k, v in metadata.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise CheckpointError(f"{path}: metadata must map str to str, got {bad!r}")
        header["__metadata__"] = dict(metadata)
    order = sorted(tensors)
    offset = 0
    arrays = []
    for name in order:
        if not isinstance(name, str) or name == "__metadata__":
            raise CheckpointError(f"{path}: invalid tensor name {name!r}")
        a = np.asarray(tensors[name])
        dt = dtype_of(a)
        n = a.size * a.dtype.itemsize
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + n]}
        arrays.append(a)
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for a in arrays:
            if a.dtype.byteorder == ">":
                a = a.astype(a.dtype.newbyteorder("<"))
            if a.ndim == 0 or a.size == 0:
                f.write(a.tobytes())
                continue
            # stream large arrays in row blocks so a memory-mapped input is never copied whole
            flat = a.reshape(a.shape[0], -1) if a.ndim > 1 else a.reshape(-1, 1)
            step = max(1, (64 << 20) // max(1, flat[0].nbytes))
            for i in range(0, flat.shape[0], step):
                f.write(np.ascontiguousarray(flat[i:i + step]).tobytes())
    os.replace(tmp, path)
