"""GPU tier for split-K tensor-core GEMVs completed in the kernel (``affine`` ``fin``, the default): at the 2B and 9B
down and 2B out shapes (4-bit g64, the runtime's plans; the split-K ones) with 1, 2, 8 and 16 rows of fresh random
x, the output equals the two-launch path (``TENSORFOLD_GEMV_FIN=0``: chunks, then ``_splitk_reduce``) bit for bit,
the arrival counters are left at zero, and the result meets the float64 oracle with test_gpu_gemv's bound."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from test_gpu_a import _cuda, _rand_q, rng
from test_gpu_gemv import _check, _ref


@pytest.mark.parametrize("out,inp", [(2048, 6144), (4096, 12288), (2048, 2048)])
def test_fin_real_shapes(monkeypatch, out, inp):
    cuda = _cuda()
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q

    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    plan = A.plan_qgemv(out, inp, bits, group)
    if not (isinstance(plan, A.GemvPlan) and plan.tc and plan.ks > 1):
        plan = A.plan_tc(out, inp, bits, group, variant="sk")  # a split-K plan of the first kernel
    assert plan.tc and plan.ks > 1, plan
    dP, dS, dB = (cuda.to_device(a) for a in (P, S, B))
    for R in (1, 2, 8, 16):
        x = rng.standard_normal((R, inp)).astype(np.float32)
        dx = cuda.to_device(x)
        ys = []
        for fin in ("0", "1"):
            monkeypatch.setenv("TENSORFOLD_GEMV_FIN", fin)
            y = cuda.to_device(np.full((R, out), np.nan, np.float32))
            ws = cuda.to_device(np.full((plan.ks, R, out), np.nan, np.float32))
            A.launch_qgemv(dP, dS, dB, dx, y, bits, group, plan, ws=ws, rows=R)
            ys.append(y.copy_to_host())
        assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32)), f"R={R}: fin != two launches"
        assert not Q.counters().copy_to_host().any(), "arrival counters not reset"
        ref, bound = _ref(x, P, S, B, bits, group)
        _check(ys[1], ref, bound)
