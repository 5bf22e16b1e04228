"""tensorfold.reference.ops against independent oracles: transformers' Qwen3.5 torch functions (float32/64 CPU)
and, for the affine dequant, a word-level packer written here from qwen35.md §4.1.

Fresh random inputs per test (seeded for reproducibility); tolerances are stated per assertion.
"""

import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tensorfold.model import bf16
from tensorfold.reference import ops

M = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


@pytest.fixture
def rng(request):
    """A generator seeded by the test's name (crc32: ``hash()`` of a str changes from process to process)."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def test_rms_norm_matches_hf_zero_centred(rng):
    w = rng.standard_normal(48).astype(np.float32) * 0.3
    x = (rng.standard_normal((5, 7, 48)) * 3).astype(np.float32)
    mod = M.Qwen3_5RMSNorm(48, eps=1e-6)
    with torch.no_grad():
        mod.weight.copy_(torch.from_numpy(w))
        ref = mod(torch.from_numpy(x)).numpy()
    got = ops.rms_norm(x, 1.0 + w, 1e-6)
    assert got.dtype == np.float32
    assert rel(got, ref) < 1e-6
    n, r = ops.add_rms_norm(x, x * 2, 1.0 + w, 1e-6)
    assert np.allclose(r, 3 * x)
    assert rel(n, mod(torch.from_numpy(3 * x)).detach().numpy()) < 1e-6


def test_gated_rms_norm_matches_hf(rng):
    w = (1 + 0.2 * rng.standard_normal(16)).astype(np.float32)
    o = rng.standard_normal((9, 4, 16)).astype(np.float32)
    z = (2 * rng.standard_normal((9, 4, 16))).astype(np.float32)
    mod = M.Qwen3_5RMSNormGated(16, eps=1e-6)
    with torch.no_grad():
        mod.weight.copy_(torch.from_numpy(w))
        ref = mod(torch.from_numpy(o), torch.from_numpy(z)).numpy()
    assert rel(ops.gated_rms_norm(o, z, w, 1e-6), ref) < 1e-6
    sig = ops.gated_rms_norm(o, z, w, 1e-6, act="sigmoid")
    assert rel(sig, ops.rms_norm(o, w, 1e-6) * torch.sigmoid(torch.from_numpy(z)).numpy()) < 1e-6


def test_activations_and_gates(rng):
    x = (rng.standard_normal((3, 50)) * 30).astype(np.float32)
    y = rng.standard_normal((3, 50)).astype(np.float32)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    assert rel(ops.silu_mul(x, y), (F.silu(tx) * ty).numpy()) < 1e-6
    assert rel(ops.sigmoid_gate(y, x), (ty * torch.sigmoid(tx)).numpy()) < 1e-6
    A_log = rng.standard_normal(50).astype(np.float32)
    dt_bias = rng.standard_normal(50).astype(np.float32)
    g, beta = ops.gdn_gates(x, y, A_log, dt_bias)  # x spans the softplus threshold 20
    g_ref = -torch.from_numpy(A_log).exp() * F.softplus(tx + torch.from_numpy(dt_bias))
    assert rel(g, g_ref.numpy()) < 1e-6
    assert rel(beta, torch.sigmoid(ty).numpy()) < 1e-6
    assert g.dtype == np.float32 and np.all(g <= 0)


def test_rope_matches_hf_partial_rotary(rng):
    hd, rot_factor, theta = 32, 0.25, 1e7
    cfg = M.Qwen3_5TextConfig(hidden_size=64, num_attention_heads=2, head_dim=hd,
                              rope_parameters={"rope_type": "default", "rope_theta": theta,
                                               "partial_rotary_factor": rot_factor})
    remb = M.Qwen3_5TextRotaryEmbedding(cfg)
    L = 11
    pos = np.sort(rng.integers(0, 5000, L))
    q = rng.standard_normal((L, 3, hd)).astype(np.float32)
    k = rng.standard_normal((L, 1, hd)).astype(np.float32)
    tq = torch.from_numpy(q).transpose(0, 1)[None]  # [1, heads, L, hd]
    tk = torch.from_numpy(k).transpose(0, 1)[None]
    cos, sin = remb(tq, torch.from_numpy(pos)[None])
    rq, rk = M.apply_rotary_pos_emb(tq, tk, cos, sin)
    rd = int(hd * rot_factor)
    assert rel(ops.rope(q, pos, rd, theta), rq[0].transpose(0, 1).numpy()) < 1e-6
    assert rel(ops.rope(k, pos, rd, theta), rk[0].transpose(0, 1).numpy()) < 1e-6
    # only the first rd dims move
    assert np.array_equal(ops.rope(q, pos, rd, theta)[..., rd:], q[..., rd:])
    # qk_norm_rope = norm then rope
    m = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
    assert np.allclose(ops.qk_norm_rope(q, m, 1e-6, pos, rd, theta), ops.rope(ops.rms_norm(q, m, 1e-6), pos, rd, theta))


def test_causal_conv_matches_hf(rng):
    C, K, L = 24, 4, 9
    w = rng.standard_normal((C, K)).astype(np.float32)
    x = rng.standard_normal((L, C)).astype(np.float32)
    ref = M.causal_conv1d_fn(torch.from_numpy(x).T[None], torch.from_numpy(w), None, activation="silu")[0].T.numpy()
    y, tail = ops.causal_conv(x, w)
    assert rel(y, ref) < 1e-6
    assert np.array_equal(tail, x[-(K - 1):])
    # continuing from a tail equals HF's update path, token by token
    tail0 = rng.standard_normal((K - 1, C)).astype(np.float32)
    state = torch.from_numpy(tail0.T.copy())[None]  # [1, C, K-1]
    y2, t2 = ops.causal_conv(x, w, tail0)
    t_step = tail0
    for t in range(L):
        r = M.causal_conv1d_update(torch.from_numpy(x[t])[None, :, None], state, torch.from_numpy(w), None, "silu")
        ys, t_step = ops.causal_conv_step(t_step, x[t], w)
        assert rel(ys, r[0, :, 0].numpy()) < 1e-6
        assert rel(y2[t], r[0, :, 0].numpy()) < 1e-6
    assert np.array_equal(t2, t_step)
    assert np.allclose(t2, state[0].numpy().T)


def test_l2norm_and_delta_rule_match_hf_recurrent(rng):
    L, Hk, Hv, Dk, Dv = 13, 2, 6, 16, 8
    q = rng.standard_normal((L, Hk, Dk))
    k = rng.standard_normal((L, Hk, Dk))
    v = rng.standard_normal((L, Hv, Dv))
    g = -np.abs(rng.standard_normal((L, Hv)))
    beta = rng.uniform(0, 1, (L, Hv))
    S0 = rng.standard_normal((Hv, Dk, Dv))
    assert rel(ops.l2norm(q), M.l2norm(torch.from_numpy(q)).numpy()) < 1e-12
    qh, kh = ops.gdn_prepare_qk(q, k)
    assert qh.dtype == np.float64  # dtype follows the input
    O, S = ops.delta_rule_recurrent(S0, qh, kh, v, g, beta)
    T = lambda a: torch.from_numpy(a)[None]  # noqa: E731
    # HF casts to float32 inside; compare at float32 accuracy
    Or, Sr = M.torch_recurrent_gated_delta_rule(T(q), T(k), T(v), g=T(g), beta=T(beta), initial_state=T(S0),
                                                output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert rel(O, Or[0].numpy()) < 1e-5
    assert rel(S, Sr[0].numpy()) < 1e-5
    Oc, Sc = ops.delta_rule_chunked(S0.astype(np.float32), qh.astype(np.float32), kh.astype(np.float32),
                                    v.astype(np.float32), g.astype(np.float32), beta.astype(np.float32), chunk=4)
    assert Oc.dtype == np.float32
    assert rel(Oc, O) < 1e-5 and rel(Sc, S) < 1e-5


def test_attention_matches_hf_eager_gqa(rng):
    L, T0, nH, nKV, hd = 5, 7, 6, 2, 16
    T = T0 + L
    q = rng.standard_normal((L, nH, hd)).astype(np.float32)
    k = rng.standard_normal((T, nKV, hd)).astype(np.float32)
    v = rng.standard_normal((T, nKV, hd)).astype(np.float32)
    qpos = np.arange(T0, T)
    scale = hd ** -0.5
    got = ops.attention(q, k, v, qpos, scale)
    mask = torch.full((L, T), float("-inf"))
    mask[torch.from_numpy(np.arange(T)[None, :] <= qpos[:, None])] = 0.0

    class Mod(torch.nn.Module):
        num_key_value_groups = nH // nKV
        training = False

    ref, _ = M.eager_attention_forward(Mod(), torch.from_numpy(q).transpose(0, 1)[None],
                                       torch.from_numpy(k).transpose(0, 1)[None],
                                       torch.from_numpy(v).transpose(0, 1)[None], mask[None, None], scaling=scale)
    assert rel(got, ref[0].numpy()) < 1e-6
    # the explicit mask restricts further; a row with no visible key is zero
    m = np.ones((L, T), bool)
    m[0] = False
    out = ops.attention(q, k, v, qpos, scale, mask=m)
    assert np.all(out[0] == 0) and np.allclose(out[1:], got[1:])


def _pack_words(codes: np.ndarray, bits: int) -> np.ndarray:
    """Word-level LSB-first packer (qwen35.md §4.1), independent of ops.affine_unpack's byte view."""
    out, n = codes.shape
    words = np.zeros((out, n * bits // 32), np.uint64)
    for j in range(n):
        off = j * bits
        lo, sh = off >> 5, off & 31
        c = codes[:, j].astype(np.uint64)
        words[:, lo] |= (c << np.uint64(sh)) & np.uint64(0xFFFFFFFF)
        if sh + bits > 32:
            words[:, lo + 1] |= c >> np.uint64(32 - sh)
    return words.astype(np.uint32)


@pytest.mark.parametrize("bits,group", [(2, 32), (3, 32), (4, 64), (5, 32), (6, 128), (8, 64)])
def test_affine_dequant_bitstream(rng, bits, group):
    out, n = 3, 256
    codes = rng.integers(0, 2 ** bits, (out, n))
    packed = _pack_words(codes, bits)
    assert np.array_equal(ops.affine_unpack(packed, bits, n), codes)
    scales = rng.standard_normal((out, n // group)).astype(np.float32)
    biases = rng.standard_normal((out, n // group)).astype(np.float32)
    w = ops.affine_dequant(packed, scales, biases, bits, group)
    ref = np.repeat(scales, group, 1) * codes.astype(np.float32) + np.repeat(biases, group, 1)  # fp32 math
    assert w.dtype == np.float32 and np.array_equal(w, ref)
    # bf16 raw bits are accepted for scales/biases
    bf = (scales.view(np.uint32) >> 16).astype(np.uint16)
    w2 = ops.affine_dequant(packed, bf, np.zeros_like(bf), bits, group)
    sc_bf = (bf.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(w2, np.repeat(sc_bf, group, 1) * codes.astype(np.float32))


def test_affine_dequant_matches_model_quant(rng):
    quant = pytest.importorskip("tensorfold.model.quant")
    w = rng.standard_normal((8, 128)).astype(np.float32)
    for bits, group in [(4, 64), (3, 32), (6, 64)]:
        packed, s, b = quant.quantize(w, bits, group)
        got = ops.affine_dequant(packed, s, b, bits, group)
        assert np.allclose(got, quant.dequantize(packed, s, b, bits, group), rtol=0, atol=1e-6)
        # what MLX's affine rule guarantees, element by element: within half a step of the group's grid, or (a
        # value beyond the grid's ends: the rule rounds the scale so that 0 or the far edge is a code, which can
        # leave the other edge outside) exactly the distance to the nearer end; plus the bf16 rounding of scale and
        # bias (the codes were chosen with the unrounded ones)
        sf = np.repeat(bf16.to_f32(s), group, axis=1)
        bf = np.repeat(bf16.to_f32(b), group, axis=1)
        r = (w - bf) / sf
        n_bins = (1 << bits) - 1
        beyond = np.maximum(np.maximum(-r, r - n_bins), 0.0)
        slack = (n_bins * np.abs(sf) + np.abs(bf)) * 2.0**-8 + 1e-6
        assert np.all(np.abs(got - w) <= np.abs(sf) * np.maximum(0.5, beyond) + slack), (bits, group)


def test_linear_embed_mlp(rng):
    x = rng.standard_normal((4, 32)).astype(np.float32)
    wg, wu = rng.standard_normal((2, 48, 32)).astype(np.float32)
    wd = rng.standard_normal((32, 48)).astype(np.float32)
    ref = F.linear(F.silu(F.linear(torch.from_numpy(x), torch.from_numpy(wg))) * F.linear(torch.from_numpy(x),
                   torch.from_numpy(wu)), torch.from_numpy(wd)).numpy()
    assert rel(ops.mlp(x, wg, wu, wd), ref) < 1e-5
    bf = (wg.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits as a raw weight
    assert rel(ops.linear(x, bf), x @ ((bf.astype(np.uint32) << 16).view(np.float32)).T) < 1e-6
    ids = np.array([3, 0, 47, 3])
    assert np.array_equal(ops.embed(wg, ids), wg[ids])
    assert ops.linear(x.astype(np.float64), wg).dtype == np.float64


def test_linear_and_embed_take_weight_objects(rng):
    weights = pytest.importorskip("tensorfold.model.weights")
    quant = pytest.importorskip("tensorfold.model.quant")
    w = rng.standard_normal((40, 64)).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    bits16 = (w.view(np.uint32) >> 16).astype(np.uint16)  # truncated bf16 bits: exactly representable values
    dense = weights.DenseWeight(bits16)
    w_bf = (bits16.astype(np.uint32) << 16).view(np.float32)
    assert rel(ops.linear(x, dense), x.astype(np.float64) @ w_bf.T.astype(np.float64)) < 1e-6
    packed, s, b = quant.quantize(w, 4, 32)
    aff = weights.AffineWeight(packed, s, b, 4, 32)
    w_q = ops.affine_dequant(packed, s, b, 4, 32)
    assert rel(ops.linear(x, aff), x.astype(np.float64) @ w_q.T.astype(np.float64)) < 1e-6
    ids = np.array([5, 39, 0])
    assert np.array_equal(ops.embed(aff, ids), w_q[ids])
    assert np.array_equal(ops.embed(dense, ids), w_bf[ids])
