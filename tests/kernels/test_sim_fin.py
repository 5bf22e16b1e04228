"""Split-K tensor-core GEMV launches that complete in the kernel (``affine`` ``fin``: the last block of a tile sums
the chunks), in the simulator: on fresh random weights and rows the output equals the two-launch path
(``TENSORFOLD_GEMV_FIN=0``: chunks, then ``_splitk_reduce``) bit for bit, for 2 and 4 chunks, one and two n-tiles,
the plain and pipelined forms, one and two warps a block; the arrival counters are left at zero; and the result
meets a float64 oracle (tolerance 2e-3 of the largest output: bf16 hi / lo split of x, fp32 accumulation)."""

import numpy as np
import pytest

from tensorfold.kernels import affine as A
from tensorfold.kernels import qgemv as Q
from tensorfold.model import quant

rng = np.random.default_rng()


def _run(P, S, B, x, plan, bits, group):
    R = x.shape[0]
    y = np.full((R, P.shape[0]), np.nan, np.float32)
    ws = np.full((plan.ks, R, P.shape[0]), np.nan, np.float32)
    A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=ws, rows=R)
    return y


@pytest.mark.parametrize("bits,group,R,ks,nw,pipe", [(4, 64, 1, 2, 1, True), (4, 64, 3, 4, 2, False),
                                                      (8, 64, 9, 2, 1, True), (2, 128, 2, 2, 2, True)])
def test_fin_equals_reduce_launch(monkeypatch, bits, group, R, ks, nw, pipe):
    out, K = 48, 512
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), bits, group)
    x = (rng.standard_normal((R, K)) * 2).astype(np.float32)
    base = A.plan_tc(out, K, bits, group, pipe=pipe)
    plan = A.GemvPlan(out, K, bits, group, 32 * nw, ks, True, base.mt, base.u, base.pipe, base.depth, "test")
    monkeypatch.setenv("TENSORFOLD_GEMV_FIN", "0")
    y2 = _run(P, S, B, x, plan, bits, group)
    monkeypatch.setenv("TENSORFOLD_GEMV_FIN", "1")
    y1 = _run(P, S, B, x, plan, bits, group)
    assert not np.isnan(y1).any()
    assert np.array_equal(y1.view(np.uint32), y2.view(np.uint32))
    assert not Q.counters().any(), "arrival counters not reset"
    ref = x.astype(np.float64) @ quant.dequantize(P, S, B, bits, group).astype(np.float64).T
    assert np.abs(y1 - ref).max() <= 2e-3 * np.abs(ref).max()
