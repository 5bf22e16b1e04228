"""Simulator tier for the chunked delta rule's tensor-core passes (inter: ``delta_chunk_tc``; intra:
``delta_intra_tc``): against a float64 recurrence (``reference.ops.delta_rule_recurrent``) on fresh random inputs,
the inter pass's two widths giving the same bits, and a segment's rows and state the same bits alone and beside
another segment. Tolerance: 1e-4 absolute and relative,
as the CUDA-core pass's test (the hi + lo bf16 splits carry about 2^-16 of each product)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from tensorfold.kernels import delta_rule as dr
from tensorfold.reference import ops

Hk, Hv, Dv = 1, 2, 24  # Dv not a multiple of 16: a partial 16-column slice


def _i32(v):
    return cuda.to_device(np.asarray(v, np.int32))


def _inputs(rng, L, Dk):
    C = 2 * Hk * Dk + Hv * Dv
    qkv = rng.standard_normal((L, C)).astype(np.float32)
    a = (rng.standard_normal((L, Hv)) - 2.0).astype(np.float32)
    b = rng.standard_normal((L, Hv)).astype(np.float32)
    A_log = np.log(rng.uniform(1.0, 16.0, Hv)).astype(np.float32)
    dt_bias = rng.uniform(-1.0, 1.0, Hv).astype(np.float32)
    return qkv, a, b, A_log, dt_bias


def _run(inp, state, segs, tc, Dk, intra_tc=False):
    qkv, a, b, A_log, dt_bias = inp
    L = qkv.shape[0]
    st = cuda.to_device(state.copy())
    o = cuda.to_device(np.full((L, Hv, Dv), np.nan, np.float32))
    work = dr.chunk_workspace(L, Hk, Hv, Dk, Dv)
    n = [s[1] for s in segs]
    dr.launch_chunked(cuda.to_device(qkv), cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log),
                      cuda.to_device(dt_bias), st, _i32([s[0] for s in segs]), _i32(n), _i32([s[2] for s in segs]),
                      o, work, max_rows_per_seg=max(n), prep_blocks=2, tc=tc, intra_tc=intra_tc)
    return o.copy_to_host(), st.copy_to_host()


def _ref(inp, state, r0, n, Dk):
    qkv, a, b, A_log, dt_bias = (x[r0:r0 + n] if x.ndim == 2 else x for x in inp)
    q = qkv[:, :Hk * Dk].reshape(n, Hk, Dk)
    k = qkv[:, Hk * Dk:2 * Hk * Dk].reshape(n, Hk, Dk)
    v = qkv[:, 2 * Hk * Dk:].reshape(n, Hv, Dv)
    qn, kn = ops.gdn_prepare_qk(q, k)
    g, beta = ops.gdn_gates(a, b, A_log, dt_bias)
    f = np.float64
    return ops.delta_rule_recurrent(state.astype(f), qn.astype(f), kn.astype(f), v.astype(f), g.astype(f),
                                    beta.astype(f))


def test_tc_inter_vs_recurrence_widths_and_neighbours():
    Dk = 16
    rng = np.random.default_rng(40 + Dk)
    L = 75
    inp = _inputs(rng, L, Dk)
    state = (rng.standard_normal((3, Hv, Dk, Dv)) * 0.3).astype(np.float32)
    segs = [(0, 70, 2), (70, 5, 0)]  # two chunks (the second partial) in slot 2; 5 rows in slot 0
    o8, s8 = _run(inp, state, segs, 8, Dk)
    assert not np.isnan(o8).any()
    for r0, n, slot in segs:
        O_ref, S_ref = _ref(inp, state[slot], r0, n, Dk)
        np.testing.assert_allclose(o8[r0:r0 + n], O_ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(s8[slot], S_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(s8[1], state[1])  # a slot no segment names is untouched
    # 16 columns a block (a partial slice at Dv = 24): the same bits
    o16, s16 = _run(inp, state, segs, 16, Dk)
    assert np.array_equal(o16.view(np.uint32), o8.view(np.uint32))
    assert np.array_equal(s16.view(np.uint32), s8.view(np.uint32))
    # the 5-row segment alone: the same bits as beside the 70-row one
    inp5 = tuple(x[70:] if x.ndim == 2 else x for x in inp)
    o5, s5 = _run(inp5, state, [(0, 5, 0)], 8, Dk)
    assert np.array_equal(o5.view(np.uint32), o8[70:].view(np.uint32))
    assert np.array_equal(s5[0].view(np.uint32), s8[0].view(np.uint32))


def test_tc_switch(monkeypatch):
    monkeypatch.setenv("TENSORFOLD_CHUNK_TC", "16")
    assert dr.inter_tc() == 16
    assert dr.inter_tc(0) == 0
    monkeypatch.setenv("TENSORFOLD_CHUNK_TC", "12")
    with pytest.raises(ValueError, match="TENSORFOLD_CHUNK_TC"):
        dr.inter_tc()


def test_tc_intra_vs_recurrence_and_neighbours():
    """The intra pass on tensor cores (with the CUDA-core inter pass, the faster one here): two segments against
    the float64 recurrence, and the 5-row segment alone == beside the 70-row one, bit for bit."""
    Dk = 16
    rng = np.random.default_rng(77)
    L = 75
    inp = _inputs(rng, L, Dk)
    state = (rng.standard_normal((3, Hv, Dk, Dv)) * 0.3).astype(np.float32)
    segs = [(0, 70, 2), (70, 5, 0)]
    o, s = _run(inp, state, segs, 0, Dk, intra_tc=True)
    assert not np.isnan(o).any()
    for r0, n, slot in segs:
        O_ref, S_ref = _ref(inp, state[slot], r0, n, Dk)
        np.testing.assert_allclose(o[r0:r0 + n], O_ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(s[slot], S_ref, rtol=1e-4, atol=1e-4)
    inp5 = tuple(x[70:] if x.ndim == 2 else x for x in inp)
    o5, s5 = _run(inp5, state, [(0, 5, 0)], 0, Dk, intra_tc=True)
    assert np.array_equal(o5.view(np.uint32), o[70:].view(np.uint32))
    assert np.array_equal(s5[0].view(np.uint32), s[0].view(np.uint32))
