"""Weight containers handed out by the checkpoint loader (see docs/contracts.md, "Checkpoint").

``DenseWeight`` wraps an unquantized ``[out, in]`` matrix (bf16 bits as uint16, float16 or float32);
``AffineWeight`` wraps an MLX affine-quantized one (packed uint32 codes + per-group scales and biases).
Both keep the arrays they were given (typically read-only memory maps) and never copy them; ``to_f32`` and
``rows`` produce float32 copies on demand.
"""

from __future__ import annotations

import numpy as np

from . import bf16
from .quant import check_bits_group, dequantize

__all__ = ["DenseWeight", "AffineWeight", "Weight"]


def _f32(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.uint16:
        return bf16.to_f32(a)
    return np.asarray(a, dtype=np.float32)


def _row_ids(ids, n_rows, what):
    idx = np.asarray(ids)
    if idx.dtype.kind not in "iu":
        raise ValueError(f"{what}.rows: ids must be integers, got dtype {idx.dtype}")
    if idx.size and (idx.min() < -n_rows or idx.max() >= n_rows):
        raise IndexError(f"{what}.rows: id out of range [0, {n_rows}): min {idx.min()}, max {idx.max()}")
    return idx


class DenseWeight:
    """An unquantized matrix ``data [out, in]``; dtype np.uint16 (bf16 bits), np.float16 or np.float32."""

    __slots__ = ("data",)

    def __init__(self, data):
        data = np.asarray(data)
        if data.dtype not in (np.uint16, np.float16, np.float32):
            raise ValueError(f"DenseWeight: dtype {data.dtype} is not bf16 bits (uint16), float16 or float32")
        if data.ndim != 2:
            raise ValueError(f"DenseWeight: expected a 2-D [out, in] matrix, got shape {data.shape}")
        self.data = data

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> str:
        return {np.dtype(np.uint16): "bf16", np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}[self.data.dtype]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def to_f32(self) -> np.ndarray:
        return _f32(self.data)

    def rows(self, ids) -> np.ndarray:
        """float32 rows ``data[ids]`` (ids: int or integer array; result shape ``ids.shape + (in,)``)."""
        idx = _row_ids(ids, self.data.shape[0], "DenseWeight")
        return _f32(self.data[idx])

    def __repr__(self):
        return f"DenseWeight({self.dtype}, shape={self.shape})"


class AffineWeight:
    """An MLX affine-quantized matrix: ``packed uint32 [out, in*bits/32]``, ``scales/biases [out, in/group]``."""

    __slots__ = ("packed", "scales", "biases", "bits", "group_size")

    def __init__(self, packed, scales, biases, bits, group_size):
        check_bits_group(bits, group_size, what="AffineWeight")
        packed, scales, biases = np.asarray(packed), np.asarray(scales), np.asarray(biases)
        if packed.dtype != np.uint32 or packed.ndim != 2:
            raise ValueError(f"AffineWeight: packed must be 2-D uint32, got {packed.dtype} {packed.shape}")
        for nm, a in (("scales", scales), ("biases", biases)):
            if a.dtype not in (np.uint16, np.float16, np.float32):
                raise ValueError(f"AffineWeight: {nm} dtype {a.dtype} is not bf16 bits (uint16), float16 or float32")
            if a.ndim != 2 or a.shape[0] != packed.shape[0]:
                raise ValueError(f"AffineWeight: {nm} shape {a.shape} does not match packed rows {packed.shape[0]}")
        if scales.shape != biases.shape:
            raise ValueError(f"AffineWeight: scales {scales.shape} and biases {biases.shape} differ")
        in_f = scales.shape[1] * group_size
        if packed.shape[1] * 32 != in_f * bits:
            raise ValueError(f"AffineWeight: packed width {packed.shape[1]} does not hold {in_f} inputs at {bits} bits "
                             f"(scales imply in={in_f} at group {group_size})")
        self.packed, self.scales, self.biases = packed, scales, biases
        self.bits, self.group_size = int(bits), int(group_size)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.packed.shape[0], self.scales.shape[1] * self.group_size)

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales.nbytes + self.biases.nbytes

    def to_f32(self) -> np.ndarray:
        return dequantize(self.packed, self.scales, self.biases, self.bits, self.group_size)

    def rows(self, ids) -> np.ndarray:
        """Dequantized float32 rows (the quantized-embedding lookup); shape ``ids.shape + (in,)``."""
        idx = _row_ids(ids, self.packed.shape[0], "AffineWeight")
        flat = idx.reshape(-1)
        out = dequantize(self.packed[flat], self.scales[flat], self.biases[flat], self.bits, self.group_size)
        return out.reshape(idx.shape + (self.shape[1],))

    def __repr__(self):
        return f"AffineWeight({self.bits}-bit g{self.group_size}, shape={self.shape})"


Weight = DenseWeight | AffineWeight
