"""Elementwise activation kernels: SwiGLU ``silu(gate) * up`` and the attention output gate ``o * sigmoid(g)``.

Owns
- ``silu_mul_k(g, u, y)``: ``y = silu(g) * u``, all float32 ``[R, I]``.
- ``silu_mul_fused_k(gu, y)``: the same when gate and up come from one fused GEMV, ``gu [R, 2I]`` with gate in
  columns ``[0, I)`` and up in ``[I, 2I)``; ``y [R, I]``.
- ``swiglu(g, u)``: the device function all of them (and the decode GEMVs' SwiGLU epilogue, ``affine`` /
  ``qgemv`` with ``glu``) compute ``silu(g) * u`` with, so every path gives the same bits.
- ``sigmoid_gate_k(o, g, y)``: ``y = o * sigmoid(g)`` float32 ``[R, n]`` (y may be o).
Reference mirrored: ``tensorfold.reference.ops.silu_mul``, ``sigmoid_gate`` (overflow-free sigmoid).

Launch geometry: 1-d grid-stride over ``R * n`` elements, 256 threads per block; ``silu_mul_fused_k`` a 2-d grid
(columns x rows, grid-stride both ways; session 25: 4.4 % of a 2B prompt's kernel time in the 1-d form). Any grid
works; the simulator launches one or two blocks.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ._device import IS_SIM, devfn, pdl_begin
from . import _kcache

__all__ = ["swiglu", "silu_mul_k", "silu_mul_fused_k", "sigmoid_gate_k", "launch_silu_mul", "launch_silu_mul_fused",
           "launch_sigmoid_gate", "COMPILE_SPECS", "HOT"]

_TPB = 64 if IS_SIM else 256


@devfn
def sigmoid_f32(x):
    if x >= 0:
        return np.float32(1.0) / (np.float32(1.0) + np.float32(math.exp(-x)))
    e = np.float32(math.exp(x))
    return e / (np.float32(1.0) + e)


@devfn
def swiglu(g, u):
    """``silu(g) * u`` as ``(g * sigmoid(g)) * u`` in float32."""
    return g * sigmoid_f32(g) * u


@_kcache.kjit
def silu_mul_k(g, u, y):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    R, n = g.shape
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < R * n:
        r = i // n
        c = i - r * n
        y[r, c] = swiglu(g[r, c], u[r, c])
        i += step


@_kcache.kjit
def silu_mul_fused_k(gu, y):
    """2-d grid: x strides columns, y strides rows (no 64-bit division per element)."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    R, n = y.shape
    c0 = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    cs = cuda.gridDim.x * cuda.blockDim.x
    r = cuda.blockIdx.y
    while r < R:
        c = c0
        while c < n:
            y[r, c] = swiglu(gu[r, c], gu[r, n + c])
            c += cs
        r += cuda.gridDim.y


@_kcache.kjit
def sigmoid_gate_k(o, g, y):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    R, n = o.shape
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < R * n:
        r = i // n
        c = i - r * n
        y[r, c] = o[r, c] * sigmoid_f32(g[r, c])
        i += step


def _grid(n, max_blocks):
    g = max(1, -(-n // _TPB))
    return g if max_blocks is None else min(g, max_blocks)


def launch_silu_mul(g, u, y, stream=0, max_blocks=None):
    silu_mul_k[_grid(y.size, max_blocks), _TPB, stream](g, u, y)


def launch_silu_mul_fused(gu, y, stream=0, max_blocks=None):
    R, n = y.shape
    gx = max(1, min(-(-n // _TPB), 64))
    gy = max(1, min(R, 65535))
    if max_blocks is not None:
        gx, gy = min(gx, max_blocks), min(gy, max_blocks)
    silu_mul_fused_k[(gx, gy), _TPB, stream](gu, y)


def launch_sigmoid_gate(o, g, y, stream=0, max_blocks=None):
    sigmoid_gate_k[_grid(y.size, max_blocks), _TPB, stream](o, g, y)


_F2 = "float32[:, ::1]"
COMPILE_SPECS = [
    (silu_mul_k, f"void({_F2}, {_F2}, {_F2})"),
    (silu_mul_fused_k, f"void({_F2}, {_F2})"),
    (sigmoid_gate_k, f"void({_F2}, {_F2}, {_F2})"),
]
HOT = {"silu_mul_k", "silu_mul_fused_k", "sigmoid_gate_k"}
