"""Simulator tier for qgemv's chunks-in-a-block form (``TENSORFOLD_GEMV3_KIN=1``): one-row launches of plain swept
bf16-x plans, where a block's warps are a tile's K chunks and their sums meet in shared memory instead of through the
split-K workspace, arrival counters and fences.

Oracles: the split-K form's one-row launch of the same plan (bit for bit: the same chunk sums added in the same
order), the same row inside an 8-row launch (bit for bit), and float64 numpy on x rounded to bf16 within the
fp32-class bound of ``test_sim_qgemv._ref``. Outputs and the workspace are poisoned with NaN; x is fresh random data.
"""

import dataclasses

import numpy as np
import pytest

from tensorfold.kernels import qgemv as Q
from tensorfold.model import bf16

from test_sim_qgemv import _case, _check, _ref

rng = np.random.default_rng()


def _launch(W, S, B, x, p):
    R, out = x.shape[0], S.shape[0]
    y = np.full((R, out), np.nan, np.float32)
    ws = np.full((p.ks, R, out), np.nan, np.float32)
    Q.launch(W, S, B, x, y, p, R, ws=ws)
    assert not np.isnan(y).any(), f"R={R}: unwritten output"
    return y


@pytest.mark.parametrize("bits,group,K,ks,u,sms", [(4, 64, 256, 2, 2, 132), (4, 32, 384, 3, 4, 1),
                                                   (8, 32, 256, 4, 2, 1), (2, 128, 512, 2, 2, 132)])
def test_kin_one_row_same_bits(monkeypatch, bits, group, K, ks, u, sms):
    """72 rows (five 16-row tiles, the last partial). ``sms`` 1 makes the form's grid one SM's blocks, so a block
    walks two or three tiles (the shared sums of several tiles); 132 gives every tile its own block."""
    out = 72
    P, S, B = _case(bits, group, out, K)
    cg = K // group // ks
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=cg, u=u, depth=1, blocks=4, xh=1, sw=1)
    assert p.ks == ks
    W = Q.sweep_pack(P, S, B, bits, group, u, per=p.per)
    monkeypatch.setattr(Q, "SMS", sms)
    x = (rng.standard_normal((8, K)) * 3).astype(np.float32)
    monkeypatch.setenv("TENSORFOLD_GEMV3_KIN", "0")
    assert not Q.kin_ok(p, 1, False, False, None)
    ref1 = _launch(W, S, B, x[:1], p)
    ref8 = _launch(W, S, B, x, p)
    monkeypatch.setenv("TENSORFOLD_GEMV3_KIN", "1")
    assert Q.kin_ok(p, 1, False, False, None)
    assert not Q.kin_ok(p, 2, False, False, None) and not Q.kin_ok(p, 1, True, False, None)
    if sms == 1:
        assert -(-out // 16) > Q.kin_grid(p), "the case should give a block several tiles"
    for r in (0, 5):
        y = _launch(W, S, B, x[r:r + 1], p)
        want = ref1 if r == 0 else ref8[r:r + 1]
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), f"row {r}"
        xb = bf16.to_f32(bf16.from_f32(x[r:r + 1]))
        _check(y, *_ref(xb, P, S, B, bits, group))
    assert not Q.counters().any()


def test_kin_routing(monkeypatch):
    """Only one-row launches of plain swept bf16-x plans with 2 to ``KIN_MAX_KS`` chunks take the form; one chunk,
    the MLX layout, hi + lo x and too many tiles a block keep the split-K form."""
    monkeypatch.setenv("TENSORFOLD_GEMV3_KIN", "1")
    p = Q.V3Plan(72, 256, 4, 64, nw=2, mt=1, cg=2, u=2, depth=1, blocks=4, xh=1, sw=1)
    assert Q.kin_ok(p, 1, False, False, None)
    assert not Q.kin_ok(p, 1, False, True, None)  # deferred completion
    assert not Q.kin_ok(dataclasses.replace(p, cg=4), 1, False, False, None)  # one chunk
    assert not Q.kin_ok(dataclasses.replace(p, sw=0), 1, False, False, None)
    assert not Q.kin_ok(dataclasses.replace(p, xh=0), 1, False, False, None)
    monkeypatch.setattr(Q, "SMS", 1)
    big = dataclasses.replace(p, out=16 * Q.KIN_MT * Q.kin_blocks_per_sm(2) + 16)
    assert not Q.kin_ok(big, 1, False, False, None)
    monkeypatch.setenv("TENSORFOLD_GEMV3_KIN", "0")
    assert not Q.kin_ok(p, 1, False, False, None)
