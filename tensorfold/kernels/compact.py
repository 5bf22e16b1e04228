"""Commit / compaction after a verify (issue 3, part B): make a kept path of tree (or window) rows the stream's
committed history.

A kept path is named by its **leaf** row: the path is the leaf's ancestor chain (``parent[]``, -1 = committed),
root first; ``seg_leaf[s] = -1`` keeps nothing. All kernels take all-layers arrays so one launch commits every
layer; a single layer is the same call with a leading axis of 1.

- ``gdn_commit``: replays the path's logged (α, k̂, δ) (written by ``delta_rule.gdn_recurrent``) onto the
  recurrent state, with the forward's own float operations (``t = α·S; S = fma(k̂, δ, t)``): the result equals
  stepping the kept rows one by one, bit for bit. Reads and writes the state once.
  state f32 [NL, slots, Hv, Dk, Dv], log_k f32 [NL, R, Hk, Dk], log_d f32 [NL, R, Hv, Dv], log_a f32 [NL, R, Hv].
  grid (nseg, Hv * ceil(Dv/32), NL), block (32, 4).
- ``conv_commit``: new tail = last K-1 raw inputs of (old tail ++ path rows), from ``conv``'s ``xlog``.
  tail f32 [NL, slots, K-1, C], xlog f32 [NL, R, C]. grid-stride over (seg, layer, channel), 1-D.
- ``kv_compact``: moves the path's K/V cache rows (and e4m3 scales) from where the verify wrote them
  (``cache_idx[r]``) to consecutive positions ``seg_dst0[s] + depth`` (depth 0 = root), i.e. right after the
  committed length. Rows move in root-first order (a destination never overwrites a later source).
  k, v [NLf, slots, ctx, nKV, hd] (f32, uint16 bf16 bits or uint8 e4m3), k_scale, v_scale f32
  [NLf, slots, ctx, nKV] (zero-size arrays for non-e4m3 caches). grid (nseg, NLf * nKV), block 128.
Reference mirrored: ``tensorfold.reference.ops.delta_rule_step`` chains and ``causal_conv_step`` chains; the
KV move is a permutation (tested against numpy indexing).
"""

from __future__ import annotations

from numba import cuda, float32, int32

from tensorfold.kernels._device import IS_SIM, pdl_begin
from . import _kcache

VS = 32
NW = 4
NT = VS * NW
MAXDK = 128
KR = MAXDK // NW
MAXP = 64  # longest kept path
MAXP1 = MAXP + 1
MAXK = 8


@cuda.jit(device=True)
def _walk_chain(chain, leaf, parent, tid):
    """Thread 0 writes the kept path leaf-first into ``chain[:cnt]`` (at most MAXP rows) and ``cnt`` into
    ``chain[MAXP]``; after the barrier every thread returns ``cnt``. Call from block-uniform control flow."""
    if tid == 0:
        cnt = 0
        x = leaf
        while x >= 0 and cnt < MAXP:
            chain[cnt] = x
            cnt += 1
            x = parent[x]
        chain[MAXP] = cnt
    cuda.syncthreads()
    return chain[MAXP]


def gdn_commit(state, log_k, log_d, log_a, parent, seg_slot, seg_leaf):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    seg = cuda.blockIdx.x
    layer = cuda.blockIdx.z
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    tid = ty * VS + tx
    chain = cuda.shared.array(MAXP1, int32)
    W = cuda.shared.array((MAXDK, VS), float32)
    slot = seg_slot[seg]
    leaf = seg_leaf[seg]
    if slot < 0 or leaf < 0:
        return
    Hv = state.shape[2]
    Dk = state.shape[3]
    Dv = state.shape[4]
    Hk = log_k.shape[2]
    nsl = (Dv + VS - 1) // VS
    hv = cuda.blockIdx.y // nsl
    sl = cuda.blockIdx.y - hv * nsl
    kh = hv // (Hv // Hk)
    col = sl * VS + tx
    cnt = _walk_chain(chain, leaf, parent, tid)
    if col < Dv:
        buf = cuda.local.array(KR, float32)
        for t in range(KR):  # all loads in flight before the first use
            buf[t] = state[layer, slot, hv, min(ty + NW * t, Dk - 1), col]
        for t in range(KR):
            if ty + NW * t < Dk:
                W[ty + NW * t, tx] = buf[t]
        for t in range(cnt - 1, -1, -1):
            j = chain[t]
            al = log_a[layer, j, hv]
            dj = log_d[layer, j, hv, col]
            for i in range(ty, Dk, NW):
                tt = al * W[i, tx]
                W[i, tx] = cuda.fma(log_k[layer, j, kh, i], dj, tt)
        for i in range(ty, Dk, NW):
            state[layer, slot, hv, i, col] = W[i, tx]


def conv_commit(tail, xlog, parent, seg_slot, seg_leaf):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    NL = tail.shape[0]
    Km1 = tail.shape[2]
    Cc = tail.shape[3]
    nseg = seg_slot.shape[0]
    vals = cuda.local.array(MAXK, float32)
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < nseg * NL * Cc:
        s = i // (NL * Cc)
        rem = i - s * NL * Cc
        layer = rem // Cc
        c = rem - layer * Cc
        slot = seg_slot[s]
        leaf = seg_leaf[s]
        if slot >= 0 and leaf >= 0:
            node = leaf
            t = 0
            for j in range(Km1 - 1, -1, -1):
                if node >= 0:
                    vals[j] = xlog[layer, node, c]
                    node = parent[node]
                else:
                    vals[j] = tail[layer, slot, Km1 - 1 - t, c]
                    t += 1
            for j in range(Km1):
                tail[layer, slot, j, c] = vals[j]
        i += stride


def kv_compact(k, v, k_scale, v_scale, parent, cache_idx, seg_slot, seg_leaf, seg_dst0):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    seg = cuda.blockIdx.x
    NLf = k.shape[0]
    nKV = k.shape[3]
    hd = k.shape[4]
    layer = cuda.blockIdx.y // nKV
    h = cuda.blockIdx.y - layer * nKV
    tid = cuda.threadIdx.x
    chain = cuda.shared.array(MAXP1, int32)
    slot = seg_slot[seg]
    leaf = seg_leaf[seg]
    if slot < 0 or leaf < 0 or layer >= NLf:
        return
    cnt = _walk_chain(chain, leaf, parent, tid)
    dst0 = seg_dst0[seg]
    has_scale = k_scale.shape[0] > 0
    for t in range(cnt - 1, -1, -1):
        src = cache_idx[chain[t]]
        dst = dst0 + (cnt - 1 - t)
        if src != dst:
            for d in range(tid, hd, cuda.blockDim.x):
                k[layer, slot, dst, h, d] = k[layer, slot, src, h, d]
                v[layer, slot, dst, h, d] = v[layer, slot, src, h, d]
            if has_scale and tid == 0:
                k_scale[layer, slot, dst, h] = k_scale[layer, slot, src, h]
                v_scale[layer, slot, dst, h] = v_scale[layer, slot, src, h]
        cuda.syncthreads()


_I1 = "int32[::1]"
_F4 = "float32[:, :, :, ::1]"
_F5 = "float32[:, :, :, :, ::1]"
SIG_GDN = f"void({_F5}, {_F4}, {_F4}, float32[:, :, ::1], {_I1}, {_I1}, {_I1})"
SIG_CONV = f"void({_F4}, float32[:, :, ::1], {_I1}, {_I1}, {_I1})"


def _sig_kv(t):
    c5 = f"{t}[:, :, :, :, ::1]"
    return f"void({c5}, {c5}, {_F4}, {_F4}, {_I1}, {_I1}, {_I1}, {_I1}, {_I1})"


COMPILE_SPECS = [
    (gdn_commit, SIG_GDN),
    (conv_commit, SIG_CONV),
    (kv_compact, _sig_kv("uint16")),
    (kv_compact, _sig_kv("uint8")),
    (kv_compact, _sig_kv("float32")),
]
HOT: set = set()

k_gdn_commit = _kcache.kjit(gdn_commit)
k_conv_commit = _kcache.kjit(conv_commit)
k_kv_compact = _kcache.kjit(kv_compact)


def launch_gdn_commit(state, log_k, log_d, log_a, parent, seg_slot, seg_leaf, *, stream=0):
    NL, _, Hv, _, Dv = state.shape
    nseg = seg_slot.shape[0]
    k_gdn_commit[(nseg, Hv * ((Dv + VS - 1) // VS), NL), (VS, NW), stream](
        state, log_k, log_d, log_a, parent, seg_slot, seg_leaf)


def launch_conv_commit(tail, xlog, parent, seg_slot, seg_leaf, *, stream=0, blocks=None):
    n = seg_slot.shape[0] * tail.shape[0] * tail.shape[3]
    nb = blocks or max(1, min(2048, (n + 255) // 256))
    # grid-stride: any block size works; the simulator runs a Python thread per GPU thread
    k_conv_commit[nb, 32 if IS_SIM else 256, stream](tail, xlog, parent, seg_slot, seg_leaf)


def launch_kv_compact(k, v, k_scale, v_scale, parent, cache_idx, seg_slot, seg_leaf, seg_dst0, *, stream=0):
    nseg = seg_slot.shape[0]
    k_kv_compact[(nseg, k.shape[0] * k.shape[3]), NT, stream](
        k, v, k_scale, v_scale, parent, cache_idx, seg_slot, seg_leaf, seg_dst0)
