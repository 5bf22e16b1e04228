"""GPU tier for ``tensorfold.kernels.qgemv`` (the bandwidth-oriented tensor-core decode GEMV), run on the device:
``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/kernels/test_gpu_qgemv.py``.

Real 9B gate+up and 27B down shapes at 4-bit g64 with the default geometry, 1 to 16 rows (both n-tile kernels; 9-16
rows as two launches), every other format at 4096 x 4096 (3 rows). MLX-packed random codes with random bf16
scales / biases. Oracle: float64 numpy on the dequantized weights (``test_gpu_gemv._ref``). Tolerance: |y - ref| <=
3e-5 * (|x| @ |W|) elementwise, the first tensor-core kernel's bound (x enters as bf16 hi + lo, fp32 accumulation of
``128 + q`` codes). Outputs poisoned with NaN. Row independence: rows launched alone or in smaller launches equal
the same rows of the 16-row launch bit for bit; a second launch gives the same bits (the split-K arrival counters
are back at zero).
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from test_gpu_a import _cuda, _rand_q, rng
from test_gpu_gemv import _check, _ref


def _run(cuda, dev, x, p, bits, group):
    from tensorfold.kernels import qgemv as Q

    out = dev[0].shape[0]
    R = x.shape[0]
    y = cuda.to_device(np.full((R, out), np.nan, np.float32))
    ws = cuda.device_array((p.ks, R, out), np.float32) if p.ks > 1 else None
    Q.launch(*dev, cuda.to_device(x), y, p, R, ws=ws)
    return y.copy_to_host()


SHAPES = [("9B gate/up", 24576, 4096), ("27B down", 5120, 17408)]


@pytest.mark.parametrize("label,out,inp", SHAPES)
def test_real_shapes_rows_1_to_16(label, out, inp):
    from tensorfold.kernels import qgemv as Q

    cuda = _cuda()
    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((16, inp)).astype(np.float32)
    ref, bound = _ref(x, P, S, B, bits, group)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    for cfg in ({},):
        p = Q.plan(out, inp, bits, group, **cfg)
        full = _run(cuda, dev, x, p, bits, group)
        _check(full, ref, bound)
        again = _run(cuda, dev, x, p, bits, group)
        assert np.array_equal(again.view(np.uint32), full.view(np.uint32)), f"{label} {p}: second launch differs"
        for r0, R in ((0, 1), (5, 1), (15, 1), (0, 4), (3, 5), (8, 8)):
            y = _run(cuda, dev, x[r0:r0 + R], p, bits, group)
            assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"{label} {p} rows {r0}+{R}"


@pytest.mark.parametrize("bits,group", [(4, 32), (4, 128), (8, 32), (8, 64), (2, 64), (2, 128)])
def test_formats(bits, group):
    from tensorfold.kernels import qgemv as Q

    cuda = _cuda()
    out, inp = 4096, 4096
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((3, inp)).astype(np.float32)
    ref, bound = _ref(x, P, S, B, bits, group)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    p = Q.plan(out, inp, bits, group)
    full = _run(cuda, dev, x, p, bits, group)
    _check(full, ref, bound)
    one = _run(cuda, dev, x[2:3], p, bits, group)
    assert np.array_equal(one.view(np.uint32), full[2:3].view(np.uint32))


def test_through_affine_launch(monkeypatch):
    """``affine.plan_qgemv`` / ``launch_qgemv`` route to qgemv with TENSORFOLD_GEMV_V3=1, 20 rows (two launches)."""
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q

    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "1")
    cuda = _cuda()
    out, inp, bits, group = 2048, 6144, 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((20, inp)).astype(np.float32)
    ref, bound = _ref(x, P, S, B, bits, group)
    p = A.plan_qgemv(out, inp, bits, group)
    assert isinstance(p, Q.V3Plan)
    y = cuda.to_device(np.full((20, out), np.nan, np.float32))
    ws = cuda.device_array(p.ks * 16 * out, np.float32)
    A.launch_qgemv(*[cuda.to_device(a) for a in (P, S, B)], cuda.to_device(x), y, bits, group, p, ws=ws, rows=20)
    _check(y.copy_to_host(), ref, bound)
