"""Simulator tier for the norms fused into a GEMV's x: the add + RMSNorm (``norm=`` of ``qgemv.launch`` and
``affine.launch_qgemv``; ``norms.fused_norm_lines``; the runtime's ``TENSORFOLD_NORM_FUSE=1``) and, at the end, the
GDN output's gated RMSNorm (``gnorm=``; ``norms.fused_gnorm_lines``; ``TENSORFOLD_GNORM_FUSE=1``: 1-8 rows, K
ranges of whole heads, against ``norms.launch_gated_rms_norm`` + the plain GEMV, bit for bit; float64 oracle).

One row. The GEMV's blocks each reduce the whole residual row the way the standalone vectorized kernel does, write
their K range of x and of the updated residual (into a second buffer), and read x from there. Against the
standalone ``norms.launch_add_rms_norm`` followed by the plain GEMV, on fresh random weights, x garbage, residual,
partial row and norm weight: x, the residual and y equal bit for bit, and the input residual is untouched. Plans:
qgemv in MLX layout and swept with bf16-only x (one chunk and several; the SwiGLU epilogue), and the first
tensor-core kernel (several warps splitting K, K split across blocks with the workspace reduce, the SwiGLU
epilogue). A prologue geometry of more virtual warps than the block has real warps (64 virtual threads on one
warp) against the standalone kernel launched at that geometry. Independent oracle: float64 RMSNorm of the float64
sum within 1e-5 relative."""

import numpy as np
import pytest
from numba import cuda

from tensorfold.kernels import affine as A
from tensorfold.kernels import norms
from tensorfold.kernels import qgemv as Q
from tensorfold.model import quant

rng = np.random.default_rng()
EPS = 1e-6


def _inputs(K):
    # magnitudes over three decades, so that another order of the sum of squares rounds differently
    h = (rng.standard_normal((1, K)) * 10.0 ** rng.uniform(-1.5, 1.5, (1, K))).astype(np.float32)
    d = rng.standard_normal((1, K)).astype(np.float32)
    mult = (1.0 + 0.2 * rng.standard_normal(K)).astype(np.float32)
    return h, d, mult


def _oracle(h, d, mult, x):
    v = h.astype(np.float64) + d.astype(np.float64)
    ref = v / np.sqrt((v * v).mean(-1, keepdims=True) + EPS) * mult
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-6)


def _same(a, b, what):
    assert not np.isnan(a).any(), f"{what}: unwritten"
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{what}: bits differ"


def _compare(gemv, K, out_y, std=None, draws=2):
    """``gemv(x, y, norm)`` with norm None (x given) against norm given (x made in the kernel), on ``draws`` fresh
    inputs (another order of the sum of squares changes the bits of a draw about half the time)."""
    for _ in range(draws):
        _compare1(gemv, K, out_y, std)


def _compare1(gemv, K, out_y, std):
    h, d, mult = _inputs(K)
    hA, xA = h.copy(), np.full((1, K), np.nan, np.float32)
    if std is None:
        norms.launch_add_rms_norm(d, hA, mult, xA, EPS)
    else:
        std(d, hA, mult, xA)
    yA = np.full((1, out_y), np.nan, np.float32)
    gemv(xA, yA, None)
    xB = (rng.standard_normal((1, K)) * 100).astype(np.float32)  # garbage the kernel must overwrite
    hB, ho = h.copy(), np.full((1, K), np.nan, np.float32)
    yB = np.full((1, out_y), np.nan, np.float32)
    gemv(xB, yB, (hB, d, mult, ho, EPS))
    _same(xB, xA, "x")
    _same(ho, hA, "residual")
    _same(yB, yA, "y")
    assert np.array_equal(hB, h), "the input residual was written"
    _oracle(h, d, mult, xB)


def _v3(out, K, cg, sw, glu=False):
    bits, group = 4, 64
    u = 4 if cg % 4 == 0 else 2
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), bits, group)
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4, sw=(2 if glu else 1) if sw else 0,
                 xh=1 if sw else 0)
    W = Q.sweep_pack(P, S, B, bits, group, u, glu=glu, per=p.per) if sw else P

    def gemv(x, y, norm):
        Q.launch(W, S, B, x, y, p, 1, ws=np.full((p.ks, 1, out), np.nan, np.float32), glu=glu, norm=norm)
        assert not Q.counters().any()
    return gemv, p


@pytest.mark.parametrize("cg,sw,glu", [(10, False, False), (2, True, False), (2, True, True), (10, True, True)])
def test_qgemv_fused_norm_same_bits(cg, sw, glu):
    out, K = 48, 640  # 10 groups of 64; the standalone geometry at 640: 32 threads x 5 float4
    gemv, p = _v3(out, K, cg, sw, glu)
    assert p.ks == 10 // cg
    _compare(gemv, K, out // 2 if glu else out)


@pytest.mark.parametrize("nw,ks,glu", [(3, 1, False), (1, 2, False), (2, 1, True)])
def test_tc_fused_norm_same_bits(nw, ks, glu):
    out, K, bits, group = 48, 640, 4, 64
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), bits, group)
    plan = A.GemvPlan(out, K, bits, group, 32 * nw, ks, True, 2, 2 if glu else 4, False)

    def gemv(x, y, norm):
        A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=np.full((ks, 1, out), np.nan, np.float32), glu=glu,
                       norm=norm)
    _compare(gemv, K, out // 2 if glu else out)


def test_prologue_more_virtual_warps_than_warps(monkeypatch):
    """64 virtual threads (2 virtual warps, 3 float4 each at K = 640: the last partly past the row) on a block of
    one warp, against the standalone kernel launched at 64 threads."""
    out, K = 16, 640
    monkeypatch.setattr(norms, "fuse_geometry", lambda n: (64, 3))
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), 4, 64)
    plan = A.GemvPlan(out, K, 4, 64, 32, 1, True, 1, 2, False)

    def gemv(x, y, norm):
        A.launch_qgemv(P, S, B, x, y, 4, 64, plan, norm=norm)

    def std(d, h, mult, x):
        norms.get_norm_v_kernel(3, True)[1, 64](d, h, mult, x, np.float32(EPS))
    _compare(gemv, K, out, std)


def test_fused_norm_refusals():
    out, K = 16, 640
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), 4, 64)
    h, d, mult = _inputs(K)
    norm = (h, d, mult, np.zeros_like(h), EPS)
    with pytest.raises(ValueError, match="fused add"):  # two rows
        A.launch_qgemv(P, S, B, np.zeros((2, K), np.float32), np.zeros((2, out), np.float32), 4, 64,
                       A.GemvPlan(out, K, 4, 64, 32, 1, True, 1, 2, False), norm=norm)
    with pytest.raises(ValueError, match="fused add"):  # the CUDA-core kernel
        A.launch_qgemv(P, S, B, np.zeros((1, K), np.float32), np.zeros((1, out), np.float32), 4, 64,
                       A.GemvPlan(out, K, 4, 64, 32, 1), norm=norm)
    with pytest.raises(ValueError, match="fused add"):  # a row the vectorized norm does not take
        A.launch_qgemv(P, S, B, np.zeros((1, K), np.float32), np.zeros((1, out), np.float32), 4, 64,
                       A.GemvPlan(out, K, 4, 64, 32, 1, True, 1, 2, False),
                       norm=(h[:, :K - 2], d, mult, h, EPS))
    assert A.norm_fusable(A.GemvPlan(out, K, 4, 64, 32, 1, True)) and not A.norm_fusable(A.GemvPlan(out, K, 4, 64,
                                                                                                      32, 1))
    # 10 groups in 6 K splits of 2: the last block has no columns (its warps would read unwritten shared memory)
    assert A.norm_fusable(A.GemvPlan(out, K, 4, 64, 32, 4, True)) and not A.norm_fusable(A.GemvPlan(out, K, 4, 64,
                                                                                                      32, 6, True))


# ---------------------------------------------------------------------------------------------- gated norm (GDN)


def _gnorm_inputs(R, K, dv):
    o = (rng.standard_normal((R, K)) * 10.0 ** rng.uniform(-1.5, 1.5, (R, K))).astype(np.float32)
    u = rng.standard_normal((R, K + 24)).astype(np.float32)  # z a column block of a wider array, as in the runner
    z = cuda.to_device(u)[:, 8:8 + K]  # (a strided numpy view does not cross into the simulator)
    w = (1.0 + 0.2 * rng.standard_normal(dv)).astype(np.float32)
    return o, z, w, u[:, 8:8 + K]


def _gcompare(gemv, R, K, dv, out_y, act):
    for _ in range(2):
        o, z, w, zh = _gnorm_inputs(R, K, dv)
        xA = np.full((R, K), np.nan, np.float32)
        norms.launch_gated_rms_norm(o, z, w, xA, EPS, dv, act=act)
        yA = np.full((R, out_y), np.nan, np.float32)
        gemv(xA, yA, None)
        xB = (rng.standard_normal((R, K)) * 100).astype(np.float32)
        yB = np.full((R, out_y), np.nan, np.float32)
        gemv(xB, yB, (o, z, w, EPS, act))
        _same(xB, xA, "x")
        _same(yB, yA, "y")
        o64 = o.astype(np.float64).reshape(R, -1, dv)
        g = zh.astype(np.float64).reshape(R, -1, dv)
        g = g / (1.0 + np.exp(-g)) if act == "silu" else 1.0 / (1.0 + np.exp(-g))
        ref = o64 / np.sqrt((o64 * o64).mean(-1, keepdims=True) + EPS) * w * g
        np.testing.assert_allclose(xB, ref.reshape(R, K), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("R,cg,act", [(1, 2, "silu"), (3, 4, "sigmoid"), (8, 2, "silu")])
def test_qgemv_fused_gnorm_same_bits(R, cg, act):
    """K 256 in heads of 32: K chunks of 4 or 8 heads; 1, 3 and 8 rows (every row's heads in the prologue)."""
    out, K, dv = 48, 256, 32
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), 4, 64)
    p = Q.V3Plan(out, K, 4, 64, nw=2, mt=1, cg=cg, u=2, depth=1, blocks=4, sw=1, xh=1)
    W = Q.sweep_pack(P, S, B, 4, 64, 2, per=p.per)

    def gemv(x, y, gnorm):
        Q.launch(W, S, B, x, y, p, R, ws=np.full((p.ks, R, out), np.nan, np.float32), gnorm=gnorm)
    _gcompare(gemv, R, K, dv, out, act)


@pytest.mark.parametrize("nw,ks,R", [(2, 1, 1), (1, 2, 5)])
def test_tc_fused_gnorm_same_bits(nw, ks, R):
    out, K, dv = 40, 256, 32
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), 4, 64)
    plan = A.GemvPlan(out, K, 4, 64, 32 * nw, ks, True, 2, 2, False)
    assert A.gnorm_fusable(plan, dv)

    def gemv(x, y, gnorm):
        A.launch_qgemv(P, S, B, x, y, 4, 64, plan, ws=np.full((ks, R, out), np.nan, np.float32), gnorm=gnorm)
    _gcompare(gemv, R, K, dv, out, "silu")


def test_fused_gnorm_refusals():
    """K ranges that split a head are refused (a block would need another block's columns)."""
    out, K, dv = 16, 384, 96
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), 4, 64)
    o, z, w, _ = _gnorm_inputs(1, K, dv)
    plan = A.GemvPlan(out, K, 4, 64, 32, 3, True, 1, 2, False)  # 6 groups, 2 a block: 128 columns, not heads of 96
    assert not A.gnorm_fusable(plan, dv) and A.gnorm_fusable(A.GemvPlan(out, K, 4, 64, 32, 1, True), dv)
    with pytest.raises(ValueError, match="whole heads"):
        A.launch_qgemv(P, S, B, np.zeros((1, K), np.float32), np.zeros((1, out), np.float32), 4, 64, plan,
                       ws=np.zeros((3, 1, out), np.float32), gnorm=(o, z, w, EPS, "silu"))
    p3 = Q.V3Plan(out, K, 4, 64, nw=2, mt=1, cg=2, u=2, depth=1, blocks=4)
    assert not Q.gnorm_ok(p3, dv) and Q.gnorm_ok(p3, 64)
