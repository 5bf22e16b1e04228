"""Small row-wise kernels the device forward needs that ``tensorfold.kernels`` does not provide (yet).

Interim home: part A of issue 3 owns ``kernels/embedding.py``, ``norms.py``, ``activations.py`` and ``sample.py``;
until those exist the runtime uses these (same math as the numpy twins named below). Each kernel computes a row
without looking at other rows and with a fixed reduction order (a block of NT threads per row, strided partial
sums, then a fixed shared-memory tree), so a row's result never depends on how many rows share the launch.

Kernels (all float32 math; rows grid-stride over blockIdx.x, any grid):
- ``embed_affine_<bf16|f32>(W, S, B, ids, out, bits, group)``: out[r] = dequant(W[ids[r]]) (MLX bit stream, fp32
  ``scale*q + bias``) -- ``reference.ops.embed`` with an AffineWeight. ``embed_dense(W16, ids, out)``: bf16 rows.
- ``rmsnorm_rows(x, w, sel, out, eps)``: out[i] = rms_norm(x[sel[i]]) * w -- ``ops.rms_norm``.
- ``add_rmsnorm(h, d, w, out, eps)``: h += d; out = rms_norm(h) * w -- ``ops.add_rms_norm``.
- ``gated_norm(o, z, w, out, eps, act)``: per (row, head) ``rms_norm(o) * w * act(z)``, act 0 = silu, 1 = sigmoid
  -- ``ops.gated_rms_norm``; grid (rows, Hv).
- ``silu_mul(gu, out)``: out = silu(gate) * up with gate/up the two halves of ``gu`` [R, 2I] -- ``ops.silu_mul``.
- ``argmax_rows(logits, valid, out)``: out[r] = argmax over the first ``valid`` columns, lowest index on ties.
- ``gather_rows(x, sel, out)``: out[i] = x[sel[i]].
- ``gemv_simple_*`` / ``dense_gemv_simple``: one thread per output, the simulator's stand-in for the affine
  GEMV (K-A's generated kernels take minutes per forward there); never used on a GPU.
- ``zero_slot(rec, conv, slot)``: zero one slot's recurrent state and conv tail in every layer.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32

from tensorfold.kernels._device import IS_SIM, bf16_to_f32

NT = 2 if IS_SIM else 128  # the simulator runs a Python thread per GPU thread: keep its blocks tiny

__all__ = ["launch_embed", "launch_rmsnorm_rows", "launch_add_rmsnorm", "launch_gated_norm", "launch_silu_mul",
           "launch_argmax", "launch_zero_slot", "launch_gather", "KERNELS"]


@cuda.jit(device=True)
def _block_sum(red, v, tid):
    """Sum of ``v`` over the NT threads of the block (fixed tree); every thread gets the result."""
    red[tid] = v
    cuda.syncthreads()
    s = NT // 2
    while s > 0:
        if tid < s:
            red[tid] += red[tid + s]
        cuda.syncthreads()
        s //= 2
    t = red[0]
    cuda.syncthreads()
    return t


@cuda.jit(device=True)
def _silu(x):
    x = float32(x)
    if x >= float32(0.0):
        return x / (float32(1.0) + float32(math.exp(-x)))
    e = float32(math.exp(x))
    return x * e / (float32(1.0) + e)


@cuda.jit(device=True)
def _sigmoid(x):
    x = float32(x)
    if x >= float32(0.0):
        return float32(1.0) / (float32(1.0) + float32(math.exp(-x)))
    e = float32(math.exp(x))
    return e / (float32(1.0) + e)


def _make_embed(bf16_scales):
    def embed_affine(W, S, B, ids, out, bits, group):
        R = ids.shape[0]
        H = out.shape[1]
        mask = np.uint32((1 << bits) - 1) if bits < 32 else np.uint32(0xFFFFFFFF)
        r = cuda.blockIdx.x
        while r < R:
            t = ids[r]
            for i in range(cuda.threadIdx.x, H, cuda.blockDim.x):
                off = i * bits
                wi = off >> 5
                sh = off & 31
                v = W[t, wi] >> np.uint32(sh)
                if sh + bits > 32:
                    v = v | (W[t, wi + 1] << np.uint32(32 - sh))
                q = float32(v & mask)
                gi = i // group
                if bf16_scales:
                    s = bf16_to_f32(S[t, gi])
                    b = bf16_to_f32(B[t, gi])
                else:
                    s = float32(S[t, gi])
                    b = float32(B[t, gi])
                out[r, i] = s * q + b
            r += cuda.gridDim.x

    return embed_affine


embed_affine_bf16 = _make_embed(True)
embed_affine_f32 = _make_embed(False)


def embed_dense(W16, ids, out):
    R = ids.shape[0]
    H = out.shape[1]
    r = cuda.blockIdx.x
    while r < R:
        t = ids[r]
        for i in range(cuda.threadIdx.x, H, cuda.blockDim.x):
            out[r, i] = bf16_to_f32(W16[t, i])
        r += cuda.gridDim.x


def rmsnorm_rows(x, w, sel, out, eps):
    n = sel.shape[0]
    H = x.shape[1]
    tid = cuda.threadIdx.x
    red = cuda.shared.array(NT, float32)
    i = cuda.blockIdx.x
    while i < n:
        r = sel[i]
        ss = float32(0.0)
        for c in range(tid, H, NT):
            v = x[r, c]
            ss += v * v
        tot = _block_sum(red, ss, tid)
        den = float32(math.sqrt(tot / float32(H) + eps))
        for c in range(tid, H, NT):
            out[i, c] = x[r, c] / den * w[c]
        i += cuda.gridDim.x


def add_rmsnorm(h, d, w, out, eps):
    R = h.shape[0]
    H = h.shape[1]
    tid = cuda.threadIdx.x
    red = cuda.shared.array(NT, float32)
    r = cuda.blockIdx.x
    while r < R:
        ss = float32(0.0)
        for c in range(tid, H, NT):
            v = h[r, c] + d[r, c]
            h[r, c] = v
            ss += v * v
        tot = _block_sum(red, ss, tid)
        den = float32(math.sqrt(tot / float32(H) + eps))
        for c in range(tid, H, NT):
            out[r, c] = h[r, c] / den * w[c]
        r += cuda.gridDim.x


def gated_norm(o, z, w, out, eps, act):
    R = o.shape[0]
    Dv = o.shape[2]
    hh = cuda.blockIdx.y
    tid = cuda.threadIdx.x
    red = cuda.shared.array(NT, float32)
    r = cuda.blockIdx.x
    while r < R:
        ss = float32(0.0)
        for c in range(tid, Dv, NT):
            v = o[r, hh, c]
            ss += v * v
        tot = _block_sum(red, ss, tid)
        den = float32(math.sqrt(tot / float32(Dv) + eps))
        for c in range(tid, Dv, NT):
            zz = z[r, hh * Dv + c]
            if act == 0:
                gt = _silu(zz)
            else:
                gt = _sigmoid(zz)
            out[r, hh * Dv + c] = o[r, hh, c] / den * w[c] * gt
        r += cuda.gridDim.x


def silu_mul(gu, out):
    R = out.shape[0]
    n = out.shape[1]
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < R * n:
        r = i // n
        c = i - r * n
        out[r, c] = _silu(gu[r, c]) * gu[r, n + c]
        i += stride


def argmax_rows(logits, valid, out):
    R = logits.shape[0]
    tid = cuda.threadIdx.x
    bv = cuda.shared.array(NT, float32)
    bi = cuda.shared.array(NT, int32)
    r = cuda.blockIdx.x
    while r < R:
        best = float32(-math.inf)
        idx = int32(2147483647)
        for c in range(tid, valid, NT):
            v = logits[r, c]
            if v > best:  # strided walk in increasing c: the first max of this thread
                best = v
                idx = c
        bv[tid] = best
        bi[tid] = idx
        cuda.syncthreads()
        s = NT // 2
        while s > 0:
            if tid < s:
                v2 = bv[tid + s]
                i2 = bi[tid + s]
                if v2 > bv[tid] or (v2 == bv[tid] and i2 < bi[tid]):
                    bv[tid] = v2
                    bi[tid] = i2
            cuda.syncthreads()
            s //= 2
        if tid == 0:
            out[r] = bi[0]
        cuda.syncthreads()
        r += cuda.gridDim.x


def gather_rows(x, sel, out):
    n = sel.shape[0]
    H = x.shape[1]
    i = cuda.blockIdx.x
    while i < n:
        r = sel[i]
        for c in range(cuda.threadIdx.x, H, cuda.blockDim.x):
            out[i, c] = x[r, c]
        i += cuda.gridDim.x


def _make_gemv(bf16_scales):
    def gemv_simple(W, S, B, x, y, bits, group):
        R = x.shape[0]
        out = y.shape[1]
        inp = x.shape[1]
        mask = np.uint32((1 << bits) - 1)
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < R * out:
            r = i // out
            o = i - r * out
            acc = float32(0.0)
            for g0 in range(0, inp, group):
                gi = g0 // group
                if bf16_scales:
                    s = bf16_to_f32(S[o, gi])
                    b = bf16_to_f32(B[o, gi])
                else:
                    s = float32(S[o, gi])
                    b = float32(B[o, gi])
                d = float32(0.0)
                sx = float32(0.0)
                for j in range(g0, g0 + group):
                    off = j * bits
                    wi = off >> 5
                    sh = off & 31
                    v = W[o, wi] >> np.uint32(sh)
                    if sh + bits > 32:
                        v = v | (W[o, wi + 1] << np.uint32(32 - sh))
                    d += float32(v & mask) * x[r, j]
                    sx += x[r, j]
                acc += s * d + b * sx
            y[r, o] = acc
            i += stride

    return gemv_simple


gemv_simple_bf16 = _make_gemv(True)
gemv_simple_f32 = _make_gemv(False)


def dense_gemv_simple(W16, x, y):
    R = x.shape[0]
    out = y.shape[1]
    inp = x.shape[1]
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < R * out:
        r = i // out
        o = i - r * out
        acc = float32(0.0)
        for j in range(inp):
            acc += bf16_to_f32(W16[o, j]) * x[r, j]
        y[r, o] = acc
        i += stride


def zero_slot(rec, conv, slot):
    NL = rec.shape[0]
    n1 = rec.shape[2] * rec.shape[3] * rec.shape[4]
    n2 = conv.shape[2] * conv.shape[3]
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < NL * (n1 + n2):
        layer = i // (n1 + n2)
        j = i - layer * (n1 + n2)
        if j < n1:
            a = j // (rec.shape[3] * rec.shape[4])
            rem = j - a * rec.shape[3] * rec.shape[4]
            b = rem // rec.shape[4]
            c = rem - b * rec.shape[4]
            rec[layer, slot, a, b, c] = float32(0.0)
        else:
            j -= n1
            a = j // conv.shape[3]
            c = j - a * conv.shape[3]
            conv[layer, slot, a, c] = float32(0.0)
        i += stride


k_embed_bf16 = cuda.jit(embed_affine_bf16)
k_embed_f32 = cuda.jit(embed_affine_f32)
k_embed_dense = cuda.jit(embed_dense)
k_rmsnorm_rows = cuda.jit(rmsnorm_rows)
k_add_rmsnorm = cuda.jit(add_rmsnorm)
k_gated_norm = cuda.jit(gated_norm)
k_silu_mul = cuda.jit(silu_mul)
k_argmax = cuda.jit(argmax_rows)
k_zero_slot = cuda.jit(zero_slot)
k_gather = cuda.jit(gather_rows)
k_gemv_bf16 = cuda.jit(gemv_simple_bf16)
k_gemv_f32 = cuda.jit(gemv_simple_f32)
k_dense_gemv = cuda.jit(dense_gemv_simple)

KERNELS = {"embed_affine_bf16": k_embed_bf16, "embed_affine_f32": k_embed_f32, "embed_dense": k_embed_dense,
           "rmsnorm_rows": k_rmsnorm_rows, "add_rmsnorm": k_add_rmsnorm, "gated_norm": k_gated_norm,
           "silu_mul": k_silu_mul, "argmax_rows": k_argmax, "zero_slot": k_zero_slot, "gather_rows": k_gather}


def _rows_grid(R, cap=4096):
    return 1 if IS_SIM else max(1, min(int(R), cap))


def _flat_grid(n, threads):
    return 1 if IS_SIM else max(1, min(4096, -(-n // threads)))


def launch_embed(wt, ids, out, *, stream=0, blocks=None):
    """wt: an arena weight entry (dict with 'kind' 'affine'|'dense' and device arrays)."""
    nb = blocks or _rows_grid(ids.shape[0])
    if wt["kind"] == "affine":
        k = k_embed_bf16 if wt["S"].dtype == np.uint16 else k_embed_f32
        k[nb, NT, stream](wt["W"], wt["S"], wt["B"], ids, out, np.int32(wt["bits"]), np.int32(wt["group"]))
    else:
        k_embed_dense[nb, NT, stream](wt["W16"], ids, out)


def launch_rmsnorm_rows(x, w, sel, out, eps, *, stream=0, blocks=None):
    k_rmsnorm_rows[blocks or _rows_grid(sel.shape[0]), NT, stream](x, w, sel, out, np.float32(eps))


def launch_add_rmsnorm(h, d, w, out, eps, *, stream=0, blocks=None):
    k_add_rmsnorm[blocks or _rows_grid(h.shape[0]), NT, stream](h, d, w, out, np.float32(eps))


def launch_gated_norm(o, z, w, out, eps, act, *, stream=0, blocks=None):
    k_gated_norm[(blocks or _rows_grid(o.shape[0]), o.shape[1]), NT, stream](o, z, w, out, np.float32(eps),
                                                                              np.int32(act))


def launch_silu_mul(gu, out, *, stream=0, blocks=None):
    n = out.shape[0] * out.shape[1]
    k_silu_mul[blocks or _flat_grid(n, 256), NT if IS_SIM else 256, stream](gu, out)


def launch_argmax(logits, valid, out, *, stream=0, blocks=None):
    k_argmax[blocks or _rows_grid(logits.shape[0]), NT, stream](logits, np.int32(valid), out)


def launch_gemv_simple(ent, x, y, *, stream=0, blocks=None):
    """y = x @ W.T, one thread per output (simulator stand-in for ``affine.launch_qgemv``: exact per row, slow
    on a GPU). ``ent``: an arena linear."""
    n = x.shape[0] * y.shape[1]
    nb = blocks or max(1, min(4096, -(-n // NT)))
    if ent["kind"] == "affine":
        k = k_gemv_bf16 if ent["S"].dtype == np.uint16 else k_gemv_f32
        k[nb, NT, stream](ent["W"], ent["S"], ent["B"], x, y, np.int32(ent["bits"]), np.int32(ent["group"]))
    else:
        k_dense_gemv[nb, NT, stream](ent["W16"], x, y)


def launch_gather(x, sel, out, *, stream=0, blocks=None):
    k_gather[blocks or _rows_grid(sel.shape[0]), NT, stream](x, sel, out)


def launch_zero_slot(rec, conv, slot, *, stream=0, blocks=None):
    n = rec.shape[0] * (rec.shape[2] * rec.shape[3] * rec.shape[4] + conv.shape[2] * conv.shape[3])
    k_zero_slot[blocks or _flat_grid(n, 256), NT if IS_SIM else 256, stream](rec, conv, np.int32(slot))
