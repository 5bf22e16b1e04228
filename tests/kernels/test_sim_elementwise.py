"""Simulator tier: norms, activations and embedding kernels against their numpy twins (tensorfold.reference.ops).

Fresh random inputs each run; fp32 kernels vs fp32 twins within rtol 2e-5 / atol 1e-6 (max-norm relative for
embeddings: 1e-6); NaN or unwritten (poisoned) outputs fail. Grids are cut to one or two blocks (grid-stride).
"""

import numpy as np
import pytest

from tensorfold.kernels import activations as A
from tensorfold.kernels import embedding as E
from tensorfold.kernels import norms as N
from tensorfold.model import quant
from tensorfold.reference import ops

rng = np.random.default_rng()


def _close(got, ref, rtol=2e-5, atol=1e-6):
    assert not np.isnan(got).any(), "NaN / unwritten output"
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


def test_add_rms_norm():
    R, n = 3, 96
    x = rng.standard_normal((R, n)).astype(np.float32)
    h = rng.standard_normal((R, n)).astype(np.float32)
    mult = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    y = np.full((R, n), np.nan, np.float32)
    h_dev = h.copy()
    N.launch_add_rms_norm(x, h_dev, mult, y, 1e-6, max_blocks=2)
    ref_y, ref_h = ops.add_rms_norm(x, h, mult, 1e-6)
    _close(h_dev, ref_h)
    _close(y, ref_y)


def test_rms_norm():
    R, n = 2, 80
    x = rng.standard_normal((R, n)).astype(np.float32) * 3
    mult = rng.standard_normal(n).astype(np.float32)
    y = np.full((R, n), np.nan, np.float32)
    N.launch_rms_norm(x, mult, y, 1e-6, max_blocks=1)
    _close(y, ops.rms_norm(x, mult, 1e-6))


@pytest.mark.parametrize("act", ["silu", "sigmoid"])
def test_gated_rms_norm(act):
    R, heads, D = 2, 5, 16
    o = rng.standard_normal((R, heads * D)).astype(np.float32)
    z = (rng.standard_normal((R, heads * D)) * 4).astype(np.float32)
    w = rng.standard_normal(D).astype(np.float32)
    y = np.full_like(o, np.nan)
    N.launch_gated_rms_norm(o, z, w, y, 1e-6, D, act=act, max_blocks=2)
    ref = ops.gated_rms_norm(o.reshape(R, heads, D), z.reshape(R, heads, D), w, 1e-6, act=act).reshape(R, -1)
    _close(y, ref)


def test_activations():
    R, n = 3, 50
    g = (rng.standard_normal((R, n)) * 6).astype(np.float32)
    u = rng.standard_normal((R, n)).astype(np.float32)
    y = np.full_like(g, np.nan)
    A.launch_silu_mul(g, u, y, max_blocks=1)
    _close(y, ops.silu_mul(g, u))
    gu = np.concatenate([g, u], axis=1)
    y2 = np.full_like(g, np.nan)
    A.launch_silu_mul_fused(gu, y2, max_blocks=2)
    _close(y2, ops.silu_mul(g, u))
    y3 = np.full_like(g, np.nan)
    A.launch_sigmoid_gate(u, g, y3, max_blocks=1)
    _close(y3, ops.sigmoid_gate(u, g))


@pytest.mark.parametrize("bits,group", [(4, 64), (3, 32), (6, 64), (8, 32), (2, 128), (5, 64)])
def test_embed_affine(bits, group):
    V, H = 11, 128
    w = rng.standard_normal((V, H)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    ids = rng.integers(0, V, 4).astype(np.int32)
    y = np.full((4, H), np.nan, np.float32)
    E.launch_embed_affine(ids, P, S, B, y, bits, group, max_blocks=2)
    ref = ops.affine_dequant(P, S, B, bits, group)[ids]
    _close(y, ref, rtol=0, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("bits,group,u,per", [(4, 64, 4, 1), (3, 32, 2, 2), (6, 64, 2, 1), (4, 32, 2, 4)])
def test_embed_swept(bits, group, u, per):
    """The gather from ``qgemv.sweep_pack``'s layout (a tied head's single copy): the bits of the MLX-layout gather,
    rows in a partial last 16-row unit included (V = 37); 3 / 6 bits have codes across words."""
    from tensorfold.kernels import qgemv as Q

    V, H = 37, 256
    w = rng.standard_normal((V, H)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    ids = np.concatenate([[V - 1, 0], rng.integers(0, V, 3)]).astype(np.int32)
    y0 = np.full((5, H), np.nan, np.float32)
    y1 = y0.copy()
    E.launch_embed_affine(ids, P, S, B, y0, bits, group, max_blocks=2)
    E.launch_embed_swept(ids, Q.sweep_pack(P, S, B, bits, group, u, per=per), y1, bits, group, u, per,
                         max_blocks=2)
    ref = ops.affine_dequant(P, S, B, bits, group)[ids]
    _close(y0, ref, rtol=0, atol=1e-6 * np.abs(ref).max())
    assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32))


def test_embed_affine_f32_scales():
    V, H, bits, group = 7, 64, 4, 32
    w = rng.standard_normal((V, H)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group, scale_dtype="f32")
    ids = np.array([6, 0, 3], np.int32)
    y = np.full((3, H), np.nan, np.float32)
    E.launch_embed_affine(ids, P, S, B, y, bits, group, max_blocks=1)
    _close(y, ops.affine_dequant(P, S, B, bits, group)[ids])


def test_embed_dense():
    from tensorfold.model import bf16

    V, H = 9, 40
    W = bf16.from_f32(rng.standard_normal((V, H)).astype(np.float32))
    ids = np.array([8, 1, 1, 4], np.int32)
    y = np.full((4, H), np.nan, np.float32)
    E.launch_embed_dense(ids, W, y, max_blocks=1)
    np.testing.assert_array_equal(y, bf16.to_f32(W)[ids])


@pytest.mark.parametrize("n", [96, 264])
def test_norms_vectorized(n):
    """The vectorized one-pass kernels (vec=True: float4 a thread, 1 and 3 a thread here with idle lanes, two rows
    through one grid-stride block: the alternating shared slots) against the twins."""
    R = 2
    x = rng.standard_normal((R, n)).astype(np.float32)
    h = rng.standard_normal((R, n)).astype(np.float32)
    mult = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    y = np.full((R, n), np.nan, np.float32)
    h_dev = h.copy()
    N.launch_add_rms_norm(x, h_dev, mult, y, 1e-6, max_blocks=1, vec=True)
    ref_y, ref_h = ops.add_rms_norm(x, h, mult, 1e-6)
    _close(h_dev, ref_h)
    _close(y, ref_y)
    y2 = np.full((R, n), np.nan, np.float32)
    N.launch_rms_norm(h, mult, y2, 1e-6, max_blocks=1, vec=True)
    _close(y2, ops.rms_norm(h, mult, 1e-6))
