"""Token sampling on the GPU: greedy argmax and temperature / top-k / top-p / min-p draws from a counter-based
generator keyed by (seed, absolute position).

Owns ``launch_sample(logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, valid_vocab, ...)``:
logits float32 ``[n, V]`` (V may be padded; ids >= valid_vocab never chosen), out_ids int32 ``[n]``, temps / top_p
/ min_p float32 ``[n]``, top_k int32 ``[n]``, seeds / positions int64 ``[n]``, valid_vocab int32. All parameters
are device buffers so a decode step can be graph-captured and the buffers rewritten between replays.

Reference mirrored (same rule, same hash, same token): ``tensorfold.reference.sampling.sample`` / ``uniform``.
Also ``launch_argmax(logits, valid_vocab, out_ids)``: the greedy pass alone (the runner's argmax without a sampler).
Kernels (fixed geometry per (rows, vocab), eight launches, no host sync; scratch from ``sample_workspace``, cached
per (rows, G); G = BLOCKS_PER_ROW = 64 on the GPU for the sampled passes, so each row-slice block reads 3880 logits
= 15 KB; rows whose work is done elsewhere leave each kernel at once):
1-2. ``amax_k`` (AMAX_G = 128 blocks per row, 128 threads): each block folds a contiguous slice (16-byte loads,
   four in flight per thread) into one 64-bit atomic max per warp of packed (order-preserving key, 2^32-1-id): the
   max is the argmax with the lowest id on ties, whatever the order; NaN counts as -inf (the twin's rule), ids >=
   valid_vocab unread. The last warp of a row to finish (atomic counter) writes ``rmax/rarg`` and, for rows with
   temperature <= 0 or no finite max, the token, and leaves the counter and the max at zero for the next launch.
   Sampled rows: m = that max, ``w = exp((l - m) / T)`` (f64).
3. ``hist_k`` (G, rows): per slice, counts (exact) and masses (f64 shared atomics, used only with margins) of NB = 64
   bins of ``d = (m - l) / T`` (1/4 wide; last bin = d >= 15.75 and -inf, kept in registers, no atomics), and the
   slice's total weight in a fixed order. Bins are monotone in the logit: bins <= B are an upper set of keys.
4. ``plan_k`` (one block per row): bin totals -> a bound B that contains every id the filters can keep (top-k: the
   bin holding the k-th largest; top-p without top-k: the bin where the head mass passes top_p * Z (+1e-9); min-p:
   the bin of -ln(min_p), +1). Mode 1: <= CAND_CAP (4096) candidates -> exact select. Mode 2 (top-k off): top-p's
   threshold lies in the edge bins [Bq, B] (mass margins -/+1e-9), bins < Bq surely kept; or no top-p: no threshold.
   Mode 3 (top-k on with > CAND_CAP candidates, or an edge bin > CAND_CAP): the single-block fallback ``sample_k``.
5. ``gather_k`` (G, rows): candidate / edge ids to ``cand`` at per-block offsets from plan_k; sure mass per slice.
6. ``select_k`` (one block per row): bitonic sort in shared memory by (key desc, id asc); mode 1: top-k = key of the
   k-th, top-p = first key-group end whose running mass reaches top_p * Zk, min-p per element, re-sort the kept
   ids by id, chunked inverse-CDF draw in id order -> out. Mode 2: the same running mass (sure + edge) gives the
   top-p key threshold ``thrk``.
7. ``dsum_k`` (G, rows) and 8. ``draw_k`` (one block per row), mode 2: kept weight per slice (key >= thrk, min-p;
   contiguous per-thread chunks, chunk sums in thread order), then the slice, chunk and id where the running sum
   (id order) passes ``u * Z``.
9. ``sample_k`` (one block per row; mode 3 rows only): 4-pass 8-bit radix selects on keys (top-k, exact counts) and
   on mass (top-p, f64 shared atomics: slow), then the chunked draw.
Sums that the twin does in another order (Zk, running masses, Z) are float64 in a fixed order here, so kernel and
twin can differ only when a threshold or the draw lands within ~1e-13 relative of an edge.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ._device import FULL_MASK, IS_SIM, devfn, ldg_f32x4_2d, pdl_begin, warp_max, warp_sum, warp_sum_i
from . import _kcache

__all__ = ["sample_k", "amax_k", "launch_sample", "launch_argmax", "sample_workspace", "argmax_workspace",
           "COMPILE_SPECS", "HOT", "SAMPLE_TPB", "BLOCKS_PER_ROW", "AMAX_G"]

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


AMAX_G = 3 if IS_SIM else 128  # blocks per row of the greedy pass: 248320 / 128 = 485 16-byte quads per block
AMAX_TPB = 64 if IS_SIM else 128  # ... ~4 quads per thread, all four loads in flight at once
_LOW32 = np.uint64(0xFFFFFFFF)


@devfn
def _pack(v, i):
    """(value, id) -> uint64 whose max is the argmax with the lowest id on ties: order-preserving key of v in the
    high word (NaN counts as -inf, -0 as +0: the twin's np.argmax), 0xFFFFFFFF - id in the low word."""
    if v != v:
        v = -_INF
    b = np.float32(v).view(np.uint32)
    if v == np.float32(0.0):
        b = np.uint32(0)
    if (b >> np.uint32(31)) != np.uint32(0):
        k = np.uint64(np.uint32(0xFFFFFFFF) ^ b)
    else:
        k = np.uint64(b | np.uint32(0x80000000))
    return (k << np.uint64(32)) | (_LOW32 - np.uint64(i))


@devfn
def _unpack(p):
    """uint64 from :func:`_pack` -> (float32 value, int32 id); 0 (nothing packed) -> (-inf, 0)."""
    if p == np.uint64(0):
        return -_INF, np.int32(0)
    k = np.uint32(p >> np.uint64(32))
    if (k >> np.uint32(31)) != np.uint32(0):
        b = np.uint32(k & np.uint32(0x7FFFFFFF))
    else:
        b = np.uint32(np.uint32(0xFFFFFFFF) ^ k)
    return b.view(np.float32), np.int32(_LOW32 - (p & _LOW32))


if IS_SIM:
    _warp_umax = warp_max
else:

    @devfn
    def _warp_umax(v):
        """Max of a uint64 over the warp (xor butterfly; shuffled as int64, compared unsigned)."""
        for off in (16, 8, 4, 2, 1):
            o = np.uint64(cuda.shfl_xor_sync(FULL_MASK, np.int64(v), off))
            if o > v:
                v = o
        return v


@devfn
def _slice(n, G, g):
    """[lo, hi) of the g-th of G contiguous slices of range(n)."""
    chunk = (n + G - 1) // G
    lo = min(n, g * chunk)
    return lo, min(n, lo + chunk)


@devfn
def _tchunk(lo, hi):
    """This thread's contiguous chunk [a, e) of [lo, hi) (blockDim.x chunks in thread order)."""
    nthr = cuda.blockDim.x
    Cc = (hi - lo + nthr - 1) // nthr
    a = min(hi, lo + cuda.threadIdx.x * Cc)
    return a, min(hi, a + Cc)


def amax_k(logits, valid_vocab, vec4, force, temps, best, cnt, out_ids, rmax, rarg):
    """Greedy pass, grid (G, rows): block g folds the g-th slice of row r (16-byte loads when ``vec4``: rows
    16-byte aligned; else scalar) into ``best[r]`` by a 64-bit atomic max of packed (key, id) (exact: max does not
    depend on the order); each warp then counts itself done in ``cnt[r]``, and the last warp of the row reads and
    clears ``best[r]``, clears ``cnt[r]`` (both zero again for the next launch), and writes ``rmax/rarg[r]``, and
    ``out_ids[r]`` when ``force`` or the row is greedy (temperature <= 0 or no finite max, as the twin).
    ids >= valid_vocab are never read; an empty row gives id 0."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    tid = cuda.threadIdx.x
    lane = tid & 31
    nthr = cuda.blockDim.x
    g = cuda.blockIdx.x
    G = cuda.gridDim.x
    done = G * (nthr >> 5)
    n = logits.shape[0]
    Vv = min(valid_vocab, logits.shape[1])
    for row in range(cuda.blockIdx.y, n, cuda.gridDim.y):
        bp = np.uint64(0)
        if vec4 != 0:
            lo, hi = _slice((Vv + 3) >> 2, G, g)  # in quads
            for base in range(lo + tid, hi, 4 * nthr):
                q1 = min(base + nthr, hi - 1)
                q2 = min(base + 2 * nthr, hi - 1)
                q3 = min(base + 3 * nthr, hi - 1)
                a0, a1, a2, a3 = ldg_f32x4_2d(logits, row, 4 * base)
                b0, b1, b2, b3 = ldg_f32x4_2d(logits, row, 4 * q1)
                c0, c1, c2, c3 = ldg_f32x4_2d(logits, row, 4 * q2)
                d0, d1, d2, d3 = ldg_f32x4_2d(logits, row, 4 * q3)
                bp = _fold4(bp, a0, a1, a2, a3, 4 * base, Vv)
                if base + nthr < hi:
                    bp = _fold4(bp, b0, b1, b2, b3, 4 * q1, Vv)
                if base + 2 * nthr < hi:
                    bp = _fold4(bp, c0, c1, c2, c3, 4 * q2, Vv)
                if base + 3 * nthr < hi:
                    bp = _fold4(bp, d0, d1, d2, d3, 4 * q3, Vv)
        else:
            lo, hi = _slice(Vv, G, g)
            for base in range(lo + tid, hi, 4 * nthr):
                i1 = min(base + nthr, hi - 1)
                i2 = min(base + 2 * nthr, hi - 1)
                i3 = min(base + 3 * nthr, hi - 1)
                v0 = logits[row, base]
                v1 = logits[row, i1]
                v2 = logits[row, i2]
                v3 = logits[row, i3]
                bp = max(bp, _pack(v0, base))
                bp = max(bp, _pack(v1, i1))  # a clamped repeat of an id already folded changes nothing
                bp = max(bp, _pack(v2, i2))
                bp = max(bp, _pack(v3, i3))
        bp = _warp_umax(bp)
        if lane == 0:
            cuda.atomic.max(best, row, bp)
            cuda.threadfence()
            if cuda.atomic.add(cnt, row, 1) == done - 1:
                p = cuda.atomic.exch(best, row, np.uint64(0))
                cnt[row] = 0
                bv, bi = _unpack(p)
                rmax[row] = bv
                rarg[row] = bi
                if force != 0:
                    out_ids[row] = bi
                else:
                    T = temps[row]
                    if not (T > np.float32(0.0)) or not (bv > -_INF and bv < _INF):
                        out_ids[row] = bi


@devfn
def _fold4(bp, v0, v1, v2, v3, i0, Vv):
    """Fold the quad at ids i0..i0+3 (those < Vv) into the packed max bp."""
    bp = max(bp, _pack(v0, i0))
    if i0 + 1 < Vv:
        bp = max(bp, _pack(v1, i0 + 1))
    if i0 + 2 < Vv:
        bp = max(bp, _pack(v2, i0 + 2))
    if i0 + 3 < Vv:
        bp = max(bp, _pack(v3, i0 + 3))
    return bp


@devfn
def _row_amax(rmax, rarg, row):
    """(max, argmax) of a row as amax_k left them."""
    return rmax[row], rarg[row]


# ---------------------------------------------------------------------------------------------------- sampled rows
NB = 64  # bins of d = (m - l) / T, 1 / BSCALE wide; the last bin holds d >= (NB - 1) / BSCALE (w < 1.4e-7) and -inf
BSCALE = 4.0
CAND_CAP = 512 if IS_SIM else 4096  # candidate ids a row may gather for the exact final select (shared memory)
FIN_TPB = 64 if IS_SIM else 256
GMAX = 256  # most blocks per row (shared staging of per-block partials)


@devfn
def _wgt(lv, m, Tf):
    return math.exp((np.float64(lv) - m) / Tf)


@devfn
def _bin(lv, m, Tf):
    """Bin of a non-NaN logit: non-increasing in the logit (so bins <= B are the ids with logit >= some bound)."""
    x = -((np.float64(lv) - m) / Tf) * BSCALE
    if x < NB - 1:
        return np.int32(x)
    return np.int32(NB - 1)


@devfn
def _row_live(rmax, rarg, temps, row):
    """(sampled?, max, argmax): a row is sampled when temperature > 0 and the max is finite (as the twin)."""
    gv, gi = _row_amax(rmax, rarg, row)
    T = temps[row]
    return (T > np.float32(0.0)) and (gv > -_INF) and (gv < _INF), gv, gi


def hist_k(logits, temps, valid_vocab, rmax, rarg, hc, hm, zp):
    """Block (g, r) of a sampled row: per-bin counts ``hc[r, g, :]`` (exact) and masses ``hm[r, g, :]`` (float64
    shared atomics on the NB-1 head bins only: order-dependent, used only for a conservative bound), and the slice's
    total weight ``zp[r, g]`` (fixed order: per-thread strided sums, butterfly, warps in order)."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    sc = cuda.shared.array(NB, np.int32)
    sm = cuda.shared.array(NB, np.float64)
    redf = cuda.shared.array(32, np.float64)
    redi = cuda.shared.array(32, np.int32)
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    g = cuda.blockIdx.x
    G = cuda.gridDim.x
    n = logits.shape[0]
    Vv = min(valid_vocab, logits.shape[1])
    lo, hi = _slice(Vv, G, g)
    for row in range(cuda.blockIdx.y, n, cuda.gridDim.y):
        live, gv, gi = _row_live(rmax, rarg, temps, row)
        if not live:
            continue
        m = np.float64(gv)
        Tf = np.float64(temps[row])
        for b in range(tid, NB, nthr):
            sc[b] = 0
            sm[b] = 0.0
        cuda.syncthreads()
        zs = np.float64(0.0)
        ms = np.float64(0.0)
        ct = np.int32(0)
        for i in range(lo + tid, hi, nthr):
            lv = logits[row, i]
            if lv == lv:
                w = _wgt(lv, m, Tf)
                zs += w
                b = _bin(lv, m, Tf)
                if b < NB - 1:
                    cuda.atomic.add(sc, b, 1)
                    cuda.atomic.add(sm, b, w)
                else:
                    ct += 1
                    ms += w
        z = _block_sum_f64(zs, redf)
        mt = _block_sum_f64(ms, redf)
        cnt = _block_sum_i(ct, redi)
        for b in range(tid, NB, nthr):
            c = sc[b]
            mm = sm[b]
            if b == NB - 1:
                c += cnt
                mm += mt
            hc[row, g, b] = c
            hm[row, g, b] = mm
        if tid == 0:
            zp[row, g] = z
        cuda.syncthreads()


def plan_k(hc, hm, zp, temps, top_k, top_p, min_p, valid_vocab, cap, rmax, rarg, plan, off, ztot):
    """One block per row: bin totals, the candidate bound B (every id the filters can keep has bin <= B),
    ``plan[r] = (mode, B, C, nvalid, Blo)`` with mode 0 greedy (done), 1 gather the C <= cap candidates (bins <= B),
    2 (top-k off) threshold draw: with top-p, bins < B are surely kept and bin B (C <= cap ids) is the edge whose
    exact key threshold select_k finds; without top-p, B = -1 (no threshold); then a block-sum draw over the whole
    row; 3 fallback (sample_k). ``off[r, g]``: where
    block g's candidates start; ``ztot[r]``: total weight (zp summed in g order)."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    tc = cuda.shared.array(NB, np.int32)
    tm = cuda.shared.array(NB, np.float64)
    bc = cuda.shared.array(3, np.int32)
    zs = cuda.shared.array(GMAX, np.float64)
    cg = cuda.shared.array(GMAX, np.int32)
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    n = hc.shape[0]
    G = hc.shape[1]
    for row in range(cuda.blockIdx.x, n, cuda.gridDim.x):
        live, gv, gi = _row_live(rmax, rarg, temps, row)
        if not live:
            if tid == 0:
                plan[row, 0] = 0
            continue
        for b in range(tid, NB, nthr):
            # four loads in flight (L2 latency bound), added in g order
            s = np.int32(0)
            mm = np.float64(0.0)
            G4 = G - (G & 3)
            for gg in range(0, G4, 4):
                c0 = hc[row, gg, b]
                c1 = hc[row, gg + 1, b]
                c2 = hc[row, gg + 2, b]
                c3 = hc[row, gg + 3, b]
                m0 = hm[row, gg, b]
                m1 = hm[row, gg + 1, b]
                m2 = hm[row, gg + 2, b]
                m3 = hm[row, gg + 3, b]
                s += c0 + c1 + c2 + c3
                mm += m0
                mm += m1
                mm += m2
                mm += m3
            for gg in range(G4, G):
                s += hc[row, gg, b]
                mm += hm[row, gg, b]
            tc[b] = s
            tm[b] = mm
        for gg in range(tid, G, nthr):
            zs[gg] = zp[row, gg]
        cuda.syncthreads()
        if tid == 0:
            Z = np.float64(0.0)
            for gg in range(G):
                Z += zs[gg]
            ztot[row] = Z
            nvalid = np.int32(0)
            for b in range(NB):
                nvalid += tc[b]
            k = top_k[row]
            kact = k > 0 and k < valid_vocab and k <= nvalid
            tp = np.float64(top_p[row])
            pact = tp < 1.0
            mp = np.float64(min_p[row])
            Bm = NB - 1
            if mp > 0.0:
                lm = -math.log(mp)
                if lm < 0.0:
                    Bm = 0
                else:
                    x = lm * BSCALE * (1.0 + 1e-9) + 1e-9
                    if x < NB - 2:
                        Bm = np.int32(x) + 1
            B = NB - 1
            Bp = NB - 1
            Bq = NB - 1
            if kact:
                acc = np.int32(0)
                for b in range(NB):
                    acc += tc[b]
                    if acc >= k:
                        B = b
                        break
                if not pact:
                    B = min(B, Bm)
            else:
                if pact:
                    # bins < Bq surely below the top-p threshold bin, bins > B surely past it (margins cover the
                    # order-dependent rounding of the atomically summed masses)
                    target = tp * Z
                    accm = np.float64(0.0)
                    for b in range(NB - 1):
                        accm += tm[b]
                        if Bq == NB - 1 and accm >= target * (1.0 - 1e-9):
                            Bq = b
                        if accm >= target * (1.0 + 1e-9):
                            B = b
                            break
                Bp = B
                B = min(B, Bm)
            C = np.int32(0)
            for b in range(B + 1):
                C += tc[b]
            mode = 3
            Blo = 0
            if C <= cap:
                mode = 1
            elif not kact:
                # threshold mode: bins < B are surely kept by top-p, bin B (the edge) is sorted exactly
                mode = 2
                if pact:
                    B = Bp
                    Blo = min(Bq, Bp)
                    C = 0
                    for b in range(Blo, B + 1):
                        C += tc[b]
                    if C > cap:
                        mode = 3
                else:
                    B = -1
                    C = 0
                    Blo = 0
            plan[row, 0] = mode
            plan[row, 1] = B
            plan[row, 2] = C
            plan[row, 3] = nvalid
            plan[row, 4] = Blo
            bc[0] = mode
            bc[1] = B
            bc[2] = Blo
        cuda.syncthreads()
        mode = bc[0]
        B = bc[1]
        Blo = bc[2]
        if mode == 1 or (mode == 2 and B >= 0):
            for gg in range(tid, G, nthr):
                s = np.int32(0)
                for b in range(Blo, B + 1):
                    s += hc[row, gg, b]
                cg[gg] = s
            cuda.syncthreads()
            if tid == 0:
                acc = np.int32(0)
                for gg in range(G):
                    c = cg[gg]
                    cg[gg] = acc
                    acc += c
            cuda.syncthreads()
            for gg in range(tid, G, nthr):
                off[row, gg] = cg[gg]
        cuda.syncthreads()


@devfn
def _kept_w(lv, m, Tf, mp):
    """Weight of a logit under the element-wise filters only (NaN -> 0, min-p)."""
    if lv != lv:
        return np.float64(0.0)
    w = _wgt(lv, m, Tf)
    if mp > 0.0 and not (w >= mp):
        return np.float64(0.0)
    return w


def gather_k(logits, temps, valid_vocab, rmax, rarg, plan, off, cand, dsum):
    """Block g of a mode-1/2 row writes the ids of its slice with bin in [Blo, B] to ``cand[r, off[r, g]:]`` (order
    within the block arbitrary: the select sorts). Mode 2 with top-p: ``dsum[r, g]`` = weight of the slice's ids
    with bin < Blo (surely kept by top-p), fixed order (strided per-thread sums, butterfly, warps in order)."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    cnt = cuda.shared.array(1, np.int32)
    redf = cuda.shared.array(32, np.float64)
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    g = cuda.blockIdx.x
    G = cuda.gridDim.x
    n = logits.shape[0]
    Vv = min(valid_vocab, logits.shape[1])
    lo, hi = _slice(Vv, G, g)
    for row in range(cuda.blockIdx.y, n, cuda.gridDim.y):
        mode = plan[row, 0]
        B = plan[row, 1]
        if (mode != 1 and mode != 2) or B < 0:
            continue
        Blo = plan[row, 4]
        gv, gi = _row_amax(rmax, rarg, row)
        m = np.float64(gv)
        Tf = np.float64(temps[row])
        base = off[row, g]
        if tid == 0:
            cnt[0] = 0
        cuda.syncthreads()
        s = np.float64(0.0)
        for i in range(lo + tid, hi, nthr):
            lv = logits[row, i]
            if lv == lv:
                b = _bin(lv, m, Tf)
                if b <= B and b >= Blo:
                    j = cuda.atomic.add(cnt, 0, 1)
                    cand[row, base + j] = i
                elif b < Blo:
                    s += _wgt(lv, m, Tf)
        if mode == 2:
            z = _block_sum_f64(s, redf)
            if tid == 0:
                dsum[row, g] = z
        cuda.syncthreads()


@devfn
def _kept_wt(lv, m, Tf, mp, thr):
    """Weight of a logit under a key threshold and min-p (NaN or below -> 0)."""
    if lv != lv or _key(lv) < thr:
        return np.float64(0.0)
    w = _wgt(lv, m, Tf)
    if mp > 0.0 and not (w >= mp):
        return np.float64(0.0)
    return w


def dsum_k(logits, temps, min_p, valid_vocab, rmax, rarg, plan, thrk, dsum):
    """Mode 2 rows: ``dsum[r, g]`` = kept weight (key >= thrk[r], min-p) of slice g, summed over contiguous
    per-thread chunks, chunk sums in thread order (draw_k repeats exactly that order in the chosen slice)."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    part = cuda.shared.array(1024, np.float64)
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    g = cuda.blockIdx.x
    G = cuda.gridDim.x
    n = logits.shape[0]
    Vv = min(valid_vocab, logits.shape[1])
    lo, hi = _slice(Vv, G, g)
    for row in range(cuda.blockIdx.y, n, cuda.gridDim.y):
        if plan[row, 0] != 2:
            continue
        gv, gi = _row_amax(rmax, rarg, row)
        m = np.float64(gv)
        Tf = np.float64(temps[row])
        mp = np.float64(min_p[row])
        thr = thrk[row]
        a, e = _tchunk(lo, hi)
        s = np.float64(0.0)
        for i in range(a, e):
            s += _kept_wt(logits[row, i], m, Tf, mp, thr)
        part[tid] = s
        cuda.syncthreads()
        if tid == 0:
            t = np.float64(0.0)
            for j in range(nthr):
                t += part[j]
            dsum[row, g] = t
        cuda.syncthreads()


@devfn
def _before(va, ia, vb, ib):
    """Sort order of the final select: larger key first, then lower id (sentinels: NaN key 0, id _BIG, last)."""
    ka = _key(va)
    kb = _key(vb)
    return ka > kb or (ka == kb and ia < ib)


@devfn
def _bitonic(sv, si, P2, by_id):
    """Block-wide bitonic sort of (sv, si)[0:P2] (P2 a power of two) by (key desc, id asc), or by id ascending
    when ``by_id``; ends synced."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    size = 2
    while size <= P2:
        stride = size >> 1
        while stride > 0:
            for t in range(tid, P2 >> 1, nthr):
                x = 2 * stride * (t // stride) + (t % stride)
                y = x + stride
                if by_id:
                    bef = si[x] < si[y]
                else:
                    bef = _before(sv[x], si[x], sv[y], si[y])
                if ((x & size) == 0) != bef:
                    tv = sv[x]
                    sv[x] = sv[y]
                    sv[y] = tv
                    ti = si[x]
                    si[x] = si[y]
                    si[y] = ti
            cuda.syncthreads()
            stride >>= 1
        size <<= 1


@devfn
def _sorted_cands(logits, row, cand, C, sv, si):
    """Stage the row's C candidates (id, logit) in shared memory padded to a power of two P2 (sentinels: id _BIG,
    NaN) and sort them by (key desc, id asc); returns P2."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    P2 = 1
    while P2 < C:
        P2 *= 2
    for j in range(tid, P2, nthr):
        if j < C:
            i = cand[row, j]
            si[j] = i
            sv[j] = logits[row, i]
        else:
            si[j] = _BIG
            sv[j] = _NAN
    cuda.syncthreads()
    _bitonic(sv, si, P2, False)
    return P2


@devfn
def _group_end(sv, a, e, L, acc, target, m, Tf, bc):
    """Over this thread's chunk [a, e) of the sorted prefix [0, L), running mass from ``acc``: the first key-group
    end j whose running mass reaches ``target`` -> atomic min into bc[1] (the block's first such end)."""
    for j in range(a, e):
        acc += _wgt(sv[j], m, Tf)
        if (j + 1 == L or _key(sv[j + 1]) != _key(sv[j])) and acc >= target:
            cuda.atomic.min(bc, 1, j)
            break


def select_k(logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, valid_vocab, rmax, rarg, plan, cand, ztot,
             dsum, thrk):
    """One block per row. Mode 1: sort the candidates (bitonic, shared memory) by (key desc, id asc); top-k
    threshold = key of the k-th; top-p: first key-group end whose running mass (sorted order, chunked sums) reaches
    top_p * Zk; min-p per element; re-sort the kept prefix by id and draw (chunked inverse CDF in id order).
    Mode 2 with top-p: sort the edge ids the same way; running mass = sure mass (dsum from gather_k, g order) +
    chunked sums over the sorted edge; ``thrk[r]`` = key of the first key-group end reaching top_p * Z (none: the
    smallest edge key); mode 2 without top-p: ``thrk[r] = 0``."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    sv = cuda.shared.array(CAND_CAP, np.float32)
    si = cuda.shared.array(CAND_CAP, np.int32)
    part = cuda.shared.array(FIN_TPB, np.float64)
    ds = cuda.shared.array(GMAX, np.float64)
    bc = cuda.shared.array(4, np.int32)
    bcf = cuda.shared.array(4, np.float64)
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    n = logits.shape[0]
    Vv = min(valid_vocab, logits.shape[1])
    G = dsum.shape[1]
    for row in range(cuda.blockIdx.x, n, cuda.gridDim.x):
        mode = plan[row, 0]
        if mode != 1 and mode != 2:
            continue
        gv, gi = _row_amax(rmax, rarg, row)
        m = np.float64(gv)
        Tf = np.float64(temps[row])
        mp = np.float64(min_p[row])
        if mode == 2:
            # threshold mode: key threshold of top-p from the edge bins (sorted), sure mass = dsum (gather_k)
            B = plan[row, 1]
            if B < 0:
                if tid == 0:
                    thrk[row] = 0
                cuda.syncthreads()
                continue
            C = plan[row, 2]
            _sorted_cands(logits, row, cand, C, sv, si)
            tp = np.float64(top_p[row])
            a, e = _tchunk(0, C)
            s = np.float64(0.0)
            for j in range(a, e):
                s += _wgt(sv[j], m, Tf)
            part[tid] = s
            cuda.syncthreads()
            for gg in range(tid, G, nthr):
                ds[gg] = dsum[row, gg]
            cuda.syncthreads()
            if tid == 0:
                acc = np.float64(0.0)
                for gg in range(G):
                    acc += ds[gg]
                acc = _excl_scan(part, nthr, acc)
                bcf[0] = tp * ztot[row]
                bc[1] = _BIG
            cuda.syncthreads()
            _group_end(sv, a, e, C, part[tid], bcf[0], m, Tf, bc)
            cuda.syncthreads()
            if tid == 0:
                jj = bc[1]
                if jj == _BIG:
                    jj = C - 1
                thrk[row] = _key(sv[jj]) if jj >= 0 else np.int64(0)
            cuda.syncthreads()
            continue
        # ---- mode 1: exact select over the gathered candidates
        C = plan[row, 2]
        nvalid = plan[row, 3]
        _sorted_cands(logits, row, cand, C, sv, si)
        # top-k: keep keys >= the k-th largest key (ties kept): prefix [0, L)
        k = top_k[row]
        L = C
        kact = k > 0 and k < Vv and k <= nvalid
        if kact and k <= C:
            tk = _key(sv[k - 1])
            for j in range(tid, C, nthr):
                if _key(sv[j]) >= tk and (j + 1 == C or _key(sv[j + 1]) < tk):
                    bc[0] = j + 1
            cuda.syncthreads()
            L = bc[0]
        # k > C happens only without top-p, when min-p's bound cut the candidates below the k-th largest key: the
        # k-th largest key is then <= every candidate's, so top-k keeps them all (L = C). (Reading sv[k - 1] there
        # read past the candidates: whatever an earlier row left in shared memory.)
        cuda.syncthreads()
        # top-p over the sorted prefix: first key-group end whose running mass >= top_p * Zk
        tp = np.float64(top_p[row])
        P = L
        if tp < 1.0:
            a, e = _tchunk(0, L)
            s = np.float64(0.0)
            for j in range(a, e):
                s += _wgt(sv[j], m, Tf)
            part[tid] = s
            cuda.syncthreads()
            if tid == 0:
                acc = np.float64(0.0)
                acc = _excl_scan(part, nthr, acc)
                Zk = acc if kact else ztot[row]
                bcf[0] = tp * Zk
                bc[1] = _BIG
            cuda.syncthreads()
            _group_end(sv, a, e, L, part[tid], bcf[0], m, Tf, bc)
            cuda.syncthreads()
            if bc[1] != _BIG:
                P = bc[1] + 1
            cuda.syncthreads()
        # re-sort the kept prefix [0, P) by id; min-p applies per element
        P2 = 1
        while P2 < P:
            P2 *= 2
        for j in range(P + tid, P2, nthr):
            si[j] = _BIG
            sv[j] = _NAN
        cuda.syncthreads()
        _bitonic(sv, si, P2, True)
        a, e = _tchunk(0, P)
        s = np.float64(0.0)
        for j in range(a, e):
            s += _kept_w(sv[j], m, Tf, mp)
        part[tid] = s
        cuda.syncthreads()
        if tid == 0:
            Z = np.float64(0.0)
            for t in range(nthr):
                Z += part[t]
            target = _uniform(seeds[row], positions[row]) * Z
            ot, acc = _pick(part, nthr, np.float64(0.0), target)
            if ot < 0:
                out_ids[row] = gi
            bc[2] = ot
            bcf[2] = acc
            bcf[3] = target
        cuda.syncthreads()
        if tid == bc[2]:
            acc = bcf[2]
            target = bcf[3]
            choice = -1
            last = -1
            for j in range(a, e):
                w = _kept_w(sv[j], m, Tf, mp)
                if w > 0.0:
                    acc += w
                    last = si[j]
                    if acc > target:
                        choice = si[j]
                        break
            if choice < 0:
                choice = last if last >= 0 else gi
            out_ids[row] = choice
        cuda.syncthreads()


@devfn
def _excl_scan(part, n, acc):
    """part[0:n] -> exclusive running sums starting at ``acc`` (in order); returns the total."""
    for t in range(n):
        d = part[t]
        part[t] = acc
        acc += d
    return acc


@devfn
def _pick(part, n, acc, target):
    """Running-sum search over part[0:n] (in order) starting from ``acc``: the first entry with weight whose sum
    passes ``target`` -> (index, running sum before it); never passed (rounding): the last entry with weight;
    none: (-1, acc)."""
    owner = -1
    last = -1
    lacc = acc
    for t in range(n):
        d = part[t]
        if d > 0.0:
            if acc + d > target:
                owner = t
                break
            last = t
            lacc = acc
        acc += d
    if owner < 0:
        owner = last
        acc = lacc
    return owner, acc


def draw_k(logits, out_ids, temps, min_p, seeds, positions, valid_vocab, rmax, rarg, plan, thrk, dsum):
    """Mode 2 rows, one block: the slice whose running dsum (g order) passes u * Z, then the chunk (chunk sums in
    thread order, as dsum_k), then the id; u * Z never reached (rounding): the last kept id; nothing kept: argmax."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    part = cuda.shared.array(FIN_TPB, np.float64)
    ds = cuda.shared.array(GMAX, np.float64)
    bc = cuda.shared.array(4, np.int32)
    bcf = cuda.shared.array(4, np.float64)
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    n = logits.shape[0]
    Vv = min(valid_vocab, logits.shape[1])
    G = dsum.shape[1]
    for row in range(cuda.blockIdx.x, n, cuda.gridDim.x):
        if plan[row, 0] != 2:
            continue
        gv, gi = _row_amax(rmax, rarg, row)
        m = np.float64(gv)
        Tf = np.float64(temps[row])
        mp = np.float64(min_p[row])
        thr = thrk[row]
        for gg in range(tid, G, nthr):
            ds[gg] = dsum[row, gg]
        cuda.syncthreads()
        if tid == 0:
            Z = np.float64(0.0)
            for gg in range(G):
                Z += ds[gg]
            target = _uniform(seeds[row], positions[row]) * Z
            owner, acc = _pick(ds, G, np.float64(0.0), target)
            bc[0] = owner
            bcf[0] = acc
            bcf[1] = target
        cuda.syncthreads()
        owner = bc[0]
        if owner < 0:
            if tid == 0:
                out_ids[row] = gi
            cuda.syncthreads()
            continue
        lo0, hi0 = _slice(Vv, G, owner)
        a, e = _tchunk(lo0, hi0)
        s = np.float64(0.0)
        for i in range(a, e):
            s += _kept_wt(logits[row, i], m, Tf, mp, thr)
        part[tid] = s
        cuda.syncthreads()
        if tid == 0:
            ot, acc = _pick(part, nthr, bcf[0], bcf[1])
            bc[1] = ot
            bcf[2] = acc
        cuda.syncthreads()
        if tid == bc[1]:
            acc = bcf[2]
            target = bcf[1]
            choice = -1
            last = -1
            for i in range(a, e):
                w = _kept_wt(logits[row, i], m, Tf, mp, thr)
                if w > 0.0:
                    acc += w
                    last = i
                    if acc > target:
                        choice = i
                        break
            if choice < 0:
                choice = last if last >= 0 else gi
            out_ids[row] = choice
        cuda.syncthreads()


def sample_k(logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, valid_vocab, rmax, rarg, plan):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
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
        if plan[row, 0] != 3:
            continue  # greedy, or done by select_k / draw_k
        gv, gi = _row_amax(rmax, rarg, row)  # from amax_k (exact)
        T = temps[row]
        if not (T > np.float32(0.0)) or not (gv > -_INF and gv < _INF):
            continue  # greedy row: amax_k wrote it
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


def keep_ids_k(tok, row_slot, ids):
    """``ids[r] = tok[r]`` for the rows of a stream (``row_slot[r] >= 0``): a step graph's drawn ids become the
    input ids of the bucket's next step, on the device (``runtime.graphs``, in-graph chaining). One block."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    for r in range(cuda.threadIdx.x, tok.shape[0], cuda.blockDim.x):
        if row_slot[r] >= 0:
            ids[r] = tok[r]


def launch_keep_ids(tok, row_slot, ids, *, stream=0):
    """:func:`keep_ids_k` over ``tok`` [n] (``row_slot``, ``ids`` at least n long)."""
    n = tok.shape[0]
    if row_slot.shape[0] < n or ids.shape[0] < n:
        raise ValueError(f"keep_ids: {n} ids need row_slot and ids of at least {n}")
    keep_ids_k[1, 32 if IS_SIM else 128, stream](tok, row_slot, ids)


sample_py = sample_k
amax_py = amax_k
keep_py = keep_ids_k
hist_py = hist_k
plan_py = plan_k
gather_py = gather_k
select_py = select_k
dsum_py = dsum_k
draw_py = draw_k
sample_k = _kcache.kjit(sample_k)
amax_k = _kcache.kjit(amax_k)
hist_k = _kcache.kjit(hist_k)
plan_k = _kcache.kjit(plan_k)
gather_k = _kcache.kjit(gather_k)
select_k = _kcache.kjit(select_k)
dsum_k = _kcache.kjit(dsum_k)
draw_k = _kcache.kjit(draw_k)
keep_ids_k = _kcache.kjit(keep_ids_k)

PASS_TPB = FIN_TPB  # row-slice passes of sampled rows: dsum_k's per-thread chunks are what draw_k re-walks
BLOCKS_PER_ROW = 3 if IS_SIM else 64  # sampled passes: 248320 / 64 = 3880 logits (15 KB) per block
_WS: dict = {}
_AWS: dict = {}


def _zeros(shape, dt):
    return cuda.to_device(np.zeros(shape, dt))


def _vec4(logits):
    """True when every row of ``logits`` starts 16-byte aligned (16-byte loads allowed)."""
    if logits.shape[1] % 4:
        return False
    ptr = getattr(logits, "device_ctypes_pointer", None)
    addr = ptr.value if ptr is not None else logits.ctypes.data
    return (addr or 0) % 16 == 0 and logits.strides[0] % 16 == 0


def argmax_workspace(n):
    """Scratch of the greedy pass for n rows: ``best`` u64 [n], ``cnt`` i32 [n] (zero between launches: the last
    warp of each row clears them), ``rmax`` f32 / ``rarg`` i32 [n]. Cached per n (allocated by the eager warm-up
    launch, before any graph capture)."""
    ws = _AWS.get(int(n))
    if ws is None:
        n = int(n)
        ws = (_zeros(n, np.uint64), _zeros(n, np.int32), cuda.device_array(n, np.float32),
              cuda.device_array(n, np.int32))
        _AWS[n] = ws
    return ws


def launch_argmax(logits, valid_vocab, out_ids, *, stream=0, blocks_per_row=None, max_blocks=None, workspace=None):
    """Greedy ids of ``logits`` [n, V] (ids >= valid_vocab masked, ties -> lowest id, NaN never beats a number):
    one launch of ``amax_k``, grid (AMAX_G, n)."""
    n = logits.shape[0]
    best, cnt, rmax, rarg = argmax_workspace(n) if workspace is None else workspace
    G = AMAX_G if blocks_per_row is None else int(blocks_per_row)
    gr = n if max_blocks is None else max(1, min(n, max_blocks))
    vv = np.int32(min(int(valid_vocab), logits.shape[1]))
    amax_k[(G, gr), AMAX_TPB, stream](logits, vv, np.int32(_vec4(logits)), np.int32(1), rmax, best, cnt, out_ids,
                                      rmax, rarg)


def sample_workspace(n, blocks_per_row=None):
    """Device scratch for ``launch_sample`` keyed by (rows, blocks per row G), allocated once (the runtime's eager
    warm-up launch before a graph capture does it): ``best`` u64 [n] / ``cnt`` i32 [n] (greedy pass, zero between
    launches), ``hc`` i32 / ``hm`` f64 [n, G, NB] (bin counts / masses), ``zp`` f64 [n, G], ``plan`` i32 [n, 5],
    ``off`` i32 [n, G], ``cand`` i32 [n, CAND_CAP], ``ztot`` f64 [n], ``dsum`` f64 [n, G], ``thrk`` i64 [n],
    ``rmax`` f32 / ``rarg`` i32 [n] (the row's max and argmax). About 70 KB per row at G = 64.
    Launches that share a workspace must be ordered on one stream (the runtime samples on one stream)."""
    G = BLOCKS_PER_ROW if blocks_per_row is None else int(blocks_per_row)
    n = int(n)
    key = (n, G)
    ws = _WS.get(key)
    if ws is None:
        da = cuda.device_array
        ws = (_zeros(n, np.uint64), _zeros(n, np.int32), da((n, G, NB), np.int32), da((n, G, NB), np.float64),
              da((n, G), np.float64), da((n, 5), np.int32), da((n, G), np.int32), da((n, CAND_CAP), np.int32),
              da(n, np.float64), da((n, G), np.float64), da(n, np.int64), da(n, np.float32), da(n, np.int32))
        _WS[key] = ws
    return ws


def launch_sample(logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, valid_vocab, stream=0,
                  max_blocks=None, blocks_per_row=None, workspace=None, cand_cap=None, greedy_only=False):
    """Fixed geometry per (rows, vocab), eight launches, no host sync: amax_k (AMAX_G, rows), hist_k (G, rows),
    plan_k (rows), gather_k (G, rows), select_k (rows), dsum_k (G, rows), draw_k (rows), sample_k (rows; only
    fallback rows do work); greedy rows are finished by amax_k and skipped by the rest. ``max_blocks`` caps the
    row dimension of each grid (rows are grid-strided), ``blocks_per_row`` overrides G (and the greedy pass's
    block count), ``workspace`` = ``sample_workspace(rows, G)``, ``cand_cap`` (<= CAND_CAP) lowers the candidate
    bound (tests). ``greedy_only``: the caller knows every row is greedy (temperature <= 0): only amax_k runs (it
    writes every row), saving the seven sampled-path launches (~11 µs at one row, ~48 µs at 64 rows on the H200)."""
    n = logits.shape[0]
    G = BLOCKS_PER_ROW if blocks_per_row is None else int(blocks_per_row)
    GA = AMAX_G if blocks_per_row is None else G
    ws = sample_workspace(n, G) if workspace is None else workspace
    best, cnt, hc, hm, zp, plan, off, cand, ztot, dsum, thrk, rmax, rarg = ws
    gr = n if max_blocks is None else max(1, min(n, max_blocks))
    vv = np.int32(min(int(valid_vocab), logits.shape[1]))
    cap = np.int32(CAND_CAP if cand_cap is None else min(int(cand_cap), CAND_CAP))
    if not 1 <= G <= GMAX:
        raise ValueError(f"launch_sample: blocks_per_row {G} outside [1, {GMAX}]")
    amax_k[(GA, gr), AMAX_TPB, stream](logits, vv, np.int32(_vec4(logits)), np.int32(1 if greedy_only else 0), temps,
                                       best, cnt, out_ids, rmax, rarg)
    if greedy_only:
        return
    hist_k[(G, gr), PASS_TPB, stream](logits, temps, vv, rmax, rarg, hc, hm, zp)
    plan_k[gr, 64, stream](hc, hm, zp, temps, top_k, top_p, min_p, vv, cap, rmax, rarg, plan, off, ztot)
    gather_k[(G, gr), PASS_TPB, stream](logits, temps, vv, rmax, rarg, plan, off, cand, dsum)
    select_k[gr, FIN_TPB, stream](logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, vv, rmax, rarg,
                                  plan, cand, ztot, dsum, thrk)
    dsum_k[(G, gr), PASS_TPB, stream](logits, temps, min_p, vv, rmax, rarg, plan, thrk, dsum)
    draw_k[gr, FIN_TPB, stream](logits, out_ids, temps, min_p, seeds, positions, vv, rmax, rarg, plan, thrk, dsum)
    sample_k[gr, SAMPLE_TPB, stream](logits, out_ids, temps, top_k, top_p, min_p, seeds, positions, vv, rmax, rarg,
                                     plan)


_F2 = "float32[:, ::1]"
_I2 = "int32[:, ::1]"
_D2 = "float64[:, ::1]"
_R = "float32[::1], int32[::1]"  # rmax, rarg
_P1 = "float32[::1], int32[::1], float32[::1], float32[::1], int64[::1], int64[::1]"  # temps .. positions
COMPILE_SPECS = [
    (sample_py, f"void({_F2}, int32[::1], {_P1}, int32, {_R}, {_I2})"),
    (amax_py, f"void({_F2}, int32, int32, int32, float32[::1], uint64[::1], int32[::1], int32[::1], {_R})"),
    (hist_py, f"void({_F2}, float32[::1], int32, {_R}, int32[:, :, ::1], float64[:, :, ::1], {_D2})"),
    (plan_py, f"void(int32[:, :, ::1], float64[:, :, ::1], {_D2}, float32[::1], int32[::1], float32[::1], "
              f"float32[::1], int32, int32, {_R}, {_I2}, {_I2}, float64[::1])"),
    (gather_py, f"void({_F2}, float32[::1], int32, {_R}, {_I2}, {_I2}, {_I2}, {_D2})"),
    (select_py, f"void({_F2}, int32[::1], {_P1}, int32, {_R}, {_I2}, {_I2}, float64[::1], {_D2}, int64[::1])"),
    (dsum_py, f"void({_F2}, float32[::1], float32[::1], int32, {_R}, {_I2}, int64[::1], {_D2})"),
    (draw_py, f"void({_F2}, int32[::1], float32[::1], float32[::1], int64[::1], int64[::1], int32, {_R}, {_I2}, "
              f"int64[::1], {_D2})"),
    (keep_py, "void(int32[::1], int32[::1], int32[::1])"),
]
HOT = {"sample_k", "amax_k", "hist_k", "plan_k", "gather_k", "select_k", "dsum_k",
       "draw_k", "keep_ids_k"}
