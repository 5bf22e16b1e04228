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
- ``attn_fused_<fmt>_g<G>``: the partials kernel with the merge in its tail (``launch(fused=True)``,
  ``TENSORFOLD_ATTN_FUSED=1``): after a split's partials, a fence and one atomic arrival a block on
  ``ctr[r, kv head]``; the block that brings the count to the row's split count resets it and, for the G heads,
  does the merge below with the same operations in the same order (thread t takes split t for the max and the
  weighted sum of l as the merge's first four warps do; each thread then 4 dims at a time, split groups in the
  merge's order), reading the partials with ``ld.global.cg`` (other blocks wrote them; L1 is not coherent). One
  launch instead of two; the same bits.
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
import os

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

    def _make_ldv(nw, ndim, cg=False):
        """A coherent ``ld.global.v{nw}.u32`` of the 4*nw bytes at ``&arr[i0, .., i{ndim-1}]`` (any dtype; the
        address must be 4*nw-byte aligned) -> UniTuple(uint32, nw). Not ``.nc``: q, the cache rows and the partials
        are written by the kernel before this one, which may still run under PDL (``_device``'s rule). ``cg``:
        ``ld.global.cg`` (L2 only), for the partials other blocks of the same launch wrote (the fused merge)."""

        def _typer(arr, idx):
            if not (isinstance(arr, types.Array) and arr.ndim == ndim):
                return None
            if not all(isinstance(i, types.Integer) for i in idx):
                return None
            return types.UniTuple(types.uint32, nw)(arr, *idx)

        def codegen(context, builder, sig, args):
            ptr = item_ptr(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
            return context.make_tuple(builder, sig.return_type,
                                      asm_vec_load(builder, ptr, nw, "u32", nc=False, cg=cg))

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
    _ldcg4 = _make_ldv(4, 4, cg=True)
    _ldcg1 = _make_ldv(1, 3, cg=True)

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

    _ldcg4 = _ldv4

    @cuda.jit(device=True)
    def _ldcg1(a, i0, i1, i2):
        return (np.float32(a[i0, i1, i2]).view(np.uint32),)

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


@devfn
def _gated(o, L, use_gate, gt):
    """The merged value of one output element: the weighted sum ``o`` over the softmax total ``L``, times
    sigmoid(gt) when ``use_gate`` (the split forms keep exp's argument <= 0). The one expression both merges use."""
    o = o / L
    if use_gate != 0:
        if gt >= float32(0.0):
            o = o / (float32(1.0) + float32(math.exp(-gt)))
        else:
            e = float32(math.exp(gt))
            o = o * e / (float32(1.0) + e)
    return o


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
FUSE = False  # the merge fused in: the last split of a (row, kv head) to finish merges them (see attn_partials)
ld = None
dec = None


def attn_partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale,
                  m_out, l_out, acc_out, qg, use_gate, out, ctr):
    """Split partials (module docstring). FUSE variants also merge: each block that writes a split's partials
    counts its arrival in ``ctr[r, kv head]`` (int32 [>= rows, nKV], all zero between launches); the block that
    brings the count to the row's split count resets it and merges the G heads' splits into ``out`` as
    ``attn_merge`` does, with the same operations in the same order (the same bits); rows of a stream slot that
    see no key get zeros, as there. Plain variants ignore ``qg``, ``use_gate``, ``out`` and ``ctr``."""
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
    s_flag = cuda.shared.array(1, int32)  # FUSE: the arrival count this block saw
    ws = cuda.shared.array((G, NSMAX), float32)  # FUSE: a split's weight exp(m_c - M), per head
    wrg = cuda.shared.array((G, NWARP), float32)  # FUSE: per-warp max / sum, per head
    mcs = cuda.local.array(G, float32)
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
    if FUSE:  # rows of a slot that see no key have no split to merge: their output is zero (attn_merge's rule)
        for rz in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            if s_slot[rz] >= 0 and s_n[rz] <= 0:
                for e in range(tid, out.shape[1] * hd, NT):
                    out[rz, e // hd, e % hd] = float32(0.0)
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
        if FUSE:
            cuda.threadfence()  # this thread's partials reach L2 before the arrival below is counted
        cuda.syncthreads()
        if FUSE:
            if tid == 0:
                s_flag[0] = cuda.atomic.add(ctr, (r, kvh), 1)
            cuda.syncthreads()
            if s_flag[0] == ns - 1:  # block-uniform: the last split of (r, kvh) to arrive merges the row's heads
                if tid == 0:
                    ctr[r, kvh] = 0
                cuda.threadfence()  # acquire side: the other splits' partials are read after their arrivals
                # attn_merge's steps for each head: thread tid holds split tid (its warp / lane as there); the
                # partials are read from L2 (.cg), other blocks wrote them
                for g in range(G):
                    mc = float32(-math.inf)
                    if tid < ns:
                        mc = np.uint32(_ldcg1(m_out, r, kvh * G + g, tid)[0]).view(np.float32)
                    mcs[g] = mc
                    x = warp_max(mc)
                    if lane == 0:
                        wrg[g, warp] = x
                cuda.syncthreads()
                for g in range(G):
                    M = wrg[g, 0]
                    for ww in range(1, NWARP):
                        M = max(M, wrg[g, ww])
                    lc = float32(0.0)
                    wt = float32(0.0)
                    if tid < ns:
                        lc = np.uint32(_ldcg1(l_out, r, kvh * G + g, tid)[0]).view(np.float32)
                        wt = float32(math.exp(mcs[g] - M))
                    ws[g, tid] = wt
                    mcs[g] = warp_sum(wt * lc)
                cuda.syncthreads()
                if lane == 0:
                    for g in range(G):
                        wrg[g, warp] = mcs[g]
                cuda.syncthreads()
                nq = hd // 4
                for e in range(tid, G * nq, NT):
                    g = e // nq
                    d = (e - g * nq) * 4
                    h = kvh * G + g
                    L = wrg[g, 0]
                    for ww in range(1, NWARP):
                        L += wrg[g, ww]
                    o0 = float32(0.0)
                    o1 = float32(0.0)
                    o2 = float32(0.0)
                    o3 = float32(0.0)
                    for grp in range(MGRP):  # attn_merge's split groups, in its order (groups past ns add 0)
                        if grp < ns:
                            x0 = float32(0.0)
                            x1 = float32(0.0)
                            x2 = float32(0.0)
                            x3 = float32(0.0)
                            for k in range(MK):
                                c2 = grp + MGRP * k
                                if c2 < ns:
                                    a4 = _ldcg4(acc_out, r, h, c2, d)
                                    wc = ws[g, c2]
                                    x0 = cuda.fma(wc, np.uint32(a4[0]).view(np.float32), x0)
                                    x1 = cuda.fma(wc, np.uint32(a4[1]).view(np.float32), x1)
                                    x2 = cuda.fma(wc, np.uint32(a4[2]).view(np.float32), x2)
                                    x3 = cuda.fma(wc, np.uint32(a4[3]).view(np.float32), x3)
                            o0 += x0
                            o1 += x1
                            o2 += x2
                            o3 += x3
                    out[r, h, d] = _gated(o0, L, use_gate, qg[r, h, hd + d])
                    out[r, h, d + 1] = _gated(o1, L, use_gate, qg[r, h, hd + d + 1])
                    out[r, h, d + 2] = _gated(o2, L, use_gate, qg[r, h, hd + d + 2])
                    out[r, h, d + 3] = _gated(o3, L, use_gate, qg[r, h, hd + d + 3])
                cuda.syncthreads()


def _make_partials(fmt, g, fuse=False):
    ld_, dec_, nw, _, quant = _FMT[fmt]
    kb = _kb(fmt, g)
    nstep = kb.bit_length() - 1
    consts = dict(G=g, KB=kb, LPK=32 // kb, NSTEP=nstep, NREST=5 - nstep, KBH=max(1, kb // 2), GL=g * LPV,
                  KPI=NWARP * kb, NW=nw, GKB=g * kb, KBNW=kb * nw, QUANT=quant, FUSE=fuse, ld=ld_, dec=dec_)
    return _kcache.variant(attn_partials, f"attn_{'fused' if fuse else 'partials'}_{fmt}_g{g}", **consts)


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
        out[r, h, dbase + tid] = _gated(o, L, use_gate, gt)


# ----------------------------------------------------------------------------------------------------------------
# signatures, compile specs, launchers
# ----------------------------------------------------------------------------------------------------------------

_DT = {"f32": "float32", "bf16": "uint16", "e4m3": "uint8"}
_NPDT = {np.dtype(np.float32): "f32", np.dtype(np.uint16): "bf16", np.dtype(np.uint8): "e4m3"}


def _sig_partials(t):
    c = f"{t}[:, :, :, ::1]"
    return (f"void(float32[:, :, ::1], {c}, {c}, float32[:, :, ::1], float32[:, :, ::1], int32[::1], int32[::1], "
            f"int32[::1], int32[::1], float32, float32[:, :, ::1], float32[:, :, ::1], float32[:, :, :, ::1], "
            f"float32[:, :, ::1], int32, float32[:, :, ::1], int32[:, ::1])")


SIG_MERGE = ("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, :, ::1], int32[::1], int32[::1], "
             "int32[::1], float32[:, :, ::1], int32, float32[:, :, ::1])")

_PY: dict = {}


def _partials_py(fmt, G, fuse=False):
    key = (fmt, G, fuse)
    if key not in _PY:
        _PY[key] = _make_partials(fmt, G, fuse)
    return _PY[key]


# the shipped models: G = 4 (2B, 9B) and 6 (27B); G = 2 for the small test shapes
COMPILE_SPECS = [(_partials_py(f, g, fu), _sig_partials(_DT[f])) for f in ("bf16", "e4m3") for g in (2, 4, 6)
                 for fu in (False, True)]
COMPILE_SPECS += [(_partials_py("f32", 2, fu), _sig_partials("float32")) for fu in (False, True)]
COMPILE_SPECS += [(attn_merge, SIG_MERGE)]
HOT = {f"attn_{k}_{f}_g{g}" for k in ("partials", "fused") for f in ("bf16", "e4m3") for g in (4, 6)}
HOT |= {"attn_merge"}

_KP: dict = {}
k_merge = _kcache.kjit(attn_merge)
_NBLK: list = []
_DUMMY: list = []


def _kernel(fmt, G, fuse=False):
    key = (fmt, G, fuse)
    if key not in _KP:
        _KP[key] = _kcache.kjit(_partials_py(fmt, G, fuse))
    return _KP[key]


def fused_on() -> bool:
    """Whether :func:`launch` fuses the merge into the partials launch (``TENSORFOLD_ATTN_FUSED=1``; off by default
    until the H200 says it is faster). Read at each launch; either way a row gets the same bits."""
    v = os.environ.get("TENSORFOLD_ATTN_FUSED", "0").strip() or "0"
    if v not in ("0", "1"):
        raise ValueError(f"TENSORFOLD_ATTN_FUSED={v!r}: expected 0 or 1")
    return v == "1"


def new_counters(nKV: int):
    """Arrival counters of the fused launch: int32 [MAXR, nKV], zero (each launch leaves them zero)."""
    z = np.zeros((MAXR, nKV), np.int32)
    return z if IS_SIM else cuda.to_device(z)


def _dummies():
    """Placeholders for the merge arguments a plain partials launch ignores."""
    if not _DUMMY:
        a, c = np.zeros((1, 1, 8), np.float32), np.zeros((1, 1), np.int32)
        _DUMMY.extend((a, c) if IS_SIM else (cuda.to_device(a), cuda.to_device(c)))
    return _DUMMY[0], _DUMMY[1]


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
                    nz=None, stream=0, merge=None):
    """nz: the most splits any row of this launch has (default NC = m.shape[2]); it only bounds the grid, every
    row's splits are done whatever its value. ``merge`` = (qg, use_gate, out, ctr): the fused kernel, which also
    does :func:`launch_merge`'s work (``ctr`` from :func:`new_counters`)."""
    R, nH, hd = q.shape
    nKV = k_cache.shape[2]
    G = nH // nKV
    assert G * nKV == nH and G <= MAXG and hd <= MAXHD and hd % LPV == 0
    cap = max(1, min(nz or m.shape[2], NSMAX))
    kern = _kernel(_NPDT[np.dtype(k_cache.dtype)], G, merge is not None)
    sc = np.float32(scale)
    if merge is None:
        f, c = _dummies()
        qg, ug, out, ctr = f, 0, f, c
    else:
        qg, ug, out, ctr = merge
        if ctr.shape[0] < min(R, MAXR) or ctr.shape[1] < nKV or out.shape != q.shape:
            raise ValueError(f"attention: the fused merge needs ctr [>= {min(R, MAXR)}, >= {nKV}] (got "
                             f"{tuple(ctr.shape)}) and out shaped like q {tuple(q.shape)} (got {tuple(out.shape)})")
    for r0 in range(0, R, MAXR):
        r1 = min(R, r0 + MAXR)
        part = r0 > 0 or r1 < R  # a piece of the rows: views (none for the usual single launch)
        rows = [a[r0:r1] if part else a for a in (q, row_slot, nk, tmask, tbase, m, l, acc)]
        qgr, outr = (qg[r0:r1], out[r0:r1]) if part and merge is not None else (qg, out)
        nb = max(1, min((r1 - r0) * nKV * cap, _nblk()))
        kern[nb, NT, stream](rows[0], k_cache, v_cache, k_scale, v_scale, rows[1], rows[2], rows[3], rows[4], sc,
                             rows[5], rows[6], rows[7], qgr, np.int32(ug), outr, ctr)


def launch_merge(m, l, acc, row_slot, nk, tmask, qg, use_gate, out, *, stream=0):
    R, nH, hd = out.shape
    k_merge[(R, nH, (hd + MQ - 1) // MQ), NTM, stream](m, l, acc, row_slot, nk, tmask, qg, np.int32(use_gate), out)


def launch(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale, m, l, acc, qg, use_gate, out,
           ctr, *, nz=None, stream=0, fused=None):
    """Attention of R rows into ``out``: the partials and the merge, as two launches or (``fused``, default
    :func:`fused_on`) as one; the same bits either way."""
    if fused if fused is not None else fused_on():
        launch_partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale, m, l, acc, nz=nz,
                        stream=stream, merge=(qg, use_gate, out, ctr))
        return
    launch_partials(q, k_cache, v_cache, k_scale, v_scale, row_slot, nk, tmask, tbase, scale, m, l, acc, nz=nz,
                    stream=stream)
    launch_merge(m, l, acc, row_slot, nk, tmask, qg, use_gate, out, stream=stream)


def partial_buffers(R, nH, hd, ctx):
    NC = max_chunks(ctx)
    return (cuda.device_array((R, nH, NC), np.float32), cuda.device_array((R, nH, NC), np.float32),
            cuda.device_array((R, nH, NC, hd), np.float32))
