"""Numpy twins of the e4m3 (OCP FP8 E4M3FN) KV-cache format: element encode/decode and per-row scales.

Owns the format the fp8 KV cache uses (kernels: ``tensorfold.kernels._device.f32_to_e4m3 / e4m3_to_f32`` and
``tensorfold.kernels.kv8``): one fp32 scale per (cache row, kv head) = ``amax / 448`` over the head's ``hd``
values (the key after RMSNorm + RoPE, the value as projected), elements stored as ``e4m3(x / scale)``
(fp32 division, round to nearest even, saturating to +-448; NaN -> 0x7F). An all-zero row has scale 0 and codes
0. Decoding is ``decode(code) * scale`` in fp32.

E4M3FN: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; 0x7F / 0xFF are NaN; max finite 448;
subnormals m * 2^-9. This file is written from that definition (a value grid and nearest-even selection), not
from the device bit tricks, so that the two check each other.
"""

from __future__ import annotations

import numpy as np

__all__ = ["E4M3_MAX", "decode_table", "e4m3_decode", "e4m3_encode", "quantize_rows", "dequantize_rows"]

E4M3_MAX = 448.0


def decode_table() -> np.ndarray:
    """float32 [256]: the value of every code (NaN for 0x7F and 0xFF)."""
    t = np.zeros(256, np.float64)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e = (c >> 3) & 0xF
        m = c & 7
        if e == 15 and m == 7:
            t[c] = np.nan
        elif e == 0:
            t[c] = s * m * 2.0 ** -9
        else:
            t[c] = s * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return t.astype(np.float32)


_TABLE = decode_table()
_POS = _TABLE[:127].astype(np.float64)  # codes 0..126, ascending, 0 .. 448


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    """uint8 codes -> float32 values."""
    return _TABLE[np.asarray(codes, np.uint8)]


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    """float32 -> uint8 codes: nearest representable value, ties to the even code, saturating; NaN -> 0x7F."""
    x = np.asarray(x, np.float32)
    a = np.abs(x).astype(np.float64)
    sign = np.signbit(x).astype(np.uint8) << 7
    a_c = np.minimum(a, E4M3_MAX)
    hi = np.searchsorted(_POS, a_c, side="left")  # first grid value >= a
    hi = np.clip(hi, 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    dlo = a_c - _POS[lo]
    dhi = _POS[hi] - a_c
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(np.isnan(x), np.uint8(0x7F), code | sign).astype(np.uint8)
    return code


def quantize_rows(x: np.ndarray):
    """x [..., hd] float32 -> (codes uint8 [..., hd], scale float32 [...]) with scale = amax/448 per row."""
    x = np.asarray(x, np.float32)
    amax = np.max(np.abs(x), axis=-1)
    scale = (amax / np.float32(E4M3_MAX)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    codes = e4m3_encode((x / safe[..., None]).astype(np.float32))
    codes = np.where((scale > 0)[..., None], codes, np.uint8(0)).astype(np.uint8)
    return codes, scale


def dequantize_rows(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(codes [..., hd], scale [...]) -> float32 [..., hd]."""
    return (e4m3_decode(codes) * np.asarray(scale, np.float32)[..., None]).astype(np.float32)
