"""Simulator tier for the decode GEMVs' SwiGLU epilogue (``affine.launch_qgemv(..., glu=True)``): a fused gate | up
weight ``[2 I, K]`` gives ``y [R, I] = silu(x @ gate.T) * (x @ up.T)`` in the GEMV's own epilogue.

Two oracles, on fresh random weights and x:
- bit for bit: the same plan's GEMV into ``[R, 2 I]`` followed by ``activations.silu_mul_fused_k`` (the launch
  pair the runtime ran before; each is tested against numpy elsewhere);
- float64 numpy: ``g = x @ gate.T``, ``u = x @ up.T`` on the dequantized weights, then ``silu(g) * u``. Bound,
  elementwise, from the GEMV's own bound ``e = 1e-5 (|x| @ |W|)`` per output (plus qgemv's offset term, see
  ``test_sim_qgemv``) carried through the product: ``|silu'(g)| <= 1.1``, so ``1.1 e_g |u| + |silu(g)| e_u`` plus
  2^-20 relative for the float32 sigmoid and products.
Covered: the first tensor-core kernel with one warp and with several warps a block (the pair summed by one warp)
and two-tile-row plans; qgemv with one K chunk and with two (the completing warp pairs the partials); partial last
tiles (I = 40 is not a multiple of the 16- or 32-row tile's 8 or 16 gate rows); one and two n-tiles (rows 3, 11).
A row's result is the same bits alone. The runtime's speed policy (``affine.glu_faster``) is pinned too.
"""

import numpy as np
import pytest

from tensorfold.kernels import activations
from tensorfold.kernels import affine as A
from tensorfold.kernels import qgemv as Q
from tensorfold.model import quant

from test_sim_qgemv import _ref

rng = np.random.default_rng()

I_ = 40  # gate rows (and up rows): out = 80


def _case(bits, group, K):
    w = rng.standard_normal((2 * I_, K)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    x = (rng.standard_normal((11, K)) * 3).astype(np.float32)
    return P, S, B, x


def _oracle64(x, P, S, B, bits, group):
    y, e = _ref(x, P, S, B, bits, group)  # the plain GEMV's reference and bound (test_sim_qgemv)
    g, u = y[:, :I_], y[:, I_:]
    eg, eu = e[:, :I_], e[:, I_:]
    sg = g / (1.0 + np.exp(-g))
    bound = 1.1 * eg * np.abs(u) + np.abs(sg) * eu + 2.0 ** -20 * np.abs(sg * u) + 1e-30
    return sg * u, bound


def _run(launch, x, P, S, B, bits, group):
    R = x.shape[0]
    full = np.full((R, 2 * I_), np.nan, np.float32)
    launch(x, full, False)
    want = np.full((R, I_), np.nan, np.float32)
    activations.launch_silu_mul_fused(full, want)
    y = np.full((R, I_), np.nan, np.float32)
    launch(x, y, True)
    assert not np.isnan(y).any(), "NaN / unwritten output"
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), "fused != GEMV + silu_mul_fused_k"
    ref, bound = _oracle64(x, P, S, B, bits, group)
    err = np.abs(y - ref)
    assert (err <= bound).all(), f"max err/bound {(err / bound).max():.2e}"
    for r0, n in ((R - 1, 1), (2, 3)):
        yr = np.full((n, I_), np.nan, np.float32)
        launch(x[r0:r0 + n], yr, True)
        assert np.array_equal(yr.view(np.uint32), y[r0:r0 + n].view(np.uint32)), f"rows {r0}..{r0 + n - 1}"


@pytest.mark.parametrize("nw,mt,u", [(1, 1, 2), (3, 2, 2)])
def test_first_kernel_glu(nw, mt, u):
    bits, group, K = 4, 64, 5 * 64  # 5 groups over nw warps: uneven warp ranges at nw = 3
    P, S, B, x = _case(bits, group, K)
    plan = A.GemvPlan(2 * I_, K, bits, group, 32 * nw, 1, True, mt, u, True, 1, "pipe2")
    assert A.glu_ok(plan, 2 * I_)

    def launch(xx, yy, glu):
        A.launch_qgemv(P, S, B, xx, yy, bits, group, plan, glu=glu)

    _run(launch, x, P, S, B, bits, group)


@pytest.mark.parametrize("bits,group,ks,mt", [(4, 64, 1, 1), (4, 64, 2, 2), (2, 128, 2, 1), (8, 32, 1, 2)])
def test_qgemv_glu(bits, group, ks, mt):
    K = 512 if group == 128 else 256
    P, S, B, x = _case(bits, group, K)
    ng = K // group
    cg = ng // ks
    u = 2 if cg % 2 == 0 else 1
    p = Q.V3Plan(2 * I_, K, bits, group, nw=2, mt=mt, cg=cg, u=u, depth=1, blocks=2 * ks)
    assert p.ks == ks and A.glu_ok(p, 2 * I_)

    def launch(xx, yy, glu):
        ws = np.full((ks, xx.shape[0], 2 * I_), np.nan, np.float32)
        A.launch_qgemv(P, S, B, xx, yy, bits, group, p, ws=ws, glu=glu)

    _run(launch, x, P, S, B, bits, group)
    assert not Q.counters().any()


def test_glu_refused_where_unsupported():
    P, S, B, x = _case(4, 64, 256)
    split = A.GemvPlan(2 * I_, 256, 4, 64, 32, 2, True, 1, 2, True, 1, "sk")  # the first kernel with two K splits
    core = A.GemvPlan(2 * I_, 256, 4, 64, 128, 1, False, 2, 4, False, 1, "")  # the CUDA-core kernel
    assert not A.glu_ok(split, 2 * I_) and not A.glu_ok(core, 2 * I_) and not A.glu_ok(Q.plan(72, 256, 4, 64), 72)
    y = np.zeros((11, I_), np.float32)
    for p in (split, core):
        with pytest.raises(ValueError, match="SwiGLU"):
            A.launch_qgemv(P, S, B, x, y, 4, 64, p, glu=True)
    with pytest.raises(ValueError, match="SwiGLU"):  # y must be [R, out / 2]
        A.launch_qgemv(P, S, B, x, np.zeros((11, 2 * I_), np.float32), 4, 64, Q.plan(2 * I_, 256, 4, 64), glu=True)


def test_glu_speed_policy():
    """The runtime's choice (speed only; same bits): the first kernel always, qgemv unless a launch piece has 1-4
    rows (its one-n-tile epilogue kernel measured slower, see ``affine.glu_faster``)."""
    first = A.plan_qgemv(12288, 2048, 4, 64)
    v3 = A.plan_qgemv(24576, 4096, 4, 64)
    assert not isinstance(first, Q.V3Plan) and isinstance(v3, Q.V3Plan)
    assert all(A.glu_faster(first, 12288, r) for r in (1, 4, 8, 11, 16))
    assert [r for r in range(1, 17) if A.glu_faster(v3, 24576, r)] == [5, 6, 7, 8, 13, 14, 15, 16]
    assert not A.glu_faster(A.plan_qgemv(12288, 2048, 3, 64), 12288, 8)  # the CUDA-core kernel: no epilogue
