"""Simulator tier for the add + RMSNorm done by a GEMV's last block (``tail=`` of ``affine.launch_qgemv``;
``norms.tail_norm_lines``; the runtime's ``TENSORFOLD_NORM_TAIL=1``).

One row of the first tensor-core kernel's whole-share form. Every block fences its y stores and counts itself; the
last one adds y to the residual and normalizes the row the way the standalone vectorized kernel does. Against the
plain launch followed by the standalone ``norms.launch_add_rms_norm``, on fresh random weights, x, residual
(magnitudes over three decades, so that another order of the sum of squares would round differently) and norm
weight: y, the residual and x equal bit for bit, the counter is back at 0, and a second launch gives the same bits.
Grids of 2 and 16 blocks; a norm geometry of more virtual warps than the block has real warps (128 virtual threads
on 2 warps) against the standalone kernel launched at that geometry. Independent oracle: float64 RMSNorm of the
float64 sum within 1e-5 relative. Launches the tail cannot serve (two rows, a K split, the SwiGLU epilogue) are
refused with a ValueError."""

import numpy as np
import pytest

from tensorfold.kernels import affine as A
from tensorfold.kernels import norms
from tensorfold.model import quant

rng = np.random.default_rng()
EPS = 1e-6
BITS, GROUP = 4, 32


def _plan(out, K, nw, ks=1):
    return A.GemvPlan(out, K, BITS, GROUP, 32 * nw, ks, True, 2, 2, True, 1, "pipe2")


def _weights(out, K):
    return quant.quantize(rng.standard_normal((out, K)).astype(np.float32), BITS, GROUP)


def _row(n):
    h = (rng.standard_normal((1, n)) * 10.0 ** rng.uniform(-1.5, 1.5, (1, n))).astype(np.float32)
    mult = (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
    return h, mult


def _same(a, b, what):
    assert not np.isnan(a).any(), f"{what}: unwritten"
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{what}: bits differ"


def _oracle(h, y, mult, x):
    v = h.astype(np.float64) + y.astype(np.float64)
    ref = v / np.sqrt((v * v).mean(-1, keepdims=True) + EPS) * mult
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("out,nw,pw,draws", [(40, 2, 8, 2), (512, 2, 2, 6)])
def test_tail_equals_gemv_then_norm(out, nw, pw, draws, monkeypatch):
    """Several draws: a tail whose sum of squares took another order would differ in the bits of about a quarter
    to a third of them (reversing a lane's four squares, counted in numpy)."""
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
    K = pw * nw * GROUP
    P, S, B = _weights(out, K)
    plan = _plan(out, K, nw)
    assert A.tail_ok(plan, 1, False, S, B)
    seen = []
    lookup = A.get_tc_kernel
    monkeypatch.setattr(A, "get_tc_kernel", lambda *a, **k: seen.append(k.get("ntl")) or lookup(*a, **k))
    for draw in range(draws):
        x = rng.standard_normal((1, K)).astype(np.float32)
        h, mult = _row(out)
        yA, hA, xA = np.full((1, out), np.nan, np.float32), h.copy(), np.full((1, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x, yA, BITS, GROUP, plan)
        norms.launch_add_rms_norm(yA, hA, mult, xA, EPS)
        cnt = norms.new_tail_counter()
        for rep in range(2 if draw == 0 else 1):  # the last block resets the counter: a second launch works
            yB, hB = np.full((1, out), np.nan, np.float32), h.copy()
            xB = (rng.standard_normal((1, out)) * 100).astype(np.float32)
            A.launch_qgemv(P, S, B, x, yB, BITS, GROUP, plan, tail=(hB, mult, xB, EPS, cnt))
            assert cnt[0] == 0
            _same(yB, yA, f"y (launch {rep})")
            _same(hB, hA, f"residual (launch {rep})")
            _same(xB, xA, f"x (launch {rep})")
        _oracle(h, yA, mult, xB)
    assert seen[1] == norms.fuse_geometry(out) and seen[0] is None, seen


def test_tail_more_virtual_warps_than_warps(monkeypatch):
    """The norm at 128 threads x 1 float4 (4 virtual warps) run by a 2-warp GEMV block: each real warp takes two
    virtual warps in turn; against the standalone kernel launched with 128 threads."""
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
    out, nw, pw = 512, 2, 2
    K = pw * nw * GROUP
    P, S, B = _weights(out, K)
    x = rng.standard_normal((1, K)).astype(np.float32)
    h, mult = _row(out)
    yA, hA, xA = np.full((1, out), np.nan, np.float32), h.copy(), np.full((1, out), np.nan, np.float32)
    A.launch_qgemv(P, S, B, x, yA, BITS, GROUP, _plan(out, K, nw))
    norms.get_norm_v_kernel(1, True)[1, 128](yA, hA, mult, xA, np.float32(EPS))
    # the tail kernel at that geometry, launched as launch_qgemv would launch it (whole form, one K split)
    k = A.get_tc_kernel(BITS, GROUP, 1, nw, 2, pw, "bf16", True, 1, whole=1, ntl=(128, 1))
    yB, hB = np.full((1, 1, out), np.nan, np.float32), h.copy()
    xB = np.full((1, out), np.nan, np.float32)
    cnt = norms.new_tail_counter()
    k[(out // 32, 1, 1), 32 * nw](P, S, B, x, yB, np.int32(1), np.int32(0), np.int32(0),
                                  hB, mult, xB, np.float32(EPS), cnt)
    assert cnt[0] == 0
    _same(yB[0], yA, "y")
    _same(hB, hA, "residual")
    _same(xB, xA, "x")
    _oracle(h, yA, mult, xB)


def test_tail_refused_where_it_cannot_run(monkeypatch):
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
    out, nw, pw = 40, 2, 8
    K = pw * nw * GROUP
    P, S, B = _weights(out, K)
    h, mult = _row(out)
    cnt = norms.new_tail_counter()
    tail = (h, mult, np.zeros((1, out), np.float32), EPS, cnt)
    x2 = rng.standard_normal((2, K)).astype(np.float32)
    with pytest.raises(ValueError, match="norm tail"):  # two rows
        A.launch_qgemv(P, S, B, x2, np.zeros((2, out), np.float32), BITS, GROUP, _plan(out, K, nw), tail=tail)
    ks2 = _plan(out, 2 * K, nw, ks=2)  # a K split across blocks
    P2, S2, B2 = _weights(out, 2 * K)
    assert not A.tail_ok(ks2, 1, False, S2, B2)
    with pytest.raises(ValueError, match="norm tail"):
        A.launch_qgemv(P2, S2, B2, x2[:1, :1].repeat(2 * K, 1), np.zeros((1, out), np.float32), BITS, GROUP, ks2,
                       ws=np.zeros((2, 1, out), np.float32), tail=tail)
    assert not A.tail_ok(_plan(out, K, nw), 1, True, S, B)  # the SwiGLU epilogue
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "0")  # the plan's own kernel has no tail
    assert not A.tail_ok(_plan(out, K, nw), 1, False, S, B)
