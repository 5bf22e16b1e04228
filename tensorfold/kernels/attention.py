"""Chunked (flash-decoding) GQA attention over a per-stream KV cache, for 1-16 query rows per stream, windows and
trees, with the sigmoid output gate fused into the merge (issue 3, part B).

Mirrors ``tensorfold.reference.attention`` (``partials``, ``merge``; same key enumeration and chunking) and, in
value, ``tensorfold.reference.ops.attention`` (qwen35.md §3.3 step 6-7). fp32 scores and softmax.

Which keys a row sees (per-row metadata, int32 [R] each): ``row_slot`` (stream slot; < 0 = padding row, nothing
written), ``nk`` (cache positions 0..nk-1), ``tmask`` (bits b: also position ``tbase + b``), ``tbase``. Keys are
enumerated positions 0..nk-1 first, then the set bits in increasing order, and cut into chunks of CW = 64: the
partition depends only on the row's own key count, so a row's result is bit-identical alone, batched with other
streams, in a window, or as a chain tree row (nk = T, tmask = bits 0..i, tbase = T).

Layouts: ``q`` f32 [R, nH, hd] (normed + roped, from ``kv8.qk_norm_rope_store``); caches [slots, ctx, nKV, hd]
f32 / uint16 (bf16 bits) / uint8 (e4m3) with ``k_scale``, ``v_scale`` f32 [slots, ctx, nKV] (zero-size otherwise);
partials ``m``, ``l`` f32 [R, nH, NC], ``acc`` f32 [R, nH, NC, hd] with NC >= the largest row's chunk count
(``max_chunks(ctx)``); ``qg`` f32 [R, nH, 2*hd] (the gate is its second half); ``out`` f32 [R, nH, hd].

Launch geometry
---------------
- ``attn_partials_<fmt>``: grid (R, nKV, nz), block 128 (4 warps); block (r, kv head, z) handles chunks
  z, z+nz, ... of row r for the G = nH/nKV query heads sharing the kv head. Scores: a warp per key, lanes over hd
  (lane + 32 i), one warp reduction per head; softmax stats per head by a warp; P·V with threads over hd.
- ``attn_merge``: grid (R, nH), block 128: block reductions for max and the weighted l sum, chunk weights in
  shared memory (at most MAXNC = 4096 chunks = 262,144 keys a row), threads over hd.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32

from tensorfold.kernels._device import IS_SIM, bf16_to_f32, e4m3_to_f32, warp_max, warp_sum

CW = 64
NT = 128
NWARP = NT // 32
MAXG = 8
MAXHD = 256
NPL = MAXHD // 32  # hd values per lane
NPT = MAXHD // NT  # hd values per thread in the P.V pass
ACCN = MAXG * NPT
KU = 4  # keys per warp per score iteration
KVN = KU * NPL
VU = 8  # keys per P.V iteration
VBN = VU * NPT
MAXNC = 4096  # chunks a row may have (262,144 keys)
MU = 8


def max_chunks(ctx: int) -> int:
    """Partial-buffer capacity (NC) for rows that see up to ``ctx`` keys."""
    return (ctx + CW - 1) // CW


@cuda.jit(device=True)
def _ld_f32(a, s, t, h, d):
    return a[s, t, h, d]


@cuda.jit(device=True)
def _ld_bf16(a, s, t, h, d):
    return bf16_to_f32(a[s, t, h, d])


@cuda.jit(device=True)
def _ld_e4m3(a, s, t, h, d):
    return e4m3_to_f32(a[s, t, h, d])


@cuda.jit(device=True)
def _nth_bit(mask, t):
    """Index of the t-th (0-based) set bit of mask."""
    m = np.uint32(mask)
    cnt = 0
    for b in range(32):
        if (m >> np.uint32(b)) & np.uint32(1):
            if cnt == t:
                return b
            cnt += 1
    return 31


def _make_partials(load, QUANT):
    def attn_partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale,
                      m_out, l_out, acc_out):
        r = cuda.blockIdx.x
        kvh = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        qs = cuda.shared.array((MAXG, MAXHD), float32)
        sc = cuda.shared.array((MAXG, CW), float32)
        kpos = cuda.shared.array(CW, int32)
        ksc = cuda.shared.array(CW, float32)
        vsc = cuda.shared.array(CW, float32)
        kv = cuda.local.array(KVN, float32)
        vbuf = cuda.local.array(VBN, float32)
        acc = cuda.local.array(ACCN, float32)
        if IS_SIM:
            # the simulator's warp helpers allocate their shared buffer on first use without a lock: do that
            # first use here, while the simulator is still starting threads one by one
            warp_sum(float32(0.0))
            warp_max(float32(0.0))
        slot = row_slot[r]
        if slot < 0:
            return
        nH = q.shape[1]
        hd = q.shape[2]
        nKV = k_cache.shape[2]
        G = nH // nKV
        nkr = nk[r]
        mask = tmask[r]
        nkeys = nkr + cuda.popc(np.uint32(mask))
        nc = (nkeys + CW - 1) // CW
        if cuda.blockIdx.z >= nc:
            return
        for g in range(G):
            for d in range(tid, MAXHD, NT):
                qv = float32(0.0)
                if d < hd:
                    qv = q[r, kvh * G + g, d]
                qs[g, d] = qv
        for c in range(cuda.blockIdx.z, nc, cuda.gridDim.z):
            cuda.syncthreads()
            base = c * CW
            n = min(CW, nkeys - base)
            if tid < n:
                j = base + tid
                if j < nkr:
                    pos = j
                else:
                    pos = tbase[r] + _nth_bit(mask, j - nkr)
                kpos[tid] = pos
                if QUANT:
                    ksc[tid] = k_scale[slot, pos, kvh] * scale
                    vsc[tid] = v_scale[slot, pos, kvh]
                else:
                    ksc[tid] = scale
                    vsc[tid] = float32(1.0)
            cuda.syncthreads()
            # scores: a warp per key, KU keys per warp at once (loads in flight together); uniform trip count so
            # the simulator's warp reductions line up
            for it in range((n + KU * NWARP - 1) // (KU * NWARP)):
                for u in range(KU):
                    # clamped indices: every load is issued without a branch, all before the first use
                    pos = kpos[min((it * KU + u) * NWARP + warp, n - 1)]
                    for i in range(NPL):
                        kv[u * NPL + i] = load(k_cache, slot, pos, kvh, min(lane + 32 * i, hd - 1))
                for g in range(MAXG):
                    if g < G:
                        for u in range(KU):
                            jj = (it * KU + u) * NWARP + warp
                            part = float32(0.0)
                            for i in range(NPL):
                                part = cuda.fma(qs[g, lane + 32 * i], kv[u * NPL + i], part)  # qs is 0 past hd
                            tot = warp_sum(part)
                            if jj < n and lane == 0:
                                sc[g, jj] = tot * ksc[jj]
            cuda.syncthreads()
            # softmax stats: a warp per head
            for g0 in range(0, G, NWARP):
                g = g0 + warp
                gv = g < G
                s0 = float32(-math.inf)
                s1 = float32(-math.inf)
                if gv and lane < n:
                    s0 = sc[g, lane]
                if gv and lane + 32 < n:
                    s1 = sc[g, lane + 32]
                mx = warp_max(max(s0, s1))
                p0 = float32(0.0)
                p1 = float32(0.0)
                if gv and lane < n:
                    p0 = float32(math.exp(s0 - mx))
                if gv and lane + 32 < n:
                    p1 = float32(math.exp(s1 - mx))
                ls = warp_sum(p0 + p1)
                if gv:
                    if lane < n:
                        sc[g, lane] = p0 * vsc[lane]
                    if lane + 32 < n:
                        sc[g, lane + 32] = p1 * vsc[lane + 32]
                    if lane == 0:
                        m_out[r, kvh * G + g, c] = mx
                        l_out[r, kvh * G + g, c] = ls
            cuda.syncthreads()
            # P.V: threads over hd
            for e in range(MAXG * NPT):
                acc[e] = float32(0.0)
            for jb in range(0, n, VU):  # VU keys' loads in flight together
                for u in range(VU):
                    pos = kpos[min(jb + u, n - 1)]  # clamped: branch-free loads, all in flight together
                    for i in range(NPT):
                        vbuf[u * NPT + i] = load(v_cache, slot, pos, kvh, min(tid + NT * i, hd - 1))
                for u in range(VU):
                    jj = jb + u
                    if jj < n:
                        for g in range(MAXG):
                            if g < G:
                                p = sc[g, jj]
                                for i in range(NPT):
                                    acc[g * NPT + i] = cuda.fma(p, vbuf[u * NPT + i], acc[g * NPT + i])
            for i in range(NPT):
                d = tid + NT * i
                if d < hd:
                    for g in range(MAXG):
                        if g < G:
                            acc_out[r, kvh * G + g, c, d] = acc[g * NPT + i]

    return attn_partials


attn_partials_f32 = _make_partials(_ld_f32, False)
attn_partials_bf16 = _make_partials(_ld_bf16, False)
attn_partials_e4m3 = _make_partials(_ld_e4m3, True)
for _f, _n in ((attn_partials_f32, "f32"), (attn_partials_bf16, "bf16"), (attn_partials_e4m3, "e4m3")):
    _f.__name__ = f"attn_partials_{_n}"


def attn_merge(m, l, acc, row_slot, nk, tmask, qg, use_gate, out):
    r = cuda.blockIdx.x
    h = cuda.blockIdx.y
    tid = cuda.threadIdx.x
    ws = cuda.shared.array(MAXNC, float32)
    red = cuda.shared.array(NT, float32)
    if row_slot[r] < 0:
        return
    hd = out.shape[2]
    nkeys = nk[r] + cuda.popc(np.uint32(tmask[r]))
    nc = (nkeys + CW - 1) // CW
    if nc <= 0:
        for d in range(tid, hd, NT):
            out[r, h, d] = float32(0.0)
        return
    # M = max_c m_c (block tree reduction, fixed order)
    mx = float32(-math.inf)
    for c in range(tid, nc, NT):
        mx = max(mx, m[r, h, c])
    red[tid] = mx
    cuda.syncthreads()
    st = NT // 2
    while st > 0:
        if tid < st:
            red[tid] = max(red[tid], red[tid + st])
        cuda.syncthreads()
        st //= 2
    M = red[0]
    cuda.syncthreads()
    # w_c = exp(m_c - M); L = sum_c w_c l_c
    ls = float32(0.0)
    for c in range(tid, nc, NT):
        w = float32(math.exp(m[r, h, c] - M))
        ws[c] = w
        ls = cuda.fma(w, l[r, h, c], ls)
    red[tid] = ls
    cuda.syncthreads()
    st = NT // 2
    while st > 0:
        if tid < st:
            red[tid] += red[tid + st]
        cuda.syncthreads()
        st //= 2
    L = red[0]
    for d in range(tid, hd, NT):
        x = float32(0.0)
        for c0 in range(0, nc, MU):  # MU chunks' loads in flight together
            for u in range(MU):
                c = c0 + u
                if c < nc:
                    x = cuda.fma(ws[c], acc[r, h, c, d], x)
        x = x / L
        if use_gate != 0:
            gt = qg[r, h, hd + d]
            if gt >= float32(0.0):
                x = x / (float32(1.0) + float32(math.exp(-gt)))
            else:
                e = float32(math.exp(gt))
                x = x * e / (float32(1.0) + e)
        out[r, h, d] = x


def _sig_partials(t):
    c = f"{t}[:, :, :, ::1]"
    return (f"void(float32[:, :, ::1], {c}, {c}, float32[:, :, ::1], float32[:, :, ::1], int32[::1], int32[::1], "
            f"int32[::1], int32[::1], float32, float32[:, :, ::1], float32[:, :, ::1], float32[:, :, :, ::1])")


SIG_MERGE = ("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, :, ::1], int32[::1], int32[::1], "
             "int32[::1], float32[:, :, ::1], int32, float32[:, :, ::1])")

COMPILE_SPECS = [
    (attn_partials_f32, _sig_partials("float32")),
    (attn_partials_bf16, _sig_partials("uint16")),
    (attn_partials_e4m3, _sig_partials("uint8")),
    (attn_merge, SIG_MERGE),
]
HOT = {"attn_partials_bf16", "attn_partials_e4m3", "attn_merge"}

_KP = {
    np.dtype(np.float32): cuda.jit(attn_partials_f32),
    np.dtype(np.uint16): cuda.jit(attn_partials_bf16),
    np.dtype(np.uint8): cuda.jit(attn_partials_e4m3),
}
k_merge = cuda.jit(attn_merge)


def launch_partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale, m, l, acc, *,
                    nz=None, stream=0):
    """nz: chunk-grid depth (default NC = m.shape[2]; smaller values grid-stride over the chunks)."""
    R, nH, hd = q.shape
    nKV = k_cache.shape[2]
    assert nH // nKV <= MAXG and hd <= MAXHD
    z = nz or m.shape[2]
    _KP[np.dtype(k_cache.dtype)][(R, nKV, z), NT, stream](
        q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, np.float32(scale), m, l, acc)


def launch_merge(m, l, acc, row_slot, nk, tmask, qg, use_gate, out, *, stream=0):
    R, nH, _ = out.shape
    k_merge[(R, nH), NT, stream](m, l, acc, row_slot, nk, tmask, qg, np.int32(use_gate), out)


def partial_buffers(R, nH, hd, ctx):
    NC = max_chunks(ctx)
    return (cuda.device_array((R, nH, NC), np.float32), cuda.device_array((R, nH, NC), np.float32),
            cuda.device_array((R, nH, NC, hd), np.float32))
