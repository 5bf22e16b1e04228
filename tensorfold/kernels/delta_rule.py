"""Gated delta rule kernels (issue 3, part B): gates, recurrence over a step / window / tree with a commit log,
and the chunked (WY) form for prompts.

Mirrors ``tensorfold.reference.ops`` (``gdn_gates``, ``gdn_prepare_qk``, ``delta_rule_step``,
``delta_rule_recurrent``, ``delta_rule_tree``, ``delta_rule_chunked``; qwen35.md §3.4-3.5). fp32 throughout.

Layouts (C-contiguous; per layer = one leading index of an all-layers array)
---------------------------------------------------------------------------
- ``qkv``   f32 [R, conv_dim]: the conv'd, SiLU'd channels (q [Hk*Dk] | k [Hk*Dk] | v [Hv*Dv]) of R rows.
- ``a, b``  f32 [R, Hv]: in_proj_a / in_proj_b outputs. ``A_log, dt_bias`` f32 [Hv].
- ``state`` f32 [slots, Hv, Dk, Dv] per layer (HF/FLA layout); allocate [layers_lin, slots, Hv, Dk, Dv].
- ``o``     f32 [R, Hv, Dv] (before the gated RMSNorm).
- Rows are grouped in *segments* (one stream's rows, consecutive): ``seg_row0[s]``, ``seg_len[s]``,
  ``seg_slot[s]`` (stream slot, < 0 = padding: the block does nothing), ``seg_commit[s]`` (1: write the state
  after the segment's last row back in place -- plain decode steps and always-committed windows).
  ``parent[r]`` int32, absolute row index of the row whose state row r continues, -1 = the committed state.
  A window is the chain parent[r] = r-1 (first row -1). Trees: parent[r] < r, within the segment, <= 16 rows.
- Commit log (what ``compact.gdn_commit`` replays onto the state for the kept path): ``log_k`` f32 [R, Hk, Dk]
  (k̂ of the row), ``log_d`` f32 [R, Hv, Dv] (δ = β(v − Sᵀk̂·α)), ``log_a`` f32 [R, Hv] (α = exp(g)). Pass arrays
  with zero rows to skip logging.

Why a log and not per-row state copies: a row's state is Hv*Dk*Dv*4 bytes (27B: 3 MiB per layer), its log entry
is Hk*Dk*4 + Hv*Dv*4 + Hv*4 bytes (27B: 32 KiB per layer, ~100x smaller). A tree row whose parent is not the
previous row rebuilds its parent's state in registers from the committed state (re-read from L2) by
replaying its ancestors' logged (α, k̂, δ) -- compute, not DRAM traffic. The replay applies exactly the same
float operations as the forward (``t = α·S; S = fma(k̂, δ, t)``), so a tree row is bit-identical to the same
row computed in a window along its branch, and ``compact.gdn_commit`` reproduces the stepped state bit for bit.

Launch geometry
---------------
- ``gdn_step`` (no logging: decode steps and committed windows, rows of a segment form a chain) and
  ``gdn_recurrent`` (logging: verify windows and trees): grid (Hv * ceil(Dv/16), nseg), block 128. A block owns a
  Dk x 16 column slice of one head's state in registers: thread = 4 value columns (one 16-byte load / store) x
  Dk/32 rows (row group tid // 4 + 32 t); the slice is read once and (commit) written once. Per row: q, k rows and
  gates per thread (all loads issued together), ‖q‖², ‖k‖² and Sᵀk in one reduction (per thread, xor butterfly
  over the row-group lanes, warps in order), then Sᵀq in a second: two barriers per row. Both kernels come from
  one source (``_make_recurrent``), so their rows agree bit for bit. ``gdn_recurrent`` adds the tree rebuild (below)
  and the log; 16 column slices give 128 blocks at B = 1 on the 2B model (16 heads).
- ``gdn_gates_kernel``: grid-stride over R*Hv, any 1-D geometry.
- ``gdn_prep``: grid (R', Hk), block 128, one warp a row (grid-stride): q̂ = l2norm(q)·Dk^-0.5, k̂ = l2norm(k),
  and g, β.
- ``gdn_chunk_intra``: grid (max_chunks, Hv, nseg), block 128: per (chunk, head) the WY factors
  U = T(β⊙V), W = T(β⊙e^c⊙K̂) and P = (Q̂K̂ᵀ)⊙Γ, plus c (cumulative log-decay).
- ``gdn_chunk_inter`` (``_v16``, ``_v8``): grid (nseg, Hv, ceil(Dv/w)), block (w, 128/w) for w = 32 / 16 / 8 value
  columns a block (``inter_width``: TENSORFOLD_CHUNK_INTER, default INTER_DEFAULT; same bits for every w; w = 32
  gives only 64 blocks at 2B): sequential over the chunks of a segment,
  S slice in shared memory; V' = U − W S, O = (e^c⊙Q̂) S + P V', S ← e^{c_n} S + (e^{c_n−c}⊙K̂)ᵀ V'. Writes
  the final state in place (prompts are committed). Each chunk is 3·Dk/32 + 2 tile stages; the next stage's tile
  is loaded into registers while the current one computes (software pipelining).
- The same pass on tensor cores (``delta_chunk_tc``, the default on a GPU; :func:`inter_tc`) replaces
  ``gdn_chunk_inter`` in :func:`launch_chunked` when Dk is a multiple of 16: other bits, about fp32 accuracy.
  Likewise ``delta_intra_tc`` for ``gdn_chunk_intra`` (the default on a GPU; ``delta_intra_tc.on``).
"""

from __future__ import annotations

import math
import os

import numpy as np
from numba import cuda, float32, int32

from ._device import FULL_MASK, IS_SIM, devfn, env_choice, pdl_begin, pdl_trigger, pdl_wait, warp_sum
from . import _kcache, delta_chunk_tc, delta_intra_tc
from .conv import silu32

VS = 32  # value columns per block (one warp's lanes)
NW = 4  # warps per block (rows of the state split across them)
NT = VS * NW
PREP_NW = NT // 32  # gdn_prep: rows a block (one warp each)
MAXDK = 128
MAXR = 16  # tree rows per segment (history kept in shared memory)
MAXR1 = MAXR + 1
CH = 64  # chunk length of the chunked form

_EPS = 1e-6
KR = MAXDK // NW  # state rows per thread


@cuda.jit(device=True)
def load_state_slice(W, state, slot, hv, col, ty, tx):
    """W[i, tx] = state[slot, hv, i, col] for this thread's rows i ≡ ty (mod NW): all KR loads are issued before
    the first use (clamped indices, no branch around a load), so their latencies overlap."""
    Dk = state.shape[2]
    buf = cuda.local.array(KR, float32)
    for t in range(KR):
        i = min(ty + NW * t, Dk - 1)
        buf[t] = state[slot, hv, i, col]
    for t in range(KR):
        i = ty + NW * t
        if i < Dk:
            W[i, tx] = buf[t]


@cuda.jit(device=True)
def gdn_gate(a, b, alog, dtb):
    """(g, beta) in fp32: g = -exp(A_log)·softplus(a + dt_bias) (threshold 20), beta = sigmoid(b)."""
    x = float32(a) + float32(dtb)
    if x > float32(20.0):
        sp = x
    else:
        sp = float32(math.log1p(math.exp(x)))
    g = -float32(math.exp(float32(alog))) * sp
    bb = float32(b)
    if bb >= float32(0.0):
        beta = float32(1.0) / (float32(1.0) + float32(math.exp(-bb)))
    else:
        e = float32(math.exp(bb))
        beta = e / (float32(1.0) + e)
    return float32(g), float32(beta)


def gdn_gates_kernel(a, b, A_log, dt_bias, g_out, beta_out):
    """g_out, beta_out [R, Hv] from a, b [R, Hv]."""
    R = a.shape[0]
    Hv = a.shape[1]
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < R * Hv:
        r = i // Hv
        h = i - r * Hv
        g, be = gdn_gate(a[r, h], b[r, h], A_log[h], dt_bias[h])
        g_out[r, h] = g
        beta_out[r, h] = be
        i += stride


# ----------------------------------------------------------------------------------------------------------------
# recurrence: step / window / tree
# ----------------------------------------------------------------------------------------------------------------
#
# Geometry shared by the lean step kernel (``gdn_step``) and the general one (``gdn_recurrent``): block = SNT
# threads owning an SVS-column slice of one value head's state (Dk x SVS, held in registers); thread tid owns
# value columns c0 = slice start + CPT * (tid % SCG) .. +CPT-1 (one 16-byte vector) and state rows
# i = tid // SCG + SRG * t, t < SKP. Sums over the Dk rows (‖q‖², ‖k‖², Sᵀk, Sᵀq) go: per thread over t in order,
# xor butterfly over the row-group lanes (offsets 4, 8, 16), then the SNW warps in order through shared memory.
# Both kernels run exactly this arithmetic through the same device functions, so a step, a window row and a tree
# row give the same bits.

CPT = 4  # value columns per thread (one 16-byte load / store)
SVS = 16  # value columns per block
SCG = SVS // CPT  # column groups per block (lanes tid % SCG)
SNT = 128  # threads per block
SRG = SNT // SCG  # row groups
SKP = MAXDK // SRG  # state rows per thread
SNW = SNT // 32  # warps per block
SKC = SKP * CPT  # state registers per thread
NGV = SNT // 32  # a lane's columns in the fused kernels' gated norm (Dv <= SNT, lane-strided)
_RGOFF = (4, 8, 16)  # lane bits that hold the row group inside a warp (SCG = 4)

if IS_SIM:

    def _sim_rg_sum(v):
        buf = cuda.shared.array(1024, np.object_)
        tid = cuda.threadIdx.x
        buf[tid] = v
        cuda.syncthreads()
        base = tid - (tid % 32)
        vals = list(buf[base:base + 32])
        for off in _RGOFF:
            vals = [vals[i] + vals[i ^ off] for i in range(32)]
        out = vals[tid % 32]
        cuda.syncthreads()
        return float32(out)

    _rg_sum = cuda.jit(device=True)(_sim_rg_sum)

    @cuda.jit(device=True)
    def _ld4(arr, i0, i1, i2, i3):
        return arr[i0, i1, i2, i3], arr[i0, i1, i2, i3 + 1], arr[i0, i1, i2, i3 + 2], arr[i0, i1, i2, i3 + 3]

    @cuda.jit(device=True)
    def _st4(arr, i0, i1, i2, i3, v0, v1, v2, v3):
        arr[i0, i1, i2, i3] = v0
        arr[i0, i1, i2, i3 + 1] = v1
        arr[i0, i1, i2, i3 + 2] = v2
        arr[i0, i1, i2, i3 + 3] = v3

    @cuda.jit(device=True)
    def _st4_3(arr, i0, i1, i2, v0, v1, v2, v3):
        arr[i0, i1, i2] = v0
        arr[i0, i1, i2 + 1] = v1
        arr[i0, i1, i2 + 2] = v2
        arr[i0, i1, i2 + 3] = v3

else:
    from llvmlite import ir as _ir
    from numba import types as _types
    from numba.cuda import cgutils as _cg
    from numba.cuda.extending import intrinsic as _intrinsic

    @devfn
    def _rg_sum(v):
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 4)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 8)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 16)
        return v

    def _ptr(context, builder, sig, args, nidx):
        arrty = sig.args[0]
        arr = args[0]
        idx = [context.cast(builder, args[1 + k], sig.args[1 + k], _types.intp) for k in range(nidx)]
        ary = context.make_array(arrty)(context, builder, value=arr)
        return _cg.get_item_pointer(context, builder, arrty, ary, idx, wraparound=False)

    def _f32_arr(arr, nd):
        return isinstance(arr, _types.Array) and arr.ndim == nd and arr.dtype == _types.float32

    @_intrinsic
    def _ld4(typingctx, arr, i0, i1, i2, i3):
        """16-byte ``ld.global.v4.f32`` of ``arr[i0, i1, i2, i3:i3+4]`` (coherent: the kernel writes arr too)."""
        if not _f32_arr(arr, 4):
            return None
        sig = _types.UniTuple(_types.float32, 4)(arr, i0, i1, i2, i3)

        def codegen(context, builder, sig, args):
            ptr = _ptr(context, builder, sig, args, 4)
            f32 = _ir.FloatType()
            st = _ir.LiteralStructType([f32, f32, f32, f32])
            asm = _ir.InlineAsm(_ir.FunctionType(st, [ptr.type]), "ld.global.v4.f32 {$0, $1, $2, $3}, [$4];",
                                "=f,=f,=f,=f,l", side_effect=True)
            res = builder.call(asm, [ptr])
            vals = [builder.extract_value(res, k) for k in range(4)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

    def _make_st4(nd):
        def typer(typingctx, arr, *rest):
            if not _f32_arr(arr, nd) or len(rest) != nd + 4:
                return None
            sig = _types.void(arr, *rest)

            def codegen(context, builder, sig, args):
                ptr = _ptr(context, builder, sig, args, nd)
                f32 = _ir.FloatType()
                vals = [context.cast(builder, args[1 + nd + k], sig.args[1 + nd + k], _types.float32)
                        for k in range(4)]
                asm = _ir.InlineAsm(_ir.FunctionType(_ir.VoidType(), [ptr.type, f32, f32, f32, f32]),
                                    "st.global.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f", side_effect=True)
                builder.call(asm, [ptr] + vals)
                return context.get_dummy_value()

            return sig, codegen

        return typer

    if True:  # explicit arities: numba intrinsics take fixed argument lists
        _st4_typer = _make_st4(4)
        _st4_3_typer = _make_st4(3)

        @_intrinsic
        def _st4(typingctx, arr, i0, i1, i2, i3, v0, v1, v2, v3):
            """16-byte ``st.global.v4.f32`` of (v0..v3) to ``arr[i0, i1, i2, i3:i3+4]``."""
            return _st4_typer(typingctx, arr, i0, i1, i2, i3, v0, v1, v2, v3)

        @_intrinsic
        def _st4_3(typingctx, arr, i0, i1, i2, v0, v1, v2, v3):
            """The same for a 3-d array."""
            return _st4_3_typer(typingctx, arr, i0, i1, i2, v0, v1, v2, v3)



if IS_SIM:

    @cuda.jit(device=True)
    def _ldcg3(arr, i0, i1, i2):
        return arr[i0, i1, i2]

else:

    @_intrinsic
    def _ldcg3(typingctx, arr, i0, i1, i2):
        """``ld.global.cg.f32`` of ``arr[i0, i1, i2]`` (L2, not L1: the value was written by another block of this
        launch, see the fused kernels' epilogue)."""
        if not _f32_arr(arr, 3):
            return None
        sig = _types.float32(arr, i0, i1, i2)

        def codegen(context, builder, sig, args):
            ptr = _ptr(context, builder, sig, args, 3)
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.FloatType(), [ptr.type]), "ld.global.cg.f32 $0, [$1];",
                                "=f,l", side_effect=True)
            return builder.call(asm, [ptr])

        return sig, codegen


CONVK = 4  # conv taps the fused kernels are built for (every Qwen3.5 size); other widths take the unfused path


@devfn
def _sigm(x):
    x = float32(x)
    if x >= float32(0.0):
        return float32(1.0) / (float32(1.0) + float32(math.exp(-x)))
    e = float32(math.exp(x))
    return e / (float32(1.0) + e)


@devfn
def _conv_ch(x, cw, tail, slot, src, ch):
    """silu(sum_j cw[ch, j] * window[j]) of channel ch, taps newest first (``conv.conv_rows``' order); src[s] is
    the s-th newest input: a row of x (>= 0) or the tail row -1 - src[s]. Both candidates are loaded (clamped
    indices) and one is selected, so the loads of all taps are independent."""
    acc = float32(0.0)
    for j in range(CONVK - 1, -1, -1):
        nd = src[CONVK - 1 - j]
        xr = x[max(nd, 0), ch]
        xt = tail[slot, max(-1 - nd, 0), ch]
        xv = xr if nd >= 0 else xt
        acc = cuda.fma(cw[ch, j], xv, acc)
    return silu32(acc)


def _make_recurrent(general, fused=False):
    """Kernel source for the lean step path (general=False) and the window / tree / logging path (True): one body,
    so both run the same float operations in the same order (the flags are compile-time constants).

    ``fused=True`` adds the layer's neighbours (``launch_fused``): ``qkv`` is then the RAW in_proj_qkv output; per
    row the block computes the causal conv + SiLU of the channels it reads once each into shared memory (the key
    head's q and k channels, the slice's v columns: the same fma order as ``conv.conv_rows``, taps along the row's
    parent chain, then the stream's conv tail; one more barrier a row), logs the raw rows into ``xlog`` (for
    ``compact.conv_commit``), and after its rows the last of a head's column-slice blocks to arrive (a per
    (segment, head) counter in ``ctr``, reset by that block) applies the gated RMSNorm of the head's rows (``o``
    re-read from L2) into ``gn`` with the arithmetic of ``norms.gated_rms_norm_k``. The unfused kernels get zero-size
    stand-ins for the extra arguments (those branches are compiled out). The fused kernels load a row's gate inputs
    ``a`` / ``b`` before the conv's loads, so their round trip overlaps the conv instead of following its barrier
    (session 42, same bits: 9B one stream +0.3 %, 2B +0.8 % on an H100)."""
    GEN = general
    FUSED = fused

    def kern(qkv, a, b, A_log, dt_bias, state, seg_row0, seg_len, seg_slot, seg_commit, parent, o, log_k, log_d,
             log_a, cw, tail, xlog, z, nw, gn, ctr, eps, act):
        pdl_trigger()  # kernels._pdl: the next launch may start now
        ru = cuda.shared.array((SNW, SVS), float32)
        rn = cuda.shared.array((SNW, 2), float32)
        ro = cuda.shared.array((SNW, SVS), float32)
        S = cuda.local.array(SKC, float32)
        qv = cuda.local.array(SKP, float32)
        kv = cuda.local.array(SKP, float32)
        vv = cuda.local.array(CPT, float32)
        dl = cuda.local.array(CPT, float32)
        if FUSED:
            src = cuda.local.array(CONVK, int32)
            cq = cuda.shared.array(MAXDK, float32)
            ck = cuda.shared.array(MAXDK, float32)
            cvs = cuda.shared.array(SVS, float32)
            flag = cuda.shared.array(1, int32)
            gov = cuda.local.array(NGV, float32)
            gzv = cuda.local.array(NGV, float32)
            gwv = cuda.local.array(NGV, float32)
        if GEN:
            khist = cuda.shared.array((MAXR, MAXDK), float32)
            dhist = cuda.shared.array((MAXR, SVS), float32)
            ahist = cuda.shared.array(MAXR, float32)
            chain = cuda.shared.array(MAXR1, int32)

        seg = cuda.blockIdx.y
        n = seg_len[seg]
        slot = seg_slot[seg]
        if n <= 0 or slot < 0:
            return
        row0 = seg_row0[seg]
        Hv = state.shape[1]
        Dk = state.shape[2]
        Dv = state.shape[3]
        nsl = (Dv + SVS - 1) // SVS
        hv = cuda.blockIdx.x // nsl
        sl = cuda.blockIdx.x - hv * nsl
        Hk = (qkv.shape[1] - Hv * Dv) // (2 * Dk)
        rep = Hv // Hk
        kh = hv // rep
        key_dim = Hk * Dk
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        cg = tid % SCG
        rg = tid // SCG
        c0 = sl * SVS + cg * CPT
        ok = c0 < Dv
        cc = min(c0, Dv - CPT)
        alog = A_log[hv]
        dtb = dt_bias[hv]
        qoff = kh * Dk
        koff = key_dim + kh * Dk
        voff = 2 * key_dim + hv * Dv + cc
        scale = float32(1.0 / math.sqrt(Dk))
        if GEN:
            logging = log_d.shape[0] > 0
            write_k = logging and sl == 0 and (hv - kh * rep) == 0
        if FUSED:
            logx = xlog.shape[0] > 0
            logqk = logx and sl == 0 and (hv - kh * rep) == 0  # one block a key head logs q / k

        # committed state slice -> registers (16-byte loads, all in flight before the first use)
        for t in range(SKP):
            i = min(rg + SRG * t, Dk - 1)
            x0, x1, x2, x3 = _ld4(state, slot, hv, i, cc)
            S[t * CPT] = x0
            S[t * CPT + 1] = x1
            S[t * CPT + 2] = x2
            S[t * CPT + 3] = x3
        for t in range(SKP):
            if not ok or rg + SRG * t >= Dk:
                for j in range(CPT):
                    S[t * CPT + j] = float32(0.0)
        # Everything above reads only the segment metadata, the layer's parameters and the committed state, which no
        # kernel of the same forward writes (host copies before the launch or graph replay; this layer's own kernel
        # or the commit launches in earlier forwards, all complete before a graph starts). So under PDL the state's
        # DRAM latency overlaps the previous kernel's tail; the in_proj rows (qkv, a, b, z) are read only after this.
        pdl_wait()
        bad = False
        cur = int32(-1)
        for r in range(row0, row0 + n):
            li = r - row0
            p = parent[r]
            if GEN:
                if p != cur:
                    # rebuild the parent's state: committed slice, then the ancestors' logged updates, root first
                    cuda.syncthreads()
                    if tid == 0:
                        cnt = 0
                        x = p
                        while x >= 0 and cnt < MAXR:
                            chain[cnt] = x - row0
                            cnt += 1
                            x = parent[x]
                        chain[MAXR] = cnt
                    cuda.syncthreads()
                    for t in range(SKP):
                        i = min(rg + SRG * t, Dk - 1)
                        x0, x1, x2, x3 = _ld4(state, slot, hv, i, cc)
                        S[t * CPT] = x0
                        S[t * CPT + 1] = x1
                        S[t * CPT + 2] = x2
                        S[t * CPT + 3] = x3
                    for t in range(SKP):
                        if not ok or rg + SRG * t >= Dk:
                            for j in range(CPT):
                                S[t * CPT + j] = float32(0.0)
                    cnt = chain[MAXR]
                    for e in range(cnt - 1, -1, -1):
                        jr = chain[e]
                        al = ahist[jr]
                        for j in range(CPT):
                            dl[j] = dhist[jr, cg * CPT + j]
                        for t in range(SKP):
                            kk = khist[jr, min(rg + SRG * t, MAXDK - 1)]
                            if rg + SRG * t >= Dk:
                                kk = float32(0.0)
                            for j in range(CPT):
                                tt = al * S[t * CPT + j]
                                S[t * CPT + j] = cuda.fma(kk, dl[j], tt)
                    cur = p
            else:
                if li > 0 and p != r - 1:
                    bad = True  # not a chain: this path keeps no history (trees need the logged path)
            # the row's inputs: q / k rows of this thread (0 past Dk), v columns, gate inputs
            if FUSED:
                av = a[r, hv]  # issued before the conv's loads (their barrier would otherwise come first)
                bv = b[r, hv]
                # the conv window of row r, newest first: rows along the parent chain, then the tail (oldest
                # first in ``tail``): src >= 0 is a row of qkv, src < 0 the tail row -1 - src
                node = r
                nt = 0
                for s_ in range(CONVK):
                    if node >= 0:
                        src[s_] = node
                        node = parent[node]
                    else:
                        src[s_] = -1 - (CONVK - 2 - nt)
                        nt += 1
                # the block's channels once each (thread tid: q and k channel tid of the key head, v column tid
                # of the slice) through shared memory; the previous row's reads are behind its two barriers
                for i in range(tid, Dk, SNT):
                    cq[i] = _conv_ch(qkv, cw, tail, slot, src, qoff + i)
                    ck[i] = _conv_ch(qkv, cw, tail, slot, src, koff + i)
                    if logqk:
                        xlog[r, qoff + i] = qkv[r, qoff + i]
                        xlog[r, koff + i] = qkv[r, koff + i]
                vc = sl * SVS + tid
                if tid < SVS and vc < Dv:
                    ch = 2 * key_dim + hv * Dv + vc
                    cvs[tid] = _conv_ch(qkv, cw, tail, slot, src, ch)
                    if logx:
                        xlog[r, ch] = qkv[r, ch]
                cuda.syncthreads()
                for t in range(SKP):
                    qv[t] = cq[min(rg + SRG * t, Dk - 1)]
                    kv[t] = ck[min(rg + SRG * t, Dk - 1)]
                for j in range(CPT):
                    vv[j] = cvs[min(cg * CPT + j, Dv - 1 - sl * SVS)]
            else:
                for t in range(SKP):
                    i = min(rg + SRG * t, Dk - 1)
                    qv[t] = qkv[r, qoff + i]
                    kv[t] = qkv[r, koff + i]
                for j in range(CPT):
                    vv[j] = qkv[r, voff + j]
                av = a[r, hv]
                bv = b[r, hv]
            for t in range(SKP):
                if rg + SRG * t >= Dk:
                    qv[t] = float32(0.0)
                    kv[t] = float32(0.0)
            g, beta = gdn_gate(av, bv, alog, dtb)
            alpha = float32(math.exp(g))
            # phase 1: S <- alpha S; partial sums of |q|^2, |k|^2, (alpha S)^T k over this thread's rows
            sq = float32(0.0)
            sk = float32(0.0)
            for t in range(SKP):
                sq = cuda.fma(qv[t], qv[t], sq)
                sk = cuda.fma(kv[t], kv[t], sk)
            for j in range(CPT):
                dl[j] = float32(0.0)
            for t in range(SKP):
                for j in range(CPT):
                    tt = alpha * S[t * CPT + j]
                    S[t * CPT + j] = tt
                    dl[j] = cuda.fma(tt, kv[t], dl[j])
            sq = _rg_sum(sq)
            sk = _rg_sum(sk)
            for j in range(CPT):
                dl[j] = _rg_sum(dl[j])
            if lane < SCG:
                for j in range(CPT):
                    ru[warp, cg * CPT + j] = dl[j]
                if lane == 0:
                    rn[warp, 0] = sq
                    rn[warp, 1] = sk
            cuda.syncthreads()
            sq = rn[0, 0]
            sk = rn[0, 1]
            for w in range(1, SNW):
                sq += rn[w, 0]
                sk += rn[w, 1]
            fq = (float32(1.0) / float32(math.sqrt(sq + float32(_EPS)))) * scale
            fk = float32(1.0) / float32(math.sqrt(sk + float32(_EPS)))
            for j in range(CPT):
                u = ru[0, cg * CPT + j]
                for w in range(1, SNW):
                    u += ru[w, cg * CPT + j]
                dl[j] = beta * (vv[j] - u * fk)
            # phase 2: S <- S + k^ delta^T; o = S^T q (scaled by fq after the sum)
            for t in range(SKP):
                kv[t] = kv[t] * fk
            oa0 = float32(0.0)
            oa1 = float32(0.0)
            oa2 = float32(0.0)
            oa3 = float32(0.0)
            for t in range(SKP):
                s0 = cuda.fma(kv[t], dl[0], S[t * CPT])
                s1 = cuda.fma(kv[t], dl[1], S[t * CPT + 1])
                s2 = cuda.fma(kv[t], dl[2], S[t * CPT + 2])
                s3 = cuda.fma(kv[t], dl[3], S[t * CPT + 3])
                S[t * CPT] = s0
                S[t * CPT + 1] = s1
                S[t * CPT + 2] = s2
                S[t * CPT + 3] = s3
                oa0 = cuda.fma(s0, qv[t], oa0)
                oa1 = cuda.fma(s1, qv[t], oa1)
                oa2 = cuda.fma(s2, qv[t], oa2)
                oa3 = cuda.fma(s3, qv[t], oa3)
            oa0 = _rg_sum(oa0)
            oa1 = _rg_sum(oa1)
            oa2 = _rg_sum(oa2)
            oa3 = _rg_sum(oa3)
            if lane < SCG:
                ro[warp, cg * CPT] = oa0
                ro[warp, cg * CPT + 1] = oa1
                ro[warp, cg * CPT + 2] = oa2
                ro[warp, cg * CPT + 3] = oa3
            if GEN:
                if li < MAXR:
                    if cg == 0:
                        for t in range(SKP):
                            if rg + SRG * t < Dk:
                                khist[li, rg + SRG * t] = kv[t]
                    if rg == 0:
                        for j in range(CPT):
                            dhist[li, cg * CPT + j] = dl[j]
                    if tid == 0:
                        ahist[li] = alpha
                if write_k and cg == 0:
                    for t in range(SKP):
                        if rg + SRG * t < Dk:
                            log_k[r, kh, rg + SRG * t] = kv[t]
                if logging:
                    if rg == 0 and ok:
                        _st4_3(log_d, r, hv, c0, dl[0], dl[1], dl[2], dl[3])
                    if sl == 0 and tid == 0:
                        log_a[r, hv] = alpha
            cuda.syncthreads()
            if rg == 0 and ok:
                o0 = ro[0, cg * CPT]
                o1 = ro[0, cg * CPT + 1]
                o2 = ro[0, cg * CPT + 2]
                o3 = ro[0, cg * CPT + 3]
                for w in range(1, SNW):
                    o0 += ro[w, cg * CPT]
                    o1 += ro[w, cg * CPT + 1]
                    o2 += ro[w, cg * CPT + 2]
                    o3 += ro[w, cg * CPT + 3]
                if bad:
                    o0 = float32(math.nan)
                    o1 = o0
                    o2 = o0
                    o3 = o0
                _st4_3(o, r, hv, c0, o0 * fq, o1 * fq, o2 * fq, o3 * fq)
            cur = r
        if FUSED:
            # arrival of this column slice: every thread's o stores fenced, one atomic per block -- before the
            # state write-back, so the fence does not wait for those stores
            cuda.threadfence()
            cuda.syncthreads()
            if tid == 0:
                flag[0] = cuda.atomic.add(ctr, (seg, hv), 1)
        if seg_commit[seg] != 0 and ok and not bad:
            for t in range(SKP):
                i = rg + SRG * t
                if i < Dk:
                    _st4(state, slot, hv, i, c0, S[t * CPT], S[t * CPT + 1], S[t * CPT + 2], S[t * CPT + 3])
        if FUSED:
            # the last slice of the head to arrive applies the gated RMSNorm to the head's rows (o re-read from L2),
            # one warp a row, with the arithmetic of ``norms.gated_rms_norm_k`` (lane-strided columns, the same
            # butterfly, the same products), so gn equals the three-launch path bit for bit
            cuda.syncthreads()
            if flag[0] == nsl - 1:
                if tid == 0:
                    ctr[seg, hv] = 0
                # a lane's o, z and norm-weight values are all loaded before the sum (one round trip, not two)
                for rb in range(row0, row0 + n, SNW):
                    r = rb + warp
                    valid = r < row0 + n
                    ss = float32(0.0)
                    if valid:
                        for i in range(NGV):
                            c = lane + 32 * i
                            if c < Dv:
                                gov[i] = _ldcg3(o, r, hv, c)
                                gzv[i] = z[r, hv * Dv + c]
                                gwv[i] = nw[c]
                        for i in range(NGV):
                            if lane + 32 * i < Dv:
                                v = gov[i]
                                ss += v * v
                    tot = warp_sum(ss)
                    if valid:
                        inv = float32(1.0) / float32(math.sqrt(tot / float32(Dv) + eps))
                        for i in range(NGV):
                            c = lane + 32 * i
                            if c < Dv:
                                zz = gzv[i]
                                if act == 0:
                                    gt = zz * _sigm(zz)
                                else:
                                    gt = _sigm(zz)
                                gn[r, hv * Dv + c] = gov[i] * inv * gwv[i] * gt

    return kern


gdn_recurrent = _make_recurrent(True)
gdn_recurrent.__name__ = gdn_recurrent.__qualname__ = "gdn_recurrent"
gdn_step = _make_recurrent(False)
gdn_step.__name__ = gdn_step.__qualname__ = "gdn_step"
gdn_fused_recurrent = _make_recurrent(True, True)
gdn_fused_recurrent.__name__ = gdn_fused_recurrent.__qualname__ = "gdn_fused_recurrent"
gdn_fused_step = _make_recurrent(False, True)
gdn_fused_step.__name__ = gdn_fused_step.__qualname__ = "gdn_fused_step"


# ----------------------------------------------------------------------------------------------------------------
# chunked form for prompts
# ----------------------------------------------------------------------------------------------------------------


def gdn_prep(qkv, a, b, A_log, dt_bias, qn, kn, g_out, beta_out):
    """qn, kn [R, Hk, Dk] = prepared q̂, k̂; g_out, beta_out [R, Hv]. grid (R', Hk), block NT: one warp a row
    (rows blockIdx.x * PREP_NW + warp, stepping gridDim.x * PREP_NW; the loop is block-uniform so that every warp
    takes part in each reduction, which the simulator needs), squares summed per lane then across the warp. Any
    grid gives the same bits."""
    R = qkv.shape[0]
    Hk = qn.shape[1]
    Dk = qn.shape[2]
    Hv = a.shape[1]
    key_dim = Hk * Dk
    h = cuda.blockIdx.y
    tid = cuda.threadIdx.x
    w = tid // 32
    lane = tid % 32
    base = cuda.blockIdx.x * PREP_NW
    while base < R:
        r = base + w
        rr = min(r, R - 1)
        sq = float32(0.0)
        sk = float32(0.0)
        for d in range(lane, Dk, 32):
            qv = qkv[rr, h * Dk + d]
            kv = qkv[rr, key_dim + h * Dk + d]
            sq += qv * qv
            sk += kv * kv
        sq = warp_sum(sq)
        sk = warp_sum(sk)
        if r < R:
            fq = (float32(1.0) / float32(math.sqrt(sq + float32(_EPS)))) * float32(1.0 / math.sqrt(Dk))
            fk = float32(1.0) / float32(math.sqrt(sk + float32(_EPS)))
            for d in range(lane, Dk, 32):
                qn[r, h, d] = qkv[r, h * Dk + d] * fq
                kn[r, h, d] = qkv[r, key_dim + h * Dk + d] * fk
            rep = Hv // Hk
            for j in range(lane, rep, 32):
                hv = h * rep + j
                g, be = gdn_gate(a[r, hv], b[r, hv], A_log[hv], dt_bias[hv])
                g_out[r, hv] = g
                beta_out[r, hv] = be
        base += cuda.gridDim.x * PREP_NW


def gdn_chunk_intra(qn, kn, qkv, g, beta, seg_row0, seg_len, cum, P, U, Wm):
    """Per (chunk, value head, segment): cum [R, Hv] (inclusive cumsum of g in the chunk), P [R, Hv, CH]
    ((Q̂K̂ᵀ)⊙Γ, row i's entries j <= i), U [R, Hv, Dv], Wm [R, Hv, Dk]. Shared: A 16 KiB + X 32 KiB.

    K̂K̂ᵀ and Q̂K̂ᵀ are register-tiled (thread = 8 rows x 4 columns) over 32-wide d slices staged in X
    (transposed, X[dd, j]); the triangular solve keeps each thread's own column in X."""
    c = cuda.blockIdx.x
    hv = cuda.blockIdx.y
    seg = cuda.blockIdx.z
    tid = cuda.threadIdx.x
    A = cuda.shared.array((CH, CH), float32)
    Xs = cuda.shared.array((CH, NT), float32)
    acc = cuda.local.array(32, float32)
    kj = cuda.local.array(4, float32)
    n_all = seg_len[seg]
    r0 = seg_row0[seg] + c * CH
    n = min(CH, n_all - c * CH)
    if n <= 0:
        return
    Hv = g.shape[1]
    Hk = qn.shape[1]
    Dk = qn.shape[2]
    Dv = U.shape[2]
    kh = hv // (Hv // Hk)
    voff = 2 * Hk * Dk + hv * Dv
    # c = inclusive cumsum of g: the chunk's g loaded in parallel into A's row 0 (unused by the strictly lower A),
    # summed there by one thread (no global load behind a global store); the solve reads exp(c) from there
    if tid < n:
        A[0, tid] = g[r0 + tid, hv]
    cuda.syncthreads()
    if tid == 0:
        cs = float32(0.0)
        for i in range(n):
            cs += A[0, i]
            A[0, i] = cs
            cum[r0 + i, hv] = cs
    i0 = (tid // 16) * 8
    j0 = (tid % 16) * 4
    for pas in range(2):  # 0: A = β k̂_i·k̂_j Γ (j < i); 1: P = q̂_i·k̂_j Γ (j <= i)
        for e in range(32):
            acc[e] = float32(0.0)
        for d0 in range(0, Dk, 32):
            cuda.syncthreads()
            for e in range(tid, 32 * CH, NT):
                j = e // 32
                dd = e - j * 32
                kv = float32(0.0)
                lv = float32(0.0)
                if j < n and d0 + dd < Dk:
                    kv = kn[r0 + j, kh, d0 + dd]
                    if pas == 0:
                        lv = kv
                    else:
                        lv = qn[r0 + j, kh, d0 + dd]
                Xs[dd, j] = kv
                Xs[32 + dd, j] = lv
            cuda.syncthreads()
            for dd in range(32):
                for jj in range(4):
                    kj[jj] = Xs[dd, j0 + jj]
                for ii in range(8):
                    li = Xs[32 + dd, i0 + ii]
                    for jj in range(4):
                        acc[ii * 4 + jj] = cuda.fma(li, kj[jj], acc[ii * 4 + jj])
        for ii in range(8):
            i = i0 + ii
            for jj in range(4):
                j = j0 + jj
                if i < n and j <= i:
                    gam = float32(math.exp(cum[r0 + i, hv] - cum[r0 + j, hv]))
                    if pas == 0:
                        if j < i:
                            A[i, j] = beta[r0 + i, hv] * acc[ii * 4 + jj] * gam
                    else:
                        P[r0 + i, hv, j] = acc[ii * 4 + jj] * gam
    cuda.syncthreads()
    # forward substitution, one column per thread (its own column of Xs): X_i = rhs_i - sum_{j<i} A_ij X_j.
    # The column's right-hand sides are staged in Xs first (loads independent of each other and of any store, so
    # they overlap), then solved in place; A's row 0 (the cumsum) is read before the solve overwrites nothing in A.
    for col in range(tid, Dv + Dk, NT):
        for i in range(n):
            if col < Dv:
                x = beta[r0 + i, hv] * qkv[r0 + i, voff + col]
            else:
                x = beta[r0 + i, hv] * float32(math.exp(A[0, i])) * kn[r0 + i, kh, col - Dv]
            Xs[i, tid] = x
        for i in range(n):
            x = Xs[i, tid]
            for j in range(i):
                x -= A[i, j] * Xs[j, tid]
            Xs[i, tid] = x
            if col < Dv:
                U[r0 + i, hv, col] = x
            else:
                Wm[r0 + i, hv, col - Dv] = x


RI = CH // NW  # chunk rows per thread in the inter pass
KT = 32  # columns of a staged tile
TL = CH * KT // NT  # tile elements per thread
KQ = KT // NW  # state rows per thread within a tile


@cuda.jit(device=True)
def _fetch_tile(buf, src, r0, n, h, k0, kdim, tid):
    """buf[t] = src[r0 + i, h, k0 + kk] for this thread's TL elements (e = tid + NT*t, i = e // KT, kk = e % KT)
    of a CH x KT tile; rows past n repeat row n-1 (callers ignore them), columns past kdim are 0. Only loads (no
    branch around a load), so a caller can issue them and compute on something else while they are in flight."""
    for t in range(TL):
        e = tid + NT * t
        i = e // KT
        kk = e - i * KT
        v = src[r0 + min(i, n - 1), h, min(k0 + kk, kdim - 1)]
        if k0 + kk >= kdim:
            v = float32(0.0)
        buf[t] = v


@cuda.jit(device=True)
def _put_tile(T, buf, tid):
    """T[i, kk] = the elements :func:`_fetch_tile` loaded into buf."""
    for t in range(TL):
        e = tid + NT * t
        i = e // KT
        T[i, e - i * KT] = buf[t]


@cuda.jit(device=True)
def _fetch_stage(buf, s, nk, Wm, qn, P, kn, r0, n, hv, kh, Dk, tid):
    """Tile of stage s of a chunk: s < nk: W[:, s*KT:]; < 2nk: Q̂; < 2nk+2: P[:, j0:] (j0 = 0, KT); else K̂."""
    if s < nk:
        _fetch_tile(buf, Wm, r0, n, hv, s * KT, Dk, tid)
    elif s < 2 * nk:
        _fetch_tile(buf, qn, r0, n, kh, (s - nk) * KT, Dk, tid)
    elif s < 2 * nk + 2:
        _fetch_tile(buf, P, r0, n, hv, (s - 2 * nk) * KT, CH, tid)
    else:
        _fetch_tile(buf, kn, r0, n, kh, (s - 2 * nk - 2) * KT, Dk, tid)


def _make_inter(vsi: int):
    """The inter pass with ``vsi`` value columns per block (``NT // vsi`` warps' worth of row groups): same
    arithmetic and summation orders as any other ``vsi`` (outputs and states agree bit for bit), grid
    ``(nseg, Hv, ceil(Dv / vsi))``, block ``(vsi, NT // vsi)``. Narrower slices give more blocks for the one
    sequential pass (2B at 32 columns: 16 heads x 4 = 64 blocks on 132 SMs)."""
    VSI = vsi
    NWI = NT // VSI
    RII = CH // NWI
    KQI = KT // NWI
    KRI = MAXDK // NWI
    KTP = KT + 1 if VSI < 32 else KT  # padded tile rows: lanes of one warp read two or more tile rows

    def kern(qn, kn, cum, P, U, Wm, state, seg_row0, seg_len, seg_slot, o):
        pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
        seg = cuda.blockIdx.x
        hv = cuda.blockIdx.y
        sl = cuda.blockIdx.z
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * VSI + tx
        S = cuda.shared.array((MAXDK, VSI), float32)
        Vp = cuda.shared.array((CH, VSI), float32)
        Tl = cuda.shared.array((CH, KTP), float32)
        ec = cuda.shared.array(CH, float32)
        dec = cuda.shared.array(CH, float32)
        acc = cuda.local.array(RII, float32)
        uu = cuda.local.array(RII, float32)
        sacc = cuda.local.array(KQI, float32)
        buf = cuda.local.array(TL, float32)
        sbuf = cuda.local.array(KRI, float32)
        n_all = seg_len[seg]
        slot = seg_slot[seg]
        if n_all <= 0 or slot < 0:
            return
        row00 = seg_row0[seg]
        Dk = state.shape[2]
        Dv = state.shape[3]
        Hv = state.shape[1]
        Hk = qn.shape[1]
        kh = hv // (Hv // Hk)
        col = sl * VSI + tx
        colok = col < Dv
        cl = min(col, Dv - 1)
        nk = (Dk + KT - 1) // KT
        nst = 3 * nk + 2
        if colok:
            for t in range(KRI):
                sbuf[t] = state[slot, hv, min(ty + NWI * t, Dk - 1), col]
            for t in range(KRI):
                i = ty + NWI * t
                if i < Dk:
                    S[i, tx] = sbuf[t]
        nch = (n_all + CH - 1) // CH
        _fetch_stage(buf, 0, nk, Wm, qn, P, kn, row00, min(CH, n_all), hv, kh, Dk, tid)
        for c in range(nch):
            r0 = row00 + c * CH
            n = min(CH, n_all - c * CH)
            cn = cum[r0 + n - 1, hv]
            for ii in range(RII):
                uu[ii] = U[r0 + min(ty + NWI * ii, n - 1), hv, cl]
            cuda.syncthreads()
            for i in range(tid, n, NT):
                ci = cum[r0 + i, hv]
                ec[i] = float32(math.exp(ci))
                dec[i] = float32(math.exp(cn - ci))
            ecn = float32(math.exp(cn))
            for ii in range(RII):
                acc[ii] = float32(0.0)
            for s in range(nst):
                cuda.syncthreads()
                _put_tile(Tl, buf, tid)
                cuda.syncthreads()
                fs = s + 1
                fr0 = r0
                fn = n
                if fs == nst:
                    fs = 0
                    fr0 = r0 + CH
                    fn = min(CH, n_all - (c + 1) * CH)
                if fn > 0:
                    _fetch_stage(buf, fs, nk, Wm, qn, P, kn, fr0, fn, hv, kh, Dk, tid)
                if s < 2 * nk:
                    # V' = U - W S (s < nk), then (e^c q) S
                    k0 = (s if s < nk else s - nk) * KT
                    for kk in range(min(KT, Dk - k0)):
                        sv = S[k0 + kk, tx]
                        for ii in range(RII):
                            acc[ii] = cuda.fma(Tl[ty + NWI * ii, kk], sv, acc[ii])
                    if s == nk - 1:
                        if colok:
                            for ii in range(RII):
                                i = ty + NWI * ii
                                if i < n:
                                    Vp[i, tx] = uu[ii] - acc[ii]
                        for ii in range(RII):
                            acc[ii] = float32(0.0)
                    elif s == 2 * nk - 1:
                        for ii in range(RII):
                            acc[ii] = acc[ii] * ec[min(ty + NWI * ii, n - 1)]
                elif s < 2 * nk + 2:
                    # O += P V' (P tile j0; rows past n and j > i are zero)
                    j0 = (s - 2 * nk) * KT
                    for jj in range(min(KT, n - j0)):
                        j = j0 + jj
                        vj = Vp[j, tx]
                        for ii in range(RII):
                            pv = Tl[ty + NWI * ii, jj]
                            if j > ty + NWI * ii:
                                pv = float32(0.0)
                            acc[ii] = cuda.fma(pv, vj, acc[ii])
                    if s == 2 * nk + 1 and colok:
                        for ii in range(RII):
                            i = ty + NWI * ii
                            if i < n:
                                o[r0 + i, hv, col] = acc[ii]
                else:
                    # S <- e^{c_n} S + (e^{c_n - c} K)^T V' on rows k0.. (Tl[j, kk] = k[r0 + j, k0 + kk])
                    k0 = (s - 2 * nk - 2) * KT
                    for q in range(KQI):
                        sacc[q] = float32(0.0)
                    for j in range(n):
                        vp = Vp[j, tx] * dec[j]
                        for q in range(KQI):
                            sacc[q] = cuda.fma(Tl[j, ty + NWI * q], vp, sacc[q])
                    if colok:
                        for q in range(KQI):
                            k = k0 + ty + NWI * q
                            if k < Dk:
                                S[k, tx] = cuda.fma(ecn, S[k, tx], sacc[q])
        cuda.syncthreads()
        if colok:
            for i in range(ty, Dk, NWI):
                state[slot, hv, i, col] = S[i, tx]

    kern.__name__ = kern.__qualname__ = "gdn_chunk_inter" if VSI == VS else f"gdn_chunk_inter_v{VSI}"
    return kern


INTER_WIDTHS = (32, 16, 8)  # value columns per inter-pass block; TENSORFOLD_CHUNK_INTER picks one
INTER_DEFAULT = 16
gdn_chunk_inter = _make_inter(VS)
_INTER_PY = {w: (gdn_chunk_inter if w == VS else _make_inter(w)) for w in INTER_WIDTHS}


# ----------------------------------------------------------------------------------------------------------------
# jit + host launchers
# ----------------------------------------------------------------------------------------------------------------

_F1 = "float32[::1]"
_F2 = "float32[:, ::1]"
_F3 = "float32[:, :, ::1]"
_F4 = "float32[:, :, :, ::1]"
_I1 = "int32[::1]"

SIG_GATES = f"void({_F2}, {_F2}, {_F1}, {_F1}, {_F2}, {_F2})"
_A2 = "float32[:, :]"  # column blocks of the fused input projection (strided rows)
_TAIL = (f"{_F2}, {_F3}, {_F2}, {_A2}, {_F1}, {_F2}, int32[:, ::1], float32, int32)")
SIG_RECURRENT = (f"void({_F2}, {_A2}, {_A2}, {_F1}, {_F1}, {_F4}, {_I1}, {_I1}, {_I1}, {_I1}, {_I1}, "
                 f"{_F3}, {_F3}, {_F3}, {_F2}, " + _TAIL)
# fused: raw qkv, z, a, b are column views of the GEMV output u [R, C + Vd + 2 Hv] (strided rows)
SIG_FUSED = (f"void({_A2}, {_A2}, {_A2}, {_F1}, {_F1}, {_F4}, {_I1}, {_I1}, {_I1}, {_I1}, {_I1}, "
             f"{_F3}, {_F3}, {_F3}, {_F2}, " + _TAIL)
SIG_PREP = f"void({_F2}, {_F2}, {_F2}, {_F1}, {_F1}, {_F3}, {_F3}, {_F2}, {_F2})"
SIG_INTRA = f"void({_F3}, {_F3}, {_F2}, {_F2}, {_F2}, {_I1}, {_I1}, {_F2}, {_F3}, {_F3}, {_F3})"
SIG_INTER = f"void({_F3}, {_F3}, {_F2}, {_F3}, {_F3}, {_F3}, {_F4}, {_I1}, {_I1}, {_I1}, {_F3})"

COMPILE_SPECS = [
    (gdn_gates_kernel, SIG_GATES),
    (gdn_recurrent, SIG_RECURRENT),
    (gdn_step, SIG_RECURRENT),
    (gdn_fused_recurrent, SIG_FUSED),
    (gdn_fused_step, SIG_FUSED),
    (gdn_prep, SIG_PREP),
    (gdn_chunk_intra, SIG_INTRA),
    (gdn_chunk_inter, SIG_INTER),
] + [(_INTER_PY[w], SIG_INTER) for w in INTER_WIDTHS if w != VS]
HOT = {"gdn_recurrent", "gdn_step", "gdn_fused_recurrent", "gdn_fused_step"}

k_gates = _kcache.kjit(gdn_gates_kernel)
k_recurrent = _kcache.kjit(gdn_recurrent)
k_step = _kcache.kjit(gdn_step)
k_fused_recurrent = _kcache.kjit(gdn_fused_recurrent)
k_fused_step = _kcache.kjit(gdn_fused_step)
k_prep = _kcache.kjit(gdn_prep)
k_chunk_intra = _kcache.kjit(gdn_chunk_intra)
k_chunk_inter = _kcache.kjit(gdn_chunk_inter)
_K_INTER = {VS: k_chunk_inter}


_K_STEP_CAP: dict = {}


def step_regs() -> int:
    """``TENSORFOLD_GDN_STEP_REGS`` (read at each launch; ``0`` the default, ``96``, ``80`` or ``64``): a register cap
    for the lean step kernel (``gdn_step``: decode steps and committed windows of many streams). Uncapped, ptxas sm_90
    gives it 127 registers, so 4 of its 128-thread blocks fit an SM; each block moves only an 8 KB state slice in and
    out, one phase after another, so few blocks an SM leave DRAM idle between a block's loads. Capped at 96 / 80 /
    64: 5 / 6 / 8 blocks an SM, with 96 / 160 / 232 bytes of spills a thread (ptxas, session 52). The same PTX, so
    the same bits. Opt-in until timed (at 32 streams the 9B step kernel moved its 3.2 GB at 63 % of copy)."""
    return int(env_choice("TENSORFOLD_GDN_STEP_REGS", "0", ("0", "96", "80", "64"), "GDN step register cap"))


def _step_kernel():
    """``k_step``, or its copy compiled under :func:`step_regs`'s cap (its own name, so the disk cache keeps both)."""
    cap = step_regs()
    if not cap or IS_SIM:  # the simulator has no registers to cap
        return k_step
    if cap not in _K_STEP_CAP:
        fn = _make_recurrent(False)
        fn.__name__ = fn.__qualname__ = f"gdn_step_r{cap}"
        _K_STEP_CAP[cap] = _kcache.kjit(fn, max_registers=cap)
    return _K_STEP_CAP[cap]


def inter_width(width=None) -> int:
    """Value columns per inter-pass block: ``width``, else ``TENSORFOLD_CHUNK_INTER`` (read at each launch, for
    A/B runs in one process), else INTER_DEFAULT."""
    w = int(width or os.environ.get("TENSORFOLD_CHUNK_INTER") or INTER_DEFAULT)
    if w not in INTER_WIDTHS:
        raise ValueError(f"chunked inter pass: width {w} not in {INTER_WIDTHS}")
    return w


def _inter_kernel(w):
    if w not in _K_INTER:
        _K_INTER[w] = _kcache.kjit(_INTER_PY[w])
    return _K_INTER[w]


def launch_gates(a, b, A_log, dt_bias, g_out, beta_out, *, stream=0, blocks=None):
    n = a.shape[0] * a.shape[1]
    nb = blocks or max(1, min(1024, (n + 127) // 128))
    k_gates[nb, 128, stream](a, b, A_log, dt_bias, g_out, beta_out)


def launch_recurrent(qkv, a, b, A_log, dt_bias, state, seg_row0, seg_len, seg_slot, seg_commit, parent,
                     o, log_k, log_d, log_a, *, nseg=None, stream=0):
    """One launch over ``nseg`` segments (default: seg_len.shape[0]). See the module docstring for the layouts.

    Without logging (``log_d`` has zero rows) the lean ``gdn_step`` runs: each segment's rows must form a chain
    (parent[r] = r - 1 after the first row; a row that does not gets NaN outputs and its segment is not committed);
    with logging, ``gdn_recurrent`` (windows and trees). Both do the same arithmetic, so rows agree bit for bit.
    Needs Dv % 4 == 0, Dk <= 128 and 16-byte aligned ``state`` / ``o`` / ``log_d`` rows (device allocations)."""
    Hv, Dk, Dv = state.shape[1], state.shape[2], state.shape[3]
    if Dv % CPT or Dk > MAXDK:
        raise ValueError(f"launch_recurrent: needs Dv % {CPT} == 0 and Dk <= {MAXDK} (Dk {Dk}, Dv {Dv})")
    ns = seg_len.shape[0] if nseg is None else nseg
    k = k_recurrent if log_d.shape[0] > 0 else _step_kernel()
    cw, tail, xlog, z, nw, gn, cnt = _no_fuse()
    k[(Hv * ((Dv + SVS - 1) // SVS), ns), SNT, stream](
        qkv, a, b, A_log, dt_bias, state, seg_row0, seg_len, seg_slot, seg_commit, parent, o, log_k, log_d, log_a,
        cw, tail, xlog, z, nw, gn, cnt, np.float32(0.0), np.int32(0))


_NO_FUSE: list = []


def _no_fuse():
    """Zero-size stand-ins for the fused-only arguments of the unfused kernels (allocated once, per context)."""
    if not _NO_FUSE:
        f = np.float32
        d = cuda.device_array
        _NO_FUSE.append((d((0, CONVK), f), d((0, CONVK - 1, 4), f), d((0, 4), f), d((0, 4), f), d(4, f), d((0, 4), f),
                         d((0, 4), np.int32)))
    return _NO_FUSE[0]


FUSED_AUTO_ROWS = 2  # TENSORFOLD_GDN_FUSED=auto: the fused kernel for launches of at most this many rows


def fused_on(rows: int = 1) -> bool:
    """Whether the runtime's step / verify launch of ``rows`` rows uses :func:`launch_fused`
    (``TENSORFOLD_GDN_FUSED``, read at each launch): "1" always, "auto" (the default) for at most FUSED_AUTO_ROWS
    rows, "0" never. The choice may depend on the row count because both paths give the same bits.

    Measured on the H200 at 4ae7b79 (benchmarks/results/fuse_2026-11-30_4ae7b79.md, 2B, graphs): always-fused
    decode 530.9 -> 564.5 tok/s at 1 stream, 3,586.9 -> 3,438.2 at 8 (its kernel, 9.1 us a layer at one row,
    replaces 11.9 us of three; at 8 rows its 1,024 blocks each redo the key head's conv). "auto" at e95a453
    (benchmarks/results/session11_2026-11-30.md, 2B, graphs) against "0": 554.7 -> 586.4 tok/s at 1 stream,
    1,078.7 -> 1,099.7 at 2, 3,697 -> 3,765 at 8 (unfused there), its GPU kernel tests passing; hence the default."""
    v = os.environ.get("TENSORFOLD_GDN_FUSED", "auto")
    return v == "1" or (v == "auto" and rows <= FUSED_AUTO_ROWS)


def fused_ok(Dk, Dv, K) -> bool:
    """Shapes :func:`launch_fused` handles: conv width CONVK, Dv % 4 == 0, Dv <= SNT (one column a thread in the
    norm epilogue), Dk <= MAXDK."""
    return K == CONVK and Dv % CPT == 0 and Dv <= SNT and Dk <= MAXDK


def fused_counters(nseg, Hv):
    """The zeroed int32 [nseg, Hv] counters :func:`launch_fused` needs (every launch leaves them zero again)."""
    return cuda.to_device(np.zeros((max(1, nseg), Hv), np.int32))


def launch_fused(x, cw, tail, xlog, z, nw, a, b, A_log, dt_bias, state, seg_row0, seg_len, seg_slot, seg_commit,
                 parent, o, gn, cnt, log_k, log_d, log_a, eps, act="silu", *, nseg=None, stream=0):
    """conv + SiLU -> gates, l2 norms, delta rule -> gated RMSNorm of the step / window / tree rows of one layer
    in one launch (what ``conv.launch_conv`` + :func:`launch_recurrent` + ``norms.launch_gated_rms_norm`` do in
    three).

    x f32 [R, C] RAW in_proj_qkv rows (any row stride), cw f32 [C, CONVK], tail f32 [slots, CONVK-1, C] (read
    only; ``compact.conv_commit`` commits from ``xlog``), xlog f32 [>= R, C] raw rows out (or zero rows), z f32
    [R, Hv*Dv] gate rows, nw f32 [Dv] norm weight, a, b f32 [R, Hv]; state, segments, parent, logs as in
    :func:`launch_recurrent`; o f32 [R, Hv, Dv] scratch (the pre-norm output), gn f32 [R, Hv*Dv] result; cnt int32
    [>= nseg, >= Hv] zeroed counters (:func:`fused_counters`). ``act``: "silu" / "swish" or "sigmoid".
    Same geometry as :func:`launch_recurrent`; the lean kernel without logs (chains only)."""
    Hv, Dk, Dv = state.shape[1], state.shape[2], state.shape[3]
    if not fused_ok(Dk, Dv, cw.shape[1]):
        raise ValueError(f"launch_fused: needs conv width {CONVK}, Dv % {CPT} == 0, Dv <= {SNT}, Dk <= {MAXDK} "
                         f"(K {cw.shape[1]}, Dk {Dk}, Dv {Dv})")
    ns = seg_len.shape[0] if nseg is None else nseg
    if cnt.shape[0] < ns or cnt.shape[1] < Hv:
        raise ValueError(f"launch_fused: counters {cnt.shape} for {ns} segments x {Hv} heads")
    k = k_fused_recurrent if log_d.shape[0] > 0 else k_fused_step
    ac = 0 if act in ("silu", "swish") else 1
    k[(Hv * ((Dv + SVS - 1) // SVS), ns), SNT, stream](
        x, a, b, A_log, dt_bias, state, seg_row0, seg_len, seg_slot, seg_commit, parent, o, log_k, log_d, log_a,
        cw, tail, xlog, z, nw, gn, cnt, np.float32(eps), np.int32(ac))


# TENSORFOLD_CHUNK_TC when unset: 16 on a GPU (session 24, 8,192 tokens of one layer, CUDA-core -> tensor-core
# inter pass at 16 columns: 2B 7,989 -> 4,212 us, 27B 18,288 -> 7,524 us before the batched loads); the CUDA-core
# pass in the simulator, where the simulated mma is slow (its own test: tests/kernels/test_sim_chunk_tc.py)
TC_DEFAULT = "0" if IS_SIM else "16"


def inter_tc(tc=None) -> int:
    """Value columns a block of the tensor-core inter pass (``delta_chunk_tc``), 0 for the CUDA-core pass: ``tc``,
    else ``TENSORFOLD_CHUNK_TC`` (read at each launch: "0", "8" or "16"), else TC_DEFAULT. Its widths give the same
    bits as each other (an mma column depends on its own B column only), other bits than the CUDA-core pass."""
    if tc is not None:
        return int(env_choice(None, str(tc), ("0", "8", "16"), "chunked inter pass: tc"))
    return int(env_choice("TENSORFOLD_CHUNK_TC", TC_DEFAULT, ("0", "8", "16"), "chunked inter pass"))


def launch_chunked(qkv, a, b, A_log, dt_bias, state, seg_row0, seg_len, seg_slot, o, work, *, max_rows_per_seg,
                   stream=0, prep_blocks=None, inter=None, tc=None, intra_tc=None):
    """Prompt path: prep (l2norm + gates) -> intra-chunk WY factors -> sequential inter-chunk pass.

    ``work`` = dict of scratch device arrays from :func:`chunk_workspace` (sized for R rows). The final state
    of each segment is written to ``state[slot]`` (its initial value is the starting state). ``tc``: the
    tensor-core inter pass's width (:func:`inter_tc`; 0: the CUDA-core pass, whose ``inter``, value columns per
    block, :func:`inter_width`, gives the same bits at every width). Dk not a multiple of 16 takes the CUDA-core
    pass. ``intra_tc`` (else ``delta_intra_tc.on()``: ``TENSORFOLD_CHUNK_INTRA_TC``, on by default on a GPU): the
    intra pass on tensor cores (``delta_intra_tc``; other bits than the CUDA-core intra pass).
    """
    R = qkv.shape[0]
    Hv, Dv = state.shape[1], state.shape[3]
    Hk = work["qn"].shape[1]
    nseg = seg_len.shape[0]
    pb = prep_blocks or max(1, min((R + PREP_NW - 1) // PREP_NW, 4096))
    k_prep[(pb, Hk), NT, stream](qkv, a, b, A_log, dt_bias, work["qn"], work["kn"], work["g"], work["beta"])
    nch = (max_rows_per_seg + CH - 1) // CH
    if (delta_intra_tc.on() if intra_tc is None else intra_tc) and delta_intra_tc.ok(work["qn"].shape[2]):
        delta_intra_tc.launch(work["qn"], work["kn"], qkv, work["g"], work["beta"], seg_row0, seg_len, work["cum"],
                              work["P"], work["U"], work["W"], nch=nch, stream=stream)
    else:
        k_chunk_intra[(nch, Hv, nseg), NT, stream](work["qn"], work["kn"], qkv, work["g"], work["beta"], seg_row0,
                                                   seg_len, work["cum"], work["P"], work["U"], work["W"])
    tw = inter_tc(tc)
    if tw and delta_chunk_tc.tc_ok(work["qn"].shape[2]):
        delta_chunk_tc.launch(work["qn"], work["kn"], work["cum"], work["P"], work["U"], work["W"], state, seg_row0,
                              seg_len, seg_slot, o, width=tw, stream=stream)
        return
    w = inter_width(inter)
    _inter_kernel(w)[(nseg, Hv, (Dv + w - 1) // w), (w, NT // w), stream](
        work["qn"], work["kn"], work["cum"], work["P"], work["U"], work["W"], state, seg_row0, seg_len, seg_slot, o)


def chunk_workspace(R, Hk, Hv, Dk, Dv):
    """Device scratch for :func:`launch_chunked` with R rows (bytes: R*(2*Hk*Dk + Hv*(4 + CH + Dv + Dk))*4)."""
    f = np.float32
    return {
        "qn": cuda.device_array((R, Hk, Dk), f),
        "kn": cuda.device_array((R, Hk, Dk), f),
        "g": cuda.device_array((R, Hv), f),
        "beta": cuda.device_array((R, Hv), f),
        "cum": cuda.device_array((R, Hv), f),
        "P": cuda.device_array((R, Hv, CH), f),
        "U": cuda.device_array((R, Hv, Dv), f),
        "W": cuda.device_array((R, Hv, Dk), f),
    }
