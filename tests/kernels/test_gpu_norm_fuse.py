"""GPU tier for the add + RMSNorm fused into the next GEMV (``norm=`` of ``affine.launch_qgemv``; the runtime's
``TENSORFOLD_NORM_FUSE=1``): ``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/kernels/test_gpu_norm_fuse.py``.

The one-row launches of the runtime's plans at the real consumers of a norm (2B in_proj, gate | up with the SwiGLU
epilogue and head on the first tensor-core kernel and qgemv; 9B and 27B in_proj and gate | up on qgemv, swept as the
runtime sweeps them), 4-bit g64 random codes and bf16 scales / biases. Against the standalone vectorized
``norms.launch_add_rms_norm`` followed by the plain launch: x, the updated residual and y bit for bit, on three
fresh draws of residual (magnitudes over three decades), partial row and norm weight; the input residual is not
written. Independent oracle for x: float64 RMSNorm within 1e-5 relative. A second fused launch gives the same bits.
"""

import dataclasses

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from test_gpu_a import _cuda, _rand_q, rng

EPS = 1e-6
CASES = [("2B in_proj", 8224, 2048, False), ("2B gate|up", 12288, 2048, True), ("2B head", 248320, 2048, False),
         ("9B in_proj", 12352, 4096, False), ("9B gate|up", 24576, 4096, True), ("27B in_proj", 16480, 5120, False),
         ("27B gate|up", 34816, 5120, True)]


def _runtime_weight(cuda, P, S, B, out, inp, glu):
    """(device W, S, B, plan) as the runner holds them: qgemv plans swept where ``forward.sweepable``."""
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q
    from tensorfold.runtime.forward import sweepable

    p = A.plan_qgemv(out, inp, 4, 64)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    if sweepable(p, inp, 4, 64):
        g = glu and A.glu_ok(p, out)
        W = Q.sweep_pack_device(dev[0], dev[1], dev[2], 4, 64, p.u, glu=g, per=p.per)
        return (W, dev[1], dev[2]), dataclasses.replace(p, sw=2 if g else 1)
    return dev, p


@pytest.mark.parametrize("label,out,inp,glu", CASES)
def test_fused_norm_real_shapes(label, out, inp, glu):
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import norms
    from tensorfold.kernels import qgemv as Q

    cuda = _cuda()
    P, S, B = _rand_q(out, inp, 4, 64)
    (W, Sd, Bd), p = _runtime_weight(cuda, P, S, B, out, inp, glu)
    assert A.norm_fusable(p), p
    oy = out // 2 if glu else out
    ws = cuda.device_array((max(1, getattr(p, "ks", 1)), 1, out), np.float32)
    cnt = None

    def gemv(x, norm):  # as Runner._linear launches it: swept weights through qgemv.launch
        y = cuda.to_device(np.full((1, oy), np.nan, np.float32))
        if getattr(p, "sw", 0):
            Q.launch(W, Sd, Bd, x, y, p, 1, ws=ws, glu=glu, cnt=cnt, norm=norm)
        else:
            A.launch_qgemv(W, Sd, Bd, x, y, 4, 64, plan=p, ws=ws, rows=1, glu=glu, cnt=cnt, norm=norm)
        return y.copy_to_host()

    for draw in range(3):
        h = (rng.standard_normal((1, inp)) * 10.0 ** rng.uniform(-1.5, 1.5, (1, inp))).astype(np.float32)
        d = rng.standard_normal((1, inp)).astype(np.float32)
        mult = (1.0 + 0.2 * rng.standard_normal(inp)).astype(np.float32)
        dd, md = cuda.to_device(d), cuda.to_device(mult)
        hA, xA = cuda.to_device(h), cuda.to_device(np.full((1, inp), np.nan, np.float32))
        norms.launch_add_rms_norm(dd, hA, md, xA, EPS)
        yA = gemv(xA, None)
        hB, ho = cuda.to_device(h), cuda.to_device(np.full((1, inp), np.nan, np.float32))
        xB = cuda.to_device((rng.standard_normal((1, inp)) * 100).astype(np.float32))
        yB = gemv(xB, (hB, dd, md, ho, EPS))
        yC = gemv(xB, (hB, dd, md, ho, EPS))
        xa, xb, ha, hb = xA.copy_to_host(), xB.copy_to_host(), hA.copy_to_host(), ho.copy_to_host()
        assert not np.isnan(yA).any() and not np.isnan(xb).any() and not np.isnan(hb).any(), label
        assert np.array_equal(xb.view(np.uint32), xa.view(np.uint32)), f"{label} draw {draw}: x"
        assert np.array_equal(hb.view(np.uint32), ha.view(np.uint32)), f"{label} draw {draw}: residual"
        assert np.array_equal(yB.view(np.uint32), yA.view(np.uint32)), f"{label} draw {draw}: y"
        assert np.array_equal(yC.view(np.uint32), yA.view(np.uint32)), f"{label} draw {draw}: second launch"
        assert np.array_equal(hB.copy_to_host(), h), f"{label}: the input residual was written"
        v = h.astype(np.float64) + d
        np.testing.assert_allclose(xb, v / np.sqrt((v * v).mean(-1, keepdims=True) + EPS) * mult, rtol=1e-5,
                                   atol=1e-6)
    print(f"\n{label}: fused add + RMSNorm == standalone + GEMV, bit for bit ({type(p).__name__})")
