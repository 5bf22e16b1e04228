"""MLX affine quantization in numpy: pack / unpack / quantize / dequantize, and the `tensorfold quantize` command.

Format (see docs qwen35.md §4): a weight ``W [out, in]`` quantized with ``bits`` b and ``group_size`` g is stored as
``packed uint32 [out, in*b/32]`` + ``scales, biases [out, in/g]``; element ``j`` of a row is code
``q = bits [j*b, (j+1)*b)`` of the row read as one little-endian, LSB-first bit stream (so 3/5/6-bit codes cross
byte and word boundaries), and ``w = scale * q + bias``.

The quantizer follows MLX's CPU kernel (ml-explore/mlx ``mlx/backend/cpu/quantized.cpp``, ``quantize<T, U>``), read
for this module. In our words, per group and all in float32:
  1. ``w_min``, ``w_max`` of the group (elements widened to float32);
  2. ``scale = max((w_max - w_min) / (2^b - 1), 1e-7)``;
  3. the "edge" is ``w_min`` when ``|w_min| > |w_max|`` (scale kept positive), otherwise ``w_max`` with the scale negated;
  4. ``q0 = rint(edge / scale)`` (round half to even); if ``q0 != 0`` then ``scale = edge / q0`` and ``bias = edge``,
     else ``bias = 0`` (scale unchanged);
  5. codes ``rint((w - bias) / scale)`` clipped to ``[0, 2^b - 1]`` -- computed with the *float32* scale and bias;
  6. only then are scale and bias rounded to the output dtype (bf16 here).
So 0.0 (code ``-bias/scale = -q0``) is exactly representable and about half of the scales are negative.
"""

from __future__ import annotations

import math

import numpy as np

from . import bf16

__all__ = ["BITS", "GROUP_SIZES", "pack", "unpack", "quantize", "dequantize", "check_bits_group", "quantize_cmd"]

BITS = (2, 3, 4, 5, 6, 8)
GROUP_SIZES = (32, 64, 128)
_ROW_CHUNK = 2048  # rows processed at a time, bounds the temporaries for big tensors


def check_bits_group(bits, group_size=None, what="quantization"):
    if bits not in BITS:
        raise ValueError(f"{what}: bits={bits!r} is not supported (choose from {BITS})")
    if group_size is not None and group_size not in GROUP_SIZES:
        raise ValueError(f"{what}: group_size={group_size!r} is not supported (choose from {GROUP_SIZES})")


def _pack_geometry(bits):
    """(codes per pack, bytes per pack): the smallest whole number of bytes holding a whole number of codes."""
    span = math.lcm(bits, 8)
    return span // bits, span // 8


def pack(codes, bits) -> np.ndarray:
    """Pack unsigned codes ``[out, in]`` (each < 2**bits) into ``uint32 [out, in*bits/32]``, LSB-first bit stream."""
    check_bits_group(bits, what="pack")
    c = np.asarray(codes)
    if c.ndim != 2:
        raise ValueError(f"pack: codes must be 2-D [out, in], got shape {c.shape}")
    out_f, in_f = c.shape
    if (in_f * bits) % 32:
        raise ValueError(f"pack: in_features={in_f} times bits={bits} is not a multiple of 32")
    if c.size and (c.min() < 0 or c.max() >= (1 << bits)):
        raise ValueError(f"pack: codes must lie in [0, {(1 << bits) - 1}] for bits={bits}, "
                         f"got range [{c.min()}, {c.max()}]")
    per, nbytes = _pack_geometry(bits)
    shifts = (np.arange(per, dtype=np.uint64) * np.uint64(bits))
    byte_shifts = np.arange(nbytes, dtype=np.uint64) * np.uint64(8)
    res = np.empty((out_f, in_f * bits // 32), dtype=np.uint32)
    for r0 in range(0, out_f, _ROW_CHUNK):
        blk = c[r0:r0 + _ROW_CHUNK].astype(np.uint64).reshape(-1, in_f // per, per)
        v = np.bitwise_or.reduce(blk << shifts, axis=-1)                    # [rows, packs]
        by = ((v[..., None] >> byte_shifts) & np.uint64(0xFF)).astype(np.uint8)  # [rows, packs, nbytes]
        res[r0:r0 + _ROW_CHUNK] = by.reshape(blk.shape[0], -1).view("<u4")
    return res


def unpack(packed, bits, in_features) -> np.ndarray:
    """Inverse of ``pack``: ``uint32 [out, in*bits/32]`` -> ``uint32 codes [out, in_features]``."""
    check_bits_group(bits, what="unpack")
    p = np.asarray(packed)
    if p.dtype != np.uint32:
        raise ValueError(f"unpack: packed must be uint32, got {p.dtype}")
    if p.ndim != 2:
        raise ValueError(f"unpack: packed must be 2-D, got shape {p.shape}")
    if (in_features * bits) % 32 or p.shape[1] != in_features * bits // 32:
        raise ValueError(f"unpack: packed width {p.shape[1]} does not hold {in_features} codes of {bits} bits "
                         f"(expected {in_features * bits / 32:g} words)")
    per, nbytes = _pack_geometry(bits)
    shifts = np.arange(per, dtype=np.uint64) * np.uint64(bits)
    byte_shifts = np.arange(nbytes, dtype=np.uint64) * np.uint64(8)
    mask = np.uint64((1 << bits) - 1)
    out_f = p.shape[0]
    res = np.empty((out_f, in_features), dtype=np.uint32)
    for r0 in range(0, out_f, _ROW_CHUNK):
        blk = np.ascontiguousarray(p[r0:r0 + _ROW_CHUNK]).astype("<u4", copy=False)
        by = blk.view(np.uint8).reshape(blk.shape[0], -1, nbytes).astype(np.uint64)
        v = np.bitwise_or.reduce(by << byte_shifts, axis=-1)                 # [rows, packs]
        res[r0:r0 + _ROW_CHUNK] = ((v[..., None] >> shifts) & mask).reshape(blk.shape[0], in_features)
    return res


def _as_f32(a, what) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return bf16.to_f32(a)
    if a.dtype in (np.float16, np.float32, np.float64):
        return a.astype(np.float32, copy=False)
    raise ValueError(f"{what}: expected bf16 bits (uint16), float16 or float32, got dtype {a.dtype}")


_SCALE_DTYPES = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32}


def quantize(w, bits=4, group_size=64, scale_dtype="bf16"):
    """Quantize ``w [out, in]`` with MLX's affine rule.

    Returns ``(packed uint32 [out, in*bits/32], scales [out, in/g], biases [out, in/g])``; scales and biases are bf16
    bits (uint16) by default, or float16 / float32 with ``scale_dtype="f16"`` / ``"f32"`` (MLX gives them the input's
    dtype). ``w`` may be float32/float16/float64 or bf16 bits (uint16); the arithmetic is float32 as in MLX.
    """
    check_bits_group(bits, group_size, what="quantize")
    if scale_dtype not in _SCALE_DTYPES:
        raise ValueError(f"quantize: scale_dtype={scale_dtype!r} is not one of {sorted(_SCALE_DTYPES)}")
    cast = bf16.from_f32 if scale_dtype == "bf16" else (lambda a: a.astype(_SCALE_DTYPES[scale_dtype]))
    w = _as_f32(w, "quantize")
    if w.ndim != 2:
        raise ValueError(f"quantize: weight must be 2-D [out, in], got shape {w.shape}")
    out_f, in_f = w.shape
    if in_f % group_size:
        raise ValueError(f"quantize: in_features={in_f} is not a multiple of group_size={group_size}")
    n_bins = np.float32((1 << bits) - 1)
    eps = np.float32(1e-7)
    ng = in_f // group_size
    codes = np.empty((out_f, in_f), dtype=np.uint32)
    scales = np.empty((out_f, ng), dtype=_SCALE_DTYPES[scale_dtype])
    biases = np.empty((out_f, ng), dtype=_SCALE_DTYPES[scale_dtype])
    with np.errstate(invalid="ignore", divide="ignore"):
        for r0 in range(0, out_f, _ROW_CHUNK):
            g = w[r0:r0 + _ROW_CHUNK].reshape(-1, ng, group_size)
            w_max = g.max(axis=-1)
            w_min = g.min(axis=-1)
            use_min = np.abs(w_min) > np.abs(w_max)
            scale = np.maximum((w_max - w_min) / n_bins, eps)
            scale = np.where(use_min, scale, -scale).astype(np.float32)
            edge = np.where(use_min, w_min, w_max).astype(np.float32)
            q0 = np.rint(edge / scale)
            nz = q0 != 0
            scale = np.where(nz, edge / np.where(nz, q0, np.float32(1)), scale).astype(np.float32)
            bias = np.where(nz, edge, np.float32(0)).astype(np.float32)
            q = np.rint((g - bias[..., None]) / scale[..., None])
            q = np.clip(q, 0, n_bins)
            codes[r0:r0 + _ROW_CHUNK] = q.reshape(-1, in_f).astype(np.uint32)
            scales[r0:r0 + _ROW_CHUNK] = cast(scale)
            biases[r0:r0 + _ROW_CHUNK] = cast(bias)
    return pack(codes, bits), scales, biases


def dequantize(packed, scales, biases, bits, group_size) -> np.ndarray:
    """``scale * q + bias`` in float32 (two float32 roundings), shape ``[out, in]`` with ``in = cols(scales) * g``."""
    check_bits_group(bits, group_size, what="dequantize")
    s = _as_f32(scales, "dequantize scales")
    b = _as_f32(biases, "dequantize biases")
    p = np.asarray(packed)
    if s.shape != b.shape or s.ndim != 2 or p.ndim != 2 or s.shape[0] != p.shape[0]:
        raise ValueError(f"dequantize: shapes disagree: packed {p.shape}, scales {s.shape}, biases {b.shape}")
    out_f, ng = s.shape
    in_f = ng * group_size
    if p.shape[1] * 32 != in_f * bits:
        raise ValueError(f"dequantize: packed width {p.shape[1]} words does not match {in_f} inputs at {bits} bits "
                         f"(expected {in_f * bits // 32})")
    res = np.empty((out_f, in_f), dtype=np.float32)
    for r0 in range(0, out_f, _ROW_CHUNK):
        q = unpack(p[r0:r0 + _ROW_CHUNK], bits, in_f).astype(np.float32).reshape(-1, ng, group_size)
        v = q * s[r0:r0 + _ROW_CHUNK, :, None]
        v += b[r0:r0 + _ROW_CHUNK, :, None]
        res[r0:r0 + _ROW_CHUNK] = v.reshape(-1, in_f)
    return res
