"""Embedding gathers into float32 rows: from an MLX affine quantized table or a bf16 table.

Owns
- ``embed_affine_bf16_k(ids, W, S, B, y, bits, group)``: ``y[r, c] = s * q + b`` of table row ``ids[r]``
  (packed uint32 ``[V, H*bits/32]``, scales / biases bf16 bits uint16 ``[V, H/group]``), fp32 math, any of bits
  2..8 (word-level extraction, codes may cross words for 3/5/6 bits).
- ``embed_affine_f32_k``: the same with float32 (or float16) scales / biases.
- ``embed_dense_k(ids, W, y)``: bf16 bits table ``uint16 [V, H]`` -> float32.
- ``embed_swept_k(ids, W, Wh, y, bits, group, u, per)``: the bf16-scale affine gather from a table in
  ``qgemv.sweep_pack``'s layout (a tied head's single copy: flat words ``W``, the same memory as uint16 ``Wh``;
  ``u`` groups an iteration, runs of ``per`` iterations): row ``p``'s group ``gi`` lies in piece
  ``sweep_piece(gi // u, p // 16)``, group slot ``gi % u``, row ``p % 16``, its scale / bias in the piece's
  tail. The same values as ``embed_affine_bf16_k``, hence the same bits.
ids int32 ``[n]``, y float32 ``[n, H]``.

Reference mirrored: ``tensorfold.reference.ops.embed`` (``affine_dequant`` rows, fp32 ``scale*q + bias``).

Launch geometry: 1-d grid-stride over ``n * H`` elements, 256 threads per block (any grid works).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ._device import IS_SIM, bf16_to_f32, devfn, pdl_begin
from . import _kcache

__all__ = ["embed_affine_bf16_k", "embed_affine_f32_k", "embed_dense_k", "embed_swept_k", "launch_embed_affine",
           "launch_embed_dense", "launch_embed_swept",
           "COMPILE_SPECS", "HOT"]

_TPB = 64 if IS_SIM else 256


@devfn
def _id_f32(v):
    return np.float32(v)


CONV = bf16_to_f32  # scale / bias decoder: each variant below sets its own (``_kcache.variant``)


def _embed_affine(ids, W, S, B, y, bits, group):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    n, H = y.shape
    mask = (np.uint32(1) << np.uint32(bits)) - np.uint32(1)
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n * H:
        r = i // H
        c = i - r * H
        row = ids[r]
        off = c * bits
        lo = off >> 5
        sh = off & 31
        v = W[row, lo] >> np.uint32(sh)
        if sh + bits > 32:
            v = v | (W[row, lo + 1] << np.uint32(32 - sh))
        q = np.float32(np.uint32(v & mask))
        gi = c // group
        y[r, c] = CONV(S[row, gi]) * q + CONV(B[row, gi])
        i += step


embed_affine_bf16_py = _kcache.variant(_embed_affine, "embed_affine_bf16_k", CONV=bf16_to_f32)
embed_affine_f32_py = _kcache.variant(_embed_affine, "embed_affine_f32_k", CONV=_id_f32)
embed_affine_bf16_k = _kcache.kjit(embed_affine_bf16_py)
embed_affine_f32_k = _kcache.kjit(embed_affine_f32_py)


@_kcache.kjit
def embed_dense_k(ids, W, y):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    n, H = y.shape
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n * H:
        r = i // H
        c = i - r * H
        y[r, c] = bf16_to_f32(W[ids[r], c])
        i += step


@_kcache.kjit
def embed_swept_k(ids, W, Wh, y, bits, group, u, per):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    n, H = y.shape
    mask = (np.uint32(1) << np.uint32(bits)) - np.uint32(1)
    wpg = group * bits // 32
    pw = 16 * u * wpg + 16 * u  # words of a piece
    nu = W.shape[0] // (pw * (H // group // u))  # 16-row units
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n * H:
        r = i // H
        c = i - r * H
        row = ids[r]
        gi = c // group
        it = gi // u
        base = (((it // per) * nu + (row >> 4)) * per + it % per) * pw
        off = (c - gi * group) * bits
        lo = base + (gi % u) * 16 * wpg + (row & 15) * wpg + (off >> 5)
        sh = off & 31
        v = W[lo] >> np.uint32(sh)
        if sh + bits > 32:
            v = v | (W[lo + 1] << np.uint32(32 - sh))
        q = np.float32(np.uint32(v & mask))
        sb = 2 * (base + 16 * u * wpg) + (row & 15) * u + gi % u
        y[r, c] = bf16_to_f32(Wh[sb]) * q + bf16_to_f32(Wh[sb + 16 * u])
        i += step


def _grid(n, max_blocks):
    g = max(1, -(-n // _TPB))
    return g if max_blocks is None else min(g, max_blocks)


def launch_embed_affine(ids, W, S, B, y, bits, group, stream=0, max_blocks=None):
    k = embed_affine_bf16_k if np.dtype(S.dtype) == np.uint16 else embed_affine_f32_k
    k[_grid(y.size, max_blocks), _TPB, stream](ids, W, S, B, y, np.int32(bits), np.int32(group))


def launch_embed_swept(ids, W, y, bits, group, u, per=1, stream=0, max_blocks=None):
    """``y[r] = row ids[r]`` of a bf16-scale affine table in ``qgemv.sweep_pack``'s layout (``W`` uint32
    ``[pieces, words]``, ``u`` groups an iteration, runs of ``per`` iterations)."""
    Wf = W.reshape(W.size)
    embed_swept_k[_grid(y.size, max_blocks), _TPB, stream](ids, Wf, Wf.view(np.uint16), y, np.int32(bits),
                                                           np.int32(group), np.int32(u), np.int32(per))


def launch_embed_dense(ids, W, y, stream=0, max_blocks=None):
    embed_dense_k[_grid(y.size, max_blocks), _TPB, stream](ids, W, y)


COMPILE_SPECS = [
    (embed_affine_bf16_py,
     "void(int32[::1], uint32[:, ::1], uint16[:, ::1], uint16[:, ::1], float32[:, ::1], int32, int32)"),
    (embed_affine_f32_py,
     "void(int32[::1], uint32[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], int32, int32)"),
    (embed_dense_k, "void(int32[::1], uint16[:, ::1], float32[:, ::1])"),
    (embed_swept_k, "void(int32[::1], uint32[::1], uint16[::1], float32[:, ::1], int32, int32, int32, int32)"),
]
HOT = {"embed_affine_bf16_k", "embed_dense_k", "embed_swept_k"}
