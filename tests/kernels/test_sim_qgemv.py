"""Simulator tier for ``tensorfold.kernels.qgemv`` (the bandwidth-oriented tensor-core decode GEMV).

Every format it covers (4-bit g32/g64/g128, 8-bit g32/g64, 2-bit g64/g128) against float64 numpy on
``ops.affine_dequant`` weights, on fresh random weights and x (x scaled by 3). Tolerance, elementwise, the kernel's
two error sources stated separately:

- 1e-5 * (|x| @ |W|): x enters the tensor cores as bf16 hi + lo, about 2^-17 relative per element;
- plus 2^-20 * 128 * sum_g |s_g| sum_{i in g} |x_i| for 2- and 4-bit codes (0 for 8-bit): the codes enter as
  ``128 + q`` and the epilogue cancels the offset, ``s * dot(128 + q, x) + (b - 128 s) * sum(x)``. The cancellation
  is exact in real arithmetic, but each fp32 rounding on the way (the mma's k-steps, ``s * D``, the accumulator that
  briefly holds about ``128 |s| sum|x|`` before the bias term lands) is relative to that offset-sized magnitude, not
  to |x| @ |W|. For 2-bit codes (q <= 3) the offset term is about 40x |x| @ |W|; 2^-20 is 16 fp32 roundings of it.
  (Session 16 saw err / (1e-5 |x| @ |W|) = 1.01 once in a 2-bit case under the old single-term bound.)

Outputs and the
split-K workspace are poisoned with NaN. Geometries: warps walking several row tiles (the next tile's loads issued
during the current one), several blocks sharing a chunk, one chunk (y written directly) and several (the warp that
completes a tile sums the chunks), 1-11 rows (one or two n-tiles, launches of 8 + 3). Exactness: rows launched
alone or in smaller launches equal the same rows of a bigger launch bit for bit; the arrival counters end at zero.
"""

import dataclasses

import numpy as np
import pytest

from tensorfold.kernels import qgemv as Q
from tensorfold.model import bf16, quant
from tensorfold.reference import ops

rng = np.random.default_rng()


def _case(bits, group, out, K):
    w = rng.standard_normal((out, K)).astype(np.float32)
    return quant.quantize(w, bits, group)


def _go(P, S, B, x, p):
    R = x.shape[0]
    y = np.full((R, S.shape[0]), np.nan, np.float32)
    ws = np.full((p.ks, R, S.shape[0]), np.nan, np.float32)
    Q.launch(P, S, B, x, y, p, R, ws=ws)
    return y


OFFSET_EPS = 2.0 ** -20  # fp32 roundings allowed relative to the offset-sized intermediate (see the docstring)


def _ref(x, P, S, B, bits, group, tol=1e-5):
    """(float64 reference, elementwise error bound) for ``y = x @ W.T``."""
    W = ops.affine_dequant(P, S, B, bits, group).astype(np.float64)
    x64 = x.astype(np.float64)
    bound = tol * (np.abs(x64) @ np.abs(W).T)
    if bits != 8:
        ax = np.abs(x64).reshape(x.shape[0], -1, group).sum(-1)  # [R, groups]: sum |x| per group
        s = np.abs(bf16.to_f32(S).astype(np.float64))  # [out, groups]
        bound = bound + OFFSET_EPS * 128.0 * (ax @ s.T)
    return x64 @ W.T, bound


def _check(y, ref, bound):
    assert not np.isnan(y).any(), "NaN / unwritten output"
    err = np.abs(y - ref)
    assert (err <= bound).all(), f"max err/bound {(err / bound).max():.2e}"


def _run_case(bits, group, ks, blocks, mt, depth, rows=11):
    out, K = 72, (512 if group == 128 else 256)  # several row tiles a warp, the last one partial
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((rows, K)) * 3).astype(np.float32)
    ng = K // group
    cg = ng // ks
    u = 2 if cg % 2 == 0 else 1
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=mt, cg=cg, u=u, depth=min(depth, cg // u), blocks=blocks)
    assert p.ks == ks
    full = _go(P, S, B, x, p)
    _check(full, *_ref(x, P, S, B, bits, group))
    assert not Q.counters().any()
    for r0, R in ((0, 1), (rows - 2, 1), (2, 5)):
        y = _go(P, S, B, x[r0:r0 + R], p)
        assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"rows {r0}..{r0 + R - 1}"


@pytest.mark.parametrize("bits,group", Q.FORMATS)
def test_formats_splitk_rows_exact(bits, group):
    """Two chunks summed in the kernel, two blocks a chunk, loads two iterations ahead."""
    _run_case(bits, group, ks=2, blocks=4, mt=1, depth=2)


@pytest.mark.parametrize("bits,group", [(4, 64), (8, 32), (2, 128)])
def test_one_chunk_two_tile_rows(bits, group):
    """One chunk (y written directly), 32-row tiles, one block."""
    _run_case(bits, group, ks=1, blocks=1, mt=2, depth=1)


def test_plan_is_a_function_of_the_shape():
    for out, K in ((12288, 2048), (2048, 6144), (24576, 4096), (4096, 12288), (34816, 5120), (5120, 17408),
                   (248320, 2048)):
        p = Q.plan(out, K, 4, 64)
        ng = K // 64
        assert ng % p.cg == 0 and p.cg % p.u == 0 and p.ks * p.cg == ng and 1 <= p.depth <= p.cg // p.u
        assert Q.plan(out, K, 4, 64) == p
        spg = 4
        assert p.cg * (spg * 2 * 32 * 8 + 2 * 4 * 4 * spg * 4) <= Q._XB_BYTES  # one chunk for 8 rows fits


def test_affine_routes_large_weights_here(monkeypatch):
    from tensorfold.kernels import affine as A

    monkeypatch.delenv("TENSORFOLD_GEMV_V3", raising=False)
    monkeypatch.setenv("TENSORFOLD_GEMV_PF", "0")  # the prefetch form off: test_prefetch_plans_fit_and_route
    assert isinstance(A.plan_qgemv(24576, 4096, 4, 64), Q.V3Plan)
    assert not isinstance(A.plan_qgemv(12288, 2048, 4, 64), Q.V3Plan)
    assert not isinstance(A.plan_qgemv(24576, 4096, 3, 64), Q.V3Plan)  # a format it does not cover
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "0")
    assert not isinstance(A.plan_qgemv(24576, 4096, 4, 64), Q.V3Plan)
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "1")
    assert isinstance(A.plan_qgemv(12288, 2048, 4, 64), Q.V3Plan)


@pytest.mark.parametrize("bits,group,u", [(4, 64, 2), (4, 64, 4), (8, 32, 4), (2, 128, 2)])
def test_cp_async_ring_and_prep_batch_same_bits(bits, group, u):
    """The cp.async ring form (weights and scales copied into a per-warp shared ring) and a small x-preparation
    batch change only how words reach the registers: the same bits as the register-ring form, 1-3 rows."""
    out, K = 72, 512
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((3, K)) * 3).astype(np.float32)
    cg = K // group // 2
    base = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4)
    ring = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4, stages=3, pb=1)
    assert ring.stages_for(1) >= 2 and ring.stages_for(2) == 0
    y0 = _go(P, S, B, x, base)
    _check(y0, *_ref(x, P, S, B, bits, group))
    y1 = _go(P, S, B, x, ring)
    assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32))
    assert not Q.counters().any()


def test_non_bf16_scales_plan_the_first_kernels(monkeypatch):
    """Weights with float32 scales are planned for the first kernels (the plan knows the scale dtype), and a qgemv
    plan handed float32 scales is refused with a clear error instead of running."""
    from tensorfold.kernels import affine as A
    from tensorfold.model import bf16

    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "1")
    out, K, R, bits, group = 40, 640, 3, 4, 64
    P, S, B = _case(bits, group, out, K)
    S32, B32 = bf16.to_f32(S), bf16.to_f32(B)
    assert isinstance(A.plan_qgemv(out, K, bits, group), Q.V3Plan)
    p = A.plan_qgemv(out, K, bits, group, A.scale_kind(S32))
    assert not isinstance(p, Q.V3Plan)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = np.full((R, out), np.nan, np.float32)
    ws = np.full((p.ks, R, out), np.nan, np.float32) if p.ks > 1 else None
    A.launch_qgemv(P, S32, B32, x, y, bits, group, p, ws=ws)
    _check(y, *_ref(x, P, S, B, bits, group))
    with pytest.raises(ValueError, match="bf16 scales"):
        A.launch_qgemv(P, S32, B32, x, y, bits, group, A.plan_qgemv(out, K, bits, group))


def test_groups_an_iteration_and_depth_do_not_change_bits():
    """u (groups an iteration) and depth (iterations of loads in flight) only reorder loads, never the arithmetic:
    plans differing only in them give the same bits (so a launch may pick them by its n-tile count)."""
    bits, group, out, K = 4, 64, 72, 1024
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((5, K)) * 3).astype(np.float32)
    ys = []
    for u, depth in ((1, 1), (2, 2), (4, 1)):
        p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=8, u=u, depth=depth, blocks=4)
        ys.append(_go(P, S, B, x, p))
    _check(ys[0], *_ref(x, P, S, B, bits, group))
    for y in ys[1:]:
        assert np.array_equal(ys[0].view(np.uint32), y.view(np.uint32))


def test_occupancy_knob_is_launch_geometry_only():
    """occ1 changes only how many blocks share a chunk in one-n-tile launches (and the register cap on the GPU):
    the chunking, hence every bit, stays; two-n-tile launches keep the plan's blocks."""
    bits, group, out, K = 4, 64, 200, 512
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((3, K)) * 3).astype(np.float32)
    base = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=4, u=2, depth=1, blocks=4)
    occ = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=4, u=2, depth=1, blocks=4, occ1=1)
    assert occ.grid_x(1) != base.grid_x(1) and occ.grid_x(2) == base.grid_x(2)
    assert occ.maxreg_for(1) == 65536 // (1 * 64) // 8 * 8 or occ.maxreg_for(1) == 255
    assert occ.maxreg_for(2) == 0 and base.maxreg_for(1) == 0
    y0 = _go(P, S, B, x, base)
    _check(y0, *_ref(x, P, S, B, bits, group))
    y1 = _go(P, S, B, x, occ)
    assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32))
    assert not Q.counters().any()


@pytest.mark.variant  # an opt-in form (off by default): run with -m variant
@pytest.mark.parametrize("bits,group,u,ks", [(4, 64, 4, 1), (4, 64, 2, 2), (8, 32, 4, 1), (2, 128, 2, 2)])
def test_prefetch_form_same_bits(bits, group, u, ks):
    """The prefetch form (every tile's words copied into dynamic shared memory before the wait, a warp holding up to
    ``pf`` tiles, helper warps in the x preparation) changes only how words reach the registers: the same bits as
    the register-ring form of the same chunking, at one and two n-tiles (1-7 rows), one chunk and two."""
    out, K = 72, 512  # 5 row tiles, the last partial
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((7, K)) * 3).astype(np.float32)
    cg = K // group // ks
    base = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4)
    pre = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=2, pf=2, nwp=3)
    assert pre.pf_launch(1)[:4] == (2, 2, 2, 96)
    for R in (1, 3, 7):
        y0 = _go(P, S, B, x[:R], base)
        _check(y0, *_ref(x[:R], P, S, B, bits, group))
        y1 = _go(P, S, B, x[:R], pre)
        assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32)), f"{R} rows"
        assert not Q.counters().any()


@pytest.mark.variant  # an opt-in form (off by default): run with -m variant
@pytest.mark.parametrize("bits,group,ks,kp", [(4, 64, 1, 2), (4, 64, 2, 4), (8, 32, 1, 4), (2, 128, 1, 2)])
def test_prefetch_form_parts(bits, group, ks, kp):
    """A tile split into ``kp`` parts inside a block (part sums added in part order through shared memory): within
    the float64 bound; 1-7 rows (one and two n-tiles) bit-equal to the same rows of a bigger launch; a geometry
    with fewer tile slots (what two n-tiles may take) gives the same bits; counters end at zero."""
    out, K = 72, 1024
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((7, K)) * 3).astype(np.float32)
    cg = K // group // ks
    u = 4 if (cg // kp) % 4 == 0 else 2
    pre = Q.V3Plan(out, K, bits, group, nw=2 * kp, mt=1, cg=cg, u=u, depth=1, blocks=2, pf=2, nwp=3, kp=kp)
    one = Q.V3Plan(out, K, bits, group, nw=kp, mt=1, cg=cg, u=u, depth=1, blocks=2, pf=3, nwp=3, kp=kp)
    full = _go(P, S, B, x, pre)
    _check(full, *_ref(x, P, S, B, bits, group))
    assert not Q.counters().any()
    for r0, R in ((0, 1), (5, 1), (1, 3)):
        y = _go(P, S, B, x[r0:r0 + R], pre)
        assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"rows {r0}+{R}"
    y = _go(P, S, B, x[:3], one)
    assert np.array_equal(y.view(np.uint32), full[:3].view(np.uint32)), "one tile slot"
    assert not Q.counters().any()


def test_prefetch_plans_fit_and_route(monkeypatch):
    """Prefetch plans exist where a weight fits the GPU's shared memory (the 2B shapes, the 9B out_proj) and not for
    the big ones; each keeps every block resident at one n-tile and fits a block's shared memory at one and two
    n-tiles; ``plan_qgemv`` routes to them with ``TENSORFOLD_GEMV_PF=1`` and not by default."""
    from tensorfold.kernels import affine as A

    monkeypatch.delenv("TENSORFOLD_GEMV_PF", raising=False)
    assert Q.plan_pf(12288, 2048, 4, 64) is None and not getattr(A.plan_qgemv(12288, 2048, 4, 64), "pf", 0)
    monkeypatch.setenv("TENSORFOLD_GEMV_PF", "1")
    monkeypatch.delenv("TENSORFOLD_GEMV_V3", raising=False)
    for out, K in ((8224, 2048), (2048, 2048), (12288, 2048), (2048, 6144), (4096, 4096), (5120, 6144)):
        p = Q.plan_pf(out, K, 4, 64)
        assert p is not None and p.pf >= 1, (out, K)
        assert p.ks * p.cg == K // 64 and p.cg % p.u == 0
        nw, pf, gx = p.pf_geom(1)
        assert gx * p.ks <= Q.SMS and nw * pf * gx * 16 >= out
        for nt in (1, 2):
            nw, pf, gx = p.pf_geom(nt)
            assert sum(p.smem_bytes(nt, nw, pf)) <= Q.smem_max() == Q.SMEM_MAX and nw * pf * gx * 16 >= out
        assert A.plan_qgemv(out, K, 4, 64) == p
    for out, K in ((24576, 4096), (4096, 12288), (248320, 2048)):
        assert Q.plan_pf(out, K, 4, 64) is None
    assert Q.plan_pf(12288, 2048, 4, 32) is None  # one word a lane and group: not this form
    monkeypatch.setenv("TENSORFOLD_GEMV_PF", "0")
    assert not (isinstance(A.plan_qgemv(12288, 2048, 4, 64), Q.V3Plan) and A.plan_qgemv(12288, 2048, 4, 64).pf)


def test_private_counters():
    """A runner's own arrival counters (``new_counters``, ``launch(..., cnt=)``): the same bits as the shared set,
    and both are left at zero (two chunks, so the counters are used)."""
    out, K = 72, 256
    P, S, B = _case(4, 64, out, K)
    x = (rng.standard_normal((3, K)) * 3).astype(np.float32)
    p = Q.V3Plan(out, K, 4, 64, nw=2, mt=1, cg=2, u=2, depth=1, blocks=4)
    assert p.ks == 2
    mine = Q.new_counters()
    y0 = _go(P, S, B, x, p)
    y1 = np.full_like(y0, np.nan)
    ws = np.full((p.ks, 3, out), np.nan, np.float32)
    Q.launch(P, S, B, x, y1, p, 3, ws=ws, cnt=mine)
    assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32))
    assert mine is not Q.counters() and not mine.any() and not Q.counters().any()
    _check(y1, *_ref(x, P, S, B, 4, 64))
    # and the launch really uses the counters it is given: preset so every tile looks complete at its first
    # arrival, the partials are summed before the other chunk lands (NaN-poisoned workspace)
    bad = Q.new_counters()
    bad[:] = p.ks - 1
    y2 = np.full_like(y0, np.nan)
    Q.launch(P, S, B, x, y2, p, 3, ws=np.full((p.ks, 3, out), np.nan, np.float32), cnt=bad)
    assert np.isnan(y2).any() and not Q.counters().any()


@pytest.mark.parametrize("bits,group,u,ks,mt", [(4, 64, 4, 2, 1), (4, 64, 2, 1, 2), (8, 32, 4, 2, 1),
                                                (2, 128, 2, 2, 1), (4, 32, 4, 1, 1)])
def test_swept_layout_same_bits(bits, group, u, ks, mt):
    """``sweep_pack``'s layout with runs of one K chunk (``per = cg / u``; codes group by group, scales and biases
    inside each piece) feeds the same values to the same arithmetic: bit-equal to the MLX layout at 1, 3 and 6 rows,
    with a partial last unit (72 rows: padded with zeros), one and two chunks; the packing itself is checked
    against the MLX arrays word by word (piece ``(i, T)`` at ``((i // per) * units + T) * per + i % per``, written
    out here, not taken from ``sweep_piece``); a plan handed the MLX layout is refused."""
    out, K = 72, 512
    P, S, B = _case(bits, group, out, K)
    ng = K // group
    cg = ng // ks
    base = Q.V3Plan(out, K, bits, group, nw=2, mt=mt, cg=cg, u=u, depth=1, blocks=4)
    swp = Q.V3Plan(out, K, bits, group, nw=2, mt=mt, cg=cg, u=u, depth=1, blocks=4, sw=True)
    per = cg // u
    assert swp.per == per
    Wp = Q.sweep_pack(P, S, B, bits, group, u, per=per)
    assert Wp.shape == Q.sweep_shape(out, K, bits, group, u) and Wp.dtype == np.uint32
    wpg = group * bits // 32
    nu = -(-out // 16)
    for _ in range(20):  # random (row, iteration) entries of the packing, read back by hand
        r, i = int(rng.integers(out)), int(rng.integers(ng // u))
        piece = Wp[((i // per) * nu + r // 16) * per + i % per]
        for k in range(u):  # group k of the iteration: its 16 rows' words in turn
            at = (k * 16 + r % 16) * wpg
            assert np.array_equal(piece[at:at + wpg], P[r, (i * u + k) * wpg:(i * u + k + 1) * wpg])
        sb = piece[16 * u * wpg:].view(np.uint16)
        assert np.array_equal(sb[(r % 16) * u:(r % 16 + 1) * u], S[r, i * u:(i + 1) * u])
        assert np.array_equal(sb[16 * u + (r % 16) * u:16 * u + (r % 16 + 1) * u], B[r, i * u:(i + 1) * u])
    for R in (1, 3, 6):
        x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
        y0 = _go(P, S, B, x, base)
        _check(y0, *_ref(x, P, S, B, bits, group))
        y1 = _go(Wp, S, B, x, swp)
        assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32)), f"R={R}"
    assert not Q.counters().any()
    with pytest.raises(ValueError, match="sweep_pack"):
        _go(P, S, B, x, swp)


@pytest.mark.parametrize("bits,group,u,out,glu,per", [(4, 64, 4, 40, False, 1), (2, 128, 2, 40, False, 2),
                                                      (4, 64, 4, 48, True, 2), (4, 64, 2, 40, False, 4)])
def test_sweep_pack_device_matches_host(bits, group, u, out, glu, per):
    """The device repack writes the same words as the numpy ``sweep_pack`` (a partial last unit padded with 0;
    gate / up rows paired)."""
    K = 512
    P, S, B = _case(bits, group, out, K)
    host = Q.sweep_pack(P, S, B, bits, group, u, glu=glu, per=per)
    dev = Q.sweep_pack_device(P, S, B, bits, group, u, glu=glu, per=per)
    assert np.array_equal(np.asarray(dev), host)


@pytest.mark.parametrize("ks", [1, 2])
def test_swept_glu_same_bits(ks):
    """The SwiGLU epilogue on the swept layout with gate / up rows paired (``sweep_pack(glu=True)``, ``sw = 2``):
    bit-equal to the MLX-layout epilogue at 1 and 6 rows, one and two chunks; ``glu_rows`` pairs unit T's gate rows
    8T..8T+7 with up rows I+8T..; a paired plan refuses a launch without the epilogue and the other way round."""
    bits, group, u, out, K = 4, 64, 4, 96, 512
    assert list(Q.glu_rows(32)) == list(range(8)) + list(range(16, 24)) + list(range(8, 16)) + list(range(24, 32))
    P, S, B = _case(bits, group, out, K)
    cg = K // group // ks
    base = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4)
    swp = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4, sw=2)
    Wp = Q.sweep_pack(P, S, B, bits, group, u, glu=True, per=swp.per)
    for R in (1, 6):
        x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
        ws = np.full((ks, R, out), np.nan, np.float32)
        y0 = np.full((R, out // 2), np.nan, np.float32)
        y1 = y0.copy()
        Q.launch(P, S, B, x, y0, base, R, ws=ws, glu=True)
        Q.launch(Wp, S, B, x, y1, swp, R, ws=ws, glu=True)
        assert not np.isnan(y0).any()
        assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32)), f"R={R}"
    assert not Q.counters().any()
    with pytest.raises(ValueError, match="paired"):
        Q.launch(Wp, S, B, x, np.zeros((R, out), np.float32), swp, R, ws=ws)


def test_affine_launcher_takes_swept_weights():
    """``affine.launch_qgemv`` hands a swept qgemv plan to ``qgemv.launch`` before reading any shape from W (a
    swept W is [pieces, words], so its first dimension is not the row count): plain and SwiGLU launches through it
    give the bits of the direct launch; asking it for the CUDA-core kernel (``no=``) of a swept plan is refused."""
    from tensorfold.kernels import affine as A
    bits, group, u, out, K = 4, 64, 4, 96, 512
    P, S, B = _case(bits, group, out, K)
    for glu in (False, True):
        p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=4, u=u, depth=1, blocks=4, sw=2 if glu else 1)
        Wp = Q.sweep_pack(P, S, B, bits, group, u, glu=glu, per=p.per)
        assert Wp.shape[0] != out
        R = 3
        x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
        ws = np.full((p.ks, R, out), np.nan, np.float32)
        w = out // 2 if glu else out
        y0 = np.full((R, w), np.nan, np.float32)
        y1 = y0.copy()
        Q.launch(Wp, S, B, x, y0, p, R, ws=ws, glu=glu)
        A.launch_qgemv(Wp, S, B, x, y1, bits, group, plan=p, ws=ws, glu=glu)
        assert not np.isnan(y0).any()
        assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32)), f"glu={glu}"
        with pytest.raises(ValueError, match="swept"):
            A.launch_qgemv(Wp, S, B, x, y1, bits, group, plan=p, ws=ws, no=4)
    assert not Q.counters().any()


@pytest.mark.parametrize("bits,group,ks", [(4, 64, 2), (4, 32, 1), (8, 32, 2), (2, 128, 1)])
def test_bf16_x_formats_rows_exact(bits, group, ks):
    """bf16-only x (``xh``: one B column a batch row, 8 rows an n-tile). Oracle: float64 on x rounded to bf16 by
    ``bf16.from_f32`` (nearest, ties to even, as ``cvt.rn``) within the fp32-class bound of ``_ref``, and float64
    on the float32 x within 2^-8 |x| @ |W| more (bf16 rounding is at most 2^-9 relative a value). 11 rows (launches
    of 8 + 3); rows launched alone or in smaller launches equal the same rows of the big launch bit for bit, which
    also holds across the two kernel forms (1-4 rows: zero lo columns, xh 2; 5-8 rows: 8 rows an n-tile, xh 1)."""
    out, K, rows = 72, (512 if group == 128 else 256), 11
    P, S, B = _case(bits, group, out, K)
    cg = K // group // ks
    u = 2 if cg % 2 == 0 else 1
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4, xh=1)
    x = (rng.standard_normal((rows, K)) * 3).astype(np.float32)
    full = _go(P, S, B, x, p)
    xb = bf16.to_f32(bf16.from_f32(x))
    ref, bound = _ref(xb, P, S, B, bits, group)
    _check(full, ref, bound)
    W = ops.affine_dequant(P, S, B, bits, group).astype(np.float64)
    ref32 = x.astype(np.float64) @ W.T
    _check(full, ref32, bound + 2.0 ** -8 * (np.abs(x.astype(np.float64)) @ np.abs(W).T))
    assert not np.array_equal(full, _go(P, S, B, x, dataclasses.replace(p, xh=0))), "xh changed nothing"
    assert not Q.counters().any()
    for r0, R in ((0, 1), (rows - 2, 1), (2, 5), (1, 8)):
        y = _go(P, S, B, x[r0:r0 + R], p)
        assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"rows {r0}..{r0 + R - 1}"


@pytest.mark.parametrize("ks", [1, 2])
def test_bf16_x_swept_and_glu_same_bits(ks):
    """bf16-only x on the swept layout: bit-equal to the MLX layout, plain (rows in order) and with the SwiGLU
    epilogue (gate / up paired), at 1 and 7 rows; the epilogue equals silu(gate) * up of the plain GEMV's gate and up
    columns, in float64 on the host, within 1e-5 relative (a mispaired row would be off by O(1))."""
    bits, group, u, out, K = 4, 64, 4, 96, 512
    P, S, B = _case(bits, group, out, K)
    cg = K // group // ks
    base = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4, xh=1)
    sw1 = dataclasses.replace(base, sw=1)
    sw2 = dataclasses.replace(base, sw=2)
    W1 = Q.sweep_pack(P, S, B, bits, group, u, per=base.per)
    W2 = Q.sweep_pack(P, S, B, bits, group, u, glu=True, per=base.per)
    for R in (1, 7):
        x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
        ws = np.full((ks, R, out), np.nan, np.float32)
        y0 = _go(P, S, B, x, base)
        assert np.array_equal(y0.view(np.uint32), _go(W1, S, B, x, sw1).view(np.uint32)), f"plain R={R}"
        g0 = np.full((R, out // 2), np.nan, np.float32)
        g1 = g0.copy()
        Q.launch(P, S, B, x, g0, base, R, ws=ws, glu=True)
        Q.launch(W2, S, B, x, g1, sw2, R, ws=ws, glu=True)
        assert not np.isnan(g0).any()
        assert np.array_equal(g0.view(np.uint32), g1.view(np.uint32)), f"glu R={R}"
        gt, up = y0[:, :out // 2].astype(np.float64), y0[:, out // 2:].astype(np.float64)
        want = gt / (1.0 + np.exp(-gt)) * up
        assert (np.abs(g0 - want) <= 1e-5 * np.abs(want) + 1e-30).all(), f"glu vs GEMV + silu * up, R={R}"
    assert not Q.counters().any()


def _wide_launch_case(monkeypatch, ks, glu, rows, wide_env, narrow_env, want_wide, want_narrow):
    """A launch of ``rows`` rows under ``wide_env`` against ``narrow_env``'s launches, and one-row launches, bit for
    bit, on the swept layout (out 96, K 512, ``ks`` chunks, plain or SwiGLU); the launches' n-tiles must be
    ``want_wide`` / ``want_narrow``; the plain outputs meet the float64 oracle on bf16-rounded x (``_ref``'s bound);
    the arrival counters end at zero."""
    bits, group, u, out, K = 4, 64, 4, 96, 512
    P, S, B = _case(bits, group, out, K)
    base = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=K // group // ks, u=u, depth=1, blocks=4, xh=1)
    p = dataclasses.replace(base, sw=2 if glu else 1)
    W = Q.sweep_pack(P, S, B, bits, group, u, glu=glu, per=base.per)
    x = (rng.standard_normal((rows, K)) * 3).astype(np.float32)
    seen = []
    real = Q.get_kernel
    monkeypatch.setattr(Q, "get_kernel", lambda *a, **k: (seen.append(a[2]), real(*a, **k))[1])

    def go(xr, env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        R = xr.shape[0]
        y = np.full((R, out // 2 if glu else out), np.nan, np.float32)
        Q.launch(W, S, B, xr, y, p, R, ws=np.full((ks, R, out), np.nan, np.float32), glu=glu)
        assert not np.isnan(y).any(), "NaN / unwritten output"
        return y

    yw = go(x, wide_env)
    assert seen == want_wide, f"n-tiles of the launches: {seen}"
    seen.clear()
    yn = go(x, narrow_env)
    assert seen == want_narrow, f"n-tiles of the launches: {seen}"
    assert np.array_equal(yw.view(np.uint32), yn.view(np.uint32))
    for r in (0, 8, rows - 1):
        assert np.array_equal(go(x[r:r + 1], wide_env).view(np.uint32), yw[r:r + 1].view(np.uint32)), f"row {r}"
    if not glu:
        _check(yw, *_ref(bf16.to_f32(bf16.from_f32(x)), P, S, B, bits, group))
    assert not Q.counters().any()


@pytest.mark.parametrize("ks,glu", [(1, False), (2, False), (2, True)])
def test_sixteen_row_launches_same_bits(monkeypatch, ks, glu):
    """``TENSORFOLD_GEMV3_R16=1`` (the default): a bf16-x launch takes 9-16 rows as two n-tiles of 8 (one weight
    read). 13 rows in one two-n-tile launch against ``TENSORFOLD_GEMV3_R16=0``'s launches of 8 + 5 and against
    one-row launches, plain and SwiGLU, one K chunk and two."""
    _wide_launch_case(monkeypatch, ks, glu, 13, {"TENSORFOLD_GEMV3_R16": "1"}, {"TENSORFOLD_GEMV3_R16": "0"},
                      [2], [1, 1])


@pytest.mark.parametrize("ks,glu", [(1, False), (2, True)])
def test_thirty_two_row_launches_same_bits(monkeypatch, ks, glu):
    """``TENSORFOLD_GEMV3_R32=1`` (opt-in): 17-32 rows in one launch of four n-tiles of 8. 29 rows against the
    default's launches of 16 + 13 and against one-row launches, plain and SwiGLU."""
    _wide_launch_case(monkeypatch, ks, glu, 29, {"TENSORFOLD_GEMV3_R32": "1"}, {"TENSORFOLD_GEMV3_R32": "0"},
                      [4], [2, 2])


@pytest.mark.parametrize("glu", [False, True])
def test_sixteen_row_launch_depth_two_same_bits(monkeypatch, glu):
    """``TENSORFOLD_GEMV3_NT2DEPTH=2`` (the default): a 16-row launch keeps two iterations of weight loads in
    flight a warp (across tile boundaries: one block, so each warp walks three tiles) and gives the bits of depth
    1, 13 rows, plain and SwiGLU; the launch must be one two-n-tile launch at depth 2."""
    bits, group, u, out, K, rows = 4, 64, 4, 96, 512, 13
    P, S, B = _case(bits, group, out, K)
    base = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=K // group, u=u, depth=1, blocks=1, xh=1)
    assert base.ks == 1 and base.per == 2
    p = dataclasses.replace(base, sw=2 if glu else 1)
    W = Q.sweep_pack(P, S, B, bits, group, u, glu=glu, per=base.per)
    x = (rng.standard_normal((rows, K)) * 3).astype(np.float32)
    seen = []
    real = Q.get_kernel
    monkeypatch.setattr(Q, "get_kernel", lambda *a, **k: (seen.append((a[2], a[7])), real(*a, **k))[1])
    monkeypatch.setenv("TENSORFOLD_GEMV3_R16", "1")
    ys = {}
    for depth in ("2", "1"):
        monkeypatch.setenv("TENSORFOLD_GEMV3_NT2DEPTH", depth)
        y = np.full((rows, out // 2 if glu else out), np.nan, np.float32)
        Q.launch(W, S, B, x, y, p, rows, glu=glu)
        assert not np.isnan(y).any(), f"NaN / unwritten output at depth {depth}"
        ys[depth] = y
    assert seen == [(2, 2), (2, 1)], f"(n-tiles, depth) of the launches: {seen}"
    assert np.array_equal(ys["2"].view(np.uint32), ys["1"].view(np.uint32))
    if not glu:
        _check(ys["2"], *_ref(bf16.to_f32(bf16.from_f32(x)), P, S, B, bits, group))


def test_sixteen_row_launch_policy(monkeypatch):
    """Which launches may take 16 rows (host policy, no kernel runs): only with ``TENSORFOLD_GEMV3_R16=1``, more
    than 8 rows, bf16-only x, no deferred completion or fused norm, and (ks > 1) a workspace of min(R, 16) rows."""
    p = Q.V3Plan(96, 512, 4, 64, nw=2, mt=1, cg=4, u=4, depth=1, blocks=4, xh=1)
    assert p.ks == 2
    ws = np.zeros((2, 12, 96), np.float32)
    monkeypatch.setenv("TENSORFOLD_GEMV3_R16", "0")
    assert Q._launch_rows(p, 12, ws, 96, False, None) == 8
    monkeypatch.setenv("TENSORFOLD_GEMV3_R16", "1")
    assert Q._launch_rows(p, 12, ws, 96, False, None) == 16
    assert Q._launch_rows(p, 8, ws, 96, False, None) == 8
    assert Q._launch_rows(p, 13, ws, 96, False, None) == 8, "workspace of 12 rows"
    assert Q._launch_rows(dataclasses.replace(p, xh=0), 12, ws, 96, False, None) == 8
    assert Q._launch_rows(p, 12, ws, 96, True, None) == 8
    monkeypatch.delenv("TENSORFOLD_GEMV3_R16", raising=False)
    assert Q._launch_rows(p, 12, ws, 96, False, None) == 16, "on by default"
    ws40 = np.zeros((2, 40, 96), np.float32)
    assert Q._launch_rows(p, 40, ws40, 96, False, None) == 16, "32-row launches are opt-in"
    monkeypatch.setenv("TENSORFOLD_GEMV3_R32", "1")
    assert Q._launch_rows(p, 40, ws40, 96, False, None) == 32
    assert Q._launch_rows(p, 16, ws40, 96, False, None) == 16
    assert Q._launch_rows(p, 40, np.zeros((2, 20, 96), np.float32), 96, False, None) == 16, "workspace of 20 rows"
    assert [Q.nt_for(r, True) for r in (4, 8, 9, 16, 17, 32)] == [1, 1, 2, 2, 4, 4]
    monkeypatch.setenv("TENSORFOLD_GEMV3_R16", "0")
    assert Q._launch_rows(p, 40, ws40, 96, False, None) == 8, "R32 takes R16"
    monkeypatch.delenv("TENSORFOLD_GEMV3_R32")
    monkeypatch.delenv("TENSORFOLD_GEMV3_R16")
    monkeypatch.setenv("TENSORFOLD_GEMV3_R16", "2")
    with pytest.raises(ValueError, match="TENSORFOLD_GEMV3_R16"):
        Q._launch_rows(p, 12, ws, 96, False, None)


def test_sixteen_row_launch_grid(monkeypatch):
    """A 16-row launch's grid holds only the blocks resident at once (``nt2_occ`` an SM, default 2; the plan's
    3 an SM made a second wave of a third of them); one-n-tile launches and hi + lo plans keep the plan's grid."""
    p = Q.V3Plan(24576, 4096, 4, 64, nw=4, mt=1, cg=16, u=4, depth=1, blocks=3 * Q.SMS, xh=1)
    assert p.ks == 4
    monkeypatch.delenv("TENSORFOLD_GEMV3_NT2OCC", raising=False)
    assert p.grid_x(1) * p.ks == 3 * Q.SMS
    assert p.grid_x(2) * p.ks == 2 * Q.SMS
    assert dataclasses.replace(p, xh=0).grid_x(2) * p.ks == 3 * Q.SMS
    monkeypatch.setenv("TENSORFOLD_GEMV3_NT2OCC", "3")
    assert p.grid_x(2) * p.ks == 3 * Q.SMS
    monkeypatch.delenv("TENSORFOLD_GEMV3_NT2DEPTH", raising=False)
    assert p.depth_for(2) == 2 and p.depth_for(1) == 1, "depth 2 in 16-row launches by default"
    monkeypatch.setenv("TENSORFOLD_GEMV3_NT2DEPTH", "1")
    assert p.depth_for(2) == 1 and p.depth_for(1) == 1
    monkeypatch.setenv("TENSORFOLD_GEMV3_NT2DEPTH", "2")
    assert p.depth_for(2) == 2 and p.depth_for(1) == 1
    assert dataclasses.replace(p, cg=4).depth_for(2) == 1, "at most a chunk's iterations"
    monkeypatch.setenv("TENSORFOLD_GEMV3_NT2OCC", "4")
    with pytest.raises(ValueError, match="TENSORFOLD_GEMV3_NT2OCC"):
        p.grid_x(2)


def test_chunk_past_static_budget_dynamic_x_tile():
    """A K chunk past the default shared-memory budget (``cg`` 32 groups of 64, one chunk: what
    ``TENSORFOLD_GEMV3_CG`` can ask for) keeps its x fragments in dynamic shared memory (``xb_dynamic``: the 8-row
    bf16-x form and the two-n-tile hi + lo form; the 1-4-row form still fits the static array). Oracle: float64 on
    the kernel's x (bf16-rounded for ``xh``, as given for hi + lo) within ``_ref``'s bound; rows of 1-, 3- and 8-row
    launches equal the same rows of the 11-row launch bit for bit, across the static and dynamic forms."""
    bits, group, out, K, rows = 4, 64, 40, 2048, 11
    assert Q.xb_dynamic(group, 32, 1, xh=1) and Q.xb_dynamic(group, 32, 2) and not Q.xb_dynamic(group, 32, 1, xh=2)
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((rows, K)) * 3).astype(np.float32)
    for xh in (1, 0):
        p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=32, u=4, depth=1, blocks=2, xh=xh)
        assert p.ks == 1
        full = _go(P, S, B, x, p)
        xin = bf16.to_f32(bf16.from_f32(x)) if xh else x
        ref, bound = _ref(xin, P, S, B, bits, group)
        _check(full, ref, bound)
        for r0, R in ((0, 1), (4, 3), (3, 8)):
            y = _go(P, S, B, x[r0:r0 + R], p)
            assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"xh {xh} rows {r0}+{R}"
    assert not Q.counters().any()


def test_cg_override_env(monkeypatch):
    """``TENSORFOLD_GEMV3_CG`` sets the named shape's chunk (and blocks) and nothing else; a chunk that does not
    divide the groups, or a malformed entry, is refused with a message naming the entry."""
    monkeypatch.setenv("TENSORFOLD_GEMV3_CG", "4096x4096=32/264, 5120x6144=48")
    p = Q.plan(4096, 4096, 4, 64)
    assert (p.cg, p.ks, p.blocks) == (32, 2, 264)
    assert Q.plan(5120, 6144, 4, 64).cg == 48
    monkeypatch.delenv("TENSORFOLD_GEMV3_CG")
    assert Q.plan(4096, 4096, 4, 64).cg == 8 and Q.plan(24576, 4096, 4, 64).cg == 16
    monkeypatch.setenv("TENSORFOLD_GEMV3_CG", "4096x4096=12")
    with pytest.raises(ValueError, match="4096x4096=12"):
        Q.plan(4096, 4096, 4, 64)
    monkeypatch.setenv("TENSORFOLD_GEMV3_CG", "4096-4096=16")
    with pytest.raises(ValueError, match="OUTxIN=CG"):
        Q.plan(4096, 4096, 4, 64)


def _launch_under(monkeypatch, env, W, S, B, x, p, glu):
    """y of one launch of plan ``p`` with the environment ``env`` set (kernels are generated per setting), its
    outputs and workspace poisoned with NaN; checks every output was written."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    R, out = x.shape[0], S.shape[0]
    y = np.full((R, out // 2 if glu else out), np.nan, np.float32)
    ws = np.full((p.ks, R, out), np.nan, np.float32)
    Q.launch(W, S, B, x, y, p, R, ws=ws, glu=glu)
    assert not np.isnan(y).any(), f"{env} R={R}: unwritten output"
    return y


@pytest.mark.parametrize("glu", [False, True])
def test_batched_completion_same_bits(monkeypatch, glu):
    """The split-K completion that sums a warp's completed tiles together (``TENSORFOLD_GEMV3_CMP=2``, the
    default) against the one-tile-at-a-time form (``1``): bit-equal, plain and with the SwiGLU epilogue. One warp a
    chunk owns every tile and completes several; 3 rows make 240 / 144 outputs (more than one pass of
    ``CMP_EPL`` x 32); 9 chunks pass ``CMP_KU`` partials a round; the last tile is partial (plain: 72 rows in
    16-row tiles; SwiGLU: 40 gate / up pairs in 32-row tiles, whose outputs past 40 must not read past the
    workspace, which the simulator checks). Checked against float64 too, counters left at zero."""
    bits, group, K, R = 4, 32, 288, 3
    out, mt = (80, 2) if glu else (72, 1)
    P, S, B = _case(bits, group, out, K)
    p = Q.V3Plan(out, K, bits, group, nw=1, mt=mt, cg=1, u=1, depth=1, blocks=1)
    assert p.ks == 9 > Q.CMP_KU and -(-out // (16 * mt)) * R * 16 > 32 * Q.CMP_EPL
    x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
    ys = [_launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": c}, P, S, B, x, p, glu) for c in ("1", "2")]
    assert not Q.counters().any()
    assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32))
    if not glu:
        _check(ys[1], *_ref(x, P, S, B, bits, group))
    # other unrolls of the batched completion (elements a lane x partials a round): 16 partials cover the 9 chunks
    # in one round (CPRED=1, plain: the loads past the last predicated off; the default CPRED=0 and SwiGLU: clamped
    # to the last), 2x8 / 1x16 take more passes over the outputs: the same bits
    for cu, cp in (("2x16", "1"), ("2x16", "0"), ("1x16", "1"), ("2x8", "1"), ("auto", "1")):
        y = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "2", "TENSORFOLD_GEMV3_CMPU": cu,
                                        "TENSORFOLD_GEMV3_CPRED": cp}, P, S, B, x, p, glu)
        assert np.array_equal(ys[0].view(np.uint32), y.view(np.uint32)), (cu, cp)
    assert not Q.counters().any()


def test_completion_loads_predicated_at_one_to_four_rows(monkeypatch):
    """``TENSORFOLD_GEMV3_CPRED=auto`` (the default since session 47): the plain 1-4-row bf16-x kernels (x form 2)
    predicate the completion's loads past the last chunk off, the 5-8-row ones (form 1), hi + lo x (form 0) and
    SwiGLU kernels clamp them; ``1`` predicates every plain kernel's, ``0`` none. Launches of 1, 3, 5 and 8 rows over
    9 chunks (16-partial rounds: 7 loads past the last chunk) give the same bits under all three settings and
    match float64."""
    monkeypatch.delenv("TENSORFOLD_GEMV3_CPRED", raising=False)
    assert Q.cpred_mode() == "auto"

    def named(glu, xh):
        return Q.get_pyfunc(4, 32, 1, 1, 1, 1, 1, 1, glu=glu, xh=xh).__name__.endswith("_cp")

    assert [named(False, xh) for xh in (0, 1, 2)] == [False, False, True]
    assert not named(True, 2)
    for mode, want in (("1", [True, True, True]), ("0", [False, False, False])):
        monkeypatch.setenv("TENSORFOLD_GEMV3_CPRED", mode)
        assert [named(False, xh) for xh in (0, 1, 2)] == want, mode
        assert not named(True, 2), mode
    bits, group, K, out = 4, 32, 288, 48
    P, S, B = _case(bits, group, out, K)
    p = Q.V3Plan(out, K, bits, group, nw=1, mt=1, cg=1, u=1, depth=1, blocks=2, xh=1)
    assert p.ks == 9
    xs = (rng.standard_normal((8, K)) * 3).astype(np.float32)
    for R in (1, 3, 5, 8):
        ys = [_launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CPRED": m, "TENSORFOLD_GEMV3_CMPU": "2x16"}, P, S, B,
                            xs[:R], p, False) for m in ("auto", "0", "1")]
        for y in ys[1:]:
            assert np.array_equal(ys[0].view(np.uint32), y.view(np.uint32)), R
        _check(ys[0], *_ref(bf16.to_f32(bf16.from_f32(xs[:R])), P, S, B, bits, group))
    assert not Q.counters().any()


@pytest.mark.parametrize("glu", [False, True])
def test_completion_unroll_picked_per_warp(monkeypatch, glu):
    """The default completion (``TENSORFOLD_GEMV3_CMPU=auto``) picks its unroll per warp from the outputs the warp
    completes: plain 2x16 up to 64, else 4x8; SwiGLU 1x16 up to 32, else 4x8. One warp owns both tiles of a 2-tile
    launch, so 1 / 2 / 3 rows complete 32 / 64 / 96 outputs and every form is taken; 9 chunks make the 16-partial
    forms clamp their loads past the last chunk. Each must give the bits of the one-tile-at-a-time completion
    (``CMP=1``), of the fixed 4x8 form and of the opt-in picked sets (plain: ``auto164``, 16x4 for many outputs,
    three rounds of 4 partials; ``auto88``, 8x8; SwiGLU: ``autog18``, 1x8 up to 32 outputs, two rounds of the 9
    chunks, the second clamping 7 of its 8), and (plain) match float64. A lane's outputs are carried from one to the
    next (tile ordinal and rest, no division) and the tile's position is found by a binary search over the warp's
    mask of completed tiles; a launch of 8 tiles, all completed by the one warp at 3 rows (384 outputs: three 4x8
    passes; one 16x4 pass whose last 128 outputs are past the end, clamped), checks both past the first two
    positions and across the passes."""
    bits, group, K = 4, 32, 288
    out, mt = (64, 2) if glu else (32, 1)  # 2 tiles of 16 (SwiGLU: 32 rows, 16 gate / up pairs) outputs
    P, S, B = _case(bits, group, out, K)
    p = Q.V3Plan(out, K, bits, group, nw=1, mt=mt, cg=1, u=1, depth=1, blocks=1)
    forms = Q.CMP_AUTO_FORMS[glu]
    assert p.ks == 9 and forms == (((1, 16), (4, 8)) if glu else ((2, 16), (4, 8)))
    picked = set()
    for R in (1, 2, 3):
        nel = 2 * R * 16  # two tiles of 16 outputs a row, all completed by the one warp
        picked.add(next((f for f in forms[:-1] if nel <= 32 * f[0]), forms[-1]))
        x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
        y1 = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "1"}, P, S, B, x, p, glu)
        y48 = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "2", "TENSORFOLD_GEMV3_CMPU": "4x8"}, P, S, B, x, p,
                            glu)
        ya = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "2", "TENSORFOLD_GEMV3_CMPU": "auto"}, P, S, B, x, p,
                           glu)
        assert np.array_equal(y1.view(np.uint32), ya.view(np.uint32)), R
        assert np.array_equal(y48.view(np.uint32), ya.view(np.uint32)), R
        if not glu:
            _check(ya, *_ref(x, P, S, B, bits, group))
        for cu in ("autog18",) if glu else ("auto164", "auto88"):
            yo = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "2", "TENSORFOLD_GEMV3_CMPU": cu}, P, S, B,
                               x, p, glu)
            assert np.array_equal(y1.view(np.uint32), yo.view(np.uint32)), (R, cu)
    assert picked == set(forms)
    assert not Q.counters().any()
    if glu:
        return
    # 8 tiles (128 rows), all completed by the one warp: tile positions 0-7 of the mask, 384 outputs at 3 rows
    out8 = 128
    P, S, B = _case(bits, group, out8, K)
    p8 = Q.V3Plan(out8, K, bits, group, nw=1, mt=1, cg=1, u=1, depth=1, blocks=1)
    x = (rng.standard_normal((3, K)) * 3).astype(np.float32)
    y1 = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "1"}, P, S, B, x, p8, glu)
    for cu in ("auto", "auto164"):
        ya = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "2", "TENSORFOLD_GEMV3_CMPU": cu}, P, S, B, x, p8,
                           glu)
        assert np.array_equal(y1.view(np.uint32), ya.view(np.uint32)), cu
    _check(ya, *_ref(x, P, S, B, bits, group))
    assert not Q.counters().any()


def test_swiglu_unroll_by_chunk_count(monkeypatch):
    """Under the default ``TENSORFOLD_GEMV3_CMPU=auto`` a SwiGLU launch of at most ``GLU_G18_KS`` K chunks takes
    ``autog18``'s set (1 x 8 partials a round for warps of up to 32 outputs), longer ones and plain launches
    ``CMP_AUTO``'s; ``auto31`` is ``CMP_AUTO``'s everywhere; a fixed form is taken as it is. The launches pass the
    choice to ``get_kernel`` (recorded here), and a 3-chunk SwiGLU launch at 1 and 3 rows gives the bits of
    ``auto31`` and of the one-tile-at-a-time completion (``CMP=1``)."""
    monkeypatch.delenv("TENSORFOLD_GEMV3_CMPU", raising=False)
    assert Q.GLU_G18_KS == 4
    assert [Q.unroll_for(True, ks) for ks in (2, 4, 5, 17)] == ["autog18", "autog18", "auto", "auto"]
    assert [Q.unroll_for(False, ks) for ks in (2, 4, 12)] == ["auto"] * 3
    monkeypatch.setenv("TENSORFOLD_GEMV3_CMPU", "auto31")
    assert {Q.unroll_for(g, ks) for g in (False, True) for ks in (2, 4, 9)} == {"auto"}
    monkeypatch.setenv("TENSORFOLD_GEMV3_CMPU", "2x16")
    assert Q.unroll_for(True, 2) == (2, 16)
    monkeypatch.setenv("TENSORFOLD_GEMV3_CMPU", "autog18")
    assert Q.unroll_for(True, 9) == "autog18" and Q.unroll_for(False, 2) == "autog18"
    monkeypatch.delenv("TENSORFOLD_GEMV3_CMPU")

    taken, real = [], Q.get_kernel

    def spy(*a, **kw):
        taken.append((kw.get("glu"), kw.get("cmpu")))
        return real(*a, **kw)

    monkeypatch.setattr(Q, "get_kernel", spy)
    bits, group, K, out = 4, 32, 96, 64  # 3 chunks of one group; 32 gate / up pairs in 2 tiles of 32 rows
    P, S, B = _case(bits, group, out, K)
    p = Q.V3Plan(out, K, bits, group, nw=1, mt=2, cg=1, u=1, depth=1, blocks=1)
    assert p.ks == 3
    for R in (1, 3):
        x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
        taken.clear()
        yd = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "2", "TENSORFOLD_GEMV3_CMPU": "auto"}, P, S, B, x,
                           p, True)
        assert taken == [(True, "autog18")], taken
        taken.clear()
        yo = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMPU": "auto31"}, P, S, B, x, p, True)
        assert taken == [(True, "auto")], taken
        y1 = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "1"}, P, S, B, x, p, True)
        assert np.array_equal(yd.view(np.uint32), yo.view(np.uint32)), R
        assert np.array_equal(yd.view(np.uint32), y1.view(np.uint32)), R
    assert not Q.counters().any()


@pytest.mark.parametrize("glu", [False, True])
def test_counter_reset_late_or_early(monkeypatch, glu):
    """``TENSORFOLD_GEMV3_RST``: the batched completion sets a tile's arrival counter back to zero after the
    completing warp's outputs are stored (``late``, the default since session 48) or right after its arrival
    (``early``, kernel names ``_re``). Both leave every counter at zero after a launch, so three launches in a row
    on the shared counters (1, 3 and 8 rows, 9 chunks, one warp completing several tiles) give the bits of the
    one-tile-at-a-time completion (``CMP=1``, which always reset late), and (plain) match float64."""
    monkeypatch.delenv("TENSORFOLD_GEMV3_RST", raising=False)
    assert Q.rst_mode() == "late"
    assert not Q.get_pyfunc(4, 32, 1, 1, 1, 1, 1, 1, glu=glu, xh=2).__name__.endswith("_re")
    monkeypatch.setenv("TENSORFOLD_GEMV3_RST", "early")
    assert Q.get_pyfunc(4, 32, 1, 1, 1, 1, 1, 1, glu=glu, xh=2).__name__.endswith("_re")
    assert not Q.get_pyfunc(4, 32, 1, 1, 1, 1, 1, 1, glu=glu, xh=2, cmp=1).__name__.endswith("_re")
    bits, group, K = 4, 32, 288
    out, mt = (80, 2) if glu else (72, 1)
    P, S, B = _case(bits, group, out, K)
    p = Q.V3Plan(out, K, bits, group, nw=1, mt=mt, cg=1, u=1, depth=1, blocks=2, xh=1)
    assert p.ks == 9
    xs = (rng.standard_normal((8, K)) * 3).astype(np.float32)
    for R in (1, 3, 8):
        ys = {m: _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "2", "TENSORFOLD_GEMV3_RST": m}, P, S, B,
                               xs[:R], p, glu) for m in ("late", "early")}
        assert not Q.counters().any(), R
        y1 = _launch_under(monkeypatch, {"TENSORFOLD_GEMV3_CMP": "1"}, P, S, B, xs[:R], p, glu)
        for m, y in ys.items():
            assert np.array_equal(y1.view(np.uint32), y.view(np.uint32)), (m, R)
        if not glu:
            _check(ys["late"], *_ref(bf16.to_f32(bf16.from_f32(xs[:R])), P, S, B, bits, group))
    assert not Q.counters().any()


@pytest.mark.parametrize("xh", [0, 1])
def test_x_first_loads_and_quad_group_sums(monkeypatch, xh):
    """``TENSORFOLD_GEMV3_PRE=0`` (the first weight loads issued after x's, the x batches unrolled) gives the bits
    of PRE=1 (the register-ring loads before the wait). ``TENSORFOLD_GEMV3_XQ=1`` (x's group sums by quad shuffles,
    another fixed order of the adds) is checked against float64 within ``_ref``'s bound, and is row-exact: rows
    launched alone or 3 at a time equal the same rows of an 8-row launch, across the 1-4-row and 5-8-row kernel
    forms. Both also with PRE=0, hi + lo x (two n-tiles at 8 rows: two x batches) and bf16-only x, two chunks."""
    bits, group, out, K, rows = 4, 64, 72, 256, 8
    P, S, B = _case(bits, group, out, K)
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=2, u=2, depth=1, blocks=4, xh=xh)
    x = (rng.standard_normal((rows, K)) * 3).astype(np.float32)
    got = {}
    for pre, xq in (("1", "0"), ("0", "0"), ("1", "1"), ("0", "1")):
        monkeypatch.setenv("TENSORFOLD_GEMV3_PRE", pre)
        monkeypatch.setenv("TENSORFOLD_GEMV3_XQ", xq)
        full = _go(P, S, B, x, p)
        xr = bf16.to_f32(bf16.from_f32(x)) if xh else x
        _check(full, *_ref(xr, P, S, B, bits, group))
        for r0, R in ((0, 1), (rows - 1, 1), (2, 3)):
            y = _go(P, S, B, x[r0:r0 + R], p)
            assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"{pre}{xq} rows {r0}+{R}"
        got[pre + xq] = full
    assert not Q.counters().any()
    assert np.array_equal(got["10"].view(np.uint32), got["00"].view(np.uint32))
    assert np.array_equal(got["11"].view(np.uint32), got["01"].view(np.uint32))


@pytest.mark.parametrize("glu", [False, True])
def test_l2_prefetch_prologue_same_bits(monkeypatch, glu):
    """``TENSORFOLD_GEMV3_PRE=2`` on the swept layout (the first tile's run prefetched into L2 before the wait, the
    first weight loads after x's; the simulator's ``pf_l2`` asserts each line lies inside W), and 3 / 4 (the first 2
    / 3 tiles' runs): the bits of PRE=1 (register-ring loads before the wait) at 1 and 6 rows, plain and SwiGLU, two
    chunks; 2 blocks (1-2 tiles a warp), 1 block (3 tiles a warp: every prefetched tile is real) and 8 (warps
    without a tile, whose clamped first tile is the last run of W: the prefetch's bounds). PRE=3 / 4 are opt-in
    (dropped in session 39): only the first case checks them (CI's time limit)."""
    bits, group, u, out, K = 4, 64, 4, 96, 512
    P, S, B = _case(bits, group, out, K)
    p2 = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=4, u=u, depth=1, blocks=2, xh=1, sw=2 if glu else 1)
    Wp = Q.sweep_pack(P, S, B, bits, group, u, glu=glu, per=p2.per)
    cases = ((p2, 1), (p2, 6), (dataclasses.replace(p2, blocks=8), 1), (dataclasses.replace(p2, blocks=1), 2))
    for i, (p, R) in enumerate(cases):
        x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
        pres = "1234" if i == 0 else "12"
        ys = [_launch_under(monkeypatch, {"TENSORFOLD_GEMV3_PRE": e}, Wp, S, B, x, p, glu) for e in pres]
        for e, y in zip(pres[1:], ys[1:]):
            assert np.array_equal(ys[0].view(np.uint32), y.view(np.uint32)), f"PRE={e} R={R} blocks={p.blocks}"
    assert not Q.counters().any()
