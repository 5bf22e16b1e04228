"""GPU tier for the decode GEMV (``affine.launch_qgemv``), run on the device:
``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/kernels/test_gpu_gemv.py``.

Every tensor-core plan variant (``affine.TC_VARIANTS``: default, pipe, w16, w16d2, w16d3, sk, skd2) runs at the 9B
gate 12288x4096, the 27B down 5120x17408 and the 2B head 248320x2048 (4-bit g64): 8 rows (and 16 for the MLP
shapes: both n-tiles) against the reference, single rows == the same rows of the bigger launches bit for bit. The
data and the float64 reference of those three shapes are made once per session (module cache) and shared by the
variants, so the file stays near 90 s on an H200.

The default plan also at the 2B down, 9B down and 27B gate shapes (split-K and not) with rows 1 / 2 / 8 / 16;
the tile shapes mt=1/u=4 and mt=4/u=2; every other tensor-core format (4-bit g32 / g128, 8-bit g32 / g64 / g128,
2-bit g64 / g128) at 4096x4096; 19 rows (grid.y); the CUDA-core kernel. MLX-packed random codes with random bf16
scales / biases (the 8-bit 2B head of the earlier file is left to the 8-bit format test: same code, smaller out). Oracle: float64 numpy
on ``affine_dequant`` weights. Tolerance: |y - ref| <= 3e-5 * (|x| @ |W|) elementwise (x enters the tensor cores as
a bf16 hi + lo pair, about 2^-18 relative; fp32 accumulation over up to 17408 inputs). Outputs are poisoned with
NaN first. Row independence: every row of a 16- or 19-row launch equals, bit for bit, the same row launched alone
or in a smaller window.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from test_gpu_a import _cuda, _rand_q, _xin, rng  # one source for the GPU tests' random MLX weights


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


SHAPES = [  # (label, out, in, rows of the big launch): 2B down, 9B down, 27B gate (the default plan; the
    # 9B gate, 27B down and 2B head run for every variant below)
    ("2B down", 2048, 6144, 8), ("9B down", 4096, 12288, 16), ("27B gate", 17408, 5120, 8),
    # session 16's shape rules: 2B out_proj / o_proj (w16), 2B gate+up (pipe2), 27B out_proj / o_proj (qgemv)
    ("2B out_proj", 2048, 2048, 16), ("2B gate", 12288, 2048, 16), ("27B out_proj", 5120, 6144, 16),
    # session 41: the 9B out_proj / o_proj (16 K ranges: one row in the whole form at 16 warps, more at 8)
    ("9B out_proj", 4096, 4096, 16),
]


@pytest.mark.parametrize("label,out,inp,rows", SHAPES)
def test_qgemv_4bit_g64_real_shapes_rows_1_2_8_16(label, out, inp, rows):
    cuda = _cuda()
    P, S, B = _rand_q(out, inp, 4, 64)
    dev = _Dev(cuda, P, S, B, 4, 64)
    from tensorfold.kernels import qgemv as Q

    # tensor cores either way: the first kernel, or qgemv (affine._v3_enabled: 27B gate, 27B out_proj)
    assert isinstance(dev.plan, Q.V3Plan) or dev.plan.tc, dev.plan
    x = rng.standard_normal((rows, inp)).astype(np.float32)
    yr = dev(x)
    ref, bound = _ref(_xin(x, dev.plan), P, S, B, 4, 64)
    _check(yr, ref, bound)
    for r0, R in ((0, 1), (5, 1), (0, 2), (0, 8), (rows - 8, 8), (rows - 1, 1)):
        y = dev(x[r0:r0 + R])
        assert np.array_equal(y.view(np.uint32), yr[r0:r0 + R].view(np.uint32)), f"rows {r0}+{R} != in {rows} ({dev.plan})"


VSHAPES = {"9B gate": (12288, 4096, 16), "27B down": (5120, 17408, 16), "2B head": (248320, 2048, 8)}
_VCACHE: dict = {}


def _vshape(cuda, label):
    """Weights (host + device), x and the float64 reference of one variant-test shape, made once per session."""
    if label not in _VCACHE:
        out, inp, rows = VSHAPES[label]
        P, S, B = _rand_q(out, inp, 4, 64)
        dev = _Dev(cuda, P, S, B, 4, 64)
        x = rng.standard_normal((rows, inp)).astype(np.float32)
        ref, bound = _ref(x, P, S, B, 4, 64)  # for the first kernel's variants (hi + lo x), not dev's default plan
        _VCACHE[label] = (dev, x, ref, bound)
    return _VCACHE[label]


def _variant_names():
    from tensorfold.kernels import affine as A

    return list(A.TC_VARIANTS)


@pytest.mark.parametrize("label", list(VSHAPES))
@pytest.mark.parametrize("variant", _variant_names())
def test_qgemv_variants_real_shapes_rows_1_8_16(variant, label):
    """One variant's plan at one real shape: 8 rows (one n-tile) and, for the MLP shapes, 16 rows (two n-tiles)
    against the reference; rows 0 / 7 / 15 alone == the same rows of the bigger launches, bit for bit."""
    cuda = _cuda()
    from tensorfold.kernels import affine as A

    dev, x, ref, bound = _vshape(cuda, label)
    out, inp, rows = VSHAPES[label]
    dev.plan = A.plan_tc(out, inp, 4, 64, variant=variant)
    assert dev.plan.variant == variant
    y8 = dev(x[:8])
    _check(y8, ref[:8], bound[:8])
    for r in (0, 7):
        y1 = dev(x[r:r + 1])
        assert np.array_equal(y1.view(np.uint32), y8[r:r + 1].view(np.uint32)), f"row {r} alone != in 8 ({dev.plan})"
    if rows == 16:
        y16 = dev(x)
        _check(y16, ref, bound)
        assert np.array_equal(y16[:8].view(np.uint32), y8.view(np.uint32)), f"rows 0..7: 16 != 8 ({dev.plan})"
        y1 = dev(x[15:16])
        assert np.array_equal(y1.view(np.uint32), y16[15:16].view(np.uint32)), f"row 15 alone != in 16 ({dev.plan})"


@pytest.mark.parametrize("mt,u", [(1, 4), (4, 2)])
def test_qgemv_tile_variants(mt, u):
    """The other tile shapes (rows per warp 16 / 64) at the 9B gate shape (the variant tests' data), 8 rows."""
    cuda = _cuda()
    from tensorfold.kernels import affine as A

    dev, x, ref, bound = _vshape(cuda, "9B gate")
    dev.plan = A.plan_tc(12288, 4096, 4, 64, mt=mt, u=u, variant="default")
    y8 = dev(x[:8])
    _check(y8, ref[:8], bound[:8])
    y1 = dev(x[6:7])
    assert np.array_equal(y1.view(np.uint32), y8[6:7].view(np.uint32))


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
    ref, bound = _ref(_xin(x, dev.plan), P, S, B, 4, 64)
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


@pytest.mark.parametrize("label,out,rows", [("2B out_proj", 2048, 16), ("9B out_proj", 4096, 16)])
def test_tc_l2_prefetch_same_bits(label, out, rows, monkeypatch):
    """``TENSORFOLD_TC_L2`` (the first tensor-core kernel asks L2 for its whole share before the PDL wait) at the
    square shapes it is for: the same bits as without it at 1 and ``rows`` rows, and against the reference."""
    cuda = _cuda()
    P, S, B = _rand_q(out, out, 4, 64)
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "auto")
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "0")  # the one-row launch through the plan's kernel (l2 applies)
    monkeypatch.setenv("TENSORFOLD_TC_VWARPS", "0")  # one K range a warp (l2 does not apply to two)
    dev = _Dev(cuda, P, S, B, 4, 64)
    assert dev.plan.tc, dev.plan  # the first kernel's plan (w16 / pipe2)
    x = rng.standard_normal((rows, out)).astype(np.float32)
    got = {}
    for v in ("0", "sq"):
        monkeypatch.setenv("TENSORFOLD_TC_L2", v)
        got[v] = (dev(x), dev(x[3:4]))
    for a, b in zip(got["0"], got["sq"]):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), label
    ref, bound = _ref(_xin(x, dev.plan), P, S, B, 4, 64)
    _check(got["sq"][0], ref, bound)


@pytest.mark.parametrize("label,out,inp", [("9B out_proj", 4096, 4096), ("2B out_proj", 2048, 2048),
                                           ("2B in_proj", 8224, 2048), ("2B qkv", 5120, 2048),
                                           ("2B down", 2048, 6144)])
def test_tc_xfrag_same_bits(label, out, inp, monkeypatch):
    """``TENSORFOLD_TC_XFRAG=1`` (the whole form makes x's fragments and group sums once a block) at every one-row
    launch the whole form takes: the same bits as the whole form without it and as the plan's kernel, on three fresh
    x rows, with and without the half share, and under ``ns`` (the form on non-square launches only);
    within the reference's bound."""
    cuda = _cuda()
    from tensorfold.kernels import affine as A

    P, S, B = _rand_q(out, inp, 4, 64)
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "auto")
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
    dev = _Dev(cuda, P, S, B, 4, 64)
    assert A.tc_whole(dev.plan, 1, 1, False, None, dev.d[1], dev.d[2]), (label, dev.plan)
    for _ in range(3):
        x = rng.standard_normal((1, inp)).astype(np.float32)
        got = {}
        for wh, xf, half in (("0", "0", "0"), ("1", "0", "0"), ("1", "1", "0"), ("1", "1", "1"), ("1", "ns", "0")):
            monkeypatch.setenv("TENSORFOLD_TC_WHOLE", wh)
            monkeypatch.setenv("TENSORFOLD_TC_XFRAG", xf)
            monkeypatch.setenv("TENSORFOLD_TC_WHOLE_HALF", half)
            got[wh + xf + half] = dev(x)
        for k, v in got.items():
            assert np.array_equal(v.view(np.uint32), got["000"].view(np.uint32)), (label, k)
    ref, bound = _ref(_xin(x, dev.plan), P, S, B, 4, 64)
    _check(got["110"], ref, bound)


@pytest.mark.parametrize("label,out,inp,glu", [("2B gate|up", 12288, 2048, True), ("9B out_proj", 4096, 4096, False),
                                               ("2B in_proj", 8224, 2048, False)])
def test_tc_lop3_same_bits(label, out, inp, glu, monkeypatch):
    """``TENSORFOLD_TC_XFRAG=1`` / ``ns`` decode every first-kernel launch's pairs with one LOP3 (``l3`` / ``xf``):
    the same bits as without at 1, 8 and 16 rows (the 2B gate | up with its SwiGLU epilogue, the 9B square plan's
    8-warp two-range launches, the 2B in_proj), on fresh x."""
    cuda = _cuda()
    from tensorfold.kernels import affine as A

    P, S, B = _rand_q(out, inp, 4, 64)
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "auto")
    p = A.plan_qgemv(out, inp, 4, 64)
    assert p.tc, (label, p)
    d = [cuda.to_device(a) for a in (P, S, B)]
    x = rng.standard_normal((16, inp)).astype(np.float32)
    oy = out // 2 if glu else out
    got = {}
    for v in ("0", "1", "ns"):
        monkeypatch.setenv("TENSORFOLD_TC_XFRAG", v)
        for rows in (1, 8, 16):
            y = cuda.to_device(np.full((rows, oy), np.nan, np.float32))
            ws = cuda.device_array((p.ks, rows, out), np.float32) if p.ks > 1 else None
            A.launch_qgemv(*d, cuda.to_device(x[:rows]), y, 4, 64, p, ws=ws, glu=glu)
            got[v, rows] = y.copy_to_host()
    for rows in (1, 8, 16):
        for v in ("1", "ns"):
            a, b = got["0", rows], got[v, rows]
            assert not np.isnan(b).any(), (label, rows, v)
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (label, rows, v)


@pytest.mark.parametrize("label,out", [("2B out_proj", 2048), ("9B out_proj", 4096)])
def test_tc_whole_same_bits(label, out, monkeypatch):
    """``TENSORFOLD_TC_WHOLE`` (the warp's whole share in registers before the PDL wait, x staged in shared memory)
    at the square shapes it is for: one row gives the same bits as the plan's kernel and matches the reference;
    eight rows keep the plan's kernel and their row 3 equals that row alone. The 9B plan has 16 K ranges
    (``TENSORFOLD_TC_VWARPS``): its whole form runs 16 warps, its other launches 8 warps of two ranges, and both
    equal the plain 16-warp kernel summing its partial tiles two at a time first; with ``TENSORFOLD_TC_VWARPS=0``
    (8 ranges) the whole form takes the 16-byte scale loads."""
    cuda = _cuda()
    P, S, B = _rand_q(out, out, 4, 64)
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "auto")
    from tensorfold.kernels import affine as A

    x = rng.standard_normal((8, out)).astype(np.float32)
    for vw in (("sq", "0") if out == 4096 else ("sq",)):
        monkeypatch.setenv("TENSORFOLD_TC_VWARPS", vw)
        dev = _Dev(cuda, P, S, B, 4, 64)
        assert dev.plan.tc and dev.plan.pipe, dev.plan
        assert dev.plan.mw == (8 if (out, vw) == (4096, "sq") else 0), dev.plan
        monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "sq")
        assert A.tc_whole(dev.plan, 1, 1, False, None, dev.d[1], dev.d[2]) == (8 if vw == "0" else 1)
        got = {}
        for v in ("0", "sq"):
            monkeypatch.setenv("TENSORFOLD_TC_WHOLE", v)
            got[v] = (dev(x[3:4]), dev(x))
        assert np.array_equal(got["0"][0].view(np.uint32), got["sq"][0].view(np.uint32)), (label, vw)
        assert np.array_equal(got["sq"][1][3:4].view(np.uint32), got["sq"][0].view(np.uint32)), (label, vw)
        if dev.plan.mw:  # against the plain 16-warp kernel (one range a warp, partial tiles summed 2 at a time)
            k = A.get_tc_kernel(4, 64, 1, 16, dev.plan.mt, dev.plan.u, "bf16", True, 1, rg=2)
            for a, xr in zip(got["sq"], (x[3:4], x)):
                y = cuda.to_device(np.full((1, xr.shape[0], out), np.nan, np.float32))
                k[(out // (16 * dev.plan.mt), 1, 1), 512](*dev.d, cuda.to_device(xr), y, np.int32(xr.shape[0]),
                                                          np.int32(0), np.int32(0))
                assert np.array_equal(a.view(np.uint32), y.copy_to_host()[0].view(np.uint32)), label
    ref, bound = _ref(_xin(x[3:4], dev.plan), P, S, B, 4, 64)
    _check(got["sq"][0], ref, bound)
