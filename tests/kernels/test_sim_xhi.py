"""Simulator tier for the first tensor-core GEMV with bf16 x only (``TENSORFOLD_GEMV_XLO=0``, an opt-in: one mma a
k-step instead of x's bf16 hi and lo parts; the bias term keeps the float32 sum of x).

Oracle: float64 numpy on the dequantized weights and the unrounded x. Bound per output: the bf16 rounding of x
(RNE, relative 2^-9) through the codes' part of the weight, 2^-9 (|x| @ |s q|), plus the float32 GEMV's own
1e-5 (|x| @ |W|). The default kernel (hi + lo) meets 1e-5 (|x| @ |W|) alone; the bf16-x kernel must not (x is
drawn so that its bf16 rounding shows), which shows the switch changes the kernel. Rows alone equal rows together,
bit for bit. Covered: the pipelined and the plain form, one and several warps, the SwiGLU epilogue, two n-tiles.
"""

import numpy as np
import pytest

from tensorfold.kernels import activations
from tensorfold.kernels import affine as A
from tensorfold.model import quant

rng = np.random.default_rng()


@pytest.mark.parametrize("nw,pipe,glu", [(1, True, False), (3, False, False), (2, True, True)])
def test_first_kernel_bf16_x(monkeypatch, nw, pipe, glu):
    bits, group, K, out = 4, 64, 5 * 64, 48
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    x = (rng.standard_normal((11, K)) * 3).astype(np.float32)
    plan = A.GemvPlan(out, K, bits, group, 32 * nw, 1, True, 1, 2, pipe, 1, "t")
    W = quant.dequantize(P, S, B, bits, group).astype(np.float64)
    Bx = np.repeat(quant._as_f32(B, "b").astype(np.float64), group, axis=1)
    sq = np.abs(W - Bx)
    x64 = x.astype(np.float64)
    ref = x64 @ W.T
    e32 = 1e-5 * (np.abs(x64) @ np.abs(W).T)
    bound = 2.0 ** -9 * (np.abs(x64) @ sq.T) + e32 + 1e-6

    def run(xx, xlo, g=False):
        monkeypatch.setenv("TENSORFOLD_GEMV_XLO", "1" if xlo else "0")
        y = np.full((xx.shape[0], out // 2 if g else out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, xx, y, bits, group, plan, glu=g)
        return y

    y = run(x, False)
    assert not np.isnan(y).any()
    err = np.abs(y - ref)
    assert (err <= bound).all(), f"max err/bound {(err / bound).max():.2e}"
    assert (err > e32).any(), "bf16 x gave float32-class results: the switch did not change the kernel"
    yd = run(x, True)
    assert (np.abs(yd - ref) <= e32 + 1e-6).all(), "the default (hi + lo) kernel"
    for r0, n in ((10, 1), (2, 3)):
        assert np.array_equal(run(x[r0:r0 + n], False).view(np.uint32), y[r0:r0 + n].view(np.uint32))
    if glu:
        yg = run(x, False, True)
        want = np.full_like(yg, np.nan)
        activations.launch_silu_mul_fused(y, want)
        assert np.array_equal(yg.view(np.uint32), want.view(np.uint32)), "epilogue != GEMV + silu_mul_fused_k"
