"""Simulator tier for ``tensorfold.kernels.qgemv`` (the bandwidth-oriented tensor-core decode GEMV).

Every format it covers (4-bit g32/g64/g128, 8-bit g32/g64, 2-bit g64/g128) against float64 numpy on
``ops.affine_dequant`` weights, on fresh random weights and x (x scaled by 3). Tolerance: |y - ref| <= 1e-5 *
(|x| @ |W|) elementwise (x enters the tensor cores as bf16 hi + lo, about 2^-17 relative per element, and the codes as
``128 + q``; the group sums of x are taken over the same hi + lo values, so the offset cancels). Outputs and the
split-K workspace are poisoned with NaN. Exactness: rows launched alone or in smaller launches (other n-tile
counts) equal the same rows of a bigger launch bit for bit; split-K (several chunks, the last block sums them) and
x prepared in several sub-chunks give every row the same bits as one chunk's worth of arithmetic demands (checked
against the reference), and the arrival counters end at zero.
"""

import numpy as np
import pytest

from tensorfold.kernels import qgemv as Q
from tensorfold.model import quant
from tensorfold.reference import ops

rng = np.random.default_rng()


def _case(bits, group, out, K):
    w = rng.standard_normal((out, K)).astype(np.float32)
    return quant.quantize(w, bits, group)


def _go(P, S, B, x, p):
    R = x.shape[0]
    y = np.full((R, P.shape[0]), np.nan, np.float32)
    ws = np.full((p.ks, R, P.shape[0]), np.nan, np.float32)
    Q.launch(P, S, B, x, y, p, R, ws=ws)
    return y


def _ref(x, P, S, B, bits, group):
    W = ops.affine_dequant(P, S, B, bits, group).astype(np.float64)
    x64 = x.astype(np.float64)
    return x64 @ W.T, np.abs(x64) @ np.abs(W).T


def _check(y, ref, bound, tol=1e-5):
    assert not np.isnan(y).any(), "NaN / unwritten output"
    err = np.abs(y - ref)
    assert (err <= tol * bound).all(), f"max err/bound {(err / bound).max():.2e}"


@pytest.mark.parametrize("bits,group", Q.FORMATS)
def test_formats_splitk_rows_exact(bits, group):
    out, K = 40, (512 if group == 128 else 256)  # two row blocks of 32, the second partial
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((6, K)) * 3).astype(np.float32)
    ng = K // group
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=ng // 2, u=2 if (ng // 2) % 2 == 0 else 1, depth=2)
    assert p.ks == 2
    full = _go(P, S, B, x, p)
    _check(full, *_ref(x, P, S, B, bits, group))
    assert not Q.counters().any()
    for r0, R in ((0, 1), (4, 1), (1, 4)):
        y = _go(P, S, B, x[r0:r0 + R], p)
        assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"rows {r0}..{r0 + R - 1}"


def test_sixteen_rows_subchunks_and_one_chunk(monkeypatch):
    """16 rows (four n-tiles, x prepared two groups at a time: several sub-chunks a block), one chunk (ks = 1)."""
    bits, group, out, K = 4, 64, 32, 256
    P, S, B = _case(bits, group, out, K)
    x = rng.standard_normal((16, K)).astype(np.float32)
    monkeypatch.setattr(Q, "_XB_BYTES", 2 * 4 * 4 * 32 * 8)  # two groups of 4 n-tiles
    p = Q.V3Plan(out, K, bits, group, nw=1, mt=2, cg=4, u=1, depth=1)
    assert p.ks == 1 and p.sc(4) == 2 and p.sc(1) == 4
    full = _go(P, S, B, x, p)
    _check(full, *_ref(x, P, S, B, bits, group))
    y = _go(P, S, B, x[9:10], p)
    assert np.array_equal(y.view(np.uint32), full[9:10].view(np.uint32))


def test_plan_is_a_function_of_the_shape():
    for out, K in ((12288, 2048), (2048, 6144), (24576, 4096), (4096, 12288), (34816, 5120), (5120, 17408),
                   (248320, 2048)):
        for per in (False, True):
            p = Q.plan(out, K, 4, 64, persist=per)
            ng = K // 64
            assert ng % p.cg == 0 and p.cg % p.u == 0 and p.ks * p.cg == ng and 1 <= p.depth <= p.cg // p.u
            assert all(p.sc(nt) >= p.u and p.cg % p.sc(nt) == 0 for nt in (1, 2, 4))
            assert Q.plan(out, K, 4, 64, persist=per) == p


@pytest.mark.parametrize("bits,group", [(4, 64), (8, 32), (2, 128)])
@pytest.mark.parametrize("ks,blocks,mt,depth", [(2, 4, 1, 2), (1, 1, 2, 1)])
def test_persistent_form(bits, group, ks, blocks, mt, depth):
    """The persistent form: warps walking several row tiles (the loads of the next tile issued during the last
    iterations of the current one), several blocks a chunk, split-K summed by the warp completing a tile; 11 rows
    (launches of 8 + 3); rows alone == together bit for bit; counters back at zero."""
    out, K = 72, (512 if group == 128 else 256)
    P, S, B = _case(bits, group, out, K)
    x = (rng.standard_normal((11, K)) * 3).astype(np.float32)
    ng = K // group
    cg = ng // ks
    u = 2 if cg % 2 == 0 else 1
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=mt, cg=cg, u=u, depth=min(depth, cg // u), persist=True,
                 blocks=blocks)
    assert p.ks == ks
    full = _go(P, S, B, x, p)
    _check(full, *_ref(x, P, S, B, bits, group))
    assert not Q.counters().any()
    for r0, R in ((0, 1), (9, 1), (2, 5)):
        y = _go(P, S, B, x[r0:r0 + R], p)
        assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"rows {r0}..{r0 + R - 1}"
