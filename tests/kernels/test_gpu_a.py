"""GPU tier for part A kernels (run on the device: ``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/kernels/test_gpu_a.py``).

Real 2B / 9B / 27B shapes and the dtype paths the simulator cannot run (16-byte ld.global.nc, shuffles, libdevice
exp): quantized GEMV (4-bit g64 at real shapes, every other bits at 4096 x 4096), row-count independence bit for
bit on the GPU, split-K, dense bf16 GEMV, prompt GEMM, norms, activations, embedding, sampling == numpy twin.
Weights are random MLX-packed codes with random bf16 scales / biases (any bit pattern is a valid code); the oracle
is float64 numpy. GEMV / GEMM tolerance: |y - ref| <= 3e-5 * (|x| @ |W|) elementwise (fp32 accumulation over up to
17408 inputs); norms / activations rtol 1e-5; outputs are poisoned with NaN first.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

rng = np.random.default_rng()


def _cuda():
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no CUDA GPU")
    return cuda


def _rand_q(out, inp, bits, group):
    from tensorfold.model import bf16

    P = rng.integers(0, 2**32, (out, inp * bits // 32), dtype=np.uint64).astype(np.uint32)
    S = bf16.from_f32((rng.standard_normal((out, inp // group)) * 0.02).astype(np.float32))
    B = bf16.from_f32((rng.standard_normal((out, inp // group)) * 0.02).astype(np.float32))
    return P, S, B


def _xin(x, plan):
    """x as ``plan``'s kernel multiplies it: rounded to bf16 (nearest even, ``bf16.from_f32``) for a qgemv plan with
    bf16-only x (``V3Plan.xh``, the default since session 22), else as given"""
    from tensorfold.model import bf16

    return bf16.to_f32(bf16.from_f32(x)) if getattr(plan, "xh", 0) else x


def _ref(x, P, S, B, bits, group):
    from tensorfold.model import bf16
    from tensorfold.reference import ops

    if bits == 4:  # fast path for the big shapes (same math as ops.affine_dequant)
        q = ((P[:, :, None] >> (np.arange(8, dtype=np.uint32) * 4)) & 15).reshape(P.shape[0], -1)
        q = q.astype(np.float32).reshape(P.shape[0], -1, group)
        W = (bf16.to_f32(S)[:, :, None] * q + bf16.to_f32(B)[:, :, None]).reshape(P.shape[0], -1)
    else:
        W = ops.affine_dequant(P, S, B, bits, group)
    x64 = x.astype(np.float64)
    return x64 @ W.T.astype(np.float64), np.abs(x64) @ np.abs(W.T).astype(np.float64)


def _check(y, ref, bound, tol=3e-5):
    assert not np.isnan(y).any()
    err = np.abs(y - ref)
    assert (err <= tol * bound).all(), f"max err/bound {(err / bound).max():.2e}"


def _gemv(cuda, P, S, B, x, bits, group):
    from tensorfold.kernels import affine as A

    out, inp = P.shape[0], x.shape[1]
    plan = A.plan_qgemv(out, inp, bits, group)
    dP, dS, dB, dx = (cuda.to_device(a) for a in (P, S, B, x))
    y = cuda.to_device(np.full((x.shape[0], out), np.nan, np.float32))
    ws = cuda.device_array((plan.ks, x.shape[0], out), np.float32) if plan.ks > 1 else None
    A.launch_qgemv(dP, dS, dB, dx, y, bits, group, plan, ws=ws)
    return y.copy_to_host(), plan


@pytest.mark.parametrize("out,inp", [(12288, 4096), (4096, 12288), (2048, 6144), (17408, 5120), (5120, 17408),
                                     (32768, 4096)])
def test_qgemv_4bit_real_shapes_and_row_independence(out, inp):
    cuda = _cuda()
    P, S, B = _rand_q(out, inp, 4, 64)
    x = rng.standard_normal((8, inp)).astype(np.float32)
    y8, plan = _gemv(cuda, P, S, B, x, 4, 64)
    ref, bound = _ref(_xin(x, plan), P, S, B, 4, 64)
    _check(y8, ref, bound)
    for r in (0, 5):
        y1, _ = _gemv(cuda, P, S, B, x[r:r + 1], 4, 64)
        assert np.array_equal(y1[0].view(np.uint32), y8[r].view(np.uint32)), f"row {r}: R=1 != R=8 ({plan})"
    y3, _ = _gemv(cuda, P, S, B, x[:3], 4, 64)
    assert np.array_equal(y3.view(np.uint32), y8[:3].view(np.uint32))


@pytest.mark.parametrize("bits", [2, 3, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_qgemv_formats(bits, group):
    cuda = _cuda()
    P, S, B = _rand_q(1024, 4096, bits, group)
    x = rng.standard_normal((2, 4096)).astype(np.float32)
    y, plan = _gemv(cuda, P, S, B, x, bits, group)
    ref, bound = _ref(_xin(x, plan), P, S, B, bits, group)
    _check(y, ref, bound)


def test_dense_bf16_gemv():
    cuda = _cuda()
    from tensorfold.kernels import affine as A
    from tensorfold.model import bf16

    W = bf16.from_f32(rng.standard_normal((4096, 4096)).astype(np.float32) * 0.02)
    for R in (1, 8):
        x = rng.standard_normal((R, 4096)).astype(np.float32)
        y = cuda.to_device(np.full((R, 4096), np.nan, np.float32))
        A.launch_dense_gemv(cuda.to_device(W.view(np.uint32)), cuda.to_device(x), y)
        Wf = bf16.to_f32(W).astype(np.float64)
        _check(y.copy_to_host(), x.astype(np.float64) @ Wf.T, np.abs(x.astype(np.float64)) @ np.abs(Wf).T)


def test_qgemm_prompt():
    cuda = _cuda()
    from tensorfold.kernels import affine as A

    P, S, B = _rand_q(4096, 4096, 4, 64)
    x = rng.standard_normal((300, 4096)).astype(np.float32)
    y = cuda.to_device(np.full((300, 4096), np.nan, np.float32))
    A.launch_qgemm(*(cuda.to_device(a) for a in (P, S, B, x)), y, 4, 64)
    ref, bound = _ref(x, P, S, B, 4, 64)
    _check(y.copy_to_host(), ref, bound)


@pytest.mark.parametrize("H", [2048, 4096, 5120, 96])
def test_norms_vectorized_rows_1_and_8(H):
    """The vectorized one-pass add + RMSNorm and RMSNorm (float4 a thread, 4 / 4 / 5 a thread at the 2B / 9B / 27B
    widths; 96: one block of 32 threads with idle ones) at 1 and 8 rows against the numpy twin (rtol
    1e-5) and the residual h (rtol 1e-6); the scalar kernel on the same input within the same tolerance."""
    cuda = _cuda()
    from tensorfold.kernels import norms as N
    from tensorfold.reference import ops

    for R in (1, 8):
        x = rng.standard_normal((R, H)).astype(np.float32)
        h = (rng.standard_normal((R, H)) * 3).astype(np.float32)
        mult = rng.standard_normal(H).astype(np.float32)
        ry, rh = ops.add_rms_norm(x, h, mult, 1e-6)
        for vec in (True, False):
            dh = cuda.to_device(h)
            y = cuda.to_device(np.full((R, H), np.nan, np.float32))
            N.launch_add_rms_norm(cuda.to_device(x), dh, cuda.to_device(mult), y, 1e-6, vec=vec)
            np.testing.assert_allclose(dh.copy_to_host(), rh, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(y.copy_to_host(), ry, rtol=1e-5, atol=1e-5)
            y2 = cuda.to_device(np.full((R, H), np.nan, np.float32))
            N.launch_rms_norm(cuda.to_device(h), cuda.to_device(mult), y2, 1e-6, vec=vec)
            np.testing.assert_allclose(y2.copy_to_host(), ops.rms_norm(h, mult, 1e-6), rtol=1e-5, atol=1e-5)


def test_norms_activations_embedding():
    cuda = _cuda()
    from tensorfold.kernels import activations as Ak
    from tensorfold.kernels import embedding as E
    from tensorfold.kernels import norms as N
    from tensorfold.reference import ops

    R, H = 8, 5120
    x = rng.standard_normal((R, H)).astype(np.float32)
    h = rng.standard_normal((R, H)).astype(np.float32)
    mult = rng.standard_normal(H).astype(np.float32)
    dh = cuda.to_device(h)
    y = cuda.to_device(np.full((R, H), np.nan, np.float32))
    N.launch_add_rms_norm(cuda.to_device(x), dh, cuda.to_device(mult), y, 1e-6)
    ry, rh = ops.add_rms_norm(x, h, mult, 1e-6)
    np.testing.assert_allclose(dh.copy_to_host(), rh, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y.copy_to_host(), ry, rtol=1e-5, atol=1e-5)
    o = rng.standard_normal((R, 48 * 128)).astype(np.float32)
    z = rng.standard_normal((R, 48 * 128)).astype(np.float32) * 3
    w = rng.standard_normal(128).astype(np.float32)
    yg = cuda.to_device(np.full_like(o, np.nan))
    N.launch_gated_rms_norm(cuda.to_device(o), cuda.to_device(z), cuda.to_device(w), yg, 1e-6, 128)
    rg = ops.gated_rms_norm(o.reshape(R, 48, 128), z.reshape(R, 48, 128), w, 1e-6).reshape(R, -1)
    np.testing.assert_allclose(yg.copy_to_host(), rg, rtol=1e-5, atol=1e-5)
    g = rng.standard_normal((R, 17408)).astype(np.float32) * 4
    u = rng.standard_normal((R, 17408)).astype(np.float32)
    ya = cuda.to_device(np.full_like(g, np.nan))
    Ak.launch_silu_mul_fused(cuda.to_device(np.concatenate([g, u], 1)), ya)
    np.testing.assert_allclose(ya.copy_to_host(), ops.silu_mul(g, u), rtol=1e-5, atol=1e-6)
    P, S, B = _rand_q(248320, 2048, 4, 64)
    ids = rng.integers(0, 248320, 16).astype(np.int32)
    ye = cuda.to_device(np.full((16, 2048), np.nan, np.float32))
    E.launch_embed_affine(cuda.to_device(ids), cuda.to_device(P), cuda.to_device(S), cuda.to_device(B), ye, 4, 64)
    ref = ops.affine_dequant(P[ids], S[ids], B[ids], 4, 64)
    np.testing.assert_allclose(ye.copy_to_host(), ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("params", [(0.0, 0, 1.0, 0.0), (1.0, 0, 1.0, 0.0), (0.7, 40, 0.9, 0.0),
                                    (1.0, 0, 0.95, 0.05), (0.6, 0, 1.0, 0.1)])
def test_sample_matches_twin(params):
    cuda = _cuda()
    from tensorfold.kernels import sample as K
    from tensorfold.reference import sampling as Sref

    t, k, p, mp = params
    n, V, valid = 8, 248320 + 64, 248320
    lg = (rng.standard_normal((n, V)) * 3).astype(np.float32)
    seeds = rng.integers(0, 2**63 - 1, n, dtype=np.int64)
    pos = rng.integers(0, 10**6, n, dtype=np.int64)
    out = cuda.to_device(np.full(n, -1, np.int32))
    K.launch_sample(cuda.to_device(lg), out, cuda.to_device(np.full(n, t, np.float32)),
                    cuda.to_device(np.full(n, k, np.int32)), cuda.to_device(np.full(n, p, np.float32)),
                    cuda.to_device(np.full(n, mp, np.float32)), cuda.to_device(seeds), cuda.to_device(pos), valid)
    ref = [Sref.sample(lg[r], t, k, p, mp, int(seeds[r]), int(pos[r]), valid) for r in range(n)]
    assert out.copy_to_host().tolist() == ref
