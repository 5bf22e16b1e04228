"""Simulator tier for the add + RMSNorm fused into the next GEMV (``norm=`` of ``qgemv.launch`` and
``affine.launch_qgemv``; ``norms.fused_norm_lines``; the runtime's ``TENSORFOLD_NORM_FUSE=1``).

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


# The fused prologue is opt-in (TENSORFOLD_NORM_FUSE=1, a tie on the H200): CI runs one case of each kernel; the
# rest are marked ``variant`` (run with -m variant), to keep CI inside its time limit.
_V = pytest.mark.variant


@pytest.mark.parametrize("cg,sw,glu", [pytest.param(10, False, False, marks=_V), pytest.param(2, True, False, marks=_V),
                                       (2, True, True), pytest.param(10, True, True, marks=_V)])
def test_qgemv_fused_norm_same_bits(cg, sw, glu):
    out, K = 48, 640  # 10 groups of 64; the standalone geometry at 640: 32 threads x 5 float4
    gemv, p = _v3(out, K, cg, sw, glu)
    assert p.ks == 10 // cg
    _compare(gemv, K, out // 2 if glu else out)


@pytest.mark.parametrize("nw,ks,glu", [pytest.param(3, 1, False, marks=_V), pytest.param(1, 2, False, marks=_V),
                                       (2, 1, True)])
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
