"""GPU tier for the lean delta-rule step path, the greedy pass and the sampler at real shapes.

Run on the device: ``NUMBA_ENABLE_CUDASIM=0 python -m pytest -m gpu tests/kernels/test_gpu_delta_sample.py``.

- Delta rule, Qwen3.5 2B / 9B / 27B heads (Hk 16, Hv 16 / 32 / 48, Dk = Dv = 128), B = 1 / 8 / 32 streams, one row
  each (the lean ``gdn_step`` kernel, state in place): output and state against the float64 twin
  (``ops.delta_rule_step``; 1e-4 on O(1) values after one step from a random state); every stream's row equals the
  same stream run alone (bit for bit); a logged 3-row window (the general kernel) equals three lean steps, rows and
  final state bit for bit.
- Greedy at vocab 248,320 (+64 padded ids that hold the largest values), 1 / 8 / 64 rows, ties across slices, NaN
  and -inf rows: ``glue.launch_argmax`` and ``launch_sample`` at temperature 0 equal the twin (numpy argmax with NaN
  as -inf). Sampled rows (temperature / top-k / top-p / min-p) equal the twin's draw.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":  # pragma: no cover - collected on CPU only with -m gpu
    pytest.skip("GPU tier (NUMBA_ENABLE_CUDASIM=1)", allow_module_level=True)

from numba import cuda  # noqa: E402

from tensorfold.kernels import delta_rule as dr  # noqa: E402
from tensorfold.kernels import sample as K  # noqa: E402
from tensorfold.reference import ops  # noqa: E402
from tensorfold.reference import sampling as Sref  # noqa: E402
from tensorfold.runtime import glue  # noqa: E402

HV = {"2B": 16, "9B": 32, "27B": 48}
HK = 16
D = 128
V, VALID = 248320 + 64, 248320


def _i32(x):
    return cuda.to_device(np.ascontiguousarray(x, np.int32))


def _inputs(rng, R, Hv):
    C = 2 * HK * D + Hv * D
    qkv = rng.standard_normal((R, C)).astype(np.float32)
    a = rng.standard_normal((R, Hv)).astype(np.float32) - 1.0
    b = rng.standard_normal((R, Hv)).astype(np.float32)
    A_log = (rng.standard_normal(Hv) * 0.5).astype(np.float32)
    dt_bias = rng.standard_normal(Hv).astype(np.float32)
    return qkv, a, b, A_log, dt_bias


def _rec(qkv, a, b, A_log, dt_bias, state, segs, parents, log):
    R = qkv.shape[0]
    Hv = state.shape[1]
    st = cuda.to_device(state)
    o = cuda.to_device(np.full((R, Hv, D), np.nan, np.float32))
    nl = R if log else 0
    lk, ld, la = (cuda.device_array((nl, HK, D), np.float32), cuda.device_array((nl, Hv, D), np.float32),
                  cuda.device_array((nl, Hv), np.float32))
    s = np.asarray(segs, np.int32).reshape(-1, 4)
    dr.launch_recurrent(cuda.to_device(qkv), cuda.to_device(a), cuda.to_device(b), cuda.to_device(A_log),
                        cuda.to_device(dt_bias), st, _i32(s[:, 0]), _i32(s[:, 1]), _i32(s[:, 2]), _i32(s[:, 3]),
                        _i32(parents), o, lk, ld, la)
    cuda.synchronize()
    return o.copy_to_host(), st.copy_to_host()


@pytest.mark.parametrize("B", [1, 8, 32])
@pytest.mark.parametrize("model", ["2B", "9B", "27B"])
def test_step_vs_twin_and_alone(model, B):
    Hv = HV[model]
    rng = np.random.default_rng(B * 100 + Hv)
    qkv, a, b, A_log, dt_bias = _inputs(rng, B, Hv)
    state = (rng.standard_normal((B, Hv, D, D)) * 0.1).astype(np.float32)
    segs = [(i, 1, B - 1 - i, 1) for i in range(B)]  # row i -> slot B-1-i
    o, st = _rec(qkv, a, b, A_log, dt_bias, state, segs, -np.ones(B), log=False)
    assert not np.isnan(o).any()
    x = qkv.astype(np.float64)
    qn, kn = ops.gdn_prepare_qk(x[:, :HK * D].reshape(B, HK, D), x[:, HK * D:2 * HK * D].reshape(B, HK, D))
    g, beta = ops.gdn_gates(a.astype(np.float64), b, A_log, dt_bias)
    v = x[:, 2 * HK * D:].reshape(B, Hv, D)
    for i in range(B):
        o_ref, s_ref = ops.delta_rule_step(state[B - 1 - i].astype(np.float64), qn[i], kn[i], v[i], g[i], beta[i])
        np.testing.assert_allclose(o[i], o_ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(st[B - 1 - i], s_ref, rtol=1e-4, atol=1e-4)
    # one stream alone (its own launch, one segment) == its row in the batch
    j = B // 2
    o1, st1 = _rec(qkv[j:j + 1], a[j:j + 1], b[j:j + 1], A_log, dt_bias, state, [(0, 1, B - 1 - j, 1)], [-1],
                   log=False)
    np.testing.assert_array_equal(o1[0], o[j])
    np.testing.assert_array_equal(st1[B - 1 - j], st[B - 1 - j])


@pytest.mark.parametrize("cap", ["96", "80", "64"])
def test_step_register_cap_same_bits(cap, monkeypatch):
    """``TENSORFOLD_GDN_STEP_REGS`` (a register cap on the lean step kernel, for more blocks an SM): the 9B heads at
    32 streams, outputs and states bit for bit equal to the uncapped kernel's (same PTX), and the float64 twin's
    bound on a few streams."""
    Hv, B = HV["9B"], 32
    rng = np.random.default_rng(52 + int(cap))
    qkv, a, b, A_log, dt_bias = _inputs(rng, B, Hv)
    state = (rng.standard_normal((B, Hv, D, D)) * 0.1).astype(np.float32)
    segs = [(i, 1, (i * 7) % B, 1) for i in range(B)]
    runs = {}
    for c in (cap, "0"):
        monkeypatch.setenv("TENSORFOLD_GDN_STEP_REGS", c)
        runs[c] = _rec(qkv, a, b, A_log, dt_bias, state, segs, -np.ones(B), log=False)
    assert dr._K_STEP_CAP.get(int(cap)) is not None, "the capped kernel was not the one launched"
    o, st = runs[cap]
    assert not np.isnan(o).any()
    np.testing.assert_array_equal(o, runs["0"][0])
    np.testing.assert_array_equal(st, runs["0"][1])
    x = qkv.astype(np.float64)
    qn, kn = ops.gdn_prepare_qk(x[:, :HK * D].reshape(B, HK, D), x[:, HK * D:2 * HK * D].reshape(B, HK, D))
    g, beta = ops.gdn_gates(a.astype(np.float64), b, A_log, dt_bias)
    v = x[:, 2 * HK * D:].reshape(B, Hv, D)
    for i in (0, 13, B - 1):
        sl = (i * 7) % B
        o_ref, s_ref = ops.delta_rule_step(state[sl].astype(np.float64), qn[i], kn[i], v[i], g[i], beta[i])
        np.testing.assert_allclose(o[i], o_ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(st[sl], s_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model", ["2B", "27B"])
def test_logged_window_equals_lean_steps(model):
    Hv = HV[model]
    rng = np.random.default_rng(7)
    R = 3
    qkv, a, b, A_log, dt_bias = _inputs(rng, R, Hv)
    state = (rng.standard_normal((2, Hv, D, D)) * 0.1).astype(np.float32)
    o_w, st_w = _rec(qkv, a, b, A_log, dt_bias, state, [(0, R, 1, 1)], [-1, 0, 1], log=True)
    st = state.copy()
    for r in range(R):
        o1, st = _rec(qkv[r:r + 1], a[r:r + 1], b[r:r + 1], A_log, dt_bias, st, [(0, 1, 1, 1)], [-1], log=False)
        np.testing.assert_array_equal(o1[0], o_w[r])
    np.testing.assert_array_equal(st, st_w)
    # the same window on the lean path (committed, no log) == the logged window
    o_l, st_l = _rec(qkv, a, b, A_log, dt_bias, state, [(0, R, 1, 1)], [-1, 0, 1], log=False)
    np.testing.assert_array_equal(o_l, o_w)
    np.testing.assert_array_equal(st_l, st_w)


def _twin_greedy(row):
    lg = row[:VALID]
    return int(np.argmax(np.where(np.isnan(lg), -np.inf, lg)))


def _greedy_logits(rng, n):
    lg = (rng.standard_normal((n, V)) * 3).astype(np.float32)
    lg[:, VALID:] = 1e4  # padded ids: masked
    if n >= 4:
        lg[1, [7, 123456, VALID - 1]] = 50.0  # tie across slices -> lowest id
        lg[2, :] = np.nan
        lg[2, 200000] = -1.0
        lg[3, :VALID] = -np.inf
        lg[3, 5:9] = np.nan  # NaN counts as -inf: lowest id of all is 0
    if n >= 8:
        lg[4, VALID - 4:VALID] = 60.0  # max in the last quad
        lg[5, 0] = -0.0
        lg[5, 1:VALID] = -1.0
        lg[5, 9] = 0.0  # -0 == +0: lowest id
    return lg


@pytest.mark.parametrize("n", [1, 8, 64])
def test_greedy_vs_twin(n):
    rng = np.random.default_rng(n)
    lg = _greedy_logits(rng, n)
    ref = [_twin_greedy(lg[r]) for r in range(n)]
    d = cuda.to_device(lg)
    out = cuda.to_device(np.full(n, -1, np.int32))
    for _ in range(3):  # repeated launches: the workspace must come back to zero each time
        glue.launch_argmax(d, VALID, out)
        assert out.copy_to_host().tolist() == ref
    z = lambda dt: cuda.to_device(np.zeros(n, dt))  # noqa: E731
    out2 = cuda.to_device(np.full(n, -1, np.int32))
    K.launch_sample(d, out2, z(np.float32), z(np.int32), cuda.to_device(np.ones(n, np.float32)), z(np.float32),
                    z(np.int64), z(np.int64), VALID)
    assert out2.copy_to_host().tolist() == ref
    # a narrower view with an odd row length takes the scalar path
    sub = np.ascontiguousarray(lg[:, :VALID - 3])
    out3 = cuda.to_device(np.full(n, -1, np.int32))
    glue.launch_argmax(cuda.to_device(sub), VALID - 3, out3)
    ref3 = [int(np.argmax(np.where(np.isnan(sub[r]), -np.inf, sub[r]))) for r in range(n)]
    assert out3.copy_to_host().tolist() == ref3


def test_sampled_mixed_rows_vs_twin():
    rng = np.random.default_rng(11)
    n = 16
    lg = (rng.standard_normal((n, V)) * 3).astype(np.float32)
    t = np.array([0.0, 0.8, 1.0, 0.7, 1.2, 0.0, 0.9, 1.0] * 2, np.float32)
    k = np.array([0, 40, 0, 0, 20, 0, 0, 3] * 2, np.int32)
    p = np.array([1.0, 0.95, 0.9, 1.0, 0.8, 1.0, 0.5, 1.0] * 2, np.float32)
    mp = np.array([0.0, 0.0, 0.0, 0.05, 0.0, 0.0, 0.02, 0.0] * 2, np.float32)
    seeds = rng.integers(0, 2**63 - 1, n, dtype=np.int64)
    pos = rng.integers(0, 10**6, n, dtype=np.int64)
    out = cuda.to_device(np.full(n, -1, np.int32))
    K.launch_sample(cuda.to_device(lg), out, cuda.to_device(t), cuda.to_device(k), cuda.to_device(p),
                    cuda.to_device(mp), cuda.to_device(seeds), cuda.to_device(pos), VALID)
    ref = [Sref.sample(lg[r], t[r], k[r], p[r], mp[r], int(seeds[r]), int(pos[r]), VALID) for r in range(n)]
    assert out.copy_to_host().tolist() == ref
