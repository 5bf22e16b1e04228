"""GPU tier for the part-B kernels (delta rule, conv, attention, fp8 KV, compaction) at real Qwen3.5 shapes.

Run on the device: ``NUMBA_ENABLE_CUDASIM=0 python -m pytest -m gpu tests/kernels/test_gpu_b.py``.
Real dtype paths the simulator cannot run (bf16 / e4m3 caches through the real conversion code, fma contraction,
libdevice exp/log) against ``tensorfold.reference`` in float64 (recurrence: 1e-4 on O(1) values after 4-8 steps;
chunked: 2e-4 over 300 tokens; attention: 1e-4 vs the twin on the same decoded caches), and the exactness
properties bit for bit on the real GPU (window == one-row steps, tree row == its branch, commit == stepping,
a row alone == batched).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":  # pragma: no cover - collected on CPU only with -m gpu
    pytest.skip("GPU tier (NUMBA_ENABLE_CUDASIM=1)", allow_module_level=True)

from numba import cuda  # noqa: E402

from tensorfold.kernels import attention as katt  # noqa: E402
from tensorfold.kernels import compact, conv  # noqa: E402
from tensorfold.kernels import delta_rule as dr  # noqa: E402
from tensorfold.kernels import kv8 as kkv8  # noqa: E402
from tensorfold.model import bf16  # noqa: E402
from tensorfold.reference import attention as ratt  # noqa: E402
from tensorfold.reference import kv8, ops  # noqa: E402

GEOM = {  # Hk, Hv, nH, nKV
    "2B": (16, 16, 8, 2),
    "9B": (16, 32, 16, 4),
    "27B": (16, 48, 24, 4),
}
D = 128
HD = 256


def _i32(x):
    return cuda.to_device(np.ascontiguousarray(x, np.int32))


def _gdn_inputs(rng, R, Hk, Hv):
    C = 2 * Hk * D + Hv * D
    qkv = rng.standard_normal((R, C)).astype(np.float32)
    a = rng.standard_normal((R, Hv)).astype(np.float32) - 1.0
    b = rng.standard_normal((R, Hv)).astype(np.float32)
    A_log = (rng.standard_normal(Hv) * 0.5).astype(np.float32)
    dt_bias = rng.standard_normal(Hv).astype(np.float32)
    return qkv, a, b, A_log, dt_bias


def _prep64(qkv, a, b, A_log, dt_bias, Hk, Hv):
    R = qkv.shape[0]
    x = qkv.astype(np.float64)
    q = x[:, :Hk * D].reshape(R, Hk, D)
    k = x[:, Hk * D:2 * Hk * D].reshape(R, Hk, D)
    v = x[:, 2 * Hk * D:].reshape(R, Hv, D)
    qn, kn = ops.gdn_prepare_qk(q, k)
    g, beta = ops.gdn_gates(a.astype(np.float64), b, A_log, dt_bias)
    return qn, kn, v, g, beta


def _rec(qkv, a, b, A_log, dt_bias, state, segs, parents, Hk, log=True):
    R = qkv.shape[0]
    Hv = state.shape[1]
    st = cuda.to_device(state)
    o = cuda.device_array((R, Hv, D), np.float32)
    nl = R if log else 0
    lk = cuda.device_array((nl, Hk, D), np.float32)
    ld = cuda.device_array((nl, Hv, D), np.float32)
    la = cuda.device_array((nl, Hv), np.float32)
    s = np.asarray(segs, np.int32).reshape(-1, 4)
    dr.launch_recurrent(cuda.to_device(qkv), cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log),
                        cuda.to_device(dt_bias), st, _i32(s[:, 0]), _i32(s[:, 1]), _i32(s[:, 2]), _i32(s[:, 3]),
                        _i32(parents), o, lk, ld, la)
    cuda.synchronize()
    return o.copy_to_host(), st.copy_to_host(), lk.copy_to_host(), ld.copy_to_host(), la.copy_to_host()


@pytest.mark.parametrize("model", ["2B", "27B"])
def test_recurrent_window_tree_commit(model):
    Hk, Hv, _, _ = GEOM[model]
    rng = np.random.default_rng(1)
    R = 4
    qkv, a, b, A_log, dt_bias = _gdn_inputs(rng, R, Hk, Hv)
    state = (rng.standard_normal((2, Hv, D, D)) * 0.1).astype(np.float32)
    o_w, st_w, *_ = _rec(qkv, a, b, A_log, dt_bias, state, [(0, R, 1, 1)], [-1, 0, 1, 2], Hk)
    qn, kn, v, g, beta = _prep64(qkv, a, b, A_log, dt_bias, Hk, Hv)
    O_ref, S_ref = ops.delta_rule_recurrent(state[1].astype(np.float64), qn, kn, v, g, beta)
    np.testing.assert_allclose(o_w, O_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(st_w[1], S_ref, rtol=1e-4, atol=1e-4)
    # one-row steps in place: bit-identical
    st = state.copy()
    outs = []
    for r in range(R):
        o1, st, *_ = _rec(qkv[r:r + 1], a[r:r + 1], b[r:r + 1], A_log, dt_bias, st, [(0, 1, 1, 1)], [-1], Hk,
                          log=False)
        outs.append(o1[0])
    np.testing.assert_array_equal(np.stack(outs), o_w)
    np.testing.assert_array_equal(st, st_w)
    # tree: rows 0,1,2,3 as window + a sibling branch 4 (parent 1); commit leaf 3 == window state
    parents = [-1, 0, 1, 2, 1]
    qkv5 = np.concatenate([qkv, qkv[:1] * 0.5])
    a5, b5 = np.concatenate([a, a[:1]]), np.concatenate([b, b[:1]])
    o_t, st_t, lk, ld, la = _rec(qkv5, a5, b5, A_log, dt_bias, state, [(0, 5, 1, 0)], parents, Hk)
    np.testing.assert_array_equal(st_t, state)
    np.testing.assert_array_equal(o_t[:4], o_w)
    stc = cuda.to_device(state[None].copy())
    compact.launch_gdn_commit(stc, cuda.to_device(lk[None]), cuda.to_device(ld[None]), cuda.to_device(la[None]),
                              _i32(parents), _i32([1]), _i32([3]))
    np.testing.assert_array_equal(stc.copy_to_host()[0], st_w)


@pytest.mark.parametrize("model", ["2B", "9B"])
def test_chunked_vs_recurrence(model):
    Hk, Hv, _, _ = GEOM[model]
    rng = np.random.default_rng(2)
    L = 300
    qkv, a, b, A_log, dt_bias = _gdn_inputs(rng, L, Hk, Hv)
    a -= 2.0
    state = (rng.standard_normal((1, Hv, D, D)) * 0.1).astype(np.float32)
    st = cuda.to_device(state)
    o = cuda.device_array((L, Hv, D), np.float32)
    work = dr.chunk_workspace(L, Hk, Hv, D, D)
    dr.launch_chunked(cuda.to_device(qkv), cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log),
                      cuda.to_device(dt_bias), st, _i32([0]), _i32([L]), _i32([0]), o, work, max_rows_per_seg=L)
    qn, kn, v, g, beta = _prep64(qkv, a, b, A_log, dt_bias, Hk, Hv)
    O_ref, S_ref = ops.delta_rule_recurrent(state[0].astype(np.float64), qn, kn, v, g, beta)
    oh = o.copy_to_host()
    assert not np.isnan(oh).any()
    np.testing.assert_allclose(oh, O_ref, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(st.copy_to_host()[0], S_ref, rtol=2e-4, atol=2e-4)


def test_conv_27B():
    Hk, Hv, _, _ = GEOM["27B"]
    C = 2 * Hk * D + Hv * D
    rng = np.random.default_rng(3)
    w = rng.standard_normal((C, 4)).astype(np.float32)
    tail = rng.standard_normal((2, 3, C)).astype(np.float32)
    parents = [-1, 0, 0, 2, -1]
    row_slot = [1, 1, 1, 1, 0]
    x = rng.standard_normal((5, C)).astype(np.float32)
    y = cuda.device_array((5, C), np.float32)
    conv.launch_conv(cuda.to_device(x), cuda.to_device(w), cuda.to_device(tail), _i32(row_slot), _i32(parents), y,
                     conv.empty_log(C))
    yt, _ = ops.causal_conv_tree(x[:4].astype(np.float64), w, tail[1], parents[:4])
    yw, _ = ops.causal_conv(x[4:].astype(np.float64), w, tail[0])
    yh = y.copy_to_host()
    np.testing.assert_allclose(yh[:4], yt, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(yh[4:], yw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", ["bf16", "e4m3"])
@pytest.mark.parametrize("model", ["2B", "27B"])
def test_store_and_attention(model, fmt):
    _, _, nH, nKV = GEOM[model]
    rng = np.random.default_rng(4)
    slots, ctx = 2, 700
    T = 600  # committed keys in slot 1
    dt = np.uint16 if fmt == "bf16" else np.uint8
    kf = rng.standard_normal((slots, ctx, nKV, HD)).astype(np.float32)
    vf = rng.standard_normal((slots, ctx, nKV, HD)).astype(np.float32)
    if fmt == "bf16":
        kc, vc, ks, vs = bf16.from_f32(kf), bf16.from_f32(vf), None, None
    else:
        (kc, ks), (vc, vs) = kv8.quantize_rows(kf), kv8.quantize_rows(vf)
    dkc, dvc = cuda.to_device(kc), cuda.to_device(vc)
    dks = cuda.to_device(ks) if ks is not None else kkv8.empty_scale()
    dvs = cuda.to_device(vs) if vs is not None else kkv8.empty_scale()
    # 3 new rows of slot 1: a window at positions T, T+1, T+2 (rope positions = cache positions)
    R = 3
    qg = rng.standard_normal((R, nH, 2 * HD)).astype(np.float32)
    k = rng.standard_normal((R, nKV, HD)).astype(np.float32)
    v = rng.standard_normal((R, nKV, HD)).astype(np.float32)
    qn = (1 + 0.1 * rng.standard_normal(HD)).astype(np.float32)
    kn = (1 + 0.1 * rng.standard_normal(HD)).astype(np.float32)
    pos = np.arange(T, T + R, dtype=np.int32)
    inv = ops.rope_inv_freq(64, 1e7)
    q_out = cuda.device_array((R, nH, HD), np.float32)
    kkv8.launch_qk_norm_rope_store(cuda.to_device(qg), cuda.to_device(k), cuda.to_device(v), cuda.to_device(qn),
                                   cuda.to_device(kn), cuda.to_device(inv), _i32(pos), _i32([1] * R), _i32(pos),
                                   1e-6, q_out, dkc, dvc, dks, dvs)
    q_ref = ops.qk_norm_rope(qg[:, :, :HD].astype(np.float64), qn, 1e-6, pos, 64, 1e7)
    k_ref = ops.qk_norm_rope(k.astype(np.float64), kn, 1e-6, pos, 64, 1e7)
    qh = q_out.copy_to_host()
    np.testing.assert_allclose(qh, q_ref, rtol=1e-4, atol=1e-4)
    kch = dkc.copy_to_host()
    ksh = dks.copy_to_host() if ks is not None else None
    kdec = ratt.decode_cache(kch, ksh)[1, T:T + R]
    tol = 2.0 ** -7 if fmt == "bf16" else 2.0 ** -3
    assert np.all(np.abs(kdec - k_ref) <= tol * np.abs(k_ref) + (1e-6 if fmt == "bf16" else ksh[1, T:T + R, :, None]))
    # attention: the 3 window rows (row i sees T + i + 1 keys), plus a chain-tree copy of row 2 and a row of slot 0
    q_all = np.concatenate([qh, qh[2:3], rng.standard_normal((1, nH, HD)).astype(np.float32)])
    meta = ([1, 1, 1, 1, 0], [T + 1, T + 2, T + 3, T, 77], [0, 0, 0, 0b111, 0], [0, 0, 0, T, 0])
    Ra = q_all.shape[0]
    m, l, acc = katt.partial_buffers(Ra, nH, HD, ctx)
    d = [_i32(x) for x in meta]
    qg_all = np.concatenate([qg, qg[2:3], qg[:1]])
    out = cuda.device_array((Ra, nH, HD), np.float32)
    katt.launch_partials(cuda.to_device(q_all), dkc, dvc, dks, dvs, *d, HD ** -0.5, m, l, acc)
    katt.launch_merge(m, l, acc, d[0], d[1], d[2], cuda.to_device(qg_all), 1, out)
    oh = out.copy_to_host()
    vch = dvc.copy_to_host()
    vsh = dvs.copy_to_host() if vs is not None else None
    twin = ratt.attention_rows(q_all, kch, vch, ksh, vsh, *[np.asarray(x) for x in meta], HD ** -0.5,
                               gate=qg_all[:, :, HD:])
    np.testing.assert_allclose(oh, twin, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(oh[3], oh[2])  # chain-tree row == window row, bit for bit
    # alone == batched
    out1 = cuda.device_array((1, nH, HD), np.float32)
    m1, l1, a1 = katt.partial_buffers(1, nH, HD, ctx)
    d1 = [_i32([x[2]]) for x in meta]
    katt.launch_partials(cuda.to_device(q_all[2:3]), dkc, dvc, dks, dvs, *d1, HD ** -0.5, m1, l1, a1, nz=3)
    katt.launch_merge(m1, l1, a1, d1[0], d1[1], d1[2], cuda.to_device(qg_all[2:3]), 1, out1)
    np.testing.assert_array_equal(out1.copy_to_host()[0], oh[2])
