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

from test_gpu_a import _cuda, _rand_q, _xin, rng
from test_gpu_gemv import _check, _ref


def _run(cuda, dev, x, p, bits, group):
    from tensorfold.kernels import qgemv as Q

    out = dev[1].shape[0]  # the scales' rows (a swept W, from sweep_pack_device, has other dimensions)
    R = x.shape[0]
    y = cuda.to_device(np.full((R, out), np.nan, np.float32))
    ws = cuda.device_array((p.ks, R, out), np.float32) if p.ks > 1 else None
    Q.launch(*dev, cuda.to_device(x), y, p, R, ws=ws)
    return y.copy_to_host()


def _bf16x_case(out, inp):
    """A real-shape 4-bit g64 case for the bf16-x plan: (cuda, bits, group, P, S, B, x [32 rows], float64 ref and
    bound on bf16-rounded x, the plan with ``xh`` 1, the device arrays)."""
    import dataclasses

    from tensorfold.kernels import qgemv as Q
    from tensorfold.model import bf16

    cuda = _cuda()
    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((32, inp)).astype(np.float32)
    ref, bound = _ref(bf16.to_f32(bf16.from_f32(x)), P, S, B, bits, group)
    p = dataclasses.replace(Q.plan(out, inp, bits, group), xh=1)
    return cuda, bits, group, P, S, B, x, ref, bound, p, [cuda.to_device(a) for a in (P, S, B)]


SHAPES = [("9B gate/up", 24576, 4096), ("27B down", 5120, 17408)]


def _glu_swept_same_bits(cuda, dev, x, p, bits, group, rows, label):
    """The SwiGLU epilogue of plan ``p`` on the MLX arrays ``dev`` against the device repack with gate / up rows
    paired (``sweep_pack_device(glu=True)``, plan ``sw = 2``): bit-equal at each row count of ``rows``."""
    import dataclasses

    from tensorfold.kernels import qgemv as Q

    out = dev[0].shape[0]
    gp = dataclasses.replace(p, sw=2)
    gW = Q.sweep_pack_device(dev[0], dev[1], dev[2], bits, group, p.u, glu=True, per=p.per)
    for R in rows:
        ys = []
        for W, pl in ((dev[0], p), (gW, gp)):
            y = cuda.to_device(np.full((R, out // 2), np.nan, np.float32))
            ws = cuda.device_array((p.ks, R, out), np.float32) if p.ks > 1 else None
            Q.launch(W, dev[1], dev[2], cuda.to_device(x[:R]), y, pl, R, ws=ws, glu=True)
            ys.append(y.copy_to_host())
        assert not np.isnan(ys[0]).any()
        assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32)), f"{label} glu R={R}"


@pytest.mark.parametrize("label,out,inp", SHAPES)
def test_real_shapes_rows_1_to_16(label, out, inp):
    from tensorfold.kernels import qgemv as Q

    cuda = _cuda()
    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((16, inp)).astype(np.float32)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    for cfg in ({},):
        p = Q.plan(out, inp, bits, group, **cfg)
        ref, bound = _ref(_xin(x, p), P, S, B, bits, group)
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
    dev = [cuda.to_device(a) for a in (P, S, B)]
    p = Q.plan(out, inp, bits, group)
    ref, bound = _ref(_xin(x, p), P, S, B, bits, group)
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
    p = A.plan_qgemv(out, inp, bits, group)
    assert isinstance(p, Q.V3Plan)
    ref, bound = _ref(_xin(x, p), P, S, B, bits, group)
    y = cuda.to_device(np.full((20, out), np.nan, np.float32))
    ws = cuda.device_array(p.ks * 16 * out, np.float32)
    A.launch_qgemv(*[cuda.to_device(a) for a in (P, S, B)], cuda.to_device(x), y, bits, group, p, ws=ws, rows=20)
    _check(y.copy_to_host(), ref, bound)


PF_SHAPES = [("2B in_all", 8224, 2048), ("2B out_proj", 2048, 2048), ("2B gate/up", 12288, 2048),
             ("2B down", 2048, 6144), ("9B out_proj", 4096, 4096), ("27B out_proj", 5120, 6144)]


@pytest.mark.parametrize("label,out,inp", PF_SHAPES)
def test_prefetch_form_real_shapes(label, out, inp, monkeypatch):
    """The prefetch form at the shapes it is planned for (more than 48 KB of dynamic shared memory a block): against
    the float64 oracle, 1-16 rows bit-equal to the 16-row launch, and (plans whose tiles are not split into parts)
    equal bit for bit to the register-ring form of the same chunking (a plan differing only in how words reach the
    registers)."""
    from tensorfold.kernels import qgemv as Q

    cuda = _cuda()
    bits, group = 4, 64
    monkeypatch.setenv("TENSORFOLD_GEMV_PF", "1")
    p = Q.plan_pf(out, inp, bits, group)
    assert p is not None and p.pf >= 1
    assert max(sum(p.smem_bytes(nt, *p.pf_geom(nt)[:2])) for nt in (1, 2)) > 48 * 1024
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((16, inp)).astype(np.float32)
    ref, bound = _ref(_xin(x, p), P, S, B, bits, group)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    full = _run(cuda, dev, x, p, bits, group)
    _check(full, ref, bound)
    again = _run(cuda, dev, x, p, bits, group)
    assert np.array_equal(again.view(np.uint32), full.view(np.uint32)), f"{label}: second launch differs"
    for r0, R in ((0, 1), (7, 1), (0, 4), (3, 5), (8, 8)):
        y = _run(cuda, dev, x[r0:r0 + R], p, bits, group)
        assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"{label} rows {r0}+{R}"
    # the same chunking through registers (static shared memory holds x for one n-tile at these chunk sizes)
    reg = Q.V3Plan(out, inp, bits, group, nw=4, mt=1, cg=p.cg, u=p.u, depth=1, blocks=132)
    if p.kp == 1 and p.cg * (group // 16) * 32 * 8 + p.cg * 4 * 4 * (group // 16) * 4 <= 40 * 1024:
        y = _run(cuda, dev, x[:3], reg, bits, group)
        assert np.array_equal(y.view(np.uint32), full[:3].view(np.uint32)), f"{label}: register form differs"


@pytest.mark.parametrize("label,out,inp", [("9B down", 4096, 12288), ("9B in_proj", 12352, 4096)])
def test_mid_shapes_now_on_qgemv(label, out, inp):
    """The 9B shapes that moved to this kernel when the line fell to 2^25 codes (session 15), default plan: against
    the float64 oracle at 1, 3, 5 and 8 rows, and each row alone equal to its row of the 8-row launch."""
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q

    cuda = _cuda()
    bits, group = 4, 64
    p = A.plan_qgemv(out, inp, bits, group)
    assert isinstance(p, Q.V3Plan), p
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((8, inp)).astype(np.float32)
    ref, bound = _ref(_xin(x, p), P, S, B, bits, group)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    full = _run(cuda, dev, x, p, bits, group)
    _check(full, ref, bound)
    for R in (1, 3, 5):
        y = _run(cuda, dev, x[:R], p, bits, group)
        _check(y, ref[:R], bound[:R])
    for r in (0, 6):
        y = _run(cuda, dev, x[r:r + 1], p, bits, group)
        assert np.array_equal(y.view(np.uint32), full[r:r + 1].view(np.uint32)), f"{label} row {r}"


@pytest.mark.parametrize("label,out,inp", SHAPES)
def test_swept_layout_real_shapes(label, out, inp):
    """``sweep_pack``'s layout at the real shapes: bit-equal to the MLX layout at 1, 5 and 16 rows (one and two
    n-tiles, two launches), and within the oracle's bound; at 9B gate + up also the SwiGLU epilogue on the device
    repack with gate / up rows paired (``sweep_pack_device(glu=True)``) against the MLX-layout epilogue."""
    import dataclasses

    from tensorfold.kernels import qgemv as Q

    cuda = _cuda()
    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((16, inp)).astype(np.float32)
    p = Q.plan(out, inp, bits, group)
    ref, bound = _ref(_xin(x, p), P, S, B, bits, group)
    sp = dataclasses.replace(p, sw=True)
    dev = [cuda.to_device(a) for a in (P, S, B)]
    sdev = [cuda.to_device(Q.sweep_pack(P, S, B, bits, group, p.u, per=p.per)), dev[1], dev[2]]
    for R in (1, 5, 16):
        y0 = _run(cuda, dev, x[:R], p, bits, group)
        y = cuda.to_device(np.full((R, out), np.nan, np.float32))
        ws = cuda.device_array((p.ks, R, out), np.float32) if p.ks > 1 else None
        Q.launch(*sdev, cuda.to_device(x[:R]), y, sp, R, ws=ws)
        y1 = y.copy_to_host()
        _check(y1, ref[:R], bound[:R])
        assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32)), f"{label} R={R}"
    if out % 16 == 0 and out >= 16384:  # a gate | up weight: the SwiGLU epilogue on gate / up rows paired
        _glu_swept_same_bits(cuda, dev, x, p, bits, group, (1, 5), label)


@pytest.mark.parametrize("label,out,inp", SHAPES)
def test_bf16_x_real_shapes(label, out, inp):
    """bf16-only x (``xh``, 8 rows an n-tile) at the real shapes, 1-16 rows: within the oracle's bound against
    float64 on x rounded to bf16 (``bf16.from_f32``, nearest even), rows alone bit-equal to the same rows of the
    16-row launch, and the swept layout (plain; at 9B gate + up also the SwiGLU epilogue on the device repack)
    bit-equal to the MLX layout."""
    import dataclasses

    from tensorfold.kernels import qgemv as Q

    cuda, bits, group, P, S, B, x, ref, bound, p, dev = _bf16x_case(out, inp)
    full = _run(cuda, dev, x[:16], p, bits, group)
    _check(full, ref[:16], bound[:16])
    for r0, R in ((0, 1), (5, 1), (15, 1), (0, 4), (3, 5), (8, 8), (1, 8)):
        y = _run(cuda, dev, x[r0:r0 + R], p, bits, group)
        assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"{label} xh rows {r0}+{R}"
    sp = dataclasses.replace(p, sw=1)
    sdev = [Q.sweep_pack_device(dev[0], dev[1], dev[2], bits, group, p.u, per=p.per), dev[1], dev[2]]
    for R in (1, 8, 16):
        y = cuda.to_device(np.full((R, out), np.nan, np.float32))
        ws = cuda.device_array((p.ks, R, out), np.float32) if p.ks > 1 else None
        Q.launch(*sdev, cuda.to_device(x[:R]), y, sp, R, ws=ws)
        y1 = y.copy_to_host()
        assert np.array_equal(full[:R].view(np.uint32), y1.view(np.uint32)), f"{label} xh swept R={R}"
    if out % 16 == 0 and out >= 16384:
        _glu_swept_same_bits(cuda, dev, x, p, bits, group, (1, 8), label + " xh")


@pytest.mark.parametrize("label,out,inp", [("9B down", 4096, 12288), ("27B down", 5120, 17408),
                                           ("27B out_proj", 5120, 6144)])
def test_deferred_completion_real_shapes(label, out, inp):
    """The deferred split-K completion (``launch(..., defer=True)`` + ``norms.launch_add_rms_norm_parts``, the
    runtime's ``TENSORFOLD_GEMV_DEFER=1``) at the shapes it serves, swept layout, the default plan, 1, 4 and 8 rows:
    the residual stream and the normed rows bit-equal to the in-kernel completion + ``launch_add_rms_norm``; y left
    unwritten; the GEMV within the oracle's bound (h - h0 against float64 on x rounded to bf16)."""
    import dataclasses

    from tensorfold.kernels import norms
    from tensorfold.kernels import qgemv as Q

    cuda = _cuda()
    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    p = dataclasses.replace(Q.plan(out, inp, bits, group), sw=1)
    assert p.ks > 1
    sdev = [cuda.to_device(Q.sweep_pack(P, S, B, bits, group, p.u, per=p.per)), cuda.to_device(S), cuda.to_device(B)]
    mult = cuda.to_device((1.0 + 0.1 * rng.standard_normal(out)).astype(np.float32))
    for R in (1, 4, 8):
        x = rng.standard_normal((R, inp)).astype(np.float32)
        h0 = rng.standard_normal((R, out)).astype(np.float32)
        ref, bound = _ref(_xin(x, p), P, S, B, bits, group)
        res = []
        for defer in (False, True):
            y = cuda.to_device(np.full((R, out), np.nan, np.float32))
            ws = cuda.to_device(np.full((p.ks, R, out), np.nan, np.float32))
            h, o = cuda.to_device(h0), cuda.to_device(np.full((R, out), np.nan, np.float32))
            Q.launch(*sdev, cuda.to_device(x), y, p, R, ws=ws, defer=defer)
            if defer:
                assert np.isnan(y.copy_to_host()).all(), f"{label} R={R}: a deferred launch wrote y"
                norms.launch_add_rms_norm_parts(ws, h, mult, o, 1e-6)
            else:
                norms.launch_add_rms_norm(y, h, mult, o, 1e-6)
            res.append((h.copy_to_host(), o.copy_to_host()))
        (ha, oa), (hb, ob) = res
        err = np.abs(hb.astype(np.float64) - h0 - ref)  # the GEMV's bound plus the residual add's rounding
        assert (err <= 3e-5 * bound + 2.0 ** -23 * np.abs(hb)).all(), f"{label} R={R}: residual vs float64"
        assert not np.isnan(ob).any()
        assert np.array_equal(ha.view(np.uint32), hb.view(np.uint32)), f"{label} R={R}: residual"
        assert np.array_equal(oa.view(np.uint32), ob.view(np.uint32)), f"{label} R={R}: normed rows"


@pytest.mark.parametrize("label,out,inp", [("2B head", 248320, 2048), ("27B down", 5120, 17408)])
def test_completion_forms_many_tiles(label, out, inp, monkeypatch):
    """The batched split-K completion's picked-per-warp sets (``TENSORFOLD_GEMV3_CMPU``: ``auto``, the default, 4 x 8
    past 64 outputs; ``auto164``, 16 x 4; ``auto88``, 8 x 8) on the swept layout at the decode plan, bf16-only x, 1,
    3 and 8 rows: the same bits. At the 2B head (ks 2) a warp walks about 20 tiles and the later chunk's warp
    completes nearly all of them, so the tile positions (searched once a lane, taken by shuffle) span masks of about
    20 set bits and 8 rows make about 2,500 outputs a warp (twenty 4 x 8 passes); the 27B down (ks 17) takes five
    rounds of 4 partials at 16 x 4. ``auto-cp``: the default set with the partial loads past the last chunk
    predicated off in every plain kernel (``TENSORFOLD_GEMV3_CPRED=1``; the default ``auto`` does it at 1-4 rows
    only; "auto" here sets ``0``) instead of clamped (at ks 2, 6 of a round's 8).
    Within the oracle's bound (float64 on bf16-rounded x) at 8 rows."""
    import dataclasses

    from tensorfold.kernels import qgemv as Q
    from tensorfold.model import bf16

    cuda = _cuda()
    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((8, inp)).astype(np.float32)
    p = dataclasses.replace(Q.plan(out, inp, bits, group), xh=1, sw=1)
    assert p.ks > 1
    dev = [Q.sweep_pack_device(*(cuda.to_device(a) for a in (P, S, B)), bits, group, p.u, per=p.per),
           cuda.to_device(S), cuda.to_device(B)]
    got = {}
    for v in ("auto", "auto164", "auto88", "auto-cp"):
        monkeypatch.setenv("TENSORFOLD_GEMV3_CMPU", v.split("-")[0])
        monkeypatch.setenv("TENSORFOLD_GEMV3_CPRED", "1" if v.endswith("-cp") else "0")
        for R in (1, 3, 8):
            y = _run(cuda, dev, x[:R], p, bits, group)
            assert not np.isnan(y).any(), (label, v, R)
            got[v, R] = y
    assert not Q.counters().copy_to_host().any(), "arrival counters not back at zero"
    for R in (1, 3, 8):
        for v in ("auto164", "auto88", "auto-cp"):
            assert np.array_equal(got["auto", R].view(np.uint32), got[v, R].view(np.uint32)), (label, v, R)
        assert np.array_equal(got["auto", R].view(np.uint32), got["auto", 8][:R].view(np.uint32)), (label, R)
    _check(got["auto", 8], *_ref(bf16.to_f32(bf16.from_f32(x)), P, S, B, bits, group))


@pytest.mark.parametrize("label,out,inp", [("9B gate|up", 24576, 4096), ("27B gate|up", 34816, 5120)])
def test_swiglu_completion_sets(label, out, inp, monkeypatch):
    """The SwiGLU epilogue's completion at the real gate | up shapes (swept layout with gate / up rows paired, bf16
    x, the decode plan, ks 4 / 5): session 31's picked set (``auto31``: 1 x 16 for warps of up to 32 outputs,
    clamped: 32 loads an output for 8 / 10 partials at one row), ``autog18`` (1 x 8, session 47), the default
    (``auto``: ``autog18``'s set at ks 4, session 31's at ks 5, ``qgemv.unroll_for``) and the one-tile-at-a-time
    completion (``TENSORFOLD_GEMV3_CMP=1``) give the same bits at 1, 3 and 8 rows. Oracle at 8 rows: float64
    silu(g) * u on bf16-rounded x, g and u from the float64 GEMV (output j: gate row j, up row out / 2 + j), within
    the GEMV's bound carried through silu (slope at most 1.1) and the product, plus 1e-6 relative for the float32
    epilogue."""
    import dataclasses

    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q
    from tensorfold.model import bf16

    cuda = _cuda()
    bits, group = 4, 64
    P, S, B = _rand_q(out, inp, bits, group)
    x = rng.standard_normal((8, inp)).astype(np.float32)
    p = dataclasses.replace(Q.plan(out, inp, bits, group), xh=1, sw=2)
    assert p.ks > 1 and A.glu_ok(p, out)
    dS, dB = cuda.to_device(S), cuda.to_device(B)
    gW = Q.sweep_pack_device(cuda.to_device(P), dS, dB, bits, group, p.u, glu=True, per=p.per)
    got = {}
    for cmp, cu in (("2", "auto31"), ("2", "auto"), ("2", "autog18"), ("1", "auto31")):
        monkeypatch.setenv("TENSORFOLD_GEMV3_CMP", cmp)
        monkeypatch.setenv("TENSORFOLD_GEMV3_CMPU", cu)
        for R in (1, 3, 8):
            y = cuda.to_device(np.full((R, out // 2), np.nan, np.float32))
            ws = cuda.device_array((p.ks, R, out), np.float32)
            Q.launch(gW, dS, dB, cuda.to_device(x[:R]), y, p, R, ws=ws, glu=True)
            got[cmp + cu, R] = y.copy_to_host()
            assert not np.isnan(got[cmp + cu, R]).any(), (label, cmp, cu, R)
    assert not Q.counters().copy_to_host().any(), "arrival counters not back at zero"
    for R in (1, 3, 8):
        for k in ("2auto31", "2autog18", "1auto31"):
            assert np.array_equal(got["2auto", R].view(np.uint32), got[k, R].view(np.uint32)), (label, k, R)
    ref, bound = _ref(bf16.to_f32(bf16.from_f32(x)), P, S, B, bits, group)
    h = out // 2  # output j: gate row j, up row h + j (``qgemv.glu_rows``)
    g, u, bg, bu = ref[:, :h], ref[:, h:], 3e-5 * bound[:, :h], 3e-5 * bound[:, h:]
    sg = g / (1 + np.exp(-g))
    want = sg * u
    lim = 1.1 * bg * (np.abs(u) + bu) + np.abs(sg) * bu + 1e-6 * np.abs(want) + 1e-30
    err = np.abs(got["2auto", 8] - want)
    assert (err <= lim).all(), f"{label}: max err / bound {(err / lim).max():.2e}"


@pytest.mark.parametrize("label,out,inp", [("9B gate|up", 24576, 4096), ("27B down", 5120, 17408)])
@pytest.mark.parametrize("env,rows", [("TENSORFOLD_GEMV3_R16", (16, 13)), ("TENSORFOLD_GEMV3_R32", (32, 29))])
def test_wide_row_launches_real_shapes(label, out, inp, env, rows, monkeypatch):
    """``TENSORFOLD_GEMV3_R16=1`` (bf16 x, 9-16 rows in one two-n-tile launch) at real shapes, on the swept layout
    the runtime reads: 16 and 13 rows equal launches of 8 + 8 / 8 + 5 (``=0``) bit for bit, and meet the float64
    oracle on bf16-rounded x; at 9B gate+up also with the SwiGLU epilogue (bit-equal to the 8-row launches). The
    same for ``TENSORFOLD_GEMV3_R32=1`` (17-32 rows in one four-n-tile launch): 32 and 29 rows against launches of
    16 + 16 / 16 + 13."""
    import dataclasses

    from tensorfold.kernels import qgemv as Q

    cuda, bits, group, P, S, B, x, ref, bound, p, dev = _bf16x_case(out, inp)
    forms = [(False, dataclasses.replace(p, sw=1), Q.sweep_pack_device(dev[0], dev[1], dev[2], bits, group, p.u,
                                                                        per=p.per), out)]
    if out % 16 == 0 and out >= 16384:
        forms.append((True, dataclasses.replace(p, sw=2), Q.sweep_pack_device(dev[0], dev[1], dev[2], bits, group,
                                                                             p.u, glu=True, per=p.per), out // 2))
    for glu, sp, W, yo in forms:
        for R in rows:
            ys = []
            for on in ("1", "0"):
                monkeypatch.setenv(env, on)
                y = cuda.to_device(np.full((R, yo), np.nan, np.float32))
                ws = cuda.device_array((p.ks, R, out), np.float32) if p.ks > 1 else None
                Q.launch(W, dev[1], dev[2], cuda.to_device(x[:R]), y, sp, R, ws=ws, glu=glu)
                ys.append(y.copy_to_host())
            assert not np.isnan(ys[0]).any(), f"{label} glu {glu} R={R}"
            assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32)), f"{label} glu {glu} R={R}"
            if not glu:
                _check(ys[0], ref[:R], bound[:R])


@pytest.mark.parametrize("label,out,inp", [("9B in_proj", 12352, 4096), ("9B down", 4096, 12288),
                                           ("27B out_proj", 5120, 6144), ("27B in_proj", 16480, 5120)])
def test_chunks_in_a_block_real_shapes(label, out, inp, monkeypatch):
    """``TENSORFOLD_GEMV3_KIN=1`` (one-row launches: a block's warps are a tile's K chunks, their sums added in
    shared memory) at the plans' own chunk counts (4, 12, 6, 5): bit-equal to the split-K form's one-row launch and
    to the same row of an 8-row launch, within the bf16-x oracle's bound."""
    import dataclasses

    from tensorfold.kernels import qgemv as Q

    cuda, bits, group, P, S, B, x, ref, bound, p, dev = _bf16x_case(out, inp)
    sp = dataclasses.replace(p, sw=1)
    sdev = [cuda.to_device(Q.sweep_pack(P, S, B, bits, group, p.u, per=p.per)), dev[1], dev[2]]

    def one(R, r0=0):
        y = cuda.to_device(np.full((R, out), np.nan, np.float32))
        ws = cuda.device_array((p.ks, R, out), np.float32)
        Q.launch(*sdev, cuda.to_device(x[r0:r0 + R]), y, sp, R, ws=ws)
        return y.copy_to_host()

    monkeypatch.setenv("TENSORFOLD_GEMV3_KIN", "0")
    y1, y8 = one(1), one(8)
    monkeypatch.setenv("TENSORFOLD_GEMV3_KIN", "1")
    assert Q.kin_ok(sp, 1, False, False, None), label
    for r0, want in ((0, y1), (5, y8[5:6])):
        y = one(1, r0)
        _check(y, ref[r0:r0 + 1], bound[r0:r0 + 1])
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), f"{label} row {r0}"
    assert np.array_equal(one(1).view(np.uint32), y1.view(np.uint32)), f"{label}: a second launch"
