"""Split-K (flash-decoding) GQA attention over a per-stream KV cache, for 1-16 query rows per stream, windows and
trees, with the sigmoid output gate fused into the merge (issue 3, part B; rewritten for speed).

Mirrors, in value, ``tensorfold.reference.attention`` (``partials`` + ``merge``: same key enumeration, fp32 scores
and softmax) and ``tensorfold.reference.ops.attention`` (qwen35.md §3.3 steps 6-7). The kernels cut a row's keys
into *splits* whose width depends only on the row's own key count (see :func:`num_splits`), not into the twin's
fixed 64-key chunks, so the partials differ from the twin's while the merged output agrees to fp32 rounding.

Which keys a row sees (per-row metadata, int32 [R] each): ``row_slot`` (stream slot; < 0 = padding row, nothing
written), ``nk`` (cache positions 0..nk-1), ``tmask`` (bits b: also position ``tbase + b``), ``tbase``. Keys are
enumerated positions 0..nk-1 first, then the set bits in increasing order. A row with n keys has
``num_splits(n)`` splits of ``split_width(n)`` consecutive keys (32 keys for n <= 1024, 64 for n <= 8192, wider
so that a row never has more than NSMAX = 128 splits). Everything a split computes (and the merge's order) depends only on the row's
keys, so a row's result is bit-identical alone, batched with other streams, in a window, or as a chain tree row
(nk = T, tmask = bits 0..i, tbase = T), and with any grid size.

Layouts: ``q`` f32 [R, nH, hd] (normed + roped, from ``kv8.qk_norm_rope_store``); caches [slots, ctx, nKV, hd]
f32 / uint16 (bf16 bits) / uint8 (e4m3) with ``k_scale``, ``v_scale`` f32 [slots, ctx, nKV] (zero-size otherwise);
partials ``m``, ``l`` f32 [R, nH, NC], ``acc`` f32 [R, nH, NC, hd] with NC >= the largest row's split count
(``max_chunks(ctx)``, at most 128); ``qg`` f32 [R, nH, 2*hd] (the gate is its second half);
``out`` f32 [R, nH, hd]. hd a multiple of 8, at most 256; G = nH / nKV at most 8.

Launch geometry
---------------
- ``attn_partials_<fmt>_g<G>`` (one kernel per cache format and GQA group size G): a 1-d grid of at most
  ``_nblk()`` blocks (a few per SM) of 128 threads (4 warps) working through a flat list of work items
  (row, kv head, split), item w going to block w mod grid. Each block first reads every row's metadata (rows
  <= 128 a launch; the launcher splits larger R) and builds an inclusive prefix of item counts in shared memory,
  so blocks without an item exit after that and a graph sized for a long capacity costs little at short
  contexts. Per item: the 4 warps take batches of KB consecutive keys in turn (KB = 8 for bf16 with G <= 4 and for
  e4m3 with G <= 6, else 4; f32 caches 4); a lane holds 8 consecutive dims of a key row (one 16-byte load for bf16, 8 bytes
  for e4m3), all KB keys' K and V loads are issued together; the G x KB partial dot products are reduced across
  the warp with a transposed butterfly (lane L ends with key L / (32 / KB)); per warp an online softmax (fp32)
  and P.V with the probabilities broadcast by shuffles; the 4 warps' states are merged through shared memory in
  warp order. All G query heads of the kv head share one read of K and V.
- e4m3: a code is turned into fp32 by placing its 7 magnitude bits at f32 bits 20..26 and its sign at bit 31,
  which is the exact value times 2^-120 (subnormals included, no flush to zero without fastmath); q is scaled by
  2^64 and the per-row K scale by 2^56 (so scores come out in true units), the per-row V scale by 2^64 and the
  merged accumulator by 2^56. Powers of two: no rounding differs from decoding to true values (products below
  2^-70 in true units may lose bits, far below fp32 resolution of the sums). Code 0x7F (NaN, never written by
  the store, which saturates) decodes to 480 here.
- ``attn_merge``: grid (R, nH, ceil(hd / 64)), block 256: a block merges up to 128 splits of one row and head
  for 64 dims (16 groups of 16 threads, 16-byte loads of the partial accumulators, 8 splits per thread, all loads
  in flight together); block max / weighted sum of l in fixed order; optional sigmoid gate.

Measured on the H200 at 8e3da2c (benchmarks/results/attention_2026-11-30_8e3da2c.md, graph-timed partials +
merge, ``benchmarks/bench_attention.py``): 2B bf16 ctx 4096 13.4 µs at B = 1 (was 62.8), 49 µs at B = 8 (32 % of
copy), 33.7 µs at ctx 32768 (47 %); 100-512 keys in a 16k / 32k-capacity graph 11-12 µs (was 35-38). The 8-key
batch is ~1,300 instructions a warp (512 of them the fma of q.k and p.v) and 2 blocks of 4 warps fit per SM, so
the kernel is bound by issue and exposed load latency, not by bandwidth; e4m3 is only slightly faster than bf16.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32, uint32

from tensorfold.kernels._device import FULL_MASK, IS_SIM, devfn, pdl_begin, warp_max, warp_sum
from . import _kcache

SWU = 64  # split width unit (keys)
SWS = 32  # split width of short rows
NSHORT = 1024  # rows with at most this many keys are short
NSMAX = 128  # the most splits a row has
NT = 128  # partials block
NWARP = NT // 32
MAXR = NT  # rows per partials launch (the launcher splits larger R)
MAXG = 8
MAXHD = 256
LPV = 8  # hd values per lane
NTM = 256  # merge block
NWM = NTM // 32
MQ = 64  # dims per merge block
MGRP = NTM // (MQ // 4)  # split groups per merge block (16)
MK = NSMAX // MGRP  # splits per merge thread (8)
MK4 = MK * 4
QMUL = 2.0 ** 64
KFIX = 2.0 ** 56
CW = SWU  # kept for callers that read the chunk unit


def split_width(n: int) -> int:
    """Keys per split of a row that sees n keys (host twin of the device rule): 32 up to 1024 keys (short rows:
    one batch per warp), then 64 up to 8192, then wider so that a row has at most NSMAX splits."""
    if n <= NSHORT:
        return SWS
    return SWU * ((n + SWU * NSMAX - 1) // (SWU * NSMAX))


def num_splits(n: int) -> int:
    if n <= 0:
        return 0
    w = split_width(n)
    return (n + w - 1) // w


def max_chunks(ctx: int) -> int:
    """Partial-buffer capacity (NC): the most splits a row that sees up to ``ctx`` keys can have."""
    a = (min(ctx, NSHORT) + SWS - 1) // SWS
    b = min((ctx + SWU - 1) // SWU, NSMAX) if ctx > NSHORT else 0
    return max(1, a, b)


@devfn
def _split_w(n):
    w = SWS
    if n > NSHORT:
        w = SWU * ((n + SWU * NSMAX - 1) // (SWU * NSMAX))
    return w


@devfn
def _nth_bit(mask, t):
    """Index of the t-th (0-based) set bit of mask (31 when there is none)."""
    m = np.uint32(mask)
    cnt = 0
    res = 31
    for b in range(32):
        if (m >> np.uint32(b)) & np.uint32(1):
            if cnt == t:
                res = b
            cnt += 1
    return res


# ----------------------------------------------------------------------------------------------------------------
# shuffles and vector loads (simulator versions below)
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:
    from numba import types
    from numba.cuda.extending import intrinsic

    from tensorfold.kernels._device import asm_vec_load, item_ptr

    @devfn
    def _shx(v, off):
        return cuda.shfl_xor_sync(FULL_MASK, v, off)

    @devfn
    def _shb(v, src):
        return cuda.shfl_sync(FULL_MASK, v, src)

    def _make_ldv(nw, ndim):
        """A coherent ``ld.global.v{nw}.u32`` of the 4*nw bytes at ``&arr[i0, .., i{ndim-1}]`` (any dtype; the
        address must be 4*nw-byte aligned) -> UniTuple(uint32, nw). Not ``.nc``: q, the cache rows and the partials
        are written by the kernel before this one, which may still run under PDL (``_device``'s rule)."""

        def _typer(arr, idx):
            if not (isinstance(arr, types.Array) and arr.ndim == ndim):
                return None
            if not all(isinstance(i, types.Integer) for i in idx):
                return None
            return types.UniTuple(types.uint32, nw)(arr, *idx)

        def codegen(context, builder, sig, args):
            ptr = item_ptr(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
            return context.make_tuple(builder, sig.return_type, asm_vec_load(builder, ptr, nw, "u32", nc=False))

        if ndim == 4:
            @intrinsic
            def ldv(typingctx, arr, i0, i1, i2, i3):
                sig = _typer(arr, (i0, i1, i2, i3))
                return None if sig is None else (sig, codegen)
        elif ndim == 3:
            @intrinsic
            def ldv(typingctx, arr, i0, i1, i2):
                sig = _typer(arr, (i0, i1, i2))
                return None if sig is None else (sig, codegen)
        else:
            raise ValueError(ndim)
        return ldv

    _ldv4 = _make_ldv(4, 4)
    _ldv2 = _make_ldv(2, 4)
    _ldq4 = _make_ldv(4, 3)

else:

    def _sim_tid():
        return cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)

    @cuda.jit(device=True)
    def _shx(v, off):
        buf = cuda.shared.array(1024, np.object_)
        tid = _sim_tid()
        buf[tid] = v
        cuda.syncthreads()
        o = buf[tid ^ off]
        cuda.syncthreads()
        return o

    @cuda.jit(device=True)
    def _shb(v, src):
        buf = cuda.shared.array(1024, np.object_)
        tid = _sim_tid()
        buf[tid] = v
        cuda.syncthreads()
        o = buf[tid - tid % 32 + src]
        cuda.syncthreads()
        return o

    def _sim_words(a, i0, i1, i2, i3, nw):
        dt = np.dtype(a.dtype)
        out = []
        for k in range(nw):
            if dt == np.uint16:
                w = int(a[i0, i1, i2, i3 + 2 * k]) | (int(a[i0, i1, i2, i3 + 2 * k + 1]) << 16)
            elif dt == np.uint8:
                w = 0
                for b in range(4):
                    w |= int(a[i0, i1, i2, i3 + 4 * k + b]) << (8 * b)
            else:
                w = int(np.float32(a[i0, i1, i2, i3 + k]).view(np.uint32))
            out.append(np.uint32(w))
        return tuple(out)

    @cuda.jit(device=True)
    def _ldv4(a, i0, i1, i2, i3):
        return _sim_words(a, i0, i1, i2, i3, 4)

    @cuda.jit(device=True)
    def _ldv2(a, i0, i1, i2, i3):
        return _sim_words(a, i0, i1, i2, i3, 2)

    @cuda.jit(device=True)
    def _ldq4(a, i0, i1, i2):
        return (np.float32(a[i0, i1, i2]).view(np.uint32), np.float32(a[i0, i1, i2 + 1]).view(np.uint32),
                np.float32(a[i0, i1, i2 + 2]).view(np.uint32), np.float32(a[i0, i1, i2 + 3]).view(np.uint32))


# ----------------------------------------------------------------------------------------------------------------
# per-format raw loads (8 dims of one key row into words kw[o : o + NW]) and decode of dim i
# ----------------------------------------------------------------------------------------------------------------


@devfn
def _ld_f32(a, s, t, h, d, kw, o):
    w = _ldv4(a, s, t, h, d)
    kw[o] = w[0]
    kw[o + 1] = w[1]
    kw[o + 2] = w[2]
    kw[o + 3] = w[3]
    w = _ldv4(a, s, t, h, d + 4)
    kw[o + 4] = w[0]
    kw[o + 5] = w[1]
    kw[o + 6] = w[2]
    kw[o + 7] = w[3]


@devfn
def _ld_bf16(a, s, t, h, d, kw, o):
    w = _ldv4(a, s, t, h, d)
    kw[o] = w[0]
    kw[o + 1] = w[1]
    kw[o + 2] = w[2]
    kw[o + 3] = w[3]


@devfn
def _ld_e4m3(a, s, t, h, d, kw, o):
    w = _ldv2(a, s, t, h, d)
    kw[o] = w[0]
    kw[o + 1] = w[1]


@devfn
def _dec_f32(kw, o, i):
    return np.uint32(kw[o + i]).view(np.float32)


@devfn
def _dec_bf16(kw, o, i):
    w = np.uint32(kw[o + i // 2])
    if i % 2 == 0:
        return np.uint32(w << np.uint32(16)).view(np.float32)
    return np.uint32(w & np.uint32(0xFFFF0000)).view(np.float32)


@devfn
def _dec_e4m3(kw, o, i):
    """e4m3 code (byte i % 4 of word i // 4) -> its value times 2^-120 (see the module docstring)."""
    w = np.uint32(kw[o + i // 4])
    b = i % 4
    if b == 0:
        x = ((w << np.uint32(20)) & np.uint32(0x07F00000)) | ((w << np.uint32(24)) & np.uint32(0x80000000))
    elif b == 1:
        x = ((w << np.uint32(12)) & np.uint32(0x07F00000)) | ((w << np.uint32(16)) & np.uint32(0x80000000))
    elif b == 2:
        x = ((w << np.uint32(4)) & np.uint32(0x07F00000)) | ((w << np.uint32(8)) & np.uint32(0x80000000))
    else:
        x = ((w >> np.uint32(4)) & np.uint32(0x07F00000)) | (w & np.uint32(0x80000000))
    return np.uint32(x).view(np.float32)


_FMT = {  # fmt: (raw load, decode, words per 8 dims, max keys per warp batch, quantized)
    "f32": (_ld_f32, _dec_f32, 8, 4, False),
    "bf16": (_ld_bf16, _dec_bf16, 4, 8, False),
    "e4m3": (_ld_e4m3, _dec_e4m3, 2, 16, True),
}


def _kb(fmt: str, G: int) -> int:
    """Keys per warp batch: as many as the registers allow without spilling (ptxas -v at sm_90: bf16 G=4 KB=8 211
    registers, G=6 KB=4 233; e4m3 G=4 KB=8 176, G=6 KB=8 242; with KB=16 the loops are no longer unrolled and the
    arrays go to local memory)."""
    if fmt == "e4m3":
        return 8 if G <= 6 else 4
    return min(_FMT[fmt][3], 8 if G <= 4 else 4)


# ----------------------------------------------------------------------------------------------------------------
# partials
# ----------------------------------------------------------------------------------------------------------------


# Per-kernel constants: the template below reads them as globals; _make_partials gives each (format, G) kernel
# its own copy of the module globals with these set, so numba freezes them as compile-time constants.
G = 4
KB = 8
LPK = 4  # lanes per key after the transposed reduction (32 // KB)
NSTEP = 3  # transposed butterfly steps (log2 KB)
NREST = 2  # plain butterfly steps after them
KBH = 4  # KB // 2 (at least 1)
GL = 32  # G * LPV
KPI = 32  # keys per block iteration (NWARP * KB)
NW = 4  # raw words per 8 dims
GKB = 32  # G * KB
KBNW = 32  # KB * NW
QUANT = False
ld = None
dec = None


def attn_partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale,
                  m_out, l_out, acc_out):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    tid = cuda.threadIdx.x
    lane = tid % 32
    warp = tid // 32
    s_inc = cuda.shared.array(MAXR, int32)  # inclusive prefix of the rows' item counts
    s_n = cuda.shared.array(MAXR, int32)  # keys each row sees
    s_slot = cuda.shared.array(MAXR, int32)
    s_nk = cuda.shared.array(MAXR, int32)
    tp = cuda.shared.array(32, int32)  # cache positions of the current row's tree keys
    sm_m = cuda.shared.array((NWARP, G), float32)
    sm_l = cuda.shared.array((NWARP, G), float32)
    sm_w = cuda.shared.array((NWARP, G), float32)
    sm_a = cuda.shared.array((NWARP, G, MAXHD), float32)
    qr = cuda.local.array(GL, float32)
    acc = cuda.local.array(GL, float32)
    mr = cuda.local.array(G, float32)
    lr = cuda.local.array(G, float32)
    pv = cuda.local.array(G, float32)
    part = cuda.local.array(GKB, float32)
    kw = cuda.local.array(KBNW, uint32)
    vw = cuda.local.array(KBNW, uint32)
    kf = cuda.local.array(LPV, float32)
    R = q.shape[0]
    hd = q.shape[2]
    nKV = k_cache.shape[2]
    # ---- prologue: item counts of every row, inclusive prefix (Hillis-Steele) in shared memory
    cnt = 0
    if tid < R:
        sl = row_slot[tid]
        nkt = nk[tid]
        tm = tmask[tid]
        n = 0
        if sl >= 0:
            n = nkt + cuda.popc(np.uint32(tm))
        s_n[tid] = n
        s_slot[tid] = sl
        s_nk[tid] = nkt
        if n > 0:
            sw0 = _split_w(n)
            cnt = nKV * ((n + sw0 - 1) // sw0)
    s_inc[tid] = cnt
    cuda.syncthreads()
    off = 1
    while off < NT:
        v = 0
        if tid >= off:
            v = s_inc[tid - off]
        cuda.syncthreads()
        s_inc[tid] += v
        cuda.syncthreads()
        off *= 2
    total = s_inc[NT - 1]
    d0 = min(lane * LPV, hd - LPV)
    lv = lane * LPV < hd
    kidx = lane // LPK
    for w in range(cuda.blockIdx.x, total, cuda.gridDim.x):
        # ---- which (row, kv head, split)
        lo = 0
        hi = NT - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if s_inc[mid] > w:
                hi = mid
            else:
                lo = mid + 1
        r = lo
        ex = 0
        if r > 0:
            ex = s_inc[r - 1]
        n = s_n[r]
        sw = _split_w(n)
        ns = (n + sw - 1) // sw
        rem = w - ex
        kvh = rem // ns
        c = rem - kvh * ns
        slot = s_slot[r]
        nkr = s_nk[r]
        base = c * sw
        endk = min(base + sw, n)
        if endk > nkr:  # tree keys in this split (block-uniform)
            if tid < 32:
                tp[tid] = tbase[r] + _nth_bit(tmask[r], tid)
            cuda.syncthreads()
        for g in range(G):
            qa = _ldq4(q, r, kvh * G + g, d0)
            qb = _ldq4(q, r, kvh * G + g, d0 + 4)
            for i in range(LPV):
                if i < 4:
                    qv = np.uint32(qa[i]).view(np.float32)
                else:
                    qv = np.uint32(qb[i - 4]).view(np.float32)
                if QUANT:
                    qv = qv * float32(QMUL)
                if not lv:
                    qv = float32(0.0)
                qr[g * LPV + i] = qv
                acc[g * LPV + i] = float32(0.0)
            mr[g] = float32(-math.inf)
            lr[g] = float32(0.0)
        nit = (endk - base + KPI - 1) // KPI
        for it in range(nit):
            b0 = base + (it * NWARP + warp) * KB
            if IS_SIM or b0 < endk:  # a warp past the end only adds zeros: skipped on the GPU
                # ---- K and V of KB keys, all loads issued together
                for u in range(KB):
                    j = min(b0 + u, endk - 1)
                    pos = j
                    if j >= nkr:
                        pos = tp[j - nkr]
                    ld(k_cache, slot, pos, kvh, d0, kw, u * NW)
                    ld(v_cache, slot, pos, kvh, d0, vw, u * NW)
                jl = b0 + kidx
                valid = jl < endk
                jl = min(jl, endk - 1)
                posl = jl
                if jl >= nkr:
                    posl = tp[jl - nkr]
                if QUANT:
                    sk = k_scale[slot, posl, kvh] * scale * float32(KFIX)
                    sv = v_scale[slot, posl, kvh] * float32(QMUL)
                else:
                    sk = scale
                    sv = float32(1.0)
                # ---- partial dots: lane's 8 dims, every head, every key
                for u in range(KB):
                    for i in range(LPV):
                        kf[i] = dec(kw, u * NW, i)
                    for g in range(G):
                        p = float32(0.0)
                        for i in range(LPV):
                            p = cuda.fma(qr[g * LPV + i], kf[i], p)
                        part[g * KB + u] = p
                for g in range(G):
                    # transposed butterfly: after it lane L holds the full dot of key L // LPK
                    offs = 16
                    half = KB
                    for st in range(NSTEP):
                        half = half // 2
                        up = (lane & offs) != 0
                        for jj in range(KBH):
                            if jj < half:
                                a = part[g * KB + jj]
                                b = part[g * KB + jj + half]
                                snd = b
                                kp = a
                                if up:
                                    snd = a
                                    kp = b
                                part[g * KB + jj] = kp + _shx(snd, offs)
                        offs = offs // 2
                    s = part[g * KB]
                    for st in range(NREST):
                        s = s + _shx(s, offs)
                        offs = offs // 2
                    s = s * sk
                    if not valid:
                        s = float32(-math.inf)
                    # online softmax over the warp's keys (reduce over the key bits of the lane)
                    bm = s
                    o2 = LPK
                    for st in range(NSTEP):
                        bm = max(bm, _shx(bm, o2))
                        o2 = o2 * 2
                    mold = mr[g]
                    mnew = max(mold, bm)
                    if mnew == float32(-math.inf):
                        alpha = float32(1.0)
                        p = float32(0.0)
                    else:
                        alpha = float32(math.exp(mold - mnew))
                        p = float32(math.exp(s - mnew))
                    ps = p
                    o2 = LPK
                    for st in range(NSTEP):
                        ps = ps + _shx(ps, o2)
                        o2 = o2 * 2
                    mr[g] = mnew
                    lr[g] = cuda.fma(lr[g], alpha, ps)
                    pv[g] = p * sv
                    for i in range(LPV):
                        acc[g * LPV + i] = acc[g * LPV + i] * alpha
                # ---- P.V
                for u in range(KB):
                    for i in range(LPV):
                        kf[i] = dec(vw, u * NW, i)
                    for g in range(G):
                        pu = _shb(pv[g], u * LPK)
                        for i in range(LPV):
                            acc[g * LPV + i] = cuda.fma(pu, kf[i], acc[g * LPV + i])
        # ---- merge the 4 warps' states (warp order) and write the split's partial
        if lane == 0:
            for g in range(G):
                sm_m[warp, g] = mr[g]
                sm_l[warp, g] = lr[g]
        if lv:
            for g in range(G):
                for i in range(LPV):
                    sm_a[warp, g, d0 + i] = acc[g * LPV + i]
        cuda.syncthreads()
        if tid < G:
            M = sm_m[0, tid]
            for ww in range(1, NWARP):
                M = max(M, sm_m[ww, tid])
            L = float32(0.0)
            for ww in range(NWARP):
                e = float32(math.exp(sm_m[ww, tid] - M))
                sm_w[ww, tid] = e
                L = cuda.fma(e, sm_l[ww, tid], L)
            m_out[r, kvh * G + tid, c] = M
            l_out[r, kvh * G + tid, c] = L
        cuda.syncthreads()
        for e in range(tid, G * hd, NT):
            g = e // hd
            d = e - g * hd
            a = float32(0.0)
            for ww in range(NWARP):
                a = cuda.fma(sm_w[ww, g], sm_a[ww, g, d], a)
            if QUANT:
                a = a * float32(KFIX)
            acc_out[r, kvh * G + g, c, d] = a
        cuda.syncthreads()


def _make_partials(fmt, g):
    ld_, dec_, nw, _, quant = _FMT[fmt]
    kb = _kb(fmt, g)
    nstep = kb.bit_length() - 1
    consts = dict(G=g, KB=kb, LPK=32 // kb, NSTEP=nstep, NREST=5 - nstep, KBH=max(1, kb // 2), GL=g * LPV,
                  KPI=NWARP * kb, NW=nw, GKB=g * kb, KBNW=kb * nw, QUANT=quant, ld=ld_, dec=dec_)
    return _kcache.variant(attn_partials, f"attn_partials_{fmt}_g{g}", **consts)


# ----------------------------------------------------------------------------------------------------------------
# merge
# ----------------------------------------------------------------------------------------------------------------


def attn_merge(m, l, acc, row_slot, nk, tmask, qg, use_gate, out):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    r = cuda.blockIdx.x
    h = cuda.blockIdx.y
    dbase = cuda.blockIdx.z * MQ
    tid = cuda.threadIdx.x
    warp = tid // 32
    grp = tid // (MQ // 4)
    sub = tid % (MQ // 4)
    ws = cuda.shared.array(NSMAX, float32)
    red = cuda.shared.array((MGRP, MQ), float32)
    wr = cuda.shared.array(NWM, float32)
    av = cuda.local.array(MK4, float32)
    hd = out.shape[2]
    NC = m.shape[2]
    # every load first (metadata, this thread's splits grp, grp + 16, .. and m, l of split tid, within the
    # buffer): one round trip; entries past the row's split count are masked below, never used
    slot = row_slot[r]
    n = nk[r] + cuda.popc(np.uint32(tmask[r]))
    d = dbase + sub * 4
    dl = min(d, hd - 4)
    for k in range(MK):
        c = min(grp + MGRP * k, NC - 1)
        w4 = _ldv4(acc, r, h, c, dl)
        for j in range(4):
            av[k * 4 + j] = np.uint32(w4[j]).view(np.float32)
    ct = min(tid, NC - 1)
    mc = m[r, h, ct]
    lc = l[r, h, ct]
    gt = float32(0.0)
    if use_gate != 0:
        gt = qg[r, h, hd + min(dbase + min(tid, MQ - 1), hd - 1)]
    if slot < 0:
        return
    if n <= 0:
        for dd in range(tid, MQ, NTM):
            if dbase + dd < hd:
                out[r, h, dbase + dd] = float32(0.0)
        return
    sw = _split_w(n)
    ns = (n + sw - 1) // sw
    if tid >= ns:
        mc = float32(-math.inf)
        lc = float32(0.0)
    # M = max_c m_c
    x = warp_max(mc)
    if tid % 32 == 0:
        wr[warp] = x
    cuda.syncthreads()
    M = wr[0]
    for i in range(1, NWM):
        M = max(M, wr[i])
    cuda.syncthreads()
    # w_c = exp(m_c - M); L = sum_c w_c l_c (fixed order)
    wt = float32(0.0)
    if tid < ns:
        wt = float32(math.exp(mc - M))
    if tid < NSMAX:
        ws[tid] = wt
    x = warp_sum(wt * lc)
    if tid % 32 == 0:
        wr[warp] = x
    cuda.syncthreads()
    L = wr[0]
    for i in range(1, NWM):
        L += wr[i]
    for j in range(4):
        xs = float32(0.0)
        for k in range(MK):
            c = grp + MGRP * k
            if c < ns:
                xs = cuda.fma(ws[c], av[k * 4 + j], xs)
        red[grp, sub * 4 + j] = xs
    cuda.syncthreads()
    if tid < MQ and dbase + tid < hd:
        o = float32(0.0)
        for g in range(MGRP):
            o += red[g, tid]
        o = o / L
        if use_gate != 0:
            if gt >= float32(0.0):
                o = o / (float32(1.0) + float32(math.exp(-gt)))
            else:
                e = float32(math.exp(gt))
                o = o * e / (float32(1.0) + e)
        out[r, h, dbase + tid] = o


# ----------------------------------------------------------------------------------------------------------------
# signatures, compile specs, launchers
# ----------------------------------------------------------------------------------------------------------------

_DT = {"f32": "float32", "bf16": "uint16", "e4m3": "uint8"}
_NPDT = {np.dtype(np.float32): "f32", np.dtype(np.uint16): "bf16", np.dtype(np.uint8): "e4m3"}


def _sig_partials(t):
    c = f"{t}[:, :, :, ::1]"
    return (f"void(float32[:, :, ::1], {c}, {c}, float32[:, :, ::1], float32[:, :, ::1], int32[::1], int32[::1], "
            f"int32[::1], int32[::1], float32, float32[:, :, ::1], float32[:, :, ::1], float32[:, :, :, ::1])")


SIG_MERGE = ("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, :, ::1], int32[::1], int32[::1], "
             "int32[::1], float32[:, :, ::1], int32, float32[:, :, ::1])")

_PY: dict = {}


def _partials_py(fmt, G):
    key = (fmt, G)
    if key not in _PY:
        _PY[key] = _make_partials(fmt, G)
    return _PY[key]


# the shipped models: G = 4 (2B, 9B) and 6 (27B); G = 2 for the small test shapes
COMPILE_SPECS = [(_partials_py(f, g), _sig_partials(_DT[f])) for f in ("bf16", "e4m3") for g in (2, 4, 6)]
COMPILE_SPECS += [(_partials_py("f32", 2), _sig_partials("float32")), (attn_merge, SIG_MERGE)]
HOT = {f"attn_partials_{f}_g{g}" for f in ("bf16", "e4m3") for g in (4, 6)} | {"attn_merge"}

_KP: dict = {}
k_merge = _kcache.kjit(attn_merge)
_NBLK: list = []


def _kernel(fmt, G):
    key = (fmt, G)
    if key not in _KP:
        _KP[key] = _kcache.kjit(_partials_py(fmt, G))
    return _KP[key]


def _nblk() -> int:
    """Partials grid size: the blocks that fit on the GPU at once (2 per SM at 176-242 registers a thread; 2 in the
    simulator, which runs blocks one by one)."""
    if not _NBLK:
        if IS_SIM:
            _NBLK.append(2)
        else:
            _NBLK.append(2 * int(cuda.get_current_device().MULTIPROCESSOR_COUNT))
    return _NBLK[0]


def launch_partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale, m, l, acc, *,
                    nz=None, stream=0):
    """nz: the most splits any row of this launch has (default NC = m.shape[2]); it only bounds the grid, every
    row's splits are done whatever its value."""
    R, nH, hd = q.shape
    nKV = k_cache.shape[2]
    G = nH // nKV
    assert G * nKV == nH and G <= MAXG and hd <= MAXHD and hd % LPV == 0
    cap = max(1, min(nz or m.shape[2], NSMAX))
    kern = _kernel(_NPDT[np.dtype(k_cache.dtype)], G)
    sc = np.float32(scale)
    for r0 in range(0, R, MAXR):
        r1 = min(R, r0 + MAXR)
        if r0 == 0 and r1 == R:
            args = (q, row_slot, nk, tmask, tbase, m, l, acc)
        else:
            args = (q[r0:r1], row_slot[r0:r1], nk[r0:r1], tmask[r0:r1], tbase[r0:r1], m[r0:r1], l[r0:r1],
                    acc[r0:r1])
        nb = max(1, min((r1 - r0) * nKV * cap, _nblk()))
        kern[nb, NT, stream](args[0], k_cache, v_cache, k_scale, v_scale, args[1], args[2], args[3], args[4], sc,
                             args[5], args[6], args[7])


def launch_merge(m, l, acc, row_slot, nk, tmask, qg, use_gate, out, *, stream=0):
    R, nH, hd = out.shape
    k_merge[(R, nH, (hd + MQ - 1) // MQ), NTM, stream](m, l, acc, row_slot, nk, tmask, qg, np.int32(use_gate), out)


def partial_buffers(R, nH, hd, ctx):
    NC = max_chunks(ctx)
    return (cuda.device_array((R, nH, NC), np.float32), cuda.device_array((R, nH, NC), np.float32),
            cuda.device_array((R, nH, NC, hd), np.float32))
