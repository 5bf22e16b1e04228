"""Prompt attention on tensor cores (a flash-attention form) over a bf16 KV cache, with the sigmoid output gate.

The decode kernels (``attention``: split-K partials + merge) serve 1-16 query rows a stream; a prompt of 4,096 rows
ran them 16-64 rows a launch, each launch walking every key with CUDA-core dot products (session 25's profile of
a 2B prompt of 4,096 tokens: 38 % of the kernel time in ``attn_partials``). This kernel serves prompt rows (mode
"prompt": a row sees cache positions 0 .. nk - 1 of its slot, no tree bits) in one launch.

Contract: ``q`` f32 [R, nH, hd] (normed + roped), caches uint16 (bf16 bits) [slots, ctx, nKV, hd], ``row_slot``
/ ``nk`` int32 [R] (slot < 0: padding, nothing written), ``qg`` f32 [R, nH, 2 hd] (the gate is its second half),
``out`` f32 [R, nH, hd] = softmax(scale q kᵀ) v, times sigmoid(gate) when ``use_gate``. hd a multiple of 16, at
most 256; G = nH / nKV at most 8.

Geometry: grid (ceil(R / 16), nKV), block 32 G threads; warp w owns query head kvh G + w for the tile's 16 rows
(one m16 tile). Each warp first writes its q fragments (hi and lo, in lane order) to dynamic shared memory (16 KB
a warp at hd 256: 64 / 96 KB a block at G = 4 / 6, above the 48 KB default, so the launch raises the limit). Keys
go in blocks of KB = 32 through static shared memory (K row-major as bf16 pairs along hd; V packed as pairs of
consecutive keys along hd, so that a B fragment of P V is one 32-bit load; both padded so that a warp's fragment
loads hit 32 banks); a thread issues all its K loads of a key block together, then all its V loads. 255
registers, 8 (G = 4) / 40 (G = 6) bytes of spills on sm_90. Per key block:

- S = q kᵀ on mma m16n8k16: q (fp32) as a bf16 high part and residual (``split_bf16x2``; lo then hi into the same
  accumulators), k exact in bf16: about fp32 accuracy.
- online softmax in fp32 per row (a row's values sit in 4 lanes: max and sum by two xor shuffles, the same sum
  in each of the 4 lanes);
- O += P V with P split into hi + lo the same way (the S accumulators of two n-tiles are the A fragment of one
  k-step: no data movement).

Exactness: a row's result depends on nothing but its own q, its keys and the fixed key-block boundaries (multiples
of KB from position 0): an mma column / row of a product depends only on its own operands, the softmax state is
per row. A tile's rows may belong to several slots (packed prompts): the tile makes one pass per distinct slot (in
the order the slots first appear) and a row takes part only in its slot's pass; in the other passes, and in key
blocks past its own nk, every score is -inf, so m, l and O are left exactly as they were (alpha = exp(0) = 1,
p = 0). Keys at or past the pass's largest nk are zeros in shared memory (never stale cache memory). Other bits than
the split-K decode kernels (another summation order), within fp32 rounding of the reference.

Measured (H200, one causal prompt of 4,096 rows, `bench_kernels_b.py --only attn_prompt`): 2B 2,065, 9B 3,494,
27B 4,756 µs, 33-43 TFLOP/s (the split-K decode kernels 64 rows a launch: 10,417 / 20,371 / 30,842; torch's
scaled_dot_product_attention 165 / 261 / 357). Tried and dropped: q reloaded from global memory and split every
key block with one load round trip a 16-byte chunk (2,426 / 3,869 / 6,094 µs); S's lo products in their own
accumulators (2,129 / 3,561 / 5,095).

The simulator runs it block-uniformly (every warp calls every mma and shuffle: both are block barriers there).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, uint32

from ._device import IS_SIM, devfn, env_choice, pdl_begin
from ._mma import mma_bf16, split_bf16x2
from .attention import _ldv4, _shx
from .qgemv import _allow_dyn
from . import _kcache

QT = 16  # query rows a block (one m16 tile)
KB = 32  # keys a key block
NNT = KB // 8  # n-tiles of S
KB2 = KB // 2  # key pairs a key block
# template globals, overridden per variant (_kcache.variant): head dim, heads a kv head
HD = 256
G = 4
KST = HD // 2 + 4  # K row stride in 32-bit words: rows g, columns t of a fragment load in 32 banks
VST = HD + 8  # V pair-row stride in words: pair rows t, columns g in 32 banks
NDT = HD // 8  # n-tiles of O
NKS = HD // 16  # k-steps of S
NC8 = HD // 8  # 16-byte chunks of a key row
NKI = (KB * NC8 + 32 * G - 1) // (32 * G)  # K chunks a thread loads a key block
NVI = (KB2 * NC8 + 32 * G - 1) // (32 * G)  # V pair chunks a thread loads a key block
NKW = 4 * NKI  # their registers
NVW = 8 * NVI
_U32 = np.dtype(np.uint32) if IS_SIM else np.uint32  # the simulator's dynamic shared array wants a dtype
NINF = float32(-math.inf)
MINIT = float32(-1e30)


@devfn
def _acc_mma2(acc, r, h0, h1, h2, h3, l0, l1, l2, l3, b0, b1):
    """acc[r, 0:4] += (hi + lo) B for an A operand split into hi / lo fragments and an exact bf16 B: the lo
    product first, then the hi one, into the same accumulators (in place)."""
    c0, c1, c2, c3 = mma_bf16(l0, l1, l2, l3, b0, b1, acc[r, 0], acc[r, 1], acc[r, 2], acc[r, 3])
    c0, c1, c2, c3 = mma_bf16(h0, h1, h2, h3, b0, b1, c0, c1, c2, c3)
    acc[r, 0] = c0
    acc[r, 1] = c1
    acc[r, 2] = c2
    acc[r, 3] = c3


def attn_prompt_bf16(q, k_cache, v_cache, row_slot, nk, qg, scale, use_gate, out):
    pdl_begin()
    tile = cuda.blockIdx.x
    kvh = cuda.blockIdx.y
    tid = cuda.threadIdx.x
    w = tid // 32
    lane = tid % 32
    g = lane >> 2
    t = lane & 3
    R = q.shape[0]
    h = kvh * G + w
    Ks = cuda.shared.array((KB, KST), uint32)
    Vs = cuda.shared.array((KB2, VST), uint32)
    oacc = cuda.local.array((NDT, 4), float32)
    sacc = cuda.local.array((NNT, 4), float32)
    r0 = tile * QT
    ra = r0 + g
    rb = ra + 8
    rac = min(ra, R - 1)
    rbc = min(rb, R - 1)
    sa = row_slot[rac] if ra < R else -1
    sb = row_slot[rbc] if rb < R else -1
    na = nk[rac]
    nb = nk[rbc]
    m_a = MINIT
    m_b = MINIT
    l_a = float32(0.0)
    l_b = float32(0.0)
    for dt in range(NDT):
        for e in range(4):
            oacc[dt, e] = float32(0.0)
    # this warp's q fragments (hi, lo) once, in lane order: Qs[((w NKS + ks) 32 + lane) 8 + 0..7]
    Qs = cuda.shared.array(0, _U32)
    for ks in range(NKS):
        d0 = 16 * ks + 2 * t
        h0, l0 = split_bf16x2(q[rac, h, d0], q[rac, h, d0 + 1])
        h1, l1 = split_bf16x2(q[rbc, h, d0], q[rbc, h, d0 + 1])
        h2, l2 = split_bf16x2(q[rac, h, d0 + 8], q[rac, h, d0 + 9])
        h3, l3 = split_bf16x2(q[rbc, h, d0 + 8], q[rbc, h, d0 + 9])
        qb = ((w * NKS + ks) * 32 + lane) * 8
        Qs[qb] = h0
        Qs[qb + 1] = h1
        Qs[qb + 2] = h2
        Qs[qb + 3] = h3
        Qs[qb + 4] = l0
        Qs[qb + 5] = l1
        Qs[qb + 6] = l2
        Qs[qb + 7] = l3
    kw = cuda.local.array(NKW, uint32)
    vw = cuda.local.array(NVW, uint32)
    nrow = min(QT, R - r0)
    for i in range(nrow):  # one pass per distinct slot of the tile, in first-appearance order (block-uniform)
        s = row_slot[r0 + i]
        first = s >= 0
        for j in range(i):
            if row_slot[r0 + j] == s:
                first = False
        if not first:
            continue
        kmax = 0
        for j in range(nrow):
            if row_slot[r0 + j] == s:
                kmax = max(kmax, nk[r0 + j])
        ka = na if sa == s else 0
        kb = nb if sb == s else 0
        for k0 in range(0, kmax, KB):
            # every load of this thread's K chunks first (one round trip), then their shared stores; then the same
            # for V (two phases rather than one: fewer registers held)
            for it in range(NKI):
                e = tid + it * 32 * G
                kk = e // NC8
                key = k0 + kk
                w0 = uint32(0)
                w1 = uint32(0)
                w2 = uint32(0)
                w3 = uint32(0)
                if e < KB * NC8 and key < kmax:
                    w0, w1, w2, w3 = _ldv4(k_cache, s, key, kvh, 8 * (e - kk * NC8))
                kw[4 * it] = w0
                kw[4 * it + 1] = w1
                kw[4 * it + 2] = w2
                kw[4 * it + 3] = w3
            cuda.syncthreads()  # the previous key block's shared reads are done
            for it in range(NKI):
                e = tid + it * 32 * G
                if e < KB * NC8:
                    kk = e // NC8
                    c = e - kk * NC8
                    Ks[kk, 4 * c] = kw[4 * it]
                    Ks[kk, 4 * c + 1] = kw[4 * it + 1]
                    Ks[kk, 4 * c + 2] = kw[4 * it + 2]
                    Ks[kk, 4 * c + 3] = kw[4 * it + 3]
            for it in range(NVI):
                e = tid + it * 32 * G
                p = e // NC8
                key = k0 + 2 * p
                c = e - p * NC8
                x0 = uint32(0)
                x1 = uint32(0)
                x2 = uint32(0)
                x3 = uint32(0)
                y0 = uint32(0)
                y1 = uint32(0)
                y2 = uint32(0)
                y3 = uint32(0)
                if e < KB2 * NC8 and key < kmax:
                    x0, x1, x2, x3 = _ldv4(v_cache, s, key, kvh, 8 * c)
                if e < KB2 * NC8 and key + 1 < kmax:
                    y0, y1, y2, y3 = _ldv4(v_cache, s, key + 1, kvh, 8 * c)
                vw[8 * it] = x0
                vw[8 * it + 1] = x1
                vw[8 * it + 2] = x2
                vw[8 * it + 3] = x3
                vw[8 * it + 4] = y0
                vw[8 * it + 5] = y1
                vw[8 * it + 6] = y2
                vw[8 * it + 7] = y3
            for it in range(NVI):
                e = tid + it * 32 * G
                if e < KB2 * NC8:
                    p = e // NC8
                    c = e - p * NC8
                    # pair word for dim d: key's bf16 in the low half, key + 1's in the high half
                    for jj in range(4):
                        xv = vw[8 * it + jj]
                        yv = vw[8 * it + 4 + jj]
                        Vs[p, 8 * c + 2 * jj] = (xv & uint32(0xFFFF)) | (yv << uint32(16))
                        Vs[p, 8 * c + 2 * jj + 1] = (xv >> uint32(16)) | (yv & uint32(0xFFFF0000))
            cuda.syncthreads()
            # S = q kᵀ (lo products first, then hi, into the same accumulators)
            for nt in range(NNT):
                for e in range(4):
                    sacc[nt, e] = float32(0.0)
            for ks in range(NKS):
                qb = ((w * NKS + ks) * 32 + lane) * 8
                h0 = Qs[qb]
                h1 = Qs[qb + 1]
                h2 = Qs[qb + 2]
                h3 = Qs[qb + 3]
                l0 = Qs[qb + 4]
                l1 = Qs[qb + 5]
                l2 = Qs[qb + 6]
                l3 = Qs[qb + 7]
                for nt in range(NNT):
                    _acc_mma2(sacc, nt, h0, h1, h2, h3, l0, l1, l2, l3, Ks[8 * nt + g, 8 * ks + t],
                              Ks[8 * nt + g, 8 * ks + 4 + t])
            # online softmax: rows g (entries 0, 1) and g + 8 (entries 2, 3) of each n-tile
            mx_a = NINF
            mx_b = NINF
            for nt in range(NNT):
                for cc in range(2):
                    key = k0 + 8 * nt + 2 * t + cc
                    va = sacc[nt, cc] * scale if key < ka else NINF
                    vb = sacc[nt, 2 + cc] * scale if key < kb else NINF
                    sacc[nt, cc] = va
                    sacc[nt, 2 + cc] = vb
                    mx_a = max(mx_a, va)
                    mx_b = max(mx_b, vb)
            mx_a = max(mx_a, _shx(mx_a, 1))
            mx_a = max(mx_a, _shx(mx_a, 2))
            mx_b = max(mx_b, _shx(mx_b, 1))
            mx_b = max(mx_b, _shx(mx_b, 2))
            mn_a = max(m_a, mx_a)
            mn_b = max(m_b, mx_b)
            al_a = float32(math.exp(m_a - mn_a))
            al_b = float32(math.exp(m_b - mn_b))
            su_a = float32(0.0)
            su_b = float32(0.0)
            for nt in range(NNT):
                for cc in range(2):
                    pa = float32(math.exp(sacc[nt, cc] - mn_a))
                    pb = float32(math.exp(sacc[nt, 2 + cc] - mn_b))
                    sacc[nt, cc] = pa
                    sacc[nt, 2 + cc] = pb
                    su_a += pa
                    su_b += pb
            su_a += _shx(su_a, 1)
            su_a += _shx(su_a, 2)
            su_b += _shx(su_b, 1)
            su_b += _shx(su_b, 2)
            l_a = l_a * al_a + su_a
            l_b = l_b * al_b + su_b
            m_a = mn_a
            m_b = mn_b
            for dt in range(NDT):
                oacc[dt, 0] *= al_a
                oacc[dt, 1] *= al_a
                oacc[dt, 2] *= al_b
                oacc[dt, 3] *= al_b
            # O += P V: n-tiles 2 kk and 2 kk + 1 of S are the A fragment of k-step kk
            for kk in range(KB // 16):
                h0, l0 = split_bf16x2(sacc[2 * kk, 0], sacc[2 * kk, 1])
                h1, l1 = split_bf16x2(sacc[2 * kk, 2], sacc[2 * kk, 3])
                h2, l2 = split_bf16x2(sacc[2 * kk + 1, 0], sacc[2 * kk + 1, 1])
                h3, l3 = split_bf16x2(sacc[2 * kk + 1, 2], sacc[2 * kk + 1, 3])
                for dt in range(NDT):
                    _acc_mma2(oacc, dt, h0, h1, h2, h3, l0, l1, l2, l3, Vs[8 * kk + t, 8 * dt + g],
                              Vs[8 * kk + 4 + t, 8 * dt + g])
    for half in range(2):
        r = ra if half == 0 else rb
        sl = sa if half == 0 else sb
        lv = l_a if half == 0 else l_b
        if r < R and sl >= 0:
            for dt in range(NDT):
                for cc in range(2):
                    d = 8 * dt + 2 * t + cc
                    o = oacc[dt, 2 * half + cc] / lv
                    if use_gate != 0:
                        gt = qg[r, h, HD + d]
                        if gt >= float32(0.0):
                            o = o / (float32(1.0) + float32(math.exp(-gt)))
                        else:
                            ex = float32(math.exp(gt))
                            o = o * ex / (float32(1.0) + ex)
                    out[r, h, d] = o


def _py(hd: int, grp: int):
    nc8 = hd // 8
    nki = (KB * nc8 + 32 * grp - 1) // (32 * grp)
    nvi = (KB2 * nc8 + 32 * grp - 1) // (32 * grp)
    return _kcache.variant(attn_prompt_bf16, f"attn_prompt_bf16_d{hd}_g{grp}", HD=hd, G=grp, KST=hd // 2 + 4,
                           VST=hd + 8, NDT=hd // 8, NKS=hd // 16, NC8=nc8,
                           NKI=nki, NVI=nvi, NKW=4 * nki, NVW=8 * nvi)


def q_bytes(hd: int, grp: int) -> int:
    """Dynamic shared bytes of a block: its warps' q fragments (hi and lo, 16 KB a warp at hd 256)."""
    return grp * (hd // 16) * 32 * 8 * 4


_K: dict = {}

# the default: on a GPU prompts take this kernel (bf16 caches); in the simulator the split-K kernels (its own
# simulator test: tests/kernels/test_sim_attention_prompt.py)
DEFAULT = "0" if IS_SIM else "1"


def on() -> bool:
    """``TENSORFOLD_ATTN_PROMPT`` (read at each launch: "0" or "1"), else DEFAULT."""
    return env_choice("TENSORFOLD_ATTN_PROMPT", DEFAULT, ("0", "1"), "prompt attention") == "1"


def ok(k_cache, nH: int, nKV: int, hd: int) -> bool:
    """Shapes and formats this kernel handles: bf16 caches, hd a multiple of 16 up to 256, G = nH / nKV <= 8."""
    return (np.dtype(k_cache.dtype) == np.uint16 and hd % 16 == 0 and 16 <= hd <= 256 and nH % nKV == 0
            and nH // nKV <= 8)


def launch(q, k_cache, v_cache, row_slot, nk, qg, scale, use_gate, out, *, stream=0):
    """One launch over every row of ``q`` (grid (ceil(R / 16), nKV), block 32 G)."""
    R, nH, hd = q.shape
    nKV = k_cache.shape[2]
    grp = nH // nKV
    key = (hd, grp)
    if key not in _K:
        if not ok(k_cache, nH, nKV, hd):
            raise ValueError(f"prompt attention: hd {hd}, {nH} heads over {nKV} kv heads, cache {k_cache.dtype}")
        _K[key] = _kcache.kjit(_py(hd, grp))
    if R == 0:
        return
    dyn = q_bytes(hd, grp)
    cfg = _K[key][((R + QT - 1) // QT, nKV), 32 * grp, stream, dyn]
    if not IS_SIM and dyn > 48 * 1024:
        cfg.pre_launch_callbacks.append(_allow_dyn(dyn))  # above 48 KB a launch fails without it
    cfg(q, k_cache, v_cache, row_slot, nk, qg, float32(scale), int(use_gate), out)


_F3 = "float32[:, :, ::1]"
_U4 = "uint16[:, :, :, ::1]"
_I1 = "int32[::1]"
SIG = f"void({_F3}, {_U4}, {_U4}, {_I1}, {_I1}, {_F3}, float32, int32, {_F3})"
COMPILE_SPECS = [(_py(256, 4), SIG), (_py(256, 6), SIG)]
HOT: set = set()
