"""DenseWeight / AffineWeight: shapes, to_f32 and rows against torch's bf16 widening and a per-element dequant here."""

import numpy as np
import pytest
import torch

from tensorfold.model import bf16, quant
from tensorfold.model.weights import AffineWeight, DenseWeight


def test_dense_weight_bf16_f16_f32():
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**16, size=(10, 6), dtype=np.uint16)
    bits[(bits & 0x7F80) == 0x7F80] = 0x3F80  # no inf/NaN
    ref = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float().numpy()
    w = DenseWeight(bits)
    assert w.shape == (10, 6)
    assert np.array_equal(w.to_f32(), ref)
    ids = np.array([[3, 0], [9, 3]])
    assert w.rows(ids).shape == (2, 2, 6)
    assert np.array_equal(w.rows(ids), ref[ids])
    h = rng.standard_normal((4, 8)).astype(np.float16)
    assert np.array_equal(DenseWeight(h).rows(2), h[2].astype(np.float32))
    with pytest.raises(ValueError, match="float64"):
        DenseWeight(np.zeros((2, 2)))
    with pytest.raises(IndexError, match="out of range"):
        w.rows([10])


@pytest.mark.parametrize("bits,group", [(4, 64), (3, 32), (6, 128), (8, 32)])
def test_affine_weight_rows_and_to_f32(bits, group):
    rng = np.random.default_rng(bits * group)
    out_f, in_f = 12, 2 * group
    packed = rng.integers(0, 2**32, size=(out_f, in_f * bits // 32), dtype=np.uint64).astype(np.uint32)
    scales = bf16.from_f32(rng.standard_normal((out_f, 2)).astype(np.float32) * 0.01)
    biases = bf16.from_f32(rng.standard_normal((out_f, 2)).astype(np.float32))
    w = AffineWeight(packed, scales, biases, bits, group)
    assert w.shape == (out_f, in_f)
    # per-element oracle: read code j from the row's little-endian bit stream as one big integer
    expect = np.empty((out_f, in_f), np.float32)
    for r in range(out_f):
        stream = int.from_bytes(packed[r].astype("<u4").tobytes(), "little")
        for j in range(in_f):
            q = (stream >> (j * bits)) & ((1 << bits) - 1)
            s = bf16.to_f32(scales[r, j // group])
            b = bf16.to_f32(biases[r, j // group])
            expect[r, j] = np.float32(np.float32(q) * s) + b
    assert np.array_equal(w.to_f32(), expect)
    ids = np.array([7, 0, 7, 11])
    assert np.array_equal(w.rows(ids), expect[ids])
    with pytest.raises(ValueError, match="packed width"):
        AffineWeight(packed[:, :-1], scales, biases, bits, group)
