"""GPU tier for the add + RMSNorm done by a GEMV's last block (``tail=`` of ``affine.launch_qgemv``; the runtime's
``TENSORFOLD_NORM_TAIL=1``): ``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/kernels/test_gpu_norm_tail.py``.

The one-row launches the tail serves, at the runtime's plans in the whole-share form: the 9B output projections
(4096 x 4096), the 2B ones (2048 x 2048) and the 2B down (2048 x 6144); 4-bit g64 random codes, bf16 scales and
biases. Against the plain launch followed by the standalone vectorized ``norms.launch_add_rms_norm``: y, the
residual and x bit for bit on three fresh draws of x, residual (magnitudes over three decades) and norm weight; the
counter back at 0 and a second launch the same bits (the graph replays it). Independent oracle for x: float64
RMSNorm within 1e-5 relative."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from test_gpu_a import _cuda, _rand_q, rng

EPS = 1e-6
CASES = [("9B out_proj", 4096, 4096), ("2B out_proj", 2048, 2048), ("2B down", 2048, 6144)]


@pytest.mark.parametrize("label,out,inp", CASES)
def test_norm_tail_real_shapes(label, out, inp, monkeypatch):
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import norms

    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
    cuda = _cuda()
    P, S, B = _rand_q(out, inp, 4, 64)
    p = A.plan_qgemv(out, inp, 4, 64)
    W, Sd, Bd = (cuda.to_device(a) for a in (P, S, B))
    assert A.tail_ok(p, 1, False, Sd, Bd), p
    cnt = norms.new_tail_counter()
    for draw in range(3):
        x = cuda.to_device(rng.standard_normal((1, inp)).astype(np.float32))
        h = (rng.standard_normal((1, out)) * 10.0 ** rng.uniform(-1.5, 1.5, (1, out))).astype(np.float32)
        mult = (1.0 + 0.2 * rng.standard_normal(out)).astype(np.float32)
        md = cuda.to_device(mult)
        yA = cuda.to_device(np.full((1, out), np.nan, np.float32))
        hA, xA = cuda.to_device(h), cuda.to_device(np.full((1, out), np.nan, np.float32))
        A.launch_qgemv(W, Sd, Bd, x, yA, 4, 64, plan=p, rows=1)
        norms.launch_add_rms_norm(yA, hA, md, xA, EPS)
        want = [a.copy_to_host() for a in (yA, hA, xA)]
        for rep in range(2):
            yB = cuda.to_device(np.full((1, out), np.nan, np.float32))
            hB = cuda.to_device(h)
            xB = cuda.to_device((rng.standard_normal((1, out)) * 100).astype(np.float32))
            A.launch_qgemv(W, Sd, Bd, x, yB, 4, 64, plan=p, rows=1, tail=(hB, md, xB, EPS, cnt))
            got = [a.copy_to_host() for a in (yB, hB, xB)]
            assert int(cnt.copy_to_host()[0]) == 0, label
            for what, g, w in zip(("y", "residual", "x"), got, want):
                assert not np.isnan(g).any(), f"{label} draw {draw}: {what} unwritten"
                assert np.array_equal(g.view(np.uint32), w.view(np.uint32)), f"{label} draw {draw}: {what}"
        v = h.astype(np.float64) + want[0].astype(np.float64)
        ref = v / np.sqrt((v * v).mean(-1, keepdims=True) + EPS) * mult
        np.testing.assert_allclose(got[2], ref, rtol=1e-5, atol=1e-6)
