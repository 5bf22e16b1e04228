"""Simulator tier for the deferred split-K completion (``qgemv.launch(..., defer=True)`` followed by
``norms.launch_add_rms_norm_parts``; the runtime's ``TENSORFOLD_GEMV_DEFER=1``).

The GEMV leaves its K chunks' partial sums in the workspace and the residual add + RMSNorm adds them in chunk order.
Against the in-kernel completion followed by ``launch_add_rms_norm``: the residual stream and the normed rows equal
bit for bit (same fp32 adds, same order), on fresh random weights (swept layout, bf16-only x, the runtime defaults),
x, residual and norm weight, at 1, 3 and 8 rows and 2 and 4 chunks. Independent oracle: float64 of x rounded to
bf16 times the dequantized weight plus the residual (bound of ``test_sim_qgemv._ref``), and float64 RMSNorm of the
kernel's own residual within 1e-5 relative."""

import numpy as np
import pytest

from tensorfold.kernels import norms
from tensorfold.kernels import qgemv as Q
from tensorfold.model import bf16, quant
from tensorfold.reference import ops

rng = np.random.default_rng()
EPS = 1e-6


def _setup(out, K, cg):
    bits, group = 4, 64
    u = 4 if cg % 4 == 0 else 2
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4, sw=True, xh=1)
    Wp = Q.sweep_pack(P, S, B, bits, group, u, per=p.per)
    return (P, S, B), Wp, p


@pytest.mark.parametrize("R,cg", [(1, 4), (3, 2), (8, 4)])
def test_deferred_completion_same_bits(R, cg):
    out, K = 72, 512
    (P, S, B), Wp, p = _setup(out, K, cg)
    assert p.ks > 1
    x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
    h0 = rng.standard_normal((R, out)).astype(np.float32)
    mult = (1.0 + 0.1 * rng.standard_normal(out)).astype(np.float32)
    # the in-kernel completion, then add + RMSNorm
    y = np.full((R, out), np.nan, np.float32)
    Q.launch(Wp, S, B, x, y, p, R, ws=np.full((p.ks, R, out), np.nan, np.float32))
    hA, oA = h0.copy(), np.full((R, out), np.nan, np.float32)
    norms.launch_add_rms_norm(y, hA, mult, oA, EPS)
    # deferred: the partials stay in ws, y is not written; the norm adds them
    ws = np.full((p.ks, R, out), np.nan, np.float32)
    yB = np.full((R, out), np.nan, np.float32)
    Q.launch(Wp, S, B, x, yB, p, R, ws=ws, defer=True)
    assert np.isnan(yB).all() and not np.isnan(ws).any()
    hB, oB = h0.copy(), np.full((R, out), np.nan, np.float32)
    norms.launch_add_rms_norm_parts(ws, hB, mult, oB, EPS)
    assert not Q.counters().any()
    assert np.array_equal(hB.view(np.uint32), hA.view(np.uint32))
    assert np.array_equal(oB.view(np.uint32), oA.view(np.uint32))
    # independent oracle
    W = ops.affine_dequant(P, S, B, 4, 64).astype(np.float64)
    xb = bf16.to_f32(bf16.from_f32(x)).astype(np.float64)
    ax = np.abs(xb).reshape(R, -1, 64).sum(-1)
    bound = 1e-5 * (np.abs(xb) @ np.abs(W).T) + 2.0 ** -20 * 128.0 * (ax @ np.abs(bf16.to_f32(S)).T) \
        + 1e-6 * np.abs(h0)
    assert (np.abs(hB - (h0 + xb @ W.T)) <= bound).all()
    h64 = hB.astype(np.float64)
    ref = h64 / np.sqrt((h64 * h64).mean(-1, keepdims=True) + EPS) * mult
    np.testing.assert_allclose(oB, ref, rtol=1e-5, atol=1e-6)


def test_deferred_completion_refusals():
    out, K = 72, 512
    _, Wp, p = _setup(out, K, 4)
    S, B = np.zeros((out, K // 64), np.uint16), np.zeros((out, K // 64), np.uint16)
    x, y = np.ones((9, K), np.float32), np.zeros((9, out), np.float32)
    with pytest.raises(ValueError, match="deferred"):  # more than 8 rows
        Q.launch(Wp, S, B, x, y, p, 9, ws=np.zeros((p.ks, 9, out), np.float32), defer=True)
    one = Q.V3Plan(out, K, 4, 64, nw=2, mt=1, cg=8, u=4, depth=1, blocks=4, sw=True, xh=1)
    with pytest.raises(ValueError, match="deferred"):  # one chunk: y is written directly, nothing to defer
        Q.launch(Q.sweep_pack(np.zeros((out, K // 8), np.uint32), S, B, 4, 64, 4, per=one.per), S, B, x[:1], y[:1],
                 one, 1, ws=np.zeros((1, 1, out), np.float32), defer=True)
    with pytest.raises(ValueError, match="add_rms_norm_parts"):  # rows not a multiple of 4
        norms.launch_add_rms_norm_parts(np.zeros((2, 1, 6), np.float32), np.zeros((1, 6), np.float32),
                                        np.ones(6, np.float32), np.zeros((1, 6), np.float32), EPS)
