"""Token sampling on the GPU: greedy argmax and temperature / top-k / top-p / min-p draws from a counter-based
generator keyed by (seed, absolute position).

Owns ``launch_sample(logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, valid_vocab, ...)``:
logits float32 ``[n, V]`` (V may be padded; ids >= valid_vocab never chosen), out_ids int32 ``[n]``, temps / top_p
/ min_p float32 ``[n]``, top_k int32 ``[n]``, seeds / positions int64 ``[n]``, valid_vocab int32. All parameters
are device buffers so a decode step can be graph-captured and the buffers rewritten between replays.

Reference mirrored (same rule, same hash, same token): ``tensorfold.reference.sampling.sample`` / ``uniform``.
Kernels (fixed geometry per (rows, vocab); scratch from ``sample_workspace``, cached per shape):
1. ``amax_part_k`` grid (G, rows), G = BLOCKS_PER_ROW (64 on the GPU: 3880 logits per block): each block reduces a
   contiguous slice of its row to (max, lowest id) -> ``pv/pi[row, g]``; NaN never wins, ids >= valid_vocab unread.
2. ``greedy_fin_k`` (one thread per row): exact argmax over the G partials (ties -> lowest id); rows with
   temperature <= 0 or no finite max are written here.
3. ``sample_k`` (one block per row; greedy rows leave at once): m from the partials; weights
   ``exp((l - m) / T)`` in float64; top-k threshold by a 4-pass 8-bit radix select on order-preserving float keys
   (integer counts in shared memory: exact); top-p threshold by the same radix select on mass (float64 shared
   atomics); min-p as ``w >= min_p``; then the inverse-CDF draw in id order: each thread sums a contiguous chunk of
   ids, thread 0 walks the chunk sums to the one holding ``u * Z``, that thread scans its chunk.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ._device import IS_SIM, devfn, warp_argmax, warp_sum, warp_sum_i

__all__ = ["sample_k", "amax_part_k", "greedy_fin_k", "launch_sample", "sample_workspace", "COMPILE_SPECS", "HOT",
           "SAMPLE_TPB", "BLOCKS_PER_ROW"]

SAMPLE_TPB = 64 if IS_SIM else 512  # 1024 x ~92 registers would exceed the 64K register file
_INF = np.float32(np.inf)
_NAN = np.float32(np.nan)  # out-of-range slots: NaN never wins a comparison
_BIG = 0x7FFFFFFF

if IS_SIM:
    from ..reference.sampling import uniform as _ref_uniform

    @cuda.jit(device=True)
    def _uniform(seed, pos):
        return _ref_uniform(int(seed), int(pos))

else:

    @devfn
    def _uniform(seed, pos):
        z = np.uint64(seed) ^ (np.uint64(pos) * np.uint64(0x9E3779B97F4A7C15))
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        return np.float64(z >> np.uint64(11)) * np.float64(1.0 / 9007199254740992.0)


@devfn
def _key(v):
    """Order-preserving key of a float32 as int64; NaN -> 0."""
    if v != v:
        return np.int64(0)
    b = np.float32(v).view(np.uint32)
    if (b >> np.uint32(31)) != np.uint32(0):
        return np.int64(np.uint32(0xFFFFFFFF) ^ b)
    return np.int64(b | np.uint32(0x80000000))


@devfn
def _block_sum_f64(v, red):
    lane = cuda.threadIdx.x & 31
    warp = cuda.threadIdx.x >> 5
    v = warp_sum(v)
    if lane == 0:
        red[warp] = v
    cuda.syncthreads()
    t = red[0]
    for i in range(1, cuda.blockDim.x >> 5):
        t += red[i]
    cuda.syncthreads()
    return t


@devfn
def _block_sum_i(v, red):
    lane = cuda.threadIdx.x & 31
    warp = cuda.threadIdx.x >> 5
    v = warp_sum_i(v)
    if lane == 0:
        red[warp] = v
    cuda.syncthreads()
    t = red[0]
    for i in range(1, cuda.blockDim.x >> 5):
        t += red[i]
    cuda.syncthreads()
    return t


@devfn
def _better(v, i, bv, bi):
    return v > bv or (v == bv and i < bi)


def amax_part_k(logits, valid_vocab, pv, pi):
    """Partial argmax: block (g, r) reduces the g-th contiguous slice of row r to (max, lowest id) -> pv/pi[r, g].
    NaN never wins; ids >= valid_vocab are not read; an empty / all-NaN slice gives (-inf, _BIG)."""
    red_v = cuda.shared.array(32, np.float32)
    red_i = cuda.shared.array(32, np.int32)
    tid = cuda.threadIdx.x
    lane = tid & 31
    warp = tid >> 5
    nthr = cuda.blockDim.x
    nw = nthr >> 5
    g = cuda.blockIdx.x
    G = cuda.gridDim.x
    n = logits.shape[0]
    Vv = min(valid_vocab, logits.shape[1])
    chunk = (Vv + G - 1) // G
    lo = g * chunk
    hi = min(Vv, lo + chunk)
    for row in range(cuda.blockIdx.y, n, cuda.gridDim.y):
        bv = -_INF
        bi = np.int32(_BIG)
        for base in range(lo + tid, hi, 4 * nthr):
            i1 = base + nthr
            i2 = base + 2 * nthr
            i3 = base + 3 * nthr
            v0 = logits[row, base]
            v1 = logits[row, i1] if i1 < hi else _NAN
            v2 = logits[row, i2] if i2 < hi else _NAN
            v3 = logits[row, i3] if i3 < hi else _NAN
            if _better(v0, base, bv, bi):
                bv = v0
                bi = np.int32(base)
            if _better(v1, i1, bv, bi):
                bv = v1
                bi = np.int32(i1)
            if _better(v2, i2, bv, bi):
                bv = v2
                bi = np.int32(i2)
            if _better(v3, i3, bv, bi):
                bv = v3
                bi = np.int32(i3)
        bv, bi = warp_argmax(bv, bi)
        if lane == 0:
            red_v[warp] = bv
            red_i[warp] = bi
        cuda.syncthreads()
        if tid == 0:
            gv = red_v[0]
            gi = red_i[0]
            for wi in range(1, nw):
                if _better(red_v[wi], red_i[wi], gv, gi):
                    gv = red_v[wi]
                    gi = red_i[wi]
            pv[row, g] = gv
            pi[row, g] = gi
        cuda.syncthreads()


@devfn
def _row_amax(pv, pi, row):
    """(max, lowest id) of row from its partials (fixed order; exact). id _BIG -> 0 (all -inf / NaN)."""
    gv = pv[row, 0]
    gi = pi[row, 0]
    for g in range(1, pv.shape[1]):
        if _better(pv[row, g], pi[row, g], gv, gi):
            gv = pv[row, g]
            gi = pi[row, g]
    if gi == _BIG:
        gi = 0
    return gv, gi


def greedy_fin_k(pv, pi, temps, out_ids):
    """One thread per row: rows with temperature <= 0 (or every logit -inf / NaN) take the argmax."""
    n = pv.shape[0]
    for row in range(cuda.grid(1), n, cuda.gridsize(1)):
        gv, gi = _row_amax(pv, pi, row)
        T = temps[row]
        if not (T > np.float32(0.0)) or not (gv > -_INF):
            out_ids[row] = gi


def sample_k(logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, valid_vocab, pv, pi):
    redf = cuda.shared.array(32, np.float64)
    redi = cuda.shared.array(32, np.int32)
    hist = cuda.shared.array(256, np.int32)
    histm = cuda.shared.array(256, np.float64)
    part = cuda.shared.array(1024, np.float64)
    bc = cuda.shared.array(4, np.int64)
    bcf = cuda.shared.array(4, np.float64)
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    n = logits.shape[0]
    Vv = min(valid_vocab, logits.shape[1])
    for row in range(cuda.blockIdx.x, n, cuda.gridDim.x):
        gv, gi = _row_amax(pv, pi, row)  # from amax_part_k's partials (exact)
        T = temps[row]
        if not (T > np.float32(0.0)) or not (gv > -_INF):
            continue  # greedy row: greedy_fin_k wrote it
        m = np.float64(gv)
        Tf = np.float64(T)
        # ---- top-k threshold: radix select on keys (exact integer counts)
        k = top_k[row]
        tk = np.int64(0)
        if k > 0 and k < Vv:
            cnt = np.int32(0)
            for i in range(tid, Vv, nthr):
                if _key(logits[row, i]) != 0:
                    cnt += 1
            nvalid = _block_sum_i(cnt, redi)
            if k <= nvalid:
                prefix = np.int64(0)
                rem = np.int64(k)
                for p in range(4):
                    shift = 24 - 8 * p
                    for b in range(tid, 256, nthr):
                        hist[b] = 0
                    cuda.syncthreads()
                    for i in range(tid, Vv, nthr):
                        key = _key(logits[row, i])
                        if key != 0 and (key >> (shift + 8)) == (prefix >> (shift + 8)):
                            cuda.atomic.add(hist, (key >> shift) & 255, 1)
                    cuda.syncthreads()
                    if tid == 0:
                        d = 255
                        while d > 0:
                            c = hist[d]
                            if c >= rem:
                                break
                            rem -= c
                            d -= 1
                        bc[0] = prefix | (np.int64(d) << shift)
                        bc[1] = rem
                    cuda.syncthreads()
                    prefix = bc[0]
                    rem = bc[1]
                    cuda.syncthreads()
                tk = prefix
        # ---- top-p threshold: radix select on mass among keys >= tk
        tp = np.float64(top_p[row])
        tpk = np.int64(0)
        if tp < 1.0:
            s = np.float64(0.0)
            for i in range(tid, Vv, nthr):
                lv = logits[row, i]
                key = _key(lv)
                if key != 0 and key >= tk:
                    s += math.exp((np.float64(lv) - m) / Tf)
            Zk = _block_sum_f64(s, redf)
            target = tp * Zk
            prefix = np.int64(0)
            above = np.float64(0.0)
            for p in range(4):
                shift = 24 - 8 * p
                for b in range(tid, 256, nthr):
                    histm[b] = 0.0
                cuda.syncthreads()
                for i in range(tid, Vv, nthr):
                    lv = logits[row, i]
                    key = _key(lv)
                    if key != 0 and key >= tk and (key >> (shift + 8)) == (prefix >> (shift + 8)):
                        cuda.atomic.add(histm, (key >> shift) & 255, math.exp((np.float64(lv) - m) / Tf))
                cuda.syncthreads()
                if tid == 0:
                    sel = -1
                    last = 0
                    d = 255
                    while d >= 0:
                        c = histm[d]
                        if c > 0.0:
                            last = d
                            if above + c >= target:
                                sel = d
                                break
                            above += c
                        d -= 1
                    if sel < 0:
                        sel = last
                        above -= histm[last]
                    bc[0] = prefix | (np.int64(sel) << shift)
                    bcf[0] = above
                cuda.syncthreads()
                prefix = bc[0]
                above = bcf[0]
                cuda.syncthreads()
            tpk = prefix
        mp = np.float64(min_p[row])
        # ---- inverse-CDF draw in id order over contiguous per-thread chunks
        C = (Vv + nthr - 1) // nthr
        lo = tid * C
        hi = min(Vv, lo + C)
        s = np.float64(0.0)
        for i in range(lo, hi):
            lv = logits[row, i]
            key = _key(lv)
            if key != 0 and key >= tk and key >= tpk:
                w = math.exp((np.float64(lv) - m) / Tf)
                if mp <= 0.0 or w >= mp:
                    s += w
        part[tid] = s
        cuda.syncthreads()
        if tid == 0:
            Z = np.float64(0.0)
            for t in range(nthr):
                Z += part[t]
            target = _uniform(seeds[row], positions[row]) * Z
            acc = np.float64(0.0)
            owner = nthr - 1
            for t in range(nthr):
                if acc + part[t] > target:
                    owner = t
                    break
                acc += part[t]
            bc[2] = owner
            bcf[1] = acc
            bcf[2] = target
        cuda.syncthreads()
        if tid == bc[2]:
            acc = bcf[1]
            target = bcf[2]
            choice = -1
            last = -1
            for i in range(lo, hi):
                lv = logits[row, i]
                key = _key(lv)
                if key != 0 and key >= tk and key >= tpk:
                    w = math.exp((np.float64(lv) - m) / Tf)
                    if mp <= 0.0 or w >= mp:
                        acc += w
                        last = i
                        if acc > target:
                            choice = i
                            break
            if choice < 0:
                choice = last if last >= 0 else gi
            out_ids[row] = choice
        cuda.syncthreads()


sample_py = sample_k
amax_part_py = amax_part_k
greedy_fin_py = greedy_fin_k
sample_k = cuda.jit(sample_k)
amax_part_k = cuda.jit(amax_part_k)
greedy_fin_k = cuda.jit(greedy_fin_k)

AMAX_TPB = 64 if IS_SIM else 256
BLOCKS_PER_ROW = 3 if IS_SIM else 64  # 248320 / 64 = 3880 logits (15 KB) per block, 15 per thread
_WS: dict = {}


def sample_workspace(n, blocks_per_row=None):
    """Device scratch for ``launch_sample`` keyed by (rows, blocks per row), allocated once (call it before a graph
    capture, or let the first eager launch do it): partial maxima ``pv`` float32 [n, G] and ids ``pi`` int32 [n, G].
    Launches that share a workspace must be ordered on one stream (the runtime samples on one stream)."""
    G = BLOCKS_PER_ROW if blocks_per_row is None else int(blocks_per_row)
    key = (int(n), G)
    ws = _WS.get(key)
    if ws is None:
        ws = (cuda.device_array((n, G), np.float32), cuda.device_array((n, G), np.int32))
        _WS[key] = ws
    return ws


def launch_sample(logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, valid_vocab, stream=0,
                  max_blocks=None, blocks_per_row=None, workspace=None):
    """Fixed geometry per (rows, vocab): amax_part_k grid (G, rows), greedy_fin_k, then sample_k (one block per
    sampled row; greedy rows leave at once). ``max_blocks`` caps the row dimension of each grid (rows are
    grid-strided), ``blocks_per_row`` overrides G, ``workspace`` = ``sample_workspace(rows, G)``."""
    n = logits.shape[0]
    G = BLOCKS_PER_ROW if blocks_per_row is None else int(blocks_per_row)
    pv, pi = sample_workspace(n, G) if workspace is None else workspace
    gr = n if max_blocks is None else max(1, min(n, max_blocks))
    vv = np.int32(valid_vocab)
    amax_part_k[(G, gr), AMAX_TPB, stream](logits, vv, pv, pi)
    greedy_fin_k[(n + 127) // 128, 128, stream](pv, pi, temps, out_ids)
    sample_k[gr, SAMPLE_TPB, stream](logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, vv, pv, pi)


_SIG_SAMPLE = ("void(float32[:, ::1], int32[::1], float32[::1], int32[::1], float32[::1], float32[::1], int64[::1], "
               "int64[::1], int32, float32[:, ::1], int32[:, ::1])")
COMPILE_SPECS = [
    (sample_py, _SIG_SAMPLE),
    (amax_part_py, "void(float32[:, ::1], int32, float32[:, ::1], int32[:, ::1])"),
    (greedy_fin_py, "void(float32[:, ::1], int32[:, ::1], float32[::1], int32[::1])"),
]
HOT = {"sample_k", "amax_part_k", "greedy_fin_k"}
