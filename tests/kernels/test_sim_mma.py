"""Simulator tier for the tensor-core helpers (``tensorfold.kernels._mma``): the m16n8k16 bf16 mma against a
float64 numpy product on fresh random tiles, and the bf16x2 split / fma helpers against their definitions."""

import numpy as np
from numba import cuda

from tensorfold.kernels import _mma
from tensorfold.model.bf16 import from_f32 as f32_to_bf16
from tensorfold.model.bf16 import to_f32 as bf16_to_f32


def test_mma_bf16_matches_numpy_and_split_is_accurate():
    rng = np.random.default_rng(1234)
    A = f32_to_bf16(rng.standard_normal((16, 16)).astype(np.float32))
    Bt = f32_to_bf16(rng.standard_normal((8, 16)).astype(np.float32))
    C = rng.standard_normal((16, 8)).astype(np.float32)
    X = (rng.standard_normal(64) * 10.0 ** rng.uniform(-3, 3, 64)).astype(np.float32)
    D = np.zeros((16, 8), np.float32)
    HL = np.zeros(64, np.uint32)
    cuda.jit(_mma._probe_mma)[1, 32](A, Bt, C, D, X, HL)
    want = bf16_to_f32(A).astype(np.float64) @ bf16_to_f32(Bt).astype(np.float64).T + C
    assert np.all(np.isfinite(D))
    np.testing.assert_allclose(D, want, rtol=1e-6, atol=1e-5)

    hi = HL[0::2]
    lo = HL[1::2]
    def unpack(u):
        return np.stack([bf16_to_f32((u & 0xFFFF).astype(np.uint16)), bf16_to_f32((u >> 16).astype(np.uint16))], 1)
    xh, xl = unpack(hi).reshape(-1), unpack(lo).reshape(-1)
    # hi is X rounded to bf16 (fma by 1 + 0 is exact), and hi + lo recovers X to about 2^-17 relative
    np.testing.assert_array_equal(xh, bf16_to_f32(f32_to_bf16(X)))
    rel = np.abs(xh.astype(np.float64) + xl - X) / np.abs(X)
    assert rel.max() < 2.0 ** -16, rel.max()
