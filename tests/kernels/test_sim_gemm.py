"""Simulator tier for the v1 kernel of tensorfold.kernels.gemm (tensor-core prompt GEMM for MLX affine weights;
v3 is in test_sim_gemm3.py; these tests pin ``impl="v1"``).

Oracle: ``ops.affine_dequant`` (fp32 ``s * q + b``) and a float64 matmul. Tolerance: ``|y - ref| <= 1e-5 *
(|x| @ |W|)`` elementwise (x enters the mma's as bf16 high + bf16 residual, about 2^-17 relative, and the qdot form
``s * dot(q, x) + b * sum(x)`` is evaluated in fp32). Outputs are poisoned with NaN first, so an unwritten output
fails. Weights are uniformly random packed words (every code value occurs) with random bf16 scales / biases, or
``quant.quantize`` of a Gaussian matrix. The simulated mma is slow and a block barrier: shapes are tiny and most
tests use a one-warp geometry (32 outputs x 16 rows per block); one test runs the production geometry.
"""

import numpy as np
import pytest

from tensorfold.kernels import gemm as G
from tensorfold.model import bf16, quant
from tensorfold.reference import ops

rng = np.random.default_rng()

SMALL = (1, 1, 2, 2)  # 1 warp: 32 outputs x 16 rows per block


def _rand_q(out, inp, bits, group, sdtype="bf16"):
    P = rng.integers(0, 2**32, (out, inp * bits // 32), dtype=np.uint64).astype(np.uint32)
    s = (rng.standard_normal((out, inp // group)) * 0.02).astype(np.float32)
    b = (rng.standard_normal((out, inp // group)) * 0.02).astype(np.float32)
    if sdtype == "bf16":
        return P, bf16.from_f32(s), bf16.from_f32(b)
    dt = np.float16 if sdtype == "f16" else np.float32
    return P, s.astype(dt), b.astype(dt)


def _ref(x, P, S, B, bits, group):
    W = ops.affine_dequant(P, S, B, bits, group).astype(np.float64)
    x = x.astype(np.float64)
    return x @ W.T, np.abs(x) @ np.abs(W).T


def _check(y, ref, bound, tol=1e-5):
    assert not np.isnan(y).any(), "NaN / unwritten output"
    err = np.abs(y - ref)
    assert (err <= tol * bound).all(), f"max err/bound {(err / bound).max():.3e} (tol {tol})"


def _run(P, S, B, x, bits, group, geo=SMALL, R=None):
    R = x.shape[0] if R is None else R
    y = np.full((R, P.shape[0]), np.nan, np.float32)
    G.launch_qgemm(P, S, B, x[:R], y, bits, group, geo=geo, impl="v1")
    return y


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_formats(bits, group):
    """Every supported bits x group; K = 128 is two stages (group 128 spans both: the odd-stage epilogue)."""
    out, K, R = 24, 128, 13
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = _run(P, S, B, x, bits, group)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)


def test_quantized_weights_partial_tiles():
    """quant.quantize weights (negative scales, edge biases); 2 x 2 blocks, both partial."""
    out, K, R, bits, group = 40, 128, 20, 4, 32
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = _run(P, S, B, x, bits, group)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)


def test_rows_independent_bit_for_bit():
    """A row's result does not depend on how many rows share the launch (R = 1, 17, 20; rows in other blocks)."""
    out, K, R, bits, group = 24, 64, 20, 4, 64
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    full = _run(P, S, B, x, bits, group)
    for r in (0, 7, 19):
        one = _run(P, S, B, x[r:r + 1], bits, group)
        assert np.array_equal(one[0].view(np.uint32), full[r].view(np.uint32)), f"row {r}: R=1 != R=20"
    part = _run(P, S, B, x, bits, group, R=17)
    assert np.array_equal(part.view(np.uint32), full[:17].view(np.uint32))
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(full, ref, bound)


def test_geometries_bit_identical():
    """The block / warp tiling only decides who computes an output, never how: other geometries give the same
    bits (per output the same mma chain over k and the same per-group epilogue)."""
    out, K, R, bits, group = 24, 64, 9, 2, 32
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    base = _run(P, S, B, x, bits, group)
    for geo in ((1, 2, 1, 1), (2, 1, 1, 2)):
        y = _run(P, S, B, x, bits, group, geo=geo)
        assert np.array_equal(y.view(np.uint32), base.view(np.uint32)), f"geo {geo}"
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(base, ref, bound)


def test_production_geometry():
    """The default geometry (one partial block of it) gives the reference result and the one-warp geometry's bits."""
    out, K, R, bits, group = 100, 64, 5, 4, 64
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = _run(P, S, B, x, bits, group, geo=G.GEO)  # v1's default
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)
    small = _run(P, S, B, x, bits, group)
    assert np.array_equal(y.view(np.uint32), small.view(np.uint32))


@pytest.mark.parametrize("sdtype", ["f32", "f16"])
def test_scale_dtypes(sdtype):
    out, K, R, bits, group = 24, 64, 5, 4, 32
    P, S, B = _rand_q(out, K, bits, group, sdtype)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = _run(P, S, B, x, bits, group)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)


def test_unsupported_formats_fall_back():
    """bits 3 (and in not a multiple of 64) go to affine.launch_qgemm: still correct, same contract."""
    assert not G.supported(128, 3, 32) and not G.supported(96, 4, 32) and G.supported(128, 8, 128)
    out, K, R = 20, 96, 3
    for bits, group in ((3, 32), (4, 32)):
        P, S, B = _rand_q(out, K, bits, group)
        x = rng.standard_normal((R, K)).astype(np.float32)
        y = np.full((R, out), np.nan, np.float32)
        G.launch_qgemm(P, S, B, x, y, bits, group)
        ref, bound = _ref(x, P, S, B, bits, group)
        _check(y, ref, bound, tol=2e-6)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_step_pairs_cover_each_step_once(bits):
    """The physical pair layout of a k-step is a permutation of its 16 codes, and the decoders read exactly those
    codes (checked on the generated expressions with plain-integer stand-ins for the bf16x2 helpers)."""
    pairs = G.step_pairs(bits)
    assert sorted(c for p in pairs for c in p) == list(range(16))
    words = rng.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32)
    codes = quant.unpack(words[None, :], bits, 128 // bits)[0]

    def fma_bf16x2(v, one, neg):  # (128 + q) pairs as bf16 -> (q_lo, q_hi)
        v = int(v)
        return ((v & 0xFFFF) - 0x4300, (v >> 16) - 0x4300)

    def pack_bf16x2(lo, hi):
        return (int(lo), int(hi))

    glb = {"np": np, "fma_bf16x2": fma_bf16x2, "pack_bf16x2": pack_bf16x2, "_TWO23": np.float32(8388608.0),
           "_ONE2": 0, "_NEG128": 0, "w": words}
    for s in range(8 // bits):
        for p in range(8):
            _, expr = G._pair_source(bits, s, p, lambda j: f"w[{j}]")
            lo, hi = eval(expr, glb)
            assert (lo, hi) == (codes[16 * s + pairs[p][0]], codes[16 * s + pairs[p][1]]), (s, p)
