"""GPU tier for the down projection with the MLP activation folded in (``affine.launch_qgemv(..., glu=True)``): at
the 2B and 9B down shapes (4-bit g64, the plans the runtime uses) with 1, 2, 8 and 16 rows of fresh random gate / up
values, the output equals ``activations.launch_silu_mul_fused`` followed by the plain GEMV bit for bit, and meets a
float64 oracle (silu(g) * u @ W.T) within 3e-5 * (|silu(g) * u| @ |W|.T) elementwise (test_gpu_gemv's bound)."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from test_gpu_a import _cuda, _rand_q, rng
from test_gpu_gemv import _check, _ref


@pytest.mark.parametrize("out,inp", [(2048, 6144), (4096, 12288)])
def test_glu_gemv_real_shapes(out, inp):
    cuda = _cuda()
    from tensorfold.kernels import activations as ACT
    from tensorfold.kernels import affine as A

    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    plan = A.plan_qgemv(out, inp, bits, group)
    if not A.glu_ok(plan):
        pytest.skip(f"the plan of {out}x{inp} is not the first tensor-core kernel's ({type(plan).__name__})")
    dP, dS, dB = (cuda.to_device(a) for a in (P, S, B))
    for R in (1, 2, 8, 16):
        gu = (rng.standard_normal((R, 2 * inp)) * 2).astype(np.float32)
        dgu = cuda.to_device(gu)
        mi = cuda.device_array((R, inp), np.float32)
        ACT.launch_silu_mul_fused(dgu, mi)
        ys = []
        for x, glu in ((mi, False), (dgu, True)):
            y = cuda.to_device(np.full((R, out), np.nan, np.float32))
            ws = cuda.device_array((plan.ks, R, out), np.float32) if plan.ks > 1 else None
            A.launch_qgemv(dP, dS, dB, x, y, bits, group, plan, ws=ws, rows=R, glu=glu)
            ys.append(y.copy_to_host())
        assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32)), f"R={R}: glu != two launches"
        g, u = gu[:, :inp].astype(np.float64), gu[:, inp:].astype(np.float64)
        ref, bound = _ref((g / (1 + np.exp(-g)) * u), P, S, B, bits, group)
        _check(ys[1], ref, bound)
