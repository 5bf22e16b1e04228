"""Simulator tier for the fused GDN layer kernels (``delta_rule.launch_fused``: conv + SiLU, gates, l2 norms, delta
rule, gated RMSNorm in one launch) against the three-launch path and the numpy twins in ``tensorfold.reference.ops``.

Tiny shapes (Hk 1, Hv 2 -> two value heads share the key head, Dk 16, Dv 40 -> two full and one partial 16-column
slice per head, conv width 4), fresh random inputs per test (no zeros), inputs taken as column views of one
``u [R, C + Vd + 2 Hv]`` block like the runtime's fused input projection.

- The normed output ``gn``, the pre-norm output ``o``, the state, the commit logs and the raw-row log ``xlog``
  equal the unfused path (``conv.launch_conv`` -> ``launch_recurrent`` -> ``norms.launch_gated_rms_norm``) bit
  for bit (same conv fma order, same recurrence body, the norm kernel's arithmetic).
- ``gn`` against the float64 composition of ``ops.causal_conv_tree``, ``gdn_prepare_qk``, ``gdn_gates``,
  ``delta_rule_tree``, ``gated_rms_norm``: 2e-5 absolute + relative on O(1) values (fp32, other summation orders).
- A stream's rows are bit-identical alone and beside other streams / padding segments; the counters are left zero.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from tensorfold.kernels import conv, delta_rule as dr, norms
from tensorfold.reference import ops

Hk, Hv, Dk, Dv, K = 1, 2, 16, 40, 4
KD = Hk * Dk
C = 2 * KD + Hv * Dv
Vd = Hv * Dv
EPS = 1e-6
TOL = dict(rtol=2e-5, atol=2e-5)


def _i32(x):
    return cuda.to_device(np.ascontiguousarray(x, np.int32))


def _model(rng, slots):
    p = dict(
        cw=rng.standard_normal((C, K)).astype(np.float32) * 0.5,
        tail=rng.standard_normal((slots, K - 1, C)).astype(np.float32),
        nw=(1.0 + 0.3 * rng.standard_normal(Dv)).astype(np.float32),
        A_log=(rng.standard_normal(Hv) * 0.5).astype(np.float32),
        dt_bias=rng.standard_normal(Hv).astype(np.float32),
        state=rng.standard_normal((slots, Hv, Dk, Dv)).astype(np.float32) * 0.3,
    )
    return p


def _u(rng, R):
    u = rng.standard_normal((R, C + Vd + 2 * Hv)).astype(np.float32)
    u[:, C + Vd + Hv:] -= 1.0  # a: milder decay
    return u


def _views(du):
    return du[:, :C], du[:, C:C + Vd], du[:, C + Vd:C + Vd + Hv], du[:, C + Vd + Hv:]


def _segs(segs):
    s = np.asarray(segs, np.int32).reshape(-1, 4)
    return _i32(s[:, 0]), _i32(s[:, 1]), _i32(s[:, 2]), _i32(s[:, 3])


def _run_fused(u, p, segs, parent, log, act="silu"):
    R = u.shape[0]
    du = cuda.to_device(u)
    x, z, b, a = _views(du)
    st = cuda.to_device(p["state"].copy())
    tail = cuda.to_device(p["tail"].copy())
    o = cuda.to_device(np.full((R, Hv, Dv), np.nan, np.float32))
    gn = cuda.to_device(np.full((R, Vd), np.nan, np.float32))
    xlog = cuda.to_device(np.full((R + 2, C), np.nan, np.float32))
    nl = R if log else 0
    lk = cuda.to_device(np.zeros((nl, Hk, Dk), np.float32))
    ld = cuda.to_device(np.zeros((nl, Hv, Dv), np.float32))
    la = cuda.to_device(np.zeros((nl, Hv), np.float32))
    cnt = dr.fused_counters(len(segs) + 1, Hv)
    dr.launch_fused(x, cuda.to_device(p["cw"]), tail, xlog, z, cuda.to_device(p["nw"]), a, b,
                    cuda.to_device(p["A_log"]), cuda.to_device(p["dt_bias"]), st, *_segs(segs), _i32(parent), o, gn,
                    cnt, lk, ld, la, EPS, act)
    np.testing.assert_array_equal(tail.copy_to_host(), p["tail"])  # the committed tail is never written here
    assert not cnt.copy_to_host().any()  # counters back to zero
    return dict(o=o.copy_to_host(), gn=gn.copy_to_host(), state=st.copy_to_host(), xlog=xlog.copy_to_host(),
                lk=lk.copy_to_host(), ld=ld.copy_to_host(), la=la.copy_to_host())


def _run_unfused(u, p, segs, parent, log, act="silu"):
    R = u.shape[0]
    du = cuda.to_device(u)
    _, z, b, a = _views(du)
    x = cuda.to_device(np.ascontiguousarray(u[:, :C]))
    row_slot = np.full(R, -1, np.int32)
    for r0, n, slot, _ in segs:
        row_slot[r0:r0 + n] = slot
    y = cuda.to_device(np.full((R, C), np.nan, np.float32))
    xlog = cuda.to_device(np.full((R + 2, C), np.nan, np.float32))
    conv.launch_conv(x, cuda.to_device(p["cw"]), cuda.to_device(p["tail"].copy()), _i32(row_slot), _i32(parent), y,
                     xlog, blocks=2, threads=64)
    st = cuda.to_device(p["state"].copy())
    o = cuda.to_device(np.full((R, Hv, Dv), np.nan, np.float32))
    nl = R if log else 0
    lk = cuda.to_device(np.zeros((nl, Hk, Dk), np.float32))
    ld = cuda.to_device(np.zeros((nl, Hv, Dv), np.float32))
    la = cuda.to_device(np.zeros((nl, Hv), np.float32))
    dr.launch_recurrent(y, a, b, cuda.to_device(p["A_log"]), cuda.to_device(p["dt_bias"]), st, *_segs(segs),
                        _i32(parent), o, lk, ld, la)
    gn = cuda.to_device(np.full((R, Vd), np.nan, np.float32))
    norms.launch_gated_rms_norm(o.reshape((R, Vd)), z, cuda.to_device(p["nw"]), gn, EPS, Dv, act=act, max_blocks=1)
    return dict(o=o.copy_to_host(), gn=gn.copy_to_host(), state=st.copy_to_host(), xlog=xlog.copy_to_host(),
                lk=lk.copy_to_host(), ld=ld.copy_to_host(), la=la.copy_to_host())


def _reference(u, p, slot, parents, act="silu"):
    """float64 twin of one stream's rows (parents local, -1 = the committed state / tail)."""
    f = np.float64
    n = u.shape[0]
    x, z = u[:, :C].astype(f), u[:, C:C + Vd].astype(f)
    b, a = u[:, C + Vd:C + Vd + Hv].astype(f), u[:, C + Vd + Hv:].astype(f)
    y, _ = ops.causal_conv_tree(x, p["cw"].astype(f), p["tail"][slot].astype(f), parents)
    q = y[:, :KD].reshape(n, Hk, Dk)
    k = y[:, KD:2 * KD].reshape(n, Hk, Dk)
    v = y[:, 2 * KD:].reshape(n, Hv, Dv)
    qn, kn = ops.gdn_prepare_qk(q, k)
    g, beta = ops.gdn_gates(a, b, p["A_log"].astype(f), p["dt_bias"].astype(f))
    O, states = ops.delta_rule_tree(p["state"][slot].astype(f), qn, kn, v, g, beta, parents)
    gn = ops.gated_rms_norm(O, z.reshape(n, Hv, Dv), p["nw"].astype(f), EPS, act).reshape(n, Vd)
    return gn, states


def _check_equal_unfused(fu, un, rows):
    for key in ("o", "state", "lk", "ld", "la"):
        np.testing.assert_array_equal(fu[key], un[key], err_msg=key)
    np.testing.assert_array_equal(fu["xlog"][rows], un["xlog"][rows])
    np.testing.assert_array_equal(fu["gn"][rows], un["gn"][rows])


@pytest.mark.parametrize("act", ["silu", "sigmoid"])
def test_fused_step_windows_vs_unfused_and_reference(act):
    """Lean path (no logs): a committed 3-row window, a padding segment, a one-row stream."""
    rng = np.random.default_rng(31)
    p = _model(rng, 3)
    u = _u(rng, 4)
    segs = [(0, 3, 2, 1), (3, 0, -1, 1), (3, 1, 0, 1)]
    parent = [-1, 0, 1, -1]
    fu = _run_fused(u, p, segs, parent, log=False, act=act)
    un = _run_unfused(u, p, segs, parent, log=False, act=act)
    assert not np.isnan(fu["gn"]).any()
    _check_equal_unfused(fu, un, slice(0, 4))
    gn2, st2 = _reference(u[:3], p, 2, [-1, 0, 1], act)
    np.testing.assert_allclose(fu["gn"][:3], gn2, **TOL)
    np.testing.assert_allclose(fu["state"][2], st2[-1], **TOL)
    gn0, st0 = _reference(u[3:4], p, 0, [-1], act)
    np.testing.assert_allclose(fu["gn"][3:4], gn0, **TOL)
    np.testing.assert_allclose(fu["state"][0], st0[-1], **TOL)
    np.testing.assert_array_equal(fu["state"][1], p["state"][1])  # no segment for slot 1


def test_fused_tree_logged_vs_unfused_and_reference():
    """General path (logs): a tree of 7 rows beside a 2-row window of another stream; nothing committed."""
    rng = np.random.default_rng(32)
    p = _model(rng, 2)
    tree = [-1, 0, 0, 1, 2, -1, 5]
    u = _u(rng, 9)
    segs = [(0, 7, 1, 0), (7, 2, 0, 0)]
    parent = tree + [-1, 7]
    fu = _run_fused(u, p, segs, parent, log=True)
    un = _run_unfused(u, p, segs, parent, log=True)
    assert not np.isnan(fu["gn"]).any()
    _check_equal_unfused(fu, un, slice(0, 9))
    np.testing.assert_array_equal(fu["state"], p["state"])
    np.testing.assert_array_equal(fu["xlog"][:9], u[:, :C])
    gt, _ = _reference(u[:7], p, 1, tree)
    np.testing.assert_allclose(fu["gn"][:7], gt, **TOL)
    gw, _ = _reference(u[7:], p, 0, [-1, 0])
    np.testing.assert_allclose(fu["gn"][7:], gw, **TOL)


def test_fused_stream_alone_equals_batched():
    rng = np.random.default_rng(33)
    p = _model(rng, 3)
    u = _u(rng, 3)
    segs = [(0, 1, 2, 1), (1, 1, 0, 1), (2, 1, 1, 1)]
    both = _run_fused(u, p, segs, [-1, -1, -1], log=False)
    alone = _run_fused(u[1:2], p, [(0, 1, 0, 1)], [-1], log=False)
    np.testing.assert_array_equal(both["gn"][1:2], alone["gn"])
    np.testing.assert_array_equal(both["state"][0], alone["state"][0])
    # a step after a step == a 2-row window (state and tail continue)
    p2 = dict(p, state=both["state"].copy(), tail=p["tail"].copy())
    p2["tail"][2] = np.concatenate([p["tail"][2][1:], u[0:1, :C]])
    u1 = _u(rng, 1)
    step2 = _run_fused(u1, p2, [(0, 1, 2, 1)], [-1], log=False)
    win = _run_fused(np.concatenate([u[0:1], u1]), p, [(0, 2, 2, 1)], [-1, 0], log=False)
    np.testing.assert_array_equal(win["gn"][1:2], step2["gn"])
    np.testing.assert_array_equal(win["state"][2], step2["state"][2])


def test_fused_rejects_other_shapes():
    rng = np.random.default_rng(34)
    p = _model(rng, 1)
    bad = cuda.to_device(np.ones((C, 3), np.float32))
    u = cuda.to_device(_u(rng, 1))
    x, z, b, a = _views(u)
    with pytest.raises(ValueError):
        dr.launch_fused(x, bad, cuda.to_device(p["tail"][:, :2]), cuda.to_device(np.zeros((1, C), np.float32)), z,
                        cuda.to_device(p["nw"]), a, b, cuda.to_device(p["A_log"]), cuda.to_device(p["dt_bias"]),
                        cuda.to_device(p["state"]), *_segs([(0, 1, 0, 1)]), _i32([-1]),
                        cuda.device_array((1, Hv, Dv), np.float32), cuda.device_array((1, Vd), np.float32),
                        dr.fused_counters(1, Hv), cuda.device_array((0, Hk, Dk), np.float32),
                        cuda.device_array((0, Hv, Dv), np.float32), cuda.device_array((0, Hv), np.float32), EPS)
