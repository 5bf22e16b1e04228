"""Simulator tier for the delta-rule and conv kernels (issue 3, part B) against ``tensorfold.reference.ops``.

Tiny shapes (Hk 1, Hv 2, Dk 16, Dv 40 -> a full and a partial 32-column slice), fresh random inputs per test.
Tolerances: fp32 kernels vs the fp32 reference, 2e-5 absolute+relative on O(1) values (different summation
orders). Exactness properties (window == one-row launches, tree == branch, commit == stepping) are bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from tensorfold.kernels import compact, conv, delta_rule as dr
from tensorfold.reference import ops

Hk, Hv, Dk, Dv, K = 1, 2, 16, 40, 4
KD = Hk * Dk
C = 2 * KD + Hv * Dv
TOL = dict(rtol=2e-5, atol=2e-5)


def _rng(seed):
    return np.random.default_rng(seed)


def _inputs(rng, R):
    qkv = rng.standard_normal((R, C)).astype(np.float32)
    a = rng.standard_normal((R, Hv)).astype(np.float32)
    b = rng.standard_normal((R, Hv)).astype(np.float32)
    A_log = (rng.standard_normal(Hv) * 0.5).astype(np.float32)
    dt_bias = rng.standard_normal(Hv).astype(np.float32)
    return qkv, a, b, A_log, dt_bias


def _prep_ref(qkv, a, b, A_log, dt_bias):
    R = qkv.shape[0]
    q = qkv[:, :KD].reshape(R, Hk, Dk)
    k = qkv[:, KD:2 * KD].reshape(R, Hk, Dk)
    v = qkv[:, 2 * KD:].reshape(R, Hv, Dv)
    qn, kn = ops.gdn_prepare_qk(q, k)
    g, beta = ops.gdn_gates(a, b, A_log, dt_bias)
    return qn, kn, v, g, beta


def _i32(x):
    return cuda.to_device(np.ascontiguousarray(x, np.int32))


def _run_rec(qkv, a, b, A_log, dt_bias, state, segs, parent, log=True):
    """segs: list of (row0, len, slot, commit). Returns (o, state_after, log_k, log_d, log_a)."""
    R = qkv.shape[0]
    st = cuda.to_device(state.copy())
    o = cuda.to_device(np.full((R, Hv, Dv), np.nan, np.float32))
    nl = R if log else 0
    lk = cuda.to_device(np.zeros((nl, Hk, Dk), np.float32))
    ld = cuda.to_device(np.zeros((nl, Hv, Dv), np.float32))
    la = cuda.to_device(np.zeros((nl, Hv), np.float32))
    s = np.asarray(segs, np.int32).reshape(-1, 4)
    dr.launch_recurrent(cuda.to_device(qkv), cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log),
                        cuda.to_device(dt_bias), st, _i32(s[:, 0]), _i32(s[:, 1]), _i32(s[:, 2]), _i32(s[:, 3]),
                        _i32(parent), o, lk, ld, la)
    return o.copy_to_host(), st.copy_to_host(), lk.copy_to_host(), ld.copy_to_host(), la.copy_to_host()


def test_gates():
    rng = _rng(1)
    R = 7
    a = (rng.standard_normal((R, Hv)) * 10).astype(np.float32)  # crosses the softplus threshold
    b = (rng.standard_normal((R, Hv)) * 10).astype(np.float32)
    A_log = rng.standard_normal(Hv).astype(np.float32)
    dt_bias = rng.standard_normal(Hv).astype(np.float32)
    g = cuda.device_array((R, Hv), np.float32)
    be = cuda.device_array((R, Hv), np.float32)
    dr.launch_gates(cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log), cuda.to_device(dt_bias), g, be,
                    blocks=1)
    g_ref, b_ref = ops.gdn_gates(a, b, A_log, dt_bias)
    np.testing.assert_allclose(g.copy_to_host(), g_ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(be.copy_to_host(), b_ref, rtol=1e-6, atol=1e-7)


def test_step_and_window_vs_reference_and_bitwise():
    rng = _rng(2)
    R = 4
    qkv, a, b, A_log, dt_bias = _inputs(rng, R)
    slots = 3
    state = rng.standard_normal((slots, Hv, Dk, Dv)).astype(np.float32) * 0.3
    slot = 1
    # window of 4 rows in one launch, committed
    o_w, st_w, *_ = _run_rec(qkv, a, b, A_log, dt_bias, state, [(0, R, slot, 1)], [-1, 0, 1, 2])
    qn, kn, v, g, beta = _prep_ref(qkv, a, b, A_log, dt_bias)
    O_ref, S_ref = ops.delta_rule_recurrent(state[slot], qn, kn, v, g, beta)
    assert not np.isnan(o_w).any()
    np.testing.assert_allclose(o_w, O_ref, **TOL)
    np.testing.assert_allclose(st_w[slot], S_ref, **TOL)
    np.testing.assert_array_equal(st_w[0], state[0])  # other slots untouched
    # one-row launches, in place: bit-identical
    st = state.copy()
    outs = []
    for r in range(R):
        o1, st, *_ = _run_rec(qkv[r:r + 1], a[r:r + 1], b[r:r + 1], A_log, dt_bias, st, [(0, 1, slot, 1)], [-1],
                              log=False)
        outs.append(o1[0])
    np.testing.assert_array_equal(np.stack(outs), o_w)
    np.testing.assert_array_equal(st, st_w)


def test_tree_matches_branches_and_commit_replays():
    rng = _rng(3)
    parents = [-1, 0, 0, 1, 2, -1, 5]
    n = len(parents)
    qkv, a, b, A_log, dt_bias = _inputs(rng, n)
    slots = 2
    slot = 1
    state = rng.standard_normal((slots, Hv, Dk, Dv)).astype(np.float32) * 0.3
    o_t, st_t, lk, ld, la = _run_rec(qkv, a, b, A_log, dt_bias, state, [(0, n, slot, 0)], parents)
    np.testing.assert_array_equal(st_t, state)  # the committed state is not touched
    qn, kn, v, g, beta = _prep_ref(qkv, a, b, A_log, dt_bias)
    O_ref, states_ref = ops.delta_rule_tree(state[slot], qn, kn, v, g, beta, parents)
    np.testing.assert_allclose(o_t, O_ref, **TOL)
    # each leaf's branch run as a window gives bit-identical rows
    for leaf in (4, 6):
        path = []
        x = leaf
        while x >= 0:
            path.append(x)
            x = parents[x]
        path = path[::-1]
        o_b, st_b, *_ = _run_rec(qkv[path], a[path], b[path], A_log, dt_bias, state,
                                 [(0, len(path), slot, 1)], [-1] + list(range(len(path) - 1)))
        np.testing.assert_array_equal(o_b, o_t[path])
        # commit the branch from the tree's log == the stepped state, bit for bit
        st_c = cuda.to_device(state[None].copy())
        compact.launch_gdn_commit(st_c, cuda.to_device(lk[None]), cuda.to_device(ld[None]), cuda.to_device(la[None]),
                                  _i32(parents), _i32([slot]), _i32([leaf]))
        np.testing.assert_array_equal(st_c.copy_to_host()[0], st_b)


def test_batched_streams_equal_alone():
    rng = _rng(4)
    qkv, a, b, A_log, dt_bias = _inputs(rng, 5)
    state = rng.standard_normal((3, Hv, Dk, Dv)).astype(np.float32) * 0.3
    segs = [(0, 2, 2, 1), (2, 1, -1, 1), (3, 2, 0, 1)]  # middle segment is padding
    parents = [-1, 0, -1, -1, 3]
    o_all, st_all, *_ = _run_rec(qkv, a, b, A_log, dt_bias, state, segs, parents)
    o_a, st_a, *_ = _run_rec(qkv[:2], a[:2], b[:2], A_log, dt_bias, state, [(0, 2, 2, 1)], [-1, 0])
    np.testing.assert_array_equal(o_all[:2], o_a)
    np.testing.assert_array_equal(st_all[2], st_a[2])
    assert np.isnan(o_all[2]).all()  # padding wrote nothing
    np.testing.assert_array_equal(st_all[1], state[1])


def test_lean_step_path_windows_and_misuse():
    """Without logs launch_recurrent runs the lean kernel: a committed chain window there == the logged window
    (general kernel) bit for bit, beside a padding segment and a one-row stream; a non-chain row gives NaN and no
    commit."""
    rng = _rng(5)
    qkv, a, b, A_log, dt_bias = _inputs(rng, 4)
    state = rng.standard_normal((3, Hv, Dk, Dv)).astype(np.float32) * 0.3
    segs = [(0, 3, 2, 1), (3, 0, -1, 1), (3, 1, 0, 1)]
    parents = [-1, 0, 1, -1]
    o_l, st_l, *_ = _run_rec(qkv, a, b, A_log, dt_bias, state, segs, parents, log=False)
    o_g, st_g, *_ = _run_rec(qkv, a, b, A_log, dt_bias, state, segs, parents, log=True)
    assert not np.isnan(o_l).any()
    np.testing.assert_array_equal(o_l, o_g)
    np.testing.assert_array_equal(st_l, st_g)
    qn, kn, v, g, beta = _prep_ref(qkv, a, b, A_log, dt_bias)
    O_ref, S_ref = ops.delta_rule_recurrent(state[2], qn[:3], kn[:3], v[:3], g[:3], beta[:3])
    np.testing.assert_allclose(o_l[:3], O_ref, **TOL)
    np.testing.assert_allclose(st_l[2], S_ref, **TOL)
    np.testing.assert_array_equal(st_l[1], state[1])
    # a tree row on the lean path: NaN out, state untouched
    o_b, st_b, *_ = _run_rec(qkv[:3], a[:3], b[:3], A_log, dt_bias, state, [(0, 3, 2, 1)], [-1, 0, 0], log=False)
    assert np.isnan(o_b[2]).all()
    np.testing.assert_array_equal(st_b, state)


def test_step_register_cap_switch(monkeypatch):
    """``TENSORFOLD_GDN_STEP_REGS`` (host policy; the cap itself is a GPU compile option, checked bit for bit in
    ``test_gpu_delta_sample.py``): off by default, the listed caps accepted, anything else a ValueError naming the
    variable, before any launch."""
    monkeypatch.delenv("TENSORFOLD_GDN_STEP_REGS", raising=False)
    assert dr.step_regs() == 0
    for cap in ("96", "80", "64"):
        monkeypatch.setenv("TENSORFOLD_GDN_STEP_REGS", cap)
        assert dr.step_regs() == int(cap)
    monkeypatch.setenv("TENSORFOLD_GDN_STEP_REGS", "48")
    with pytest.raises(ValueError, match="TENSORFOLD_GDN_STEP_REGS"):
        dr._step_kernel()


@pytest.mark.parametrize("L", [5, 70])
def test_chunked_vs_reference(L):
    rng = _rng(10 + L)
    qkv, a, b, A_log, dt_bias = _inputs(rng, L)
    a = a - 2.0  # milder decay so chunk-boundary state matters
    state = rng.standard_normal((2, Hv, Dk, Dv)).astype(np.float32) * 0.3
    slot = 1
    st = cuda.to_device(state.copy())
    o = cuda.to_device(np.full((L, Hv, Dv), np.nan, np.float32))
    work = dr.chunk_workspace(L, Hk, Hv, Dk, Dv)
    dr.launch_chunked(cuda.to_device(qkv), cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log),
                      cuda.to_device(dt_bias), st, _i32([0]), _i32([L]), _i32([slot]), o, work,
                      max_rows_per_seg=L, prep_blocks=2, tc=0)  # the tensor-core pass: test_sim_chunk_tc.py
    qn, kn, v, g, beta = _prep_ref(qkv, a, b, A_log, dt_bias)
    O_ref, S_ref = ops.delta_rule_recurrent(state[slot].astype(np.float64), qn.astype(np.float64),
                                            kn.astype(np.float64), v.astype(np.float64), g.astype(np.float64),
                                            beta.astype(np.float64))
    oh = o.copy_to_host()
    assert not np.isnan(oh).any()
    np.testing.assert_allclose(oh, O_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(st.copy_to_host()[slot], S_ref, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------------------------------------
# causal conv + conv/KV compaction
# ----------------------------------------------------------------------------------------------------------------

CC = 24  # conv channels for the conv tests


def test_conv_window_tree_and_commit():
    rng = _rng(20)
    slots = 2
    w = rng.standard_normal((CC, K)).astype(np.float32)
    tail = rng.standard_normal((slots, K - 1, CC)).astype(np.float32)
    # stream 1: tree of 6 rows; stream 0: window of 2 rows; one padding row
    parents = [-1, 0, 0, 2, 3, -1, -1, 6, -1]
    row_slot = [1, 1, 1, 1, 1, 1, 0, 0, -1]
    R = len(parents)
    x = rng.standard_normal((R, CC)).astype(np.float32)
    y = cuda.to_device(np.full((R, CC), np.nan, np.float32))
    xlog = cuda.to_device(np.zeros((R, CC), np.float32))
    dtail = cuda.to_device(tail.copy())
    conv.launch_conv(cuda.to_device(x), cuda.to_device(w), dtail, _i32(row_slot), _i32(parents), y, xlog, blocks=2,
                     threads=64)
    yh = y.copy_to_host()
    np.testing.assert_array_equal(dtail.copy_to_host(), tail)  # committed tail untouched
    y_tree, tails = ops.causal_conv_tree(x[:6], w, tail[1], parents[:6])
    np.testing.assert_allclose(yh[:6], y_tree, rtol=1e-5, atol=1e-6)
    y_win, tail0 = ops.causal_conv(x[6:8], w, tail[0])
    np.testing.assert_allclose(yh[6:8], y_win, rtol=1e-5, atol=1e-6)
    assert np.isnan(yh[8]).all()
    np.testing.assert_array_equal(xlog.copy_to_host()[:8], x[:8])
    # runs of rows a thread (a chain's window slid in registers, other rows walking their parents): the same bits
    for rb in (2, 3, 9):
        y2 = cuda.to_device(np.full((R, CC), np.nan, np.float32))
        conv.launch_conv(cuda.to_device(x), cuda.to_device(w), dtail, _i32(row_slot), _i32(parents), y2,
                         conv.empty_log(CC), blocks=2, threads=64, rb=rb)
        np.testing.assert_array_equal(y2.copy_to_host().view(np.uint32), yh.view(np.uint32))
    # commit leaf 4 of stream 1 (path 0, 2, 3, 4) and leaf 7 of stream 0: tails equal the stepped tails exactly
    compact.launch_conv_commit(dtail.reshape(1, slots, K - 1, CC),
                               cuda.to_device(x[None].copy()), _i32(parents), _i32([1, 0]), _i32([4, 7]), blocks=1)
    th = dtail.copy_to_host()
    np.testing.assert_array_equal(th[1], tails[4])
    np.testing.assert_array_equal(th[0], tail0)


def test_kv_compact_moves_kept_path():
    rng = _rng(21)
    NL, slots, ctx, nkv, hd = 2, 2, 12, 2, 8
    parents = [-1, 0, 0, 2, -1]
    cache_idx = [5, 6, 7, 8, 3]  # stream 1 tree at positions 5..8; stream 0 row at 3 (already in place)
    for dt in (np.uint16, np.uint8):
        k = rng.integers(0, 200, (NL, slots, ctx, nkv, hd)).astype(dt)
        v = rng.integers(0, 200, (NL, slots, ctx, nkv, hd)).astype(dt)
        ks = rng.standard_normal((NL, slots, ctx, nkv)).astype(np.float32)
        vs = rng.standard_normal((NL, slots, ctx, nkv)).astype(np.float32)
        dk, dv, dks, dvs = (cuda.to_device(a.copy()) for a in (k, v, ks, vs))
        compact.launch_kv_compact(dk, dv, dks, dvs, _i32(parents), _i32(cache_idx), _i32([1, 0]), _i32([3, 4]),
                                  _i32([5, 3]))
        ek, ev, eks, evs = k.copy(), v.copy(), ks.copy(), vs.copy()
        for dst, src in zip((5, 6, 7), (5, 7, 8)):  # path 0 -> 2 -> 3
            for a, b in ((ek, k), (ev, v), (eks, ks), (evs, vs)):
                a[:, 1, dst] = b[:, 1, src]
        np.testing.assert_array_equal(dk.copy_to_host(), ek)
        np.testing.assert_array_equal(dv.copy_to_host(), ev)
        np.testing.assert_array_equal(dks.copy_to_host(), eks)
        np.testing.assert_array_equal(dvs.copy_to_host(), evs)
