"""GPU tier for the decode GEMVs' SwiGLU epilogue (``affine.launch_qgemv(..., glu=True)``), run on the device:
``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/kernels/test_gpu_glu.py``.

The fused gate | up shapes of the 2B (12288 x 2048: the first tensor-core kernel, "pipe2"), 9B (24576 x 4096) and
27B (34816 x 5120; both qgemv, several K chunks) at 4-bit g64 with their default plans, 1, 4, 8 and 11 rows
(one and two n-tiles, 8 + 3 launches). Oracles, on MLX-packed random codes and random bf16 scales / biases:
- bit for bit: the same plan's GEMV into ``[R, 2 I]`` followed by ``activations.silu_mul_fused_k``;
- float64 numpy (``test_gpu_gemv._ref`` for the gate and up sums), ``silu(g) * u``, within the GEMV bound
  ``e = 3e-5 (|x| @ |W|)`` carried through the product: ``1.1 e_g |u| + |silu(g)| e_u + 2^-20 |silu(g) u|``.
Rows launched alone equal the same rows of the 11-row launch bit for bit.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from test_gpu_a import _cuda, _rand_q, _xin, rng
from test_gpu_gemv import _ref

SHAPES = [("2B", 12288, 2048), ("9B", 24576, 4096), ("27B", 34816, 5120)]


@pytest.mark.parametrize("label,out,inp", SHAPES)
def test_glu_real_shapes(label, out, inp):
    from tensorfold.kernels import activations, affine as A

    cuda = _cuda()
    bits, group, I = 4, 64, out // 2
    P, S, B = _rand_q(out, inp, bits, group)
    plan = A.plan_qgemv(out, inp, bits, group)
    assert A.glu_ok(plan, out), (label, plan)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    x = rng.standard_normal((11, inp)).astype(np.float32)
    ws = cuda.device_array((max(plan.ks, 1) * 16 * out,), np.float32)

    def run(xx, glu):
        R = xx.shape[0]
        y = cuda.to_device(np.full((R, I if glu else out), np.nan, np.float32))
        w = ws[:plan.ks * R * out].reshape((plan.ks, R, out)) if plan.ks > 1 else None
        A.launch_qgemv(*dev, cuda.to_device(xx), y, bits, group, plan, ws=w, rows=R, glu=glu)
        return y

    ref, e = _ref(_xin(x, plan), P, S, B, bits, group)
    e = 3e-5 * e
    g, u = ref[:, :I], ref[:, I:]
    sg = g / (1.0 + np.exp(-g))
    bound = 1.1 * e[:, :I] * np.abs(u) + np.abs(sg) * e[:, I:] + 2.0 ** -20 * np.abs(sg * u) + 1e-30
    for R in (1, 4, 8, 11):
        full = run(x[:R], False)
        want = cuda.to_device(np.full((R, I), np.nan, np.float32))
        activations.launch_silu_mul_fused(full, want)
        y = run(x[:R], True).copy_to_host()
        assert not np.isnan(y).any(), f"{label} R={R}: NaN / unwritten output"
        assert np.array_equal(y.view(np.uint32), want.copy_to_host().view(np.uint32)), \
            f"{label} R={R}: fused != GEMV + silu_mul_fused_k"
        err = np.abs(y - sg[:R] * u[:R])
        assert (err <= bound[:R]).all(), f"{label} R={R}: max err/bound {(err / bound[:R]).max():.2e}"
        if R == 11:
            for r in (0, 9):
                yr = run(x[r:r + 1], True).copy_to_host()
                assert np.array_equal(yr.view(np.uint32), y[r:r + 1].view(np.uint32)), f"{label} row {r} alone"
