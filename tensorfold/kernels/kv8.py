"""Full-attention pre-step (issue 3, part B): q/k RMSNorm (multiplier form, per head over hd) + partial rotate-half
RoPE, fused with the cache write of k and v, in three cache formats (f32, bf16 bits as uint16, e4m3 codes as
uint8 with one fp32 scale per (row, kv head) = amax/448, quantized as the key and value are roped and stored).

Mirrors ``tensorfold.reference.ops.qk_norm_rope`` (qwen35.md §3.3 steps 3-4: ``x / sqrt(mean(x²) + eps) * mult``,
then for i < R/2 ``(x_i, x_{i+R/2}) -> (x_i cos - x_{i+R/2} sin, x_{i+R/2} cos + x_i sin)`` with angle
``float32(pos) * inv_freq[i]`` in fp32 like HF) and ``tensorfold.reference.kv8.quantize_rows`` (e4m3 rows).

Arguments (per launch, R rows of any streams)
---------------------------------------------
``qg`` f32 [R, nH, 2*hd] (the q_proj output viewed per head: query then gate), ``k``, ``v`` f32 [R, nKV, hd],
``q_norm``, ``k_norm`` f32 [hd] multipliers, ``inv_freq`` f32 [rotary_dim/2] (``ops.rope_inv_freq``),
``pos`` int32 [R] (rope position), ``row_slot`` int32 [R] (< 0: padding, nothing written), ``cache_idx`` int32 [R]
(cache position to write k/v at; < 0: do not write), ``eps`` f32; outputs ``q_out`` f32 [R, nH, hd],
``k_cache``, ``v_cache`` [slots, ctx, nKV, hd] (one layer; allocate [layers_full, slots, ctx, nKV, hd] and pass
``cache[l]``), ``k_scale``, ``v_scale`` f32 [slots, ctx, nKV] (e4m3; zero-size arrays [0, 0, 0] otherwise).

Launch geometry: grid (Rb, nH + nKV), block 128; blockIdx.y < nH is query head y, else kv head y - nH (which
also stores v); rows grid-stride over blockIdx.x. hd <= 256.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from tensorfold.kernels._device import IS_SIM, f32_to_bf16, f32_to_e4m3, pdl_begin
from . import _kcache

NT = 32 if IS_SIM else 128  # the simulator runs a Python thread per GPU thread
MAXHD = 256
E4M3_MAX = 448.0


@cuda.jit(device=True)
def _enc_f32(x):
    return x


ENC, QUANT = _enc_f32, False  # the cache format: each variant below sets its own (``_kcache.variant``)


def _qk_norm_rope_store(qg, k, v, q_norm, k_norm, inv_freq, pos, row_slot, cache_idx, eps, q_out,
                        k_cache, v_cache, k_scale, v_scale):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    R = qg.shape[0]
    nH = qg.shape[1]
    hd = q_out.shape[2]
    half = inv_freq.shape[0]
    rot = 2 * half
    j = cuda.blockIdx.y
    tid = cuda.threadIdx.x
    xs = cuda.shared.array(MAXHD, float32)
    ys = cuda.shared.array(MAXHD, float32)
    red = cuda.shared.array(NT, float32)
    isq = j < nH
    h = j - nH
    r = cuda.blockIdx.x
    while r < R:
        slot = row_slot[r]
        ci = cache_idx[r]
        if slot >= 0 and (isq or ci >= 0):
            ss = float32(0.0)
            for d in range(tid, hd, NT):
                if isq:
                    x = qg[r, j, d]
                else:
                    x = k[r, h, d]
                xs[d] = x
                ss += x * x
            red[tid] = ss
            cuda.syncthreads()
            s = NT // 2
            while s > 0:
                if tid < s:
                    red[tid] += red[tid + s]
                cuda.syncthreads()
                s //= 2
            den = float32(math.sqrt(red[0] / float32(hd) + eps))
            cuda.syncthreads()
            for d in range(tid, hd, NT):
                if isq:
                    mlt = q_norm[d]
                else:
                    mlt = k_norm[d]
                xs[d] = xs[d] / den * mlt
            cuda.syncthreads()
            p = float32(pos[r])
            amax = float32(0.0)
            for d in range(tid, hd, NT):
                y = xs[d]
                if d < rot:
                    if d < half:
                        ang = p * inv_freq[d]
                        y = xs[d] * float32(math.cos(ang)) - xs[d + half] * float32(math.sin(ang))
                    else:
                        ang = p * inv_freq[d - half]
                        y = xs[d] * float32(math.cos(ang)) + xs[d - half] * float32(math.sin(ang))
                ys[d] = y
                amax = max(amax, abs(y))
            if isq:
                for d in range(tid, hd, NT):
                    q_out[r, j, d] = ys[d]
            else:
                if QUANT:
                    red[tid] = amax
                    cuda.syncthreads()
                    s = NT // 2
                    while s > 0:
                        if tid < s:
                            red[tid] = max(red[tid], red[tid + s])
                        cuda.syncthreads()
                        s //= 2
                    sc = red[0] / float32(E4M3_MAX)
                    cuda.syncthreads()
                    if tid == 0:
                        k_scale[slot, ci, h] = sc
                    for d in range(tid, hd, NT):
                        if sc > float32(0.0):
                            k_cache[slot, ci, h, d] = ENC(ys[d] / sc)
                        else:
                            k_cache[slot, ci, h, d] = ENC(float32(0.0))
                    # v: plain copy + quantize
                    vmax = float32(0.0)
                    for d in range(tid, hd, NT):
                        vv = v[r, h, d]
                        vmax = max(vmax, abs(vv))
                    red[tid] = vmax
                    cuda.syncthreads()
                    s = NT // 2
                    while s > 0:
                        if tid < s:
                            red[tid] = max(red[tid], red[tid + s])
                        cuda.syncthreads()
                        s //= 2
                    sv = red[0] / float32(E4M3_MAX)
                    if tid == 0:
                        v_scale[slot, ci, h] = sv
                    for d in range(tid, hd, NT):
                        if sv > float32(0.0):
                            v_cache[slot, ci, h, d] = ENC(v[r, h, d] / sv)
                        else:
                            v_cache[slot, ci, h, d] = ENC(float32(0.0))
                else:
                    for d in range(tid, hd, NT):
                        k_cache[slot, ci, h, d] = ENC(ys[d])
                        v_cache[slot, ci, h, d] = ENC(v[r, h, d])
            cuda.syncthreads()
        r += cuda.gridDim.x


qk_norm_rope_store_f32, qk_norm_rope_store_bf16, qk_norm_rope_store_e4m3 = (
    _kcache.variant(_qk_norm_rope_store, f"qk_norm_rope_store_{n}", ENC=enc, QUANT=quant)
    for n, enc, quant in (("f32", _enc_f32, False), ("bf16", f32_to_bf16, False), ("e4m3", f32_to_e4m3, True)))


def _sig(t):
    c = f"{t}[:, :, :, ::1]"
    return (f"void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], float32[::1], float32[::1], "
            f"float32[::1], int32[::1], int32[::1], int32[::1], float32, float32[:, :, ::1], {c}, {c}, "
            f"float32[:, :, ::1], float32[:, :, ::1])")


COMPILE_SPECS = [
    (qk_norm_rope_store_f32, _sig("float32")),
    (qk_norm_rope_store_bf16, _sig("uint16")),
    (qk_norm_rope_store_e4m3, _sig("uint8")),
]
HOT = {"qk_norm_rope_store_bf16", "qk_norm_rope_store_e4m3"}

_K = {
    np.dtype(np.float32): _kcache.kjit(qk_norm_rope_store_f32),
    np.dtype(np.uint16): _kcache.kjit(qk_norm_rope_store_bf16),
    np.dtype(np.uint8): _kcache.kjit(qk_norm_rope_store_e4m3),
}


def empty_scale():
    """Zero-size scale array for non-e4m3 caches."""
    return cuda.device_array((0, 0, 0), np.float32)


def launch_qk_norm_rope_store(qg, k, v, q_norm, k_norm, inv_freq, pos, row_slot, cache_idx, eps, q_out,
                              k_cache, v_cache, k_scale, v_scale, *, stream=0, row_blocks=None):
    """Kernel chosen by the cache dtype (float32 / uint16 bf16 / uint8 e4m3)."""
    R = qg.shape[0]
    nb = row_blocks or max(1, min(R, 1024))
    _K[np.dtype(k_cache.dtype)][(nb, qg.shape[1] + k.shape[1]), NT, stream](
        qg, k, v, q_norm, k_norm, inv_freq, pos, row_slot, cache_idx, np.float32(eps), q_out,
        k_cache, v_cache, k_scale, v_scale)
