"""Depthwise causal conv + SiLU over rows that continue a stream's conv tail (issue 3, part B).

Mirrors ``tensorfold.reference.ops.causal_conv`` / ``causal_conv_step`` / ``causal_conv_tree``
(qwen35.md §3.4 step 2, §6.11): ``y[r, c] = silu(Σ_j w[c, j] · window_r[j, c])`` where window_r is the K raw
(pre-conv) inputs ending at row r: row r itself, then its parent, the parent's parent, ... and, when the chain
reaches ``parent = -1``, the stream's committed tail (newest last). A window is the chain parent[r] = r-1.
The sum runs newest tap first (j = K-1 .. 0), one fma per tap, then SiLU in fp32.

Layouts
-------
- ``x``     f32 [R, C] raw qkv (in_proj_qkv output) of R rows, ``w`` f32 [C, K] (w[:, K-1] = current token).
- ``tail``  f32 [slots, K-1, C] per layer, oldest first (allocate [layers_lin, slots, K-1, C]); **f32** so that
  a continued stream sees exactly the inputs a window would (27B: 48*3*10240*4 B = 5.6 MiB per stream).
- ``row_slot`` int32 [R] (< 0: padding row, nothing written), ``parent`` int32 [R] (absolute row, -1 = tail).
- ``y``     f32 [R, C] conv'd + SiLU'd; ``xlog`` f32 [R, C] (or zero rows): a copy of the raw row for
  ``compact.conv_commit`` (the input buffer is reused by the next layer). The committed tail is never written here.

Launch geometry: ``conv_rows`` grid-stride over (run of ``rb`` rows, channel) items (channel fastest, coalesced);
any 1-D grid. A thread walks its run's rows in order; a row whose parent is the row before it slides the window
held in registers (prompts and windows), any other row walks its parent chain. Session 25 (2B prompt of 4,096
tokens): one row a thread cost 6.3 % of the prompt's kernel time.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from . import _kcache
from ._device import pdl_begin

MAXK = 8


@cuda.jit(device=True)
def silu32(x):
    x = float32(x)
    if x >= float32(0.0):
        return x / (float32(1.0) + float32(math.exp(-x)))
    e = float32(math.exp(x))
    return x * e / (float32(1.0) + e)


def conv_rows(x, w, tail, row_slot, parent, y, xlog, rb):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    R = x.shape[0]
    Cc = x.shape[1]
    K = w.shape[1]
    logging = xlog.shape[0] > 0
    # newest first, constant indices only (registers): win[0] = this row's input, win[1] its parent's, ...;
    # wr[j] = w[c, K - 1 - j], the tap weight of win[j]
    win = cuda.local.array(MAXK, float32)
    wr = cuda.local.array(MAXK, float32)
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    nrb = (R + rb - 1) // rb
    while i < nrb * Cc:
        b = i // Cc
        c = i - b * Cc
        for j in range(MAXK):
            if j < K:
                wr[j] = w[c, K - 1 - j]
        prev = -2  # the row whose window win holds (-2: none)
        for r in range(b * rb, min(b * rb + rb, R)):
            slot = row_slot[r]
            if slot < 0:
                prev = -2
                continue
            if prev >= 0 and parent[r] == prev:
                # a chain: this row's window is its parent's moved one tap older, plus the row itself
                for j in range(MAXK - 1, 0, -1):
                    win[j] = win[j - 1]
                win[0] = x[r, c]
            else:
                node = r
                t = 0  # tail entries consumed
                for j in range(MAXK):
                    if j < K:
                        if node >= 0:
                            win[j] = x[node, c]
                            node = parent[node]
                        else:
                            win[j] = tail[slot, K - 2 - t, c]
                            t += 1
            acc = float32(0.0)
            for j in range(MAXK):  # one fma a tap, newest first (the order of the one-row walk)
                if j < K:
                    acc = cuda.fma(wr[j], win[j], acc)
            y[r, c] = silu32(acc)
            if logging:
                xlog[r, c] = win[0]
            prev = r
        i += stride


_SIG = ("void(float32[:, ::1], float32[:, ::1], float32[:, :, ::1], int32[::1], int32[::1], float32[:, ::1], "
        "float32[:, ::1], int32)")
COMPILE_SPECS = [(conv_rows, _SIG)]
HOT = {"conv_rows"}

k_conv_rows = _kcache.kjit(conv_rows)
ROWS_RUN = 16  # rows a thread walks when R >= RUN_FROM (a chain's window slides in registers)
RUN_FROM = 64


def launch_conv(x, w, tail, row_slot, parent, y, xlog, *, stream=0, blocks=None, threads=256, rb=None):
    """``rb``: consecutive rows a thread takes for one channel (default ROWS_RUN from RUN_FROM rows, else 1). Any
    value gives the same bits: a row's window holds the same inputs whether slid or walked, and the taps are
    summed in the same order."""
    if w.shape[1] > MAXK:
        raise ValueError(f"causal conv: kernel size {w.shape[1]} above {MAXK}")
    R = x.shape[0]
    rb = int(rb or (ROWS_RUN if R >= RUN_FROM else 1))
    n = ((R + rb - 1) // rb) * x.shape[1]
    nb = blocks or max(1, min(4096, (n + threads - 1) // threads))
    k_conv_rows[nb, threads, stream](x, w, tail, row_slot, parent, y, xlog, np.int32(rb))


def empty_log(C):
    """A zero-row log array (conv without logging)."""
    return cuda.device_array((0, C), np.float32)
