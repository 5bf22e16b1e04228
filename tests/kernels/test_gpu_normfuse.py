"""GPU tier for the residual add + RMSNorm fused into the first tensor-core GEMV's x loads
(``affine.launch_qgemv(..., norm=(d, mult, hn, eps))``), run on the device:
``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/kernels/test_gpu_normfuse.py``.

The 2B consumers of a norm at 4-bit g64 with their default plans: the GDN in_all (8224 x 2048), the attention qkv
(6144 x 2048) and gate | up (12288 x 2048, with and without the SwiGLU epilogue); 1, 3, 8 and 11 rows.
Oracles, on random codes, scales, residuals, deltas and multipliers:
- bit for bit: ``norms.launch_add_rms_norm`` (the vectorized kernel) then the same plan's GEMV: y and hn = h + d
  (this is where the explicit fma of both kernels' sums of squares matters: the compiler may not contract one and
  not the other);
- float64 numpy: the normed rows through ``test_gpu_gemv._ref``, within its bound 3e-5 (|x| @ |W|) (plain only).
Rows launched alone equal the same rows of the 11-row launch bit for bit.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from test_gpu_a import _cuda, _rand_q, rng
from test_gpu_gemv import _ref

SHAPES = [("in_all", 8224, 2048, False), ("qkv", 6144, 2048, False), ("gate_up", 12288, 2048, False),
          ("gate_up_glu", 12288, 2048, True)]
EPS = 1e-6


@pytest.mark.parametrize("label,out,inp,glu", SHAPES)
def test_norm_fused_real_shapes(label, out, inp, glu):
    from tensorfold.kernels import affine as A, norms

    cuda = _cuda()
    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    plan = A.plan_qgemv(out, inp, bits, group)
    assert A.norm_ok(plan), (label, plan)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    h = (rng.standard_normal((11, inp)) * 2).astype(np.float32)
    d = (rng.standard_normal((11, inp)) * 0.5).astype(np.float32)
    mult = (1.0 + 0.3 * rng.standard_normal(inp)).astype(np.float32)
    md = cuda.to_device(mult)
    ws = cuda.device_array((max(plan.ks, 1) * 16 * out,), np.float32)
    yo = out // 2 if glu else out

    def wsp(R):
        return ws[:plan.ks * R * out].reshape((plan.ks, R, out)) if plan.ks > 1 else None

    def two(hh, dd):
        R = hh.shape[0]
        h2, x = cuda.to_device(hh), cuda.to_device(np.full_like(hh, np.nan))
        norms.launch_add_rms_norm(cuda.to_device(dd), h2, md, x, EPS, vec=True)
        y = cuda.to_device(np.full((R, yo), np.nan, np.float32))
        A.launch_qgemv(*dev, x, y, bits, group, plan, ws=wsp(R), rows=R, glu=glu)
        return y.copy_to_host(), h2.copy_to_host(), x.copy_to_host()

    def fused(hh, dd):
        R = hh.shape[0]
        hn = cuda.to_device(np.full_like(hh, np.nan))
        y = cuda.to_device(np.full((R, yo), np.nan, np.float32))
        A.launch_qgemv(*dev, cuda.to_device(hh), y, bits, group, plan, ws=wsp(R), rows=R, glu=glu,
                       norm=(cuda.to_device(dd), md, hn, EPS))
        return y.copy_to_host(), hn.copy_to_host()

    for R in (1, 3, 8, 11):
        want, hwant, x = two(h[:R], d[:R])
        y, hn = fused(h[:R], d[:R])
        assert not np.isnan(y).any() and not np.isnan(hn).any(), f"{label} R={R}: NaN / unwritten output"
        assert np.array_equal(hn.view(np.uint32), hwant.view(np.uint32)), f"{label} R={R}: hn"
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), f"{label} R={R}: fused != norm + GEMV"
        if not glu:
            v = h[:R].astype(np.float64) + d[:R]
            xn = (v / np.sqrt((v * v).mean(1, keepdims=True) + EPS) * mult).astype(np.float32)
            ref, e = _ref(xn, P, S, B, bits, group)
            assert (np.abs(y - ref) <= 3e-5 * e + 1e-6).all(), f"{label} R={R}: against float64"
        if R == 11:
            for r in (0, 9):
                yr, _ = fused(h[r:r + 1], d[r:r + 1])
                assert np.array_equal(yr.view(np.uint32), y[r:r + 1].view(np.uint32)), f"{label} row {r} alone"
