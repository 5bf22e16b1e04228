"""GPU tier for the fused GDN layer kernels (``delta_rule.launch_fused``) at Qwen3.5 2B / 9B / 27B shapes.

Run on the device: ``NUMBA_ENABLE_CUDASIM=0 python -m pytest -m gpu tests/kernels/test_gpu_fused.py``.

Hk 16, Dk = Dv = 128, Hv 16 / 32 / 48, conv width 4; inputs are column views of one u [R, C + Vd + 2 Hv] block (the
runtime's fused input projection), fresh random values (no zeros), a random state and conv tail per slot.
- against the three-launch path (``conv.launch_conv`` -> ``launch_recurrent`` -> ``norms.launch_gated_rms_norm``):
  normed and pre-norm output, state, logs and raw-row log bit for bit (at 4ae7b79, before the norm epilogue took
  the norm kernel's arithmetic, the normed output was checked within 2e-6 and passed);
- against the float64 twins (``ops.causal_conv_tree``, ``gdn_prepare_qk``, ``gdn_gates``, ``delta_rule_tree``,
  ``gated_rms_norm``): 1e-4 absolute + relative on O(1) values;
- every stream's row equals the same stream alone (bit for bit); a logged 3-row window equals three lean steps
  (rows and final state bit for bit); the counters are left zero.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":  # pragma: no cover - collected on CPU only with -m gpu
    pytest.skip("GPU tier (NUMBA_ENABLE_CUDASIM=1)", allow_module_level=True)

from numba import cuda  # noqa: E402

from tensorfold.kernels import conv, delta_rule as dr, norms  # noqa: E402
from tensorfold.reference import ops  # noqa: E402

HV = {"2B": 16, "9B": 32, "27B": 48}
HK, D, K = 16, 128, 4
EPS = 1e-6
TOL = dict(rtol=1e-4, atol=1e-4)


class G:
    def __init__(self, Hv):
        self.Hv = Hv
        self.KD = HK * D
        self.C = 2 * self.KD + Hv * D
        self.Vd = Hv * D


def _i32(x):
    return cuda.to_device(np.ascontiguousarray(x, np.int32))


def _model(rng, g, slots):
    return dict(
        cw=rng.standard_normal((g.C, K)).astype(np.float32) * 0.5,
        tail=rng.standard_normal((slots, K - 1, g.C)).astype(np.float32),
        nw=(1.0 + 0.3 * rng.standard_normal(D)).astype(np.float32),
        A_log=(rng.standard_normal(g.Hv) * 0.5).astype(np.float32),
        dt_bias=rng.standard_normal(g.Hv).astype(np.float32),
        state=rng.standard_normal((slots, g.Hv, D, D)).astype(np.float32) * 0.1,
    )


def _u(rng, g, R):
    u = rng.standard_normal((R, g.C + g.Vd + 2 * g.Hv)).astype(np.float32)
    u[:, g.C + g.Vd + g.Hv:] -= 1.0
    return u


def _views(g, du):
    C, Vd, Hv = g.C, g.Vd, g.Hv
    return du[:, :C], du[:, C:C + Vd], du[:, C + Vd:C + Vd + Hv], du[:, C + Vd + Hv:]


def _segs(segs):
    s = np.asarray(segs, np.int32).reshape(-1, 4)
    return _i32(s[:, 0]), _i32(s[:, 1]), _i32(s[:, 2]), _i32(s[:, 3])


def _logs(g, R, log):
    nl = R if log else 0
    return (cuda.to_device(np.zeros((nl, HK, D), np.float32)), cuda.to_device(np.zeros((nl, g.Hv, D), np.float32)),
            cuda.to_device(np.zeros((nl, g.Hv), np.float32)))


def _host(d):
    return {k: v.copy_to_host() for k, v in d.items()}


def _fused(g, u, p, segs, parent, log):
    R = u.shape[0]
    du = cuda.to_device(u)
    x, z, b, a = _views(g, du)
    st = cuda.to_device(p["state"].copy())
    o = cuda.to_device(np.full((R, g.Hv, D), np.nan, np.float32))
    gn = cuda.to_device(np.full((R, g.Vd), np.nan, np.float32))
    xlog = cuda.to_device(np.full((R, g.C), np.nan, np.float32))
    lk, ld, la = _logs(g, R, log)
    cnt = dr.fused_counters(len(segs), g.Hv)
    dr.launch_fused(x, cuda.to_device(p["cw"]), cuda.to_device(p["tail"]), xlog, z, cuda.to_device(p["nw"]), a, b,
                    cuda.to_device(p["A_log"]), cuda.to_device(p["dt_bias"]), st, *_segs(segs), _i32(parent), o, gn,
                    cnt, lk, ld, la, EPS)
    cuda.synchronize()
    assert not cnt.copy_to_host().any()
    return _host(dict(o=o, gn=gn, state=st, xlog=xlog, lk=lk, ld=ld, la=la))


def _unfused(g, u, p, segs, parent, log):
    R = u.shape[0]
    du = cuda.to_device(u)
    _, z, b, a = _views(g, du)
    row_slot = np.full(R, -1, np.int32)
    for r0, n, slot, _ in segs:
        row_slot[r0:r0 + n] = slot
    y = cuda.device_array((R, g.C), np.float32)
    xlog = cuda.to_device(np.full((R, g.C), np.nan, np.float32))
    conv.launch_conv(cuda.to_device(np.ascontiguousarray(u[:, :g.C])), cuda.to_device(p["cw"]),
                     cuda.to_device(p["tail"]), _i32(row_slot), _i32(parent), y, xlog)
    st = cuda.to_device(p["state"].copy())
    o = cuda.to_device(np.full((R, g.Hv, D), np.nan, np.float32))
    lk, ld, la = _logs(g, R, log)
    dr.launch_recurrent(y, a, b, cuda.to_device(p["A_log"]), cuda.to_device(p["dt_bias"]), st, *_segs(segs),
                        _i32(parent), o, lk, ld, la)
    gn = cuda.to_device(np.full((R, g.Vd), np.nan, np.float32))
    norms.launch_gated_rms_norm(o.reshape((R, g.Vd)), z, cuda.to_device(p["nw"]), gn, EPS, D)
    cuda.synchronize()
    return _host(dict(o=o, gn=gn, state=st, xlog=xlog, lk=lk, ld=ld, la=la))


def _reference(g, u, p, slot, parents):
    f = np.float64
    n = u.shape[0]
    C, Vd, Hv, KD = g.C, g.Vd, g.Hv, g.KD
    y, _ = ops.causal_conv_tree(u[:, :C].astype(f), p["cw"].astype(f), p["tail"][slot].astype(f), parents)
    q, k, v = y[:, :KD].reshape(n, HK, D), y[:, KD:2 * KD].reshape(n, HK, D), y[:, 2 * KD:].reshape(n, Hv, D)
    qn, kn = ops.gdn_prepare_qk(q, k)
    gg, beta = ops.gdn_gates(u[:, C + Vd + Hv:].astype(f), u[:, C + Vd:C + Vd + Hv].astype(f),
                             p["A_log"].astype(f), p["dt_bias"].astype(f))
    O, states = ops.delta_rule_tree(p["state"][slot].astype(f), qn, kn, v, gg, beta, parents)
    gn = ops.gated_rms_norm(O, u[:, C:C + Vd].astype(f).reshape(n, Hv, D), p["nw"].astype(f), EPS).reshape(n, Vd)
    return gn, states


@pytest.mark.parametrize("model", list(HV))
@pytest.mark.parametrize("B", [1, 8])
def test_fused_step_vs_unfused_twin_and_alone(model, B):
    g = G(HV[model])
    rng = np.random.default_rng(100 + B + g.Hv)
    slots = B + 1
    p = _model(rng, g, slots)
    u = _u(rng, g, B)
    order = rng.permutation(slots)[:B]  # streams in scrambled slots
    segs = [(i, 1, int(order[i]), 1) for i in range(B)]
    parent = [-1] * B
    fu = _fused(g, u, p, segs, parent, log=False)
    un = _unfused(g, u, p, segs, parent, log=False)
    assert not np.isnan(fu["gn"]).any()
    for key in ("o", "state", "xlog"):
        np.testing.assert_array_equal(fu[key], un[key], err_msg=key)
    np.testing.assert_array_equal(fu["gn"], un["gn"])
    for i in (0, B - 1):
        s = int(order[i])
        gr, sr = _reference(g, u[i:i + 1], p, s, [-1])
        np.testing.assert_allclose(fu["gn"][i:i + 1], gr, **TOL)
        np.testing.assert_allclose(fu["state"][s], sr[-1], **TOL)
    alone = _fused(g, u[B - 1:B], p, [(0, 1, int(order[B - 1]), 1)], [-1], log=False)
    np.testing.assert_array_equal(alone["gn"], fu["gn"][B - 1:B])
    np.testing.assert_array_equal(alone["state"][int(order[B - 1])], fu["state"][int(order[B - 1])])


@pytest.mark.parametrize("model", ["2B", "27B"])
def test_fused_logged_window_equals_lean_steps_and_tree(model):
    g = G(HV[model])
    rng = np.random.default_rng(7 + g.Hv)
    p = _model(rng, g, 2)
    u = _u(rng, g, 3)
    win = _fused(g, u, p, [(0, 3, 1, 0)], [-1, 0, 1], log=True)
    un = _unfused(g, u, p, [(0, 3, 1, 0)], [-1, 0, 1], log=True)
    for key in ("o", "state", "xlog", "lk", "ld", "la"):
        np.testing.assert_array_equal(win[key], un[key], err_msg=key)
    np.testing.assert_array_equal(win["gn"], un["gn"])
    # three lean steps, state and tail carried on the host
    q = dict(p, state=p["state"].copy(), tail=p["tail"].copy())
    rows = []
    for r in range(3):
        st = _fused(g, u[r:r + 1], q, [(0, 1, 1, 1)], [-1], log=False)
        rows.append(st["gn"][0])
        q["state"] = st["state"]
        q["tail"][1] = np.concatenate([q["tail"][1][1:], u[r:r + 1, :g.C]])
    np.testing.assert_array_equal(np.stack(rows), win["gn"])
    # a tree (verify, logged) against the twin
    tree = [-1, 0, 0, 1, -1]
    ut = _u(rng, g, len(tree))
    tr = _fused(g, ut, p, [(0, len(tree), 0, 0)], tree, log=True)
    gr, _ = _reference(g, ut, p, 0, tree)
    np.testing.assert_allclose(tr["gn"], gr, **TOL)
    np.testing.assert_array_equal(tr["state"], p["state"])
