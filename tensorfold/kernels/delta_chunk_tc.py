"""The chunked delta rule's inter-chunk pass on tensor cores (``mma.sync`` m16n8k16, bf16 hi + lo splits).

Same contract as ``delta_rule``'s ``gdn_chunk_inter`` (its inputs are ``gdn_chunk_intra``'s outputs; see that
module's docstring): per segment, sequentially over its chunks of CH = 64 rows,

    V' = U - W S,   O = (e^c ⊙ Q̂) S + P V',   S <- e^{c_n} S + (e^{c_n - c} ⊙ K̂)ᵀ V'.

What differs is how the three products are formed: each is a sum of warp-wide mma's, every fp32 operand split into
a bf16 "high" part and a bf16 residual (``_mma.split_bf16x2``), and a product taken as hi·hi + hi·lo + lo·hi (the
lo·lo term, about 2^-16 of the product, is dropped): about fp32 accuracy (each operand to about 2^-17 relative)
from bf16 tensor cores. Sums run in another order than the CUDA-core kernel, so the bits differ from it (both sit
well within the tests' 1e-4 of a float64 recurrence); within this kernel a segment's results depend on nothing but
its own rows and state, whatever else the launch holds.

Geometry: grid (nseg, Hv, ceil(Dv / (8 NTN))), block 128 = 4 warps; a block owns 8 NTN value columns of one head.
- The state slice S (Dk x 8 NTN) lives in mma accumulators across the chunks: warp w owns the 16-row tiles
  w and w + 4 of Dk (Dk <= 128). After each update it is published to shared memory as packed bf16 pairs for the
  next chunk's products, where S is the B operand.
- K order inside an mma. A dot product does not care how k is permuted, as long as A and B use the same map. This
  kernel puts logical k = (t, t + 8) in the physical pair (2t, 2t + 1) and (t + 4, t + 12) in (2t + 8, 2t + 9)
  (lane g = lane >> 2, t = lane & 3). Then the pair a B fragment needs, rows (r, r + 8) of a 16-row tile, is the
  pair one lane holds in its accumulators (c0 / c2, c1 / c3): publishing S or V' is a lane-local pack and a store,
  with no shuffles. The packed arrays are ``[tile, r (0..7), column]``, the row stride padded so that a warp's
  B-fragment loads hit 32 distinct banks.
- Warp w computes chunk rows 16w .. 16w + 15 of V' and O (A operands W, Q̂, P read from global memory: L2
  resident, written by the intra pass just before), then the state tiles it owns (A operand K̂ᵀ scaled by
  e^{c_n - c}). Three barriers a chunk.

Dk must be a multiple of 16 (real models: 128), at most 128; columns past Dv and rows past a chunk's end are
zeros. In the simulator every warp calls every mma (the simulated mma is a block barrier); on the GPU warps skip the
P tiles above their diagonal and state tiles past Dk.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from ._device import IS_SIM, devfn, pdl_begin
from ._mma import mma_bf16, split_bf16x2
from . import _kcache

CH = 64  # chunk rows (delta_rule.CH)
NTB = 128  # threads a block (4 warps, one 16-row tile of the chunk each)
MAXDK = 128
NTC = CH // 16  # 16-row tiles of a chunk
SKT = MAXDK // 16  # 16-row tiles of the largest state
# template globals, overridden per variant (_kcache.variant): n-tiles of 8 value columns, Dk, packed row stride
NTN = 2
NSA = 4  # 2 NTN: a warp's state accumulator fragments (2 tiles of Dk x NTN n-tiles)
DKC = 128
VSP = 24
KB = 4  # k-tiles of W / Q̂ a load batch (min(4, DKC / 16))
_KOFF = (0, 8, 4, 12)  # logical k of a lane's fragment values, after t: (t, t + 8) and (t + 4, t + 12)


def _vsp(ntn: int) -> int:
    """Row stride (uint32 words) of the packed [tile, r, column] arrays: a B-fragment load reads rows t / t + 4
    and columns g (32 lanes), so a stride of 8 mod 32 (or 24) puts them in 32 distinct banks."""
    return {1: 8, 2: 24, 4: 40}[ntn]


@devfn
def _mma3(h0, h1, h2, h3, l0, l1, l2, l3, bh0, bh1, bl0, bl1, c0, c1, c2, c3):
    """c + A B with A = h + l and B = bh + bl split operands: lo·hi, hi·lo, then hi·hi (small terms first)."""
    c0, c1, c2, c3 = mma_bf16(l0, l1, l2, l3, bh0, bh1, c0, c1, c2, c3)
    c0, c1, c2, c3 = mma_bf16(h0, h1, h2, h3, bl0, bl1, c0, c1, c2, c3)
    return mma_bf16(h0, h1, h2, h3, bh0, bh1, c0, c1, c2, c3)


@devfn
def _acc_mma3(acc, r, h0, h1, h2, h3, l0, l1, l2, l3, bh0, bh1, bl0, bl1):
    """acc[r, 0:4] += A B (:func:`_mma3`), in place: acc is a local [rows, 4] array of accumulator fragments."""
    d0, d1, d2, d3 = _mma3(h0, h1, h2, h3, l0, l1, l2, l3, bh0, bh1, bl0, bl1, acc[r, 0], acc[r, 1], acc[r, 2],
                           acc[r, 3])
    acc[r, 0] = d0
    acc[r, 1] = d1
    acc[r, 2] = d2
    acc[r, 3] = d3


@devfn
def _bpacked(Xh, Xl, i, col, t):
    """The B fragment (hi b0, b1, lo b0, b1) of column ``col`` from packed arrays ``X[i, r, col]`` (r: the pair of
    rows r, r + 8 of a 16-row tile): logical k (t, t + 8) and (t + 4, t + 12)."""
    return Xh[i, t, col], Xh[i, t + 4, col], Xl[i, t, col], Xl[i, t + 4, col]


@devfn
def _split4(x00, x01, x10, x11, x02, x03, x12, x13):
    """A fragment (a0..a3 = rows g / g + 8 x logical k pairs (t, t + 8) / (t + 4, t + 12)) split into hi and lo."""
    h0, l0 = split_bf16x2(x00, x01)
    h1, l1 = split_bf16x2(x10, x11)
    h2, l2 = split_bf16x2(x02, x03)
    h3, l3 = split_bf16x2(x12, x13)
    return h0, h1, h2, h3, l0, l1, l2, l3


def gdn_chunk_inter_tc(qn, kn, cum, P, U, Wm, state, seg_row0, seg_len, seg_slot, o):
    """Template of the tensor-core inter pass (variants fix NTN, DKC, VSP); arguments as ``gdn_chunk_inter``."""
    pdl_begin()
    seg = cuda.blockIdx.x
    hv = cuda.blockIdx.y
    n0 = cuda.blockIdx.z * (8 * NTN)
    tid = cuda.threadIdx.x
    w = tid // 32
    lane = tid % 32
    g = lane >> 2
    t = lane & 3
    NKT = DKC // 16
    Sph = cuda.shared.array((SKT, 8, VSP), np.uint32)
    Spl = cuda.shared.array((SKT, 8, VSP), np.uint32)
    Vph = cuda.shared.array((NTC, 8, VSP), np.uint32)
    Vpl = cuda.shared.array((NTC, 8, VSP), np.uint32)
    ecs = cuda.shared.array(CH, float32)
    decs = cuda.shared.array(CH, float32)
    sacc = cuda.local.array((NSA, 4), float32)  # state tiles mi = 0, 1 x n-tiles
    vacc = cuda.local.array((NTN, 4), float32)
    qacc = cuda.local.array((NTN, 4), float32)
    xw = cuda.local.array((KB, 8), float32)  # a batch of W / Q̂ fragment values (rows g, g + 8 x 4 k offsets)
    xq = cuda.local.array((KB, 8), float32)
    xp = cuda.local.array((NTC, 8), float32)
    xk = cuda.local.array((NTC, 8), float32)
    n_all = seg_len[seg]
    slot = seg_slot[seg]
    if n_all <= 0 or slot < 0:
        return
    row00 = seg_row0[seg]
    Dv = state.shape[3]
    Hv = state.shape[1]
    Hk = qn.shape[1]
    kh = hv // (Hv // Hk)
    # the state tiles this warp owns, into accumulators, and published packed
    for mi in range(2):
        mt = w + 4 * mi
        if (IS_SIM and 4 * mi < NKT) or mt < NKT:
            ra = min(16 * mt + g, DKC - 1)
            rb8 = min(16 * mt + g + 8, DKC - 1)
            for nt in range(NTN):
                for cc in range(2):
                    col = n0 + 8 * nt + 2 * t + cc
                    ok = mt < NKT and col < Dv
                    cl = min(col, Dv - 1)
                    va = state[slot, hv, ra, cl]
                    vb = state[slot, hv, rb8, cl]
                    if not ok:
                        va = float32(0.0)
                        vb = float32(0.0)
                    sacc[mi * NTN + nt, cc] = va
                    sacc[mi * NTN + nt, 2 + cc] = vb
                    if mt < NKT:
                        hi, lo = split_bf16x2(va, vb)
                        Sph[mt, g, 8 * nt + 2 * t + cc] = hi
                        Spl[mt, g, 8 * nt + 2 * t + cc] = lo
    nch = (n_all + CH - 1) // CH
    i_a = 16 * w + g  # this lane's chunk rows (fragment rows g and g + 8 of the warp's tile)
    i_b = i_a + 8
    for c in range(nch):
        r0 = row00 + c * CH
        n = min(CH, n_all - c * CH)
        cn = cum[r0 + n - 1, hv]
        if tid < n:
            ci = cum[r0 + tid, hv]
            ecs[tid] = float32(math.exp(ci))
            decs[tid] = float32(math.exp(cn - ci))
        ecn = float32(math.exp(cn))
        cuda.syncthreads()  # (1) S published, e^c and decays ready
        oka = i_a < n
        okb = i_b < n
        ra = r0 + min(i_a, n - 1)
        rb = r0 + min(i_b, n - 1)
        for nt in range(NTN):
            for e in range(4):
                vacc[nt, e] = float32(0.0)
                qacc[nt, e] = float32(0.0)
        # V' = U - W S and Q̂ S over Dk, 16 at a time; a batch's loads (KB k-tiles of W and Q̂) are issued
        # together, then consumed: one memory round trip a batch instead of one a k-tile
        for hb in range(NKT // KB):
            for kk in range(KB):
                k0 = 16 * (hb * KB + kk)
                for e in range(4):
                    ke = k0 + t + _KOFF[e]
                    xw[kk, e] = Wm[ra, hv, ke]
                    xw[kk, 4 + e] = Wm[rb, hv, ke]
                    xq[kk, e] = qn[ra, kh, ke]
                    xq[kk, 4 + e] = qn[rb, kh, ke]
            for kk in range(KB):
                kt = hb * KB + kk
                za = float32(1.0) if oka else float32(0.0)
                zb = float32(1.0) if okb else float32(0.0)
                wh0, wh1, wh2, wh3, wl0, wl1, wl2, wl3 = _split4(
                    xw[kk, 0] * za, xw[kk, 1] * za, xw[kk, 4] * zb, xw[kk, 5] * zb,
                    xw[kk, 2] * za, xw[kk, 3] * za, xw[kk, 6] * zb, xw[kk, 7] * zb)
                qh0, qh1, qh2, qh3, ql0, ql1, ql2, ql3 = _split4(
                    xq[kk, 0] * za, xq[kk, 1] * za, xq[kk, 4] * zb, xq[kk, 5] * zb,
                    xq[kk, 2] * za, xq[kk, 3] * za, xq[kk, 6] * zb, xq[kk, 7] * zb)
                for nt in range(NTN):
                    bh0, bh1, bl0, bl1 = _bpacked(Sph, Spl, kt, 8 * nt + g, t)
                    _acc_mma3(vacc, nt, wh0, wh1, wh2, wh3, wl0, wl1, wl2, wl3, bh0, bh1, bl0, bl1)
                    _acc_mma3(qacc, nt, qh0, qh1, qh2, qh3, ql0, ql1, ql2, ql3, bh0, bh1, bl0, bl1)
        ea = ecs[min(i_a, n - 1)]
        eb = ecs[min(i_b, n - 1)]
        for nt in range(NTN):
            for cc in range(2):
                col = n0 + 8 * nt + 2 * t + cc
                cl = min(col, Dv - 1)
                ua = U[ra, hv, cl]
                ub = U[rb, hv, cl]
                va = ua - vacc[nt, cc]
                vb = ub - vacc[nt, 2 + cc]
                if not (oka and col < Dv):
                    va = float32(0.0)
                if not (okb and col < Dv):
                    vb = float32(0.0)
                hi, lo = split_bf16x2(va, vb)
                Vph[w, g, 8 * nt + 2 * t + cc] = hi
                Vpl[w, g, 8 * nt + 2 * t + cc] = lo
                qacc[nt, cc] = qacc[nt, cc] * ea
                qacc[nt, 2 + cc] = qacc[nt, 2 + cc] * eb
        cuda.syncthreads()  # (2) V' published
        # O = (e^c Q̂) S + P V' over the chunk's columns j <= i
        for jt in range(NTC):  # P's tiles of this warp's rows, all loads first (masked below)
            for e in range(4):
                xp[jt, e] = P[ra, hv, 16 * jt + t + _KOFF[e]]
                xp[jt, 4 + e] = P[rb, hv, 16 * jt + t + _KOFF[e]]
        for jt in range(NTC):
            if IS_SIM or jt <= w:
                j = 16 * jt + t
                p00 = xp[jt, 0]
                p01 = xp[jt, 1]
                p02 = xp[jt, 2]
                p03 = xp[jt, 3]
                p10 = xp[jt, 4]
                p11 = xp[jt, 5]
                p12 = xp[jt, 6]
                p13 = xp[jt, 7]
                if not (oka and j <= i_a):
                    p00 = float32(0.0)
                if not (oka and j + 8 <= i_a):
                    p01 = float32(0.0)
                if not (oka and j + 4 <= i_a):
                    p02 = float32(0.0)
                if not (oka and j + 12 <= i_a):
                    p03 = float32(0.0)
                if not (okb and j <= i_b):
                    p10 = float32(0.0)
                if not (okb and j + 8 <= i_b):
                    p11 = float32(0.0)
                if not (okb and j + 4 <= i_b):
                    p12 = float32(0.0)
                if not (okb and j + 12 <= i_b):
                    p13 = float32(0.0)
                ph0, ph1, ph2, ph3, pl0, pl1, pl2, pl3 = _split4(p00, p01, p10, p11, p02, p03, p12, p13)
                for nt in range(NTN):
                    bh0, bh1, bl0, bl1 = _bpacked(Vph, Vpl, jt, 8 * nt + g, t)
                    _acc_mma3(qacc, nt, ph0, ph1, ph2, ph3, pl0, pl1, pl2, pl3, bh0, bh1, bl0, bl1)
        for nt in range(NTN):
            for cc in range(2):
                col = n0 + 8 * nt + 2 * t + cc
                if col < Dv:
                    if oka:
                        o[r0 + i_a, hv, col] = qacc[nt, cc]
                    if okb:
                        o[r0 + i_b, hv, col] = qacc[nt, 2 + cc]
        # S <- e^{c_n} S + (e^{c_n - c} K̂)ᵀ V' on the state tiles this warp owns
        for mi in range(2):
            mt = w + 4 * mi
            if (IS_SIM and 4 * mi < NKT) or mt < NKT:  # simulator: block-uniform (mma is a barrier there)
                kr = min(16 * mt + g, DKC - 1)
                kr8 = min(16 * mt + g + 8, DKC - 1)
                for nt in range(NTN):
                    for e in range(4):
                        sacc[mi * NTN + nt, e] = sacc[mi * NTN + nt, e] * ecn
                for jt in range(NTC):  # K̂ at rows j (every j-tile) and this tile's columns k: loads first
                    for e in range(4):
                        jr = r0 + min(16 * jt + t + _KOFF[e], n - 1)
                        xk[jt, e] = kn[jr, kh, kr]
                        xk[jt, 4 + e] = kn[jr, kh, kr8]
                for jt in range(NTC):
                    j = 16 * jt + t
                    # A[k, j] = dec[j] K̂[r0 + j, k]: rows k (g, g + 8), columns j (t, t + 8, t + 4, t + 12)
                    s0 = decs[min(j, n - 1)] if j < n else float32(0.0)
                    s1 = decs[min(j + 8, n - 1)] if j + 8 < n else float32(0.0)
                    s2 = decs[min(j + 4, n - 1)] if j + 4 < n else float32(0.0)
                    s3 = decs[min(j + 12, n - 1)] if j + 12 < n else float32(0.0)
                    kh0, kh1, kh2, kh3, kl0, kl1, kl2, kl3 = _split4(
                        xk[jt, 0] * s0, xk[jt, 1] * s1, xk[jt, 4] * s0, xk[jt, 5] * s1,
                        xk[jt, 2] * s2, xk[jt, 3] * s3, xk[jt, 6] * s2, xk[jt, 7] * s3)
                    for nt in range(NTN):
                        bh0, bh1, bl0, bl1 = _bpacked(Vph, Vpl, jt, 8 * nt + g, t)
                        _acc_mma3(sacc, mi * NTN + nt, kh0, kh1, kh2, kh3, kl0, kl1, kl2, kl3, bh0, bh1, bl0, bl1)
        cuda.syncthreads()  # (3) every warp is done reading S's packed copy (products) and V' (P V', update)
        for mi in range(2):
            mt = w + 4 * mi
            if mt < NKT:
                for nt in range(NTN):
                    for cc in range(2):
                        hi, lo = split_bf16x2(sacc[mi * NTN + nt, cc], sacc[mi * NTN + nt, 2 + cc])
                        Sph[mt, g, 8 * nt + 2 * t + cc] = hi
                        Spl[mt, g, 8 * nt + 2 * t + cc] = lo
    for mi in range(2):
        mt = w + 4 * mi
        if mt < NKT:
            for nt in range(NTN):
                for cc in range(2):
                    col = n0 + 8 * nt + 2 * t + cc
                    if col < Dv:
                        state[slot, hv, 16 * mt + g, col] = sacc[mi * NTN + nt, cc]
                        state[slot, hv, 16 * mt + g + 8, col] = sacc[mi * NTN + nt, 2 + cc]


TC_WIDTHS = (8, 16)  # value columns a block (8 NTN)
TC_DKS = (16, 32, 64, 128)


def _py(width: int, dk: int):
    ntn = width // 8
    return _kcache.variant(gdn_chunk_inter_tc, f"gdn_chunk_inter_tc{width}_k{dk}", NTN=ntn, DKC=dk, VSP=_vsp(ntn),
                           KB=min(4, dk // 16), NSA=2 * ntn)


_K: dict = {}


def tc_ok(Dk: int) -> bool:
    """Shapes the tensor-core inter pass handles: Dk a multiple of 16, at most 128."""
    return Dk in TC_DKS


def kernel(width: int, dk: int):
    """The jitted inter pass with ``width`` value columns a block for key dimension ``dk`` (compiled once)."""
    key = (width, dk)
    if key not in _K:
        if width not in TC_WIDTHS or dk not in TC_DKS:
            raise ValueError(f"tensor-core inter pass: width {width} (of {TC_WIDTHS}), Dk {dk} (of {TC_DKS})")
        _K[key] = _kcache.kjit(_py(width, dk))
    return _K[key]


def launch(qn, kn, cum, P, U, Wm, state, seg_row0, seg_len, seg_slot, o, *, width=8, stream=0):
    """One launch over every segment; arguments and results as ``delta_rule.gdn_chunk_inter``."""
    Hv, Dk, Dv = state.shape[1], state.shape[2], state.shape[3]
    nseg = seg_len.shape[0]
    kernel(width, Dk)[(nseg, Hv, (Dv + width - 1) // width), NTB, stream](
        qn, kn, cum, P, U, Wm, state, seg_row0, seg_len, seg_slot, o)


_F2 = "float32[:, ::1]"
_F3 = "float32[:, :, ::1]"
_F4 = "float32[:, :, :, ::1]"
_I1 = "int32[::1]"
SIG = f"void({_F3}, {_F3}, {_F2}, {_F3}, {_F3}, {_F3}, {_F4}, {_I1}, {_I1}, {_I1}, {_F3})"
COMPILE_SPECS = [(_py(w, 128), SIG) for w in TC_WIDTHS]
HOT: set = set()
