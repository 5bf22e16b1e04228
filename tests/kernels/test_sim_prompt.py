"""Simulator tier for the prompt-path launch variants (helper PROMPT): every inter-pass width of the chunked delta
rule gives the same bits as the 32-column kernel and matches the float64 recurrence."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from tensorfold.kernels import delta_rule as dr
from tensorfold.reference import ops

Hk, Hv, Dk, Dv = 1, 2, 16, 40  # Dv not a multiple of 16 or 32: partial column slices


def _i32(v):
    return cuda.to_device(np.asarray(v, np.int32))


def _inputs(rng, L):
    C = 2 * Hk * Dk + Hv * Dv
    qkv = rng.standard_normal((L, C)).astype(np.float32)
    a = (rng.standard_normal((L, Hv)) - 2.0).astype(np.float32)
    b = rng.standard_normal((L, Hv)).astype(np.float32)
    A_log = np.log(rng.uniform(1.0, 16.0, Hv)).astype(np.float32)
    dt_bias = rng.uniform(-1.0, 1.0, Hv).astype(np.float32)
    return qkv, a, b, A_log, dt_bias


def _prep_ref(qkv, a, b, A_log, dt_bias):
    L = qkv.shape[0]
    q = qkv[:, :Hk * Dk].reshape(L, Hk, Dk)
    k = qkv[:, Hk * Dk:2 * Hk * Dk].reshape(L, Hk, Dk)
    v = qkv[:, 2 * Hk * Dk:].reshape(L, Hv, Dv)
    qn, kn = ops.gdn_prepare_qk(q, k)
    g, beta = ops.gdn_gates(a, b, A_log, dt_bias)
    return qn, kn, v, g, beta


def _run(L, segs, width, seed):
    rng = np.random.default_rng(seed)
    qkv, a, b, A_log, dt_bias = _inputs(rng, L)
    state = (rng.standard_normal((3, Hv, Dk, Dv)) * 0.3).astype(np.float32)
    st = cuda.to_device(state.copy())
    o = cuda.to_device(np.full((L, Hv, Dv), np.nan, np.float32))
    work = dr.chunk_workspace(L, Hk, Hv, Dk, Dv)
    row0 = [s[0] for s in segs]
    n = [s[1] for s in segs]
    slot = [s[2] for s in segs]
    dr.launch_chunked(cuda.to_device(qkv), cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log),
                      cuda.to_device(dt_bias), st, _i32(row0), _i32(n), _i32(slot), o, work,
                      max_rows_per_seg=max(n), prep_blocks=2, inter=width, tc=0)
    return (qkv, a, b, A_log, dt_bias, state), o.copy_to_host(), st.copy_to_host()


@pytest.mark.parametrize("width", [16, 8])
def test_inter_widths_same_bits(width):
    """Two segments (70 rows: two chunks, the second partial; 5 rows) in two slots: a narrower inter pass writes
    the same outputs and states as the 32-column kernel, bit for bit."""
    segs = [(0, 70, 2), (70, 5, 0)]
    _, o32, s32 = _run(75, segs, 32, 7)
    inp, ow, sw = _run(75, segs, width, 7)
    assert not np.isnan(ow).any()
    np.testing.assert_array_equal(ow, o32)
    np.testing.assert_array_equal(sw, s32)
    # and against the float64 recurrence (segment 0 from slot 2's state)
    qkv, a, b, A_log, dt_bias, state = inp
    qn, kn, v, g, beta = _prep_ref(qkv[:70], a[:70], b[:70], A_log, dt_bias)
    f = np.float64
    O_ref, S_ref = ops.delta_rule_recurrent(state[2].astype(f), qn.astype(f), kn.astype(f), v.astype(f),
                                            g.astype(f), beta.astype(f))
    np.testing.assert_allclose(ow[:70], O_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sw[2], S_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(sw[1], state[1])  # an untouched slot


def test_inter_width_switch(monkeypatch):
    monkeypatch.setenv("TENSORFOLD_CHUNK_INTER", "8")
    assert dr.inter_width() == 8
    assert dr.inter_width(32) == 32
    monkeypatch.setenv("TENSORFOLD_CHUNK_INTER", "12")
    with pytest.raises(ValueError):
        dr.inter_width()
    monkeypatch.delenv("TENSORFOLD_CHUNK_INTER")
    assert dr.inter_width() == dr.INTER_DEFAULT
