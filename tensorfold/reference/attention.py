"""Numpy twins of the chunked (flash-decoding) attention kernels in ``tensorfold.kernels.attention`` and of the
fused q/k-norm + RoPE + cache store in ``tensorfold.kernels.kv8``.

Which keys a query row sees (the kernels' metadata, per row r):
- ``nk[r]``: the row sees cache positions 0 .. nk[r]-1 of its stream (the committed cache, plus, for a window
  row, the window rows up to itself: window row i of a stream with committed length T has nk = T + i + 1);
- ``tmask[r]`` (uint32 bits) and ``tbase[r]``: it also sees positions ``tbase[r] + b`` for every set bit b (tree
  rows: its ancestors and itself among the new rows, written at tbase + tree index).
The row's keys are enumerated in that order -- j < nk[r] is position j, j >= nk[r] is the (j - nk[r])-th set bit
-- and cut into chunks of ``CW`` = 64 consecutive keys. The partition depends only on the row's own key count, so
a row's output is the same alone, in a window, in a tree (a chain tree row written as nk = T,
tmask = bits 0..i, tbase = T enumerates exactly the positions of the window row) or beside other streams.

Per chunk c and query head h: ``m`` = max of the scores ``s_j = scale * q·k_j`` (fp32), ``l = Σ exp(s_j - m)``,
``acc = Σ exp(s_j - m) v_j``. Merge: ``M = max_c m_c``, ``o = Σ_c e^{m_c - M} acc_c / Σ_c e^{m_c - M} l_c``,
then optionally ``o * sigmoid(gate)``. GQA: query head h reads kv head h // (nH / nKV).

Caches: f32, bf16 bits (uint16) or e4m3 codes (uint8) with fp32 scales [slots, ctx, nKV]
(``tensorfold.reference.kv8``), laid out [slots, ctx, nKV, hd].
"""

from __future__ import annotations

import numpy as np

from tensorfold.model import bf16
from tensorfold.reference import kv8

CW = 64

__all__ = ["CW", "row_positions", "decode_cache", "partials", "merge", "attention_rows", "num_chunks"]


def row_positions(nk: int, tmask: int, tbase: int) -> np.ndarray:
    """Cache positions a row sees, in its key order."""
    bits = [b for b in range(32) if (int(tmask) >> b) & 1]
    return np.concatenate([np.arange(int(nk)), int(tbase) + np.asarray(bits, np.int64)]).astype(np.int64)


def num_chunks(nk: int, tmask: int) -> int:
    n = int(nk) + bin(int(tmask) & 0xFFFFFFFF).count("1")
    return (n + CW - 1) // CW


def decode_cache(cache: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """A cache array (f32, uint16 bf16 bits, or uint8 e4m3 codes + scales) -> float32 values, same shape."""
    if cache.dtype == np.uint16:
        return bf16.to_f32(cache)
    if cache.dtype == np.uint8:
        return kv8.dequantize_rows(cache, scale)
    return np.asarray(cache, np.float32)


def partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale):
    """-> list per row of (m [nH, nc], l [nH, nc], acc [nH, nc, hd]) (None for padding rows), fp32."""
    q = np.asarray(q, np.float32)
    R, nH, hd = q.shape
    kf = decode_cache(k_cache, k_scale)
    vf = decode_cache(v_cache, v_scale)
    nKV = kf.shape[2]
    rep = nH // nKV
    out = []
    for r in range(R):
        if row_slot[r] < 0:
            out.append(None)
            continue
        pos = row_positions(nk[r], tmask[r], tbase[r])
        nc = (len(pos) + CW - 1) // CW
        m = np.zeros((nH, nc), np.float32)
        l = np.zeros((nH, nc), np.float32)
        acc = np.zeros((nH, nc, hd), np.float32)
        ks = kf[row_slot[r], pos]  # [n, nKV, hd]
        vs = vf[row_slot[r], pos]
        for h in range(nH):
            s = (ks[:, h // rep] @ q[r, h]) * np.float32(scale)
            for c in range(nc):
                sl = slice(c * CW, min(len(pos), (c + 1) * CW))
                mm = s[sl].max()
                p = np.exp(s[sl] - mm)
                m[h, c] = mm
                l[h, c] = p.sum()
                acc[h, c] = p @ vs[sl, h // rep]
        out.append((m, l, acc))
    return out


def merge(parts, gate=None):
    """parts from :func:`partials` -> o [R, nH, hd] (zeros for padding rows); gate [R, nH, hd] or None."""
    R = len(parts)
    first = next(p for p in parts if p is not None)
    nH, _, hd = first[2].shape
    o = np.zeros((R, nH, hd), np.float32)
    for r, p in enumerate(parts):
        if p is None:
            continue
        m, l, acc = p
        M = m.max(axis=1, keepdims=True)
        w = np.exp(m - M)
        o[r] = (w[:, :, None] * acc).sum(1) / (w * l).sum(1)[:, None]
        if gate is not None:
            o[r] = o[r] / (1.0 + np.exp(-np.asarray(gate[r], np.float32)))
    return o.astype(np.float32)


def attention_rows(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale, gate=None):
    """Convenience: partials + merge."""
    return merge(partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale), gate)
