"""RMSNorm kernels: residual-add + RMSNorm (fused), plain RMSNorm, gated RMSNorm per head.

Owns
- ``add_rms_norm_k(x, h, mult, y, eps)``: per row ``h += x`` (the residual stream, updated in place) then
  ``y = h / sqrt(mean(h^2) + eps) * mult``; writes both h and y.
- ``rms_norm_k(x, mult, y, eps)``: ``y = x / sqrt(mean(x^2) + eps) * mult``.
- ``gated_rms_norm_k(o, z, w, y, eps, head_dim, act)``: per head of ``head_dim`` columns
  ``y = o / sqrt(mean(o^2) + eps) * w * act(z)``, act 0 = silu, 1 = sigmoid (the GDN output norm).
Arrays are float32 2-d ``[R, n]`` (C-contiguous), multipliers float32 ``[n]`` / ``[head_dim]``.

Reference mirrored: ``tensorfold.reference.ops.rms_norm``, ``add_rms_norm``, ``gated_rms_norm`` (fp32).

Launch geometry: rms kernels one block per row (grid-stride over rows, so any grid works; the simulator launches
one or two blocks), any multiple of 32 threads (256 on the GPU); each thread strides over the columns, the sum of
squares goes through a warp butterfly then a fixed-order sum over the block's warps. Gated norm: one warp per
(row, head), blocks of 4 warps, grid-stride over row*heads. ``launch_*`` helpers pick the geometry.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ._device import IS_SIM, devfn, warp_sum

__all__ = ["add_rms_norm_k", "rms_norm_k", "gated_rms_norm_k", "launch_add_rms_norm", "launch_rms_norm",
           "launch_gated_rms_norm", "COMPILE_SPECS", "HOT"]

_TPB = 64 if IS_SIM else 256


@devfn
def _block_sum(v, red):
    """Sum over the block: warp butterfly, then warp partials in fixed order. Every thread gets the total."""
    lane = cuda.threadIdx.x & 31
    warp = cuda.threadIdx.x >> 5
    v = warp_sum(v)
    if lane == 0:
        red[warp] = v
    cuda.syncthreads()
    nw = cuda.blockDim.x >> 5
    t = red[0]
    for i in range(1, nw):
        t += red[i]
    cuda.syncthreads()
    return t


@devfn
def _sigmoid(x):
    if x >= 0:
        return np.float32(1.0) / (np.float32(1.0) + np.float32(math.exp(-x)))
    e = np.float32(math.exp(x))
    return e / (np.float32(1.0) + e)


def add_rms_norm_k(x, h, mult, y, eps):
    red = cuda.shared.array(32, np.float32)
    R, n = h.shape
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
        ss = np.float32(0.0)
        for c in range(tid, n, cuda.blockDim.x):
            v = h[r, c] + x[r, c]
            h[r, c] = v
            ss += v * v
        tot = _block_sum(ss, red)
        inv = np.float32(1.0) / np.float32(math.sqrt(tot / np.float32(n) + eps))
        for c in range(tid, n, cuda.blockDim.x):
            y[r, c] = h[r, c] * inv * mult[c]


def rms_norm_k(x, mult, y, eps):
    red = cuda.shared.array(32, np.float32)
    R, n = x.shape
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
        ss = np.float32(0.0)
        for c in range(tid, n, cuda.blockDim.x):
            v = x[r, c]
            ss += v * v
        tot = _block_sum(ss, red)
        inv = np.float32(1.0) / np.float32(math.sqrt(tot / np.float32(n) + eps))
        for c in range(tid, n, cuda.blockDim.x):
            y[r, c] = x[r, c] * inv * mult[c]


def gated_rms_norm_k(o, z, w, y, eps, head_dim, act):
    R, n = o.shape
    heads = n // head_dim
    total = R * heads
    lane = cuda.threadIdx.x & 31
    warp = cuda.threadIdx.x >> 5
    nw = cuda.blockDim.x >> 5
    for base in range(cuda.blockIdx.x * nw, total, cuda.gridDim.x * nw):
        t = base + warp
        valid = t < total
        r = 0
        c0 = 0
        if valid:
            r = t // heads
            c0 = (t - r * heads) * head_dim
        ss = np.float32(0.0)
        if valid:
            for c in range(lane, head_dim, 32):
                v = o[r, c0 + c]
                ss += v * v
        tot = warp_sum(ss)
        if valid:
            inv = np.float32(1.0) / np.float32(math.sqrt(tot / np.float32(head_dim) + eps))
            for c in range(lane, head_dim, 32):
                zz = z[r, c0 + c]
                if act == 0:
                    g = zz * _sigmoid(zz)
                else:
                    g = _sigmoid(zz)
                y[r, c0 + c] = o[r, c0 + c] * inv * w[c] * g


add_rms_norm_k = cuda.jit(add_rms_norm_k)
rms_norm_k = cuda.jit(rms_norm_k)
gated_rms_norm_k = cuda.jit(gated_rms_norm_k)


def launch_add_rms_norm(x, h, mult, y, eps, stream=0, max_blocks=None):
    R = h.shape[0]
    g = R if max_blocks is None else min(R, max_blocks)
    add_rms_norm_k[g, _TPB, stream](x, h, mult, y, np.float32(eps))


def launch_rms_norm(x, mult, y, eps, stream=0, max_blocks=None):
    R = x.shape[0]
    g = R if max_blocks is None else min(R, max_blocks)
    rms_norm_k[g, _TPB, stream](x, mult, y, np.float32(eps))


def launch_gated_rms_norm(o, z, w, y, eps, head_dim, act="silu", stream=0, max_blocks=None):
    total = o.shape[0] * (o.shape[1] // head_dim)
    g = -(-total // 4)
    if max_blocks is not None:
        g = min(g, max_blocks)
    a = 0 if act in ("silu", "swish") else 1
    gated_rms_norm_k[g, 128, stream](o, z, w, y, np.float32(eps), np.int32(head_dim), np.int32(a))


_F2 = "float32[:, ::1]"
COMPILE_SPECS = [
    (add_rms_norm_k, f"void({_F2}, {_F2}, float32[::1], {_F2}, float32)"),
    (rms_norm_k, f"void({_F2}, float32[::1], {_F2}, float32)"),
    (gated_rms_norm_k, f"void({_F2}, {_F2}, float32[::1], {_F2}, float32, int32, int32)"),
]
HOT = {"add_rms_norm_k", "rms_norm_k", "gated_rms_norm_k"}
