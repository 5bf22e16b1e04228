"""GPU tier for the prompt-path variants (helper PROMPT): every inter-pass width of the chunked delta rule at real
Qwen3.5 shapes (2B / 9B / 27B heads, Dk = Dv = 128), 300 tokens in two segments (two slots), against the float64
recurrence (2e-4, as tests/kernels/test_gpu_b.py) and bit for bit against the 32-column kernel; the tensor-core
inter pass (``delta_chunk_tc``) against the same recurrence, its widths bit for bit against each other, and a
segment alone bit for bit against the same segment beside another.

    NUMBA_ENABLE_CUDASIM=0 python -m pytest -m gpu tests/kernels/test_gpu_prompt.py
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":  # pragma: no cover
    pytest.skip("GPU tier (NUMBA_ENABLE_CUDASIM=1)", allow_module_level=True)

from numba import cuda  # noqa: E402

from tensorfold.kernels import delta_rule as dr  # noqa: E402
from tensorfold.reference import ops  # noqa: E402

GEOM = {"2B": (16, 16), "9B": (16, 32), "27B": (16, 48)}  # Hk, Hv
D = 128


def _i32(x):
    return cuda.to_device(np.ascontiguousarray(x, np.int32))


def _inputs(rng, R, Hk, Hv):
    C = 2 * Hk * D + Hv * D
    qkv = rng.standard_normal((R, C)).astype(np.float32)
    a = rng.standard_normal((R, Hv)).astype(np.float32) - 2.0
    b = rng.standard_normal((R, Hv)).astype(np.float32)
    A_log = (rng.standard_normal(Hv) * 0.5).astype(np.float32)
    dt_bias = rng.standard_normal(Hv).astype(np.float32)
    return qkv, a, b, A_log, dt_bias


def _run(inp, state, segs, width, Hk, tc=0, intra_tc=False):
    qkv, a, b, A_log, dt_bias = inp
    R = qkv.shape[0]
    Hv = state.shape[1]
    st = cuda.to_device(state)
    o = cuda.device_array((R, Hv, D), np.float32)
    work = dr.chunk_workspace(R, Hk, Hv, D, D)
    s = np.asarray(segs, np.int32)
    dr.launch_chunked(cuda.to_device(qkv), cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log),
                      cuda.to_device(dt_bias), st, _i32(s[:, 0]), _i32(s[:, 1]), _i32(s[:, 2]), o, work,
                      max_rows_per_seg=int(s[:, 1].max()), inter=width, tc=tc,
                      intra_tc=intra_tc)
    cuda.synchronize()
    return o.copy_to_host(), st.copy_to_host()


def _ref(inp, state, L0, Hk, Hv):
    """The float64 recurrence over the first L0 rows from ``state``."""
    qkv, a, b, A_log, dt_bias = inp
    x = qkv[:L0].astype(np.float64)
    q = x[:, :Hk * D].reshape(L0, Hk, D)
    k = x[:, Hk * D:2 * Hk * D].reshape(L0, Hk, D)
    v = x[:, 2 * Hk * D:].reshape(L0, Hv, D)
    qn, kn = ops.gdn_prepare_qk(q, k)
    g, beta = ops.gdn_gates(a[:L0].astype(np.float64), b[:L0], A_log, dt_bias)
    return ops.delta_rule_recurrent(state.astype(np.float64), qn, kn, v, g, beta)


@pytest.mark.parametrize("model", ["2B", "9B", "27B"])
def test_inter_widths(model):
    Hk, Hv = GEOM[model]
    rng = np.random.default_rng(11)
    L0, L1 = 300, 77
    inp = _inputs(rng, L0 + L1, Hk, Hv)
    state = (rng.standard_normal((2, Hv, D, D)) * 0.1).astype(np.float32)
    segs = [(0, L0, 1), (L0, L1, 0)]
    o32, s32 = _run(inp, state, segs, 32, Hk)
    O_ref, S_ref = _ref(inp, state[1], L0, Hk, Hv)
    for w in dr.INTER_WIDTHS:
        ow, sw = (o32, s32) if w == 32 else _run(inp, state, segs, w, Hk)
        assert not np.isnan(ow).any(), w
        np.testing.assert_allclose(ow[:L0], O_ref, rtol=2e-4, atol=2e-4, err_msg=f"width {w}")
        np.testing.assert_allclose(sw[1], S_ref, rtol=2e-4, atol=2e-4, err_msg=f"width {w}")
        assert np.array_equal(ow, o32), f"width {w}: outputs differ from the 32-column kernel"
        assert np.array_equal(sw, s32), f"width {w}: states differ from the 32-column kernel"


@pytest.mark.parametrize("model", ["2B", "9B", "27B"])
def test_tc_inter(model):
    """The tensor-core inter pass: 300 + 77 rows in two slots against the float64 recurrence (2e-4), 8 and 16
    columns a block bit for bit, and the 77-row segment alone bit for bit against it
    beside the 300-row one."""
    Hk, Hv = GEOM[model]
    rng = np.random.default_rng(12)
    L0, L1 = 300, 77
    inp = _inputs(rng, L0 + L1, Hk, Hv)
    state = (rng.standard_normal((2, Hv, D, D)) * 0.1).astype(np.float32)
    segs = [(0, L0, 1), (L0, L1, 0)]
    o8, s8 = _run(inp, state, segs, 16, Hk, tc=8)
    assert not np.isnan(o8).any()
    O_ref, S_ref = _ref(inp, state[1], L0, Hk, Hv)
    np.testing.assert_allclose(o8[:L0], O_ref, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(s8[1], S_ref, rtol=2e-4, atol=2e-4)
    inp1 = tuple(x[L0:] if x.ndim == 2 else x for x in inp)
    O1, S1 = _ref(inp1, state[0], L1, Hk, Hv)
    np.testing.assert_allclose(o8[L0:], O1, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(s8[0], S1, rtol=2e-4, atol=2e-4)
    o16, s16 = _run(inp, state, segs, 16, Hk, tc=16)
    assert np.array_equal(o16.view(np.uint32), o8.view(np.uint32))
    assert np.array_equal(s16.view(np.uint32), s8.view(np.uint32))
    oa, sa = _run(inp1, state, [(0, L1, 0)], 16, Hk, tc=8)
    assert np.array_equal(oa.view(np.uint32), o8[L0:].view(np.uint32))
    assert np.array_equal(sa[0].view(np.uint32), s8[0].view(np.uint32))


@pytest.mark.parametrize("model", ["2B", "9B", "27B"])
def test_tc_intra(model):
    """The intra pass on tensor cores (``delta_intra_tc``, with the tensor-core inter pass): 300 + 77 rows in two
    slots against the float64 recurrence (2e-4), and the 77-row segment alone bit for bit against it beside the
    300-row one."""
    Hk, Hv = GEOM[model]
    rng = np.random.default_rng(13)
    L0, L1 = 300, 77
    inp = _inputs(rng, L0 + L1, Hk, Hv)
    state = (rng.standard_normal((2, Hv, D, D)) * 0.1).astype(np.float32)
    segs = [(0, L0, 1), (L0, L1, 0)]
    o, s = _run(inp, state, segs, 16, Hk, tc=16, intra_tc=True)
    assert not np.isnan(o).any()
    O_ref, S_ref = _ref(inp, state[1], L0, Hk, Hv)
    np.testing.assert_allclose(o[:L0], O_ref, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(s[1], S_ref, rtol=2e-4, atol=2e-4)
    inp1 = tuple(x[L0:] if x.ndim == 2 else x for x in inp)
    O1, S1 = _ref(inp1, state[0], L1, Hk, Hv)
    np.testing.assert_allclose(o[L0:], O1, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(s[0], S1, rtol=2e-4, atol=2e-4)
    oa, sa = _run(inp1, state, [(0, L1, 0)], 16, Hk, tc=16, intra_tc=True)
    assert np.array_equal(oa.view(np.uint32), o[L0:].view(np.uint32))
    assert np.array_equal(sa[0].view(np.uint32), s[0].view(np.uint32))
