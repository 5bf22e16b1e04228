"""GPU tier for the decode GEMV (``affine.launch_qgemv``), run on the device:
``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/kernels/test_gpu_gemv.py``.

Real 2B / 9B / 27B shapes (MLP gate+up and down, the 2B head 248320 x 2048), MLX-packed random codes with random
bf16 scales / biases, bits 4 (groups 32 / 64 / 128), 8 and 2, rows 1 / 2 / 8 / 16 (and 19: grid.y), each with the
default plan (so the tensor-core kernel for 2/4/8 bits, split-K where the plan chooses it). Oracle: float64 numpy
on ``affine_dequant`` weights. Tolerance: |y - ref| <= 3e-5 * (|x| @ |W|) elementwise (x enters the tensor cores as
a bf16 hi + lo pair, about 2^-18 relative; fp32 accumulation over up to 17408 inputs). Outputs are poisoned with
NaN first. Row independence: every row of a 16- or 19-row launch equals, bit for bit, the same row launched alone
or in a smaller window.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

rng = np.random.default_rng()


def _cuda():
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no CUDA GPU")
    return cuda


def _rand_q(out, inp, bits, group):
    from tensorfold.model import bf16

    P = rng.integers(0, 2**32, (out, inp * bits // 32), dtype=np.uint64).astype(np.uint32)
    S = bf16.from_f32((rng.standard_normal((out, inp // group)) * 0.02).astype(np.float32))
    B = bf16.from_f32((rng.standard_normal((out, inp // group)) * 0.02).astype(np.float32))
    return P, S, B


def _ref(x, P, S, B, bits, group, chunk=16384):
    """float64 x @ W.T and |x| @ |W|.T, W dequantized in row chunks (the 2B head is 0.5 G weights)."""
    from tensorfold.model import bf16

    out = P.shape[0]
    x64 = x.astype(np.float64)
    ax = np.abs(x64)
    ref = np.empty((x.shape[0], out))
    bound = np.empty((x.shape[0], out))
    cpw = 32 // bits
    sh = (np.arange(cpw, dtype=np.uint32) * bits)
    for o0 in range(0, out, chunk):
        p = P[o0:o0 + chunk]
        q = ((p[:, :, None] >> sh) & np.uint32((1 << bits) - 1)).reshape(p.shape[0], -1, group).astype(np.float64)
        s = bf16.to_f32(S[o0:o0 + chunk]).astype(np.float64)[:, :, None]
        b = bf16.to_f32(B[o0:o0 + chunk]).astype(np.float64)[:, :, None]
        W = (s * q + b).reshape(p.shape[0], -1)
        ref[:, o0:o0 + chunk] = x64 @ W.T
        bound[:, o0:o0 + chunk] = ax @ np.abs(W).T
    return ref, bound


def _check(y, ref, bound, tol=3e-5):
    assert not np.isnan(y).any(), "NaN / unwritten output"
    err = np.abs(y - ref)
    assert (err <= tol * bound).all(), f"max err/bound {(err / bound).max():.2e}"


class _Dev:
    def __init__(self, cuda, P, S, B, bits, group):
        from tensorfold.kernels import affine as A

        self.A, self.cuda, self.bits, self.group = A, cuda, bits, group
        self.out = P.shape[0]
        self.plan = A.plan_qgemv(self.out, P.shape[1] * 32 // bits, bits, group)
        self.d = [cuda.to_device(a) for a in (P, S, B)]

    def __call__(self, x):
        cuda, p = self.cuda, self.plan
        y = cuda.to_device(np.full((x.shape[0], self.out), np.nan, np.float32))
        ws = cuda.device_array((p.ks, x.shape[0], self.out), np.float32) if p.ks > 1 else None
        self.A.launch_qgemv(*self.d, cuda.to_device(x), y, self.bits, self.group, p, ws=ws)
        return y.copy_to_host()


SHAPES = [  # (label, out, in, rows of the big launch): 2B gate+up / down, 9B gate+up / down, 27B gate / down
    ("2B gu", 12288, 2048, 16), ("2B down", 2048, 6144, 8), ("9B gu", 24576, 4096, 16), ("9B down", 4096, 12288, 16),
    ("27B gate", 17408, 5120, 8), ("27B down", 5120, 17408, 8),
]


@pytest.mark.parametrize("label,out,inp,rows", SHAPES)
def test_qgemv_4bit_g64_real_shapes_rows_1_2_8_16(label, out, inp, rows):
    cuda = _cuda()
    P, S, B = _rand_q(out, inp, 4, 64)
    dev = _Dev(cuda, P, S, B, 4, 64)
    assert dev.plan.tc, dev.plan
    x = rng.standard_normal((rows, inp)).astype(np.float32)
    yr = dev(x)
    ref, bound = _ref(x, P, S, B, 4, 64)
    _check(yr, ref, bound)
    for r0, R in ((0, 1), (5, 1), (0, 2), (0, 8), (rows - 8, 8), (rows - 1, 1)):
        y = dev(x[r0:r0 + R])
        assert np.array_equal(y.view(np.uint32), yr[r0:r0 + R].view(np.uint32)), f"rows {r0}+{R} != in {rows} ({dev.plan})"


@pytest.mark.parametrize("mt,u", [(1, 4), (4, 2)])
def test_qgemv_tile_variants(mt, u):
    """The other tile shapes the benchmark measures (rows per warp 16 / 64) at the 9B gate shape."""
    cuda = _cuda()
    from tensorfold.kernels import affine as A

    out, inp = 12288, 4096
    P, S, B = _rand_q(out, inp, 4, 64)
    dev = _Dev(cuda, P, S, B, 4, 64)
    dev.plan = A.plan_tc(out, inp, 4, 64, mt=mt, u=u)
    x = rng.standard_normal((8, inp)).astype(np.float32)
    y8 = dev(x)
    ref, bound = _ref(x, P, S, B, 4, 64)
    _check(y8, ref, bound)
    y1 = dev(x[6:7])
    assert np.array_equal(y1.view(np.uint32), y8[6:7].view(np.uint32))


def test_qgemv_2b_head_248320x2048():
    cuda = _cuda()
    for bits in (4, 8):
        P, S, B = _rand_q(248320, 2048, bits, 64)
        dev = _Dev(cuda, P, S, B, bits, 64)
        x = rng.standard_normal((8, 2048)).astype(np.float32)
        y8 = dev(x)
        ref, bound = _ref(x, P, S, B, bits, 64)
        _check(y8, ref, bound)
        y1 = dev(x[3:4])
        assert np.array_equal(y1.view(np.uint32), y8[3:4].view(np.uint32))
        del P, S, B, dev


@pytest.mark.parametrize("bits,group", [(4, 32), (4, 128), (8, 32), (8, 64), (8, 128), (2, 64), (2, 128)])
def test_qgemv_formats(bits, group):
    """Every other tensor-core format at 4096 x 4096, 3 rows; 4-bit g64 also at 19 rows (two n-tiles, grid.y)."""
    cuda = _cuda()
    out, inp = 4096, 4096
    P, S, B = _rand_q(out, inp, bits, group)
    dev = _Dev(cuda, P, S, B, bits, group)
    assert dev.plan.tc, dev.plan
    x = rng.standard_normal((3, inp)).astype(np.float32)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(dev(x), ref, bound)


def test_qgemv_19_rows_grid_y():
    cuda = _cuda()
    out, inp = 4096, 4096
    P, S, B = _rand_q(out, inp, 4, 64)
    dev = _Dev(cuda, P, S, B, 4, 64)
    x = rng.standard_normal((19, inp)).astype(np.float32)
    y19 = dev(x)
    ref, bound = _ref(x, P, S, B, 4, 64)
    _check(y19, ref, bound)
    y2 = dev(x[17:19])
    assert np.array_equal(y2.view(np.uint32), y19[17:19].view(np.uint32))


def test_cuda_core_fallback_still_correct():
    """The CUDA-core kernel (3/5/6 bits, and 2/4/8 bits with TENSORFOLD_GEMV_TC=0) at a real shape."""
    cuda = _cuda()
    from tensorfold.kernels import affine as A

    out, inp = 4096, 4096
    P, S, B = _rand_q(out, inp, 4, 64)
    plan = A._plan_cuda_core(out, inp, 4, 64)
    x = rng.standard_normal((3, inp)).astype(np.float32)
    y = cuda.to_device(np.full((3, out), np.nan, np.float32))
    ws = cuda.device_array((plan.ks, 3, out), np.float32) if plan.ks > 1 else None
    A.launch_qgemv(*(cuda.to_device(a) for a in (P, S, B, x)), y, 4, 64, plan, ws=ws)
    ref, bound = _ref(x, P, S, B, 4, 64)
    _check(y.copy_to_host(), ref, bound)


@pytest.mark.parametrize("out,inp", [(12288, 4096), (5120, 17408)])
def test_qgemv_pipelined_form(out, inp):
    """The pipelined tensor-core form (``plan_tc(pipe=True)``, default off until measured) at the 9B gate and 27B
    down shapes: 8 rows against the reference, rows alone == in the 8."""
    cuda = _cuda()
    from tensorfold.kernels import affine as A

    P, S, B = _rand_q(out, inp, 4, 64)
    dev = _Dev(cuda, P, S, B, 4, 64)
    dev.plan = A.plan_tc(out, inp, 4, 64, pipe=True)
    x = rng.standard_normal((8, inp)).astype(np.float32)
    y8 = dev(x)
    ref, bound = _ref(x, P, S, B, 4, 64)
    _check(y8, ref, bound)
    for r in (0, 7):
        y1 = dev(x[r:r + 1])
        assert np.array_equal(y1.view(np.uint32), y8[r:r + 1].view(np.uint32))
