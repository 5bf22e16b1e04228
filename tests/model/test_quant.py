"""MLX affine quantization: packing against a per-bit Python bit-stream reader written here, MLX's (s, b) rule,
and (when the `mlx` package is importable) bit-for-bit agreement with mx.quantize / mx.dequantize."""

import itertools

import numpy as np
import pytest

from tensorfold.model import bf16, quant

PAIRS = list(itertools.product(quant.BITS, quant.GROUP_SIZES))


def _codes_by_bit_loop(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Independent unpacker: walk each row's words bit by bit (LSB first) and cut the stream every `bits` bits."""
    out = np.zeros((packed.shape[0], n), dtype=np.int64)
    for r, row in enumerate(packed.tolist()):
        stream = []
        for word in row:
            for k in range(32):
                stream.append((word >> k) & 1)
        for j in range(n):
            out[r, j] = sum(stream[j * bits + t] << t for t in range(bits))
    return out


def _bf16_random(rng, shape, scale=1.0):
    return bf16.from_f32((rng.standard_normal(shape) * scale).astype(np.float32))


@pytest.mark.parametrize("bits,group", PAIRS)
def test_dequantize_matches_independent_bitstream(bits, group):
    rng = np.random.default_rng(1000 + 10 * bits + group)
    out_f, in_f = 3, 2 * group
    packed = rng.integers(0, 2**32, size=(out_f, in_f * bits // 32), dtype=np.uint64).astype(np.uint32)
    scales = _bf16_random(rng, (out_f, in_f // group), 0.05)
    biases = _bf16_random(rng, (out_f, in_f // group), 0.5)
    codes = _codes_by_bit_loop(packed, bits, in_f)
    assert np.array_equal(quant.unpack(packed, bits, in_f), codes)
    s = np.repeat(bf16.to_f32(scales), group, axis=1)
    b = np.repeat(bf16.to_f32(biases), group, axis=1)
    expect = (codes.astype(np.float32) * s) + b  # float32: one rounding for the product, one for the sum
    got = quant.dequantize(packed, scales, biases, bits, group)
    assert got.dtype == np.float32 and np.array_equal(got, expect)
    # pack is the exact inverse of the independent reader
    assert np.array_equal(quant.pack(codes.astype(np.uint32), bits), packed)


@pytest.mark.parametrize("bits", quant.BITS)
def test_pack_unpack_round_trip(bits):
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 2**bits, size=(37, 96), dtype=np.uint32)
    packed = quant.pack(codes, bits)
    assert packed.shape == (37, 96 * bits // 32) and packed.dtype == np.uint32
    assert np.array_equal(quant.unpack(packed, bits, 96), codes)


@pytest.mark.parametrize("bits,group", PAIRS)
def test_quantize_follows_mlx_rule(bits, group):
    rng = np.random.default_rng(2000 + 10 * bits + group)
    out_f, in_f = 48, 4 * group
    w = (rng.standard_normal((out_f, in_f)) * rng.uniform(0.01, 3.0, (out_f, 1))).astype(np.float32)
    w[rng.random(w.shape) < 0.05] = 0.0  # exact zeros to check representability
    w = bf16.to_f32(bf16.from_f32(w))  # bf16-valued like a real checkpoint
    n_bins = 2**bits - 1

    # float32 scales: the rule's own precision
    packed, s32, b32 = quant.quantize(w, bits, group, scale_dtype="f32")
    codes = _codes_by_bit_loop(packed[:4], bits, in_f)  # spot-check packing with the independent reader
    assert np.array_equal(codes, quant.unpack(packed[:4], bits, in_f))
    q = quant.unpack(packed, bits, in_f).reshape(out_f, -1, group).astype(np.float64)
    wg = w.reshape(out_f, -1, group).astype(np.float64)
    s = s32.astype(np.float64)[..., None]
    b = b32.astype(np.float64)[..., None]
    recon = s * q + b
    # bias is an edge of the group (max or min) or 0, never something else
    gmax, gmin = wg.max(-1), wg.min(-1)
    assert np.all((b32 == 0) | (b32 == gmax) | (b32 == gmin))
    # 0.0 is exactly representable: the code of an exact zero reconstructs to 0 up to the f32 rounding of s
    zero = wg == 0.0
    assert zero.any()
    zr = np.abs(recon[zero])
    assert np.all(zr <= (np.abs(b) * 2.0**-22 + 1e-30).repeat(group, -1)[zero])
    # reconstruction error: |s|/2 wherever the ideal code lies in range; the far end (opposite the edge) may sit up to
    # one step past the last code after MLX snaps s to edge/round(edge/s) and is clipped there: error < |s|
    ideal = (wg - b) / s
    inside = (ideal >= -0.5) & (ideal <= n_bins + 0.5)
    err = np.abs(recon - wg) / np.abs(s)
    assert np.all(err[inside] <= 0.5 + 1e-4)
    assert np.all(err <= 1.0 + 1e-4)
    assert inside.mean() > 0.97
    # MLX makes the larger-magnitude edge exact, so about half of the scales are negative
    neg = (s32 < 0).mean()
    assert 0.2 < neg < 0.8, neg
    # default bf16 outputs are the f32 ones rounded to nearest even, codes unchanged
    p2, sb, bb = quant.quantize(w, bits, group)
    assert np.array_equal(p2, packed)
    assert np.array_equal(sb, bf16.from_f32(s32)) and np.array_equal(bb, bf16.from_f32(b32))


def test_quantize_rejects_bad_arguments():
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    with pytest.raises(ValueError, match="bits=7"):
        quant.quantize(w, 7, 64)
    with pytest.raises(ValueError, match="group_size=48"):
        quant.quantize(w, 4, 48)
    with pytest.raises(ValueError, match="in_features=64 is not a multiple of group_size=128"):
        quant.quantize(w, 4, 128)
    with pytest.raises(ValueError, match="packed width 7"):
        quant.unpack(np.zeros((4, 7), np.uint32), 4, 64)
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 15\]"):
        quant.pack(np.full((2, 32), 16, np.uint32), 4)


@pytest.mark.parametrize("bits,group", PAIRS)
def test_bit_exact_with_mlx(bits, group):
    mx = pytest.importorskip("mlx.core", reason="mlx not importable (pip install 'mlx[cpu]' on Linux)")
    rng = np.random.default_rng(3000 + 10 * bits + group)
    wb = _bf16_random(rng, (16, 3 * group), 0.7)
    mw = mx.array(bf16.to_f32(wb)).astype(mx.bfloat16)
    mq, ms, mb = mx.quantize(mw, group_size=group, bits=bits)
    packed, s, b = quant.quantize(wb, bits, group)
    assert np.array_equal(np.array(mq), packed)
    assert np.array_equal(bf16.from_f32(np.array(ms.astype(mx.float32))), s)
    assert np.array_equal(bf16.from_f32(np.array(mb.astype(mx.float32))), b)
    # float32 in -> float32 scales, same codes rule
    w32 = (rng.standard_normal((8, 2 * group))).astype(np.float32)
    mq, ms, mb = mx.quantize(mx.array(w32), group_size=group, bits=bits)
    packed, s32, b32 = quant.quantize(w32, bits, group, scale_dtype="f32")
    assert np.array_equal(np.array(mq), packed)
    assert np.array_equal(np.array(ms), s32) and np.array_equal(np.array(mb), b32)
    # dequantize with float32 scales: MLX's fp32 math equals ours bit for bit
    got = quant.dequantize(packed, s32, b32, bits, group)
    ref = np.array(mx.dequantize(mx.array(packed), mx.array(s32), mx.array(b32), group_size=group, bits=bits))
    assert np.array_equal(got, ref)
