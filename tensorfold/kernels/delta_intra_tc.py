"""The chunked delta rule's intra-chunk pass on tensor cores (the default on a GPU; ``TENSORFOLD_CHUNK_INTRA_TC``).

Same contract as ``delta_rule.gdn_chunk_intra`` (per chunk of CH = 64 rows and value head: c = the inclusive
cumsum of g, P = (Q̂K̂ᵀ)⊙Γ for j <= i, and the WY factors U = (I + A)⁻¹ (β⊙V), W = (I + A)⁻¹ (β⊙e^c⊙K̂) with
A = β⊙(K̂K̂ᵀ)⊙Γ strictly below the diagonal), with the products on mma m16n8k16 over bf16 hi + lo splits
(``delta_chunk_tc``'s ``_mma3``: hi·hi + hi·lo + lo·hi, fp32 accumulation) and the same k permutation (logical
(t, t + 8) and (t + 4, t + 12) in a lane's register pairs).

- c: the same serial fp32 cumsum as the CUDA-core pass (the same bits of c, P's decays and the inter pass's).
- Gram products: warp w owns chunk rows 16w .. 16w + 15 and forms K̂K̂ᵀ and Q̂K̂ᵀ for them over the 8-column tiles
  j <= i (its A operand: its rows of K̂ and Q̂; its B operand: K̂ᵀ, read straight from global memory; the pass is
  parallel over chunks and heads, so other blocks hide the latency). A goes to shared memory, P to global.
- The solve by 16-row blocks: the diagonal blocks' inverses T_bb = (I + A_bb)⁻¹ by forward substitution (one
  column a thread, 64 threads), then, block row by block row, X_b = T_bb (R_b - Σ_{j<b} A_bj X_j), both as mma
  products. A warp owns 16 of the right-hand columns [β v | β e^c k̂] of a pass (64 columns), so a block row needs
  no other warp's results; R_b - Σ A X is transposed into B fragments through shared memory.

Other bits than the CUDA-core pass (another summation order, the inverse-then-multiply form of the solve); both
within the tests' tolerance of a float64 recurrence. Needs Dk a multiple of 16, at most 128. Measured on the H200
(session 25, 8,192 tokens of one layer, with the tensor-core inter pass): 2B 3,875 -> 2,776, 9B 5,556 -> 3,553,
27B 7,553 -> 4,665 µs against the CUDA-core intra pass.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from ._device import IS_SIM, env_choice, pdl_begin
from ._mma import split_bf16x2
from .delta_chunk_tc import _acc_mma3, _bpacked, _split4
from . import _kcache

CH = 64
NTB = 128
NTC = CH // 16  # 16-row blocks of a chunk
NJT = CH // 8  # 8-column tiles of a chunk
CW = 64  # right-hand columns a pass (16 a warp: two 8-column n-tiles)
XST = CW + 8  # packed row stride (words): B-fragment loads (rows t / t + 4, columns g) in 32 banks
AST = CH + 1
_KOFF = (0, 8, 4, 12)
DKC = 128  # template global, overridden per variant (_kcache.variant)


def gdn_chunk_intra_tc(qn, kn, qkv, g, beta, seg_row0, seg_len, cum, P, U, Wm):
    """Template (variants fix DKC); arguments and results as ``delta_rule.gdn_chunk_intra``."""
    pdl_begin()
    c = cuda.blockIdx.x
    hv = cuda.blockIdx.y
    seg = cuda.blockIdx.z
    tid = cuda.threadIdx.x
    w = tid // 32
    lane = tid % 32
    gq = lane >> 2
    t = lane & 3
    NKT = DKC // 16
    As = cuda.shared.array((CH, AST), float32)
    Ts = cuda.shared.array((NTC, 16, 17), float32)
    cs = cuda.shared.array(CH, float32)
    Xph = cuda.shared.array((NTC, 8, XST), np.uint32)
    Xpl = cuda.shared.array((NTC, 8, XST), np.uint32)
    Rph = cuda.shared.array((8, XST), np.uint32)
    Rpl = cuda.shared.array((8, XST), np.uint32)
    accK = cuda.local.array((NJT, 4), float32)
    accP = cuda.local.array((NJT, 4), float32)
    xb = cuda.local.array((NJT, 4), float32)
    xa = cuda.local.array(16, float32)
    acc = cuda.local.array((2, 4), float32)
    a = cuda.local.array(8, float32)
    n_all = seg_len[seg]
    r0 = seg_row0[seg] + c * CH
    n = min(CH, n_all - c * CH)
    if n <= 0:
        return
    Hv = g.shape[1]
    Hk = qn.shape[1]
    Dv = U.shape[2]
    kh = hv // (Hv // Hk)
    voff = 2 * Hk * DKC + hv * Dv
    # c: the chunk's g, summed in order by one thread (as gdn_chunk_intra)
    if tid < n:
        cs[tid] = g[r0 + tid, hv]
    cuda.syncthreads()
    if tid == 0:
        s = float32(0.0)
        for i in range(n):
            s += cs[i]
            cs[i] = s
            cum[r0 + i, hv] = s
    for j in range(NJT):
        for e in range(4):
            accK[j, e] = float32(0.0)
            accP[j, e] = float32(0.0)
    i_a = 16 * w + gq
    i_b = i_a + 8
    oka = i_a < n
    okb = i_b < n
    ra = r0 + min(i_a, n - 1)
    rb = r0 + min(i_b, n - 1)
    za = float32(1.0) if oka else float32(0.0)
    zb = float32(1.0) if okb else float32(0.0)
    # K̂K̂ᵀ and Q̂K̂ᵀ for this warp's rows, over the column tiles j <= i
    for kt in range(NKT):
        k0 = 16 * kt + t
        for e in range(4):
            xa[e] = kn[ra, kh, k0 + _KOFF[e]] * za
            xa[4 + e] = kn[rb, kh, k0 + _KOFF[e]] * zb
            xa[8 + e] = qn[ra, kh, k0 + _KOFF[e]] * za
            xa[12 + e] = qn[rb, kh, k0 + _KOFF[e]] * zb
        for jt in range(NJT):
            j = 8 * jt + gq
            zj = float32(1.0) if j < n else float32(0.0)
            jr = r0 + min(j, n - 1)
            for e in range(4):
                xb[jt, e] = kn[jr, kh, k0 + _KOFF[e]] * zj
        kh0, kh1, kh2, kh3, kl0, kl1, kl2, kl3 = _split4(xa[0], xa[1], xa[4], xa[5], xa[2], xa[3], xa[6], xa[7])
        qh0, qh1, qh2, qh3, ql0, ql1, ql2, ql3 = _split4(xa[8], xa[9], xa[12], xa[13], xa[10], xa[11], xa[14],
                                                         xa[15])
        for jt in range(NJT):
            if IS_SIM or jt <= 2 * w + 1:
                bh0, bl0 = split_bf16x2(xb[jt, 0], xb[jt, 1])
                bh1, bl1 = split_bf16x2(xb[jt, 2], xb[jt, 3])
                _acc_mma3(accK, jt, kh0, kh1, kh2, kh3, kl0, kl1, kl2, kl3, bh0, bh1, bl0, bl1)
                _acc_mma3(accP, jt, qh0, qh1, qh2, qh3, ql0, ql1, ql2, ql3, bh0, bh1, bl0, bl1)
    cuda.syncthreads()  # c complete
    # decays: A (strictly lower) to shared memory, P (j <= i) to global memory
    ba = beta[ra, hv]
    bb_ = beta[rb, hv]
    for jt in range(NJT):
        for cc in range(2):
            j = 8 * jt + 2 * t + cc
            for h in range(2):
                i = i_a + 8 * h
                ok = (i_a < n) if h == 0 else (i_b < n)
                bi = ba if h == 0 else bb_
                kv = accK[jt, 2 * h + cc]
                pv = accP[jt, 2 * h + cc]
                av = float32(0.0)
                if ok and j <= i:
                    gam = float32(math.exp(cs[i] - cs[j]))
                    if j < i:
                        av = bi * kv * gam
                    P[r0 + i, hv, j] = pv * gam
                As[i, j] = av
    cuda.syncthreads()
    # T_bb = (I + A_bb)^-1, one column a thread
    if tid < 16 * NTC:
        bd = tid // 16
        col = tid % 16
        for i in range(16):
            x = float32(1.0) if i == col else float32(0.0)
            for j in range(col, i):
                x -= As[16 * bd + i, 16 * bd + j] * Ts[bd, j, col]
            Ts[bd, i, col] = x
    cuda.syncthreads()
    ncol = Dv + DKC
    for p0 in range(0, ncol, CW):
        cl0 = 16 * w  # this warp's columns within the pass
        for bb in range(NTC):
            ia = 16 * bb + gq
            ib = ia + 8
            # R_b at the accumulator positions: [β v | β e^c k̂] of rows ia / ib
            for nt in range(2):
                for cc in range(2):
                    col = p0 + cl0 + 8 * nt + 2 * t + cc
                    for h in range(2):
                        i = ia + 8 * h
                        ir = r0 + min(i, n - 1)
                        if col < Dv:
                            x = beta[ir, hv] * qkv[ir, voff + col]
                        else:
                            x = beta[ir, hv] * float32(math.exp(cs[min(i, n - 1)])) * kn[ir, kh, min(col - Dv, DKC - 1)]
                        if i >= n or col >= ncol:
                            x = float32(0.0)
                        acc[nt, 2 * h + cc] = x
            # R_b - sum_{j < b} A_bj X_j
            for jb in range(bb):
                for e in range(4):
                    a[e] = -As[ia, 16 * jb + t + _KOFF[e]]
                    a[4 + e] = -As[ib, 16 * jb + t + _KOFF[e]]
                ah0, ah1, ah2, ah3, al0, al1, al2, al3 = _split4(a[0], a[1], a[4], a[5], a[2], a[3], a[6], a[7])
                for nt in range(2):
                    bh0, bh1, bl0, bl1 = _bpacked(Xph, Xpl, jb, cl0 + 8 * nt + gq, t)
                    _acc_mma3(acc, nt, ah0, ah1, ah2, ah3, al0, al1, al2, al3, bh0, bh1, bl0, bl1)
            for nt in range(2):
                for cc in range(2):
                    hi, lo = split_bf16x2(acc[nt, cc], acc[nt, 2 + cc])
                    Rph[gq, cl0 + 8 * nt + 2 * t + cc] = hi
                    Rpl[gq, cl0 + 8 * nt + 2 * t + cc] = lo
            cuda.syncthreads()  # R'_b transposed (each warp reads only its own columns)
            # X_b = T_bb R'_b
            th0, th1, th2, th3, tl0, tl1, tl2, tl3 = _split4(
                Ts[bb, gq, t], Ts[bb, gq, t + 8], Ts[bb, gq + 8, t], Ts[bb, gq + 8, t + 8],
                Ts[bb, gq, t + 4], Ts[bb, gq, t + 12], Ts[bb, gq + 8, t + 4], Ts[bb, gq + 8, t + 12])
            for nt in range(2):
                for e in range(4):
                    acc[nt, e] = float32(0.0)
                cb = cl0 + 8 * nt + gq
                _acc_mma3(acc, nt, th0, th1, th2, th3, tl0, tl1, tl2, tl3, Rph[t, cb], Rph[t + 4, cb],
                          Rpl[t, cb], Rpl[t + 4, cb])
            for nt in range(2):
                for cc in range(2):
                    cw = cl0 + 8 * nt + 2 * t + cc
                    col = p0 + cw
                    for h in range(2):
                        i = ia + 8 * h
                        x = acc[nt, 2 * h + cc]
                        if i < n and col < Dv:
                            U[r0 + i, hv, col] = x
                        elif i < n and col < ncol:
                            Wm[r0 + i, hv, col - Dv] = x
                    hi, lo = split_bf16x2(acc[nt, cc], acc[nt, 2 + cc])
                    Xph[bb, gq, cw] = hi
                    Xpl[bb, gq, cw] = lo
            cuda.syncthreads()  # X_b published; R' free for the next block row


DKS = (16, 32, 64, 128)


def _py(dk: int):
    return _kcache.variant(gdn_chunk_intra_tc, f"gdn_chunk_intra_tc_k{dk}", DKC=dk)


_K: dict = {}


# the default: on a GPU the tensor-core pass (1.4-1.6x the whole chunked layer, above); in the simulator the
# CUDA-core pass, where the simulated mma is slow (its own test: tests/kernels/test_sim_chunk_tc.py)
DEFAULT = "0" if IS_SIM else "1"


def on() -> bool:
    """``TENSORFOLD_CHUNK_INTRA_TC`` (read at each launch: "0" or "1"), else DEFAULT."""
    return env_choice("TENSORFOLD_CHUNK_INTRA_TC", DEFAULT, ("0", "1"), "chunked intra pass") == "1"


def ok(Dk: int) -> bool:
    return Dk in DKS


def launch(qn, kn, qkv, g, beta, seg_row0, seg_len, cum, P, U, Wm, *, nch, stream=0):
    """One launch, grid (nch, Hv, nseg); arguments and results as ``delta_rule.gdn_chunk_intra``."""
    Dk = qn.shape[2]
    if Dk not in _K:
        if Dk not in DKS:
            raise ValueError(f"tensor-core intra pass: Dk {Dk} not in {DKS}")
        _K[Dk] = _kcache.kjit(_py(Dk))
    _K[Dk][(nch, g.shape[1], seg_len.shape[0]), NTB, stream](qn, kn, qkv, g, beta, seg_row0, seg_len, cum, P, U, Wm)


_F2 = "float32[:, ::1]"
_F3 = "float32[:, :, ::1]"
_I1 = "int32[::1]"
SIG = f"void({_F3}, {_F3}, {_F2}, {_F2}, {_F2}, {_I1}, {_I1}, {_F2}, {_F3}, {_F3}, {_F3})"
COMPILE_SPECS = [(_py(128), SIG)]
HOT: set = set()
