"""The tensor-core GEMV with the MLP activation folded in (``affine.launch_qgemv(..., glu=True)``), in the
simulator: on fresh random gate / up rows its output equals ``activations.launch_silu_mul_fused`` followed by the
plain GEMV bit for bit (single-pass and split-K plans, pipelined and plain forms, one and two n-tiles), and meets a
float64 oracle (silu(g) * u times the dequantized weight; tolerance 2e-3 of the largest output: bf16 hi / lo split
of x, fp32 accumulation). A plan it cannot take is refused with a ValueError."""

import numpy as np
import pytest

from tensorfold.kernels import activations as ACT
from tensorfold.kernels import affine as A
from tensorfold.model import quant

rng = np.random.default_rng()


def _gemv(P, S, B, x, plan, bits, group, glu):
    R = x.shape[0]
    y = np.full((R, P.shape[0]), np.nan, np.float32)
    ws = np.full((plan.ks, R, P.shape[0]), np.nan, np.float32) if plan.ks > 1 else None
    A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=ws, rows=R, glu=glu)
    return y


@pytest.mark.parametrize("bits,group,R,ks,pipe", [(4, 64, 1, 1, True), (4, 64, 3, 2, True), (8, 64, 2, 1, False),
                                                   (4, 128, 9, 2, False), (2, 64, 1, 2, True)])
def test_glu_equals_two_launches(bits, group, R, ks, pipe):
    out, K = 32, 256
    W = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(W, bits, group)
    gu = (rng.standard_normal((R, 2 * K)) * 2).astype(np.float32)
    base = A.plan_tc(out, K, bits, group, pipe=pipe)
    plan = A.GemvPlan(out, K, bits, group, base.tpb, ks, True, base.mt, base.u, base.pipe, base.depth, "test")
    assert A.glu_ok(plan)
    mi = np.full((R, K), np.nan, np.float32)
    ACT.launch_silu_mul_fused(gu, mi)
    y2 = _gemv(P, S, B, mi, plan, bits, group, False)
    y1 = _gemv(P, S, B, gu, plan, bits, group, True)
    assert not np.isnan(y1).any()
    assert np.array_equal(y1.view(np.uint32), y2.view(np.uint32))
    g, u = gu[:, :K].astype(np.float64), gu[:, K:].astype(np.float64)
    ref = (g / (1 + np.exp(-g)) * u) @ quant.dequantize(P, S, B, bits, group).astype(np.float64).T
    assert np.abs(y1 - ref).max() <= 2e-3 * np.abs(ref).max()


def test_glu_refuses_other_plans():
    out, K = 32, 256
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), 4, 64)
    gu = rng.standard_normal((1, 2 * K)).astype(np.float32)
    cc = A._plan_cuda_core(out, K, 4, 64)
    assert not A.glu_ok(cc)
    with pytest.raises(ValueError, match="glu"):
        A.launch_qgemv(P, S, B, gu, np.zeros((1, out), np.float32), 4, 64, cc, glu=True)
    tc = A.plan_tc(out, K, 4, 64)
    with pytest.raises(ValueError, match="glu"):  # x of the wrong width
        A.launch_qgemv(P, S, B, gu[:, :K + 64], np.zeros((1, out), np.float32), 4, 64, tc, glu=True)
