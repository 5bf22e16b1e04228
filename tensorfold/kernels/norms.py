"""RMSNorm kernels: residual-add + RMSNorm (fused), plain RMSNorm, gated RMSNorm per head.

Owns
- ``add_rms_norm_k(x, h, mult, y, eps)``: per row ``h += x`` (the residual stream, updated in place) then
  ``y = h / sqrt(mean(h^2) + eps) * mult``; writes both h and y.
- ``rms_norm_k(x, mult, y, eps)``: ``y = x / sqrt(mean(x^2) + eps) * mult``.
- ``gated_rms_norm_k(o, z, w, y, eps, head_dim, act)``: per head of ``head_dim`` columns
  ``y = o / sqrt(mean(o^2) + eps) * w * act(z)``, act 0 = silu, 1 = sigmoid (the GDN output norm).
- ``fused_norm_lines``: source lines of a GEMV prologue (qgemv, the first tensor-core kernel) that does the
  one-row add + RMSNorm for the GEMV that reads its output, with these kernels' bits (``TENSORFOLD_NORM_FUSE``,
  :func:`fuse_on`; opt-in: no gain measured in session 37).
Arrays are float32 2-d ``[R, n]`` (C-contiguous), multipliers float32 ``[n]`` / ``[head_dim]``.

Reference mirrored: ``tensorfold.reference.ops.rms_norm``, ``add_rms_norm``, ``gated_rms_norm`` (fp32).

Launch geometry: rms kernels one block per row (grid-stride over rows, so any grid works; the simulator launches
one or two blocks), any multiple of 32 threads (256 on the GPU); each thread strides over the columns, the sum of
squares goes through a warp butterfly then a fixed-order sum over the block's warps. Gated norm: one warp per
(row, head), blocks of 4 warps, grid-stride over row*heads. ``launch_*`` helpers pick the geometry.
"""

from __future__ import annotations

import math
import os

import numpy as np
from numba import cuda

from ._device import IS_SIM, devfn, ldg_f32x4_2d, lds4, pdl_begin, warp_sum
from . import _kcache

__all__ = ["add_rms_norm_k", "rms_norm_k", "gated_rms_norm_k", "launch_add_rms_norm", "launch_rms_norm",
           "launch_gated_rms_norm", "COMPILE_SPECS", "HOT"]

_TPB = 64 if IS_SIM else 256


@devfn
def _block_sum(v, red):
    """Sum over the block: warp butterfly, then warp partials in fixed order. Every thread gets the total."""
    lane = cuda.threadIdx.x & 31
    warp = cuda.threadIdx.x >> 5
    v = warp_sum(v)
    if lane == 0:
        red[warp] = v
    cuda.syncthreads()
    nw = cuda.blockDim.x >> 5
    t = red[0]
    for i in range(1, nw):
        t += red[i]
    cuda.syncthreads()
    return t


@devfn
def _sigmoid(x):
    if x >= 0:
        return np.float32(1.0) / (np.float32(1.0) + np.float32(math.exp(-x)))
    e = np.float32(math.exp(x))
    return e / (np.float32(1.0) + e)


def add_rms_norm_k(x, h, mult, y, eps):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    red = cuda.shared.array(32, np.float32)
    R, n = h.shape
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
        ss = np.float32(0.0)
        for c in range(tid, n, cuda.blockDim.x):
            v = h[r, c] + x[r, c]
            h[r, c] = v
            ss += v * v
        tot = _block_sum(ss, red)
        inv = np.float32(1.0) / np.float32(math.sqrt(tot / np.float32(n) + eps))
        for c in range(tid, n, cuda.blockDim.x):
            y[r, c] = h[r, c] * inv * mult[c]


def rms_norm_k(x, mult, y, eps):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    red = cuda.shared.array(32, np.float32)
    R, n = x.shape
    tid = cuda.threadIdx.x
    for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
        ss = np.float32(0.0)
        for c in range(tid, n, cuda.blockDim.x):
            v = x[r, c]
            ss += v * v
        tot = _block_sum(ss, red)
        inv = np.float32(1.0) / np.float32(math.sqrt(tot / np.float32(n) + eps))
        for c in range(tid, n, cuda.blockDim.x):
            y[r, c] = x[r, c] * inv * mult[c]


def gated_rms_norm_k(o, z, w, y, eps, head_dim, act):
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    R, n = o.shape
    heads = n // head_dim
    total = R * heads
    lane = cuda.threadIdx.x & 31
    warp = cuda.threadIdx.x >> 5
    nw = cuda.blockDim.x >> 5
    for base in range(cuda.blockIdx.x * nw, total, cuda.gridDim.x * nw):
        t = base + warp
        valid = t < total
        r = 0
        c0 = 0
        if valid:
            r = t // heads
            c0 = (t - r * heads) * head_dim
        ss = np.float32(0.0)
        if valid:
            for c in range(lane, head_dim, 32):
                v = o[r, c0 + c]
                ss += v * v
        tot = warp_sum(ss)
        if valid:
            inv = np.float32(1.0) / np.float32(math.sqrt(tot / np.float32(head_dim) + eps))
            for c in range(lane, head_dim, 32):
                zz = z[r, c0 + c]
                if act == 0:
                    g = zz * _sigmoid(zz)
                else:
                    g = _sigmoid(zz)
                y[r, c0 + c] = o[r, c0 + c] * inv * w[c] * g


add_rms_norm_k = _kcache.kjit(add_rms_norm_k)
rms_norm_k = _kcache.kjit(rms_norm_k)
gated_rms_norm_k = _kcache.kjit(gated_rms_norm_k)


# ----------------------------------------------------------------------------------------------------------------
# vectorized one-pass forms (rows whose length is a multiple of 4): every thread owns VPT float4 columns, loads all
# of them at once (16-byte loads: x, h, mult), keeps the sums h + x in registers for the second half, one block sum
# (warp butterfly, warp partials in order through shared memory, one barrier a row: the partials alternate between
# two shared slots). The scalar kernels stride over the columns in a loop of dependent load round trips: measured
# on the H200 at 938dc6f (benchmarks/results/gemv_2026-11-30_938dc6f.md, graph replay) add + RMSNorm 4.8 / 7.6 /
# 9.0 us at one 2048 / 4096 / 5120 row. The vectorized timing of that run (0.8-0.9 us) is NOT valid: the build's
# stores had been removed as dead code (inline asm without side effects), so it measured an empty kernel; fixed
# (``_st4`` is side-effecting, the PTX now holds the st.global.v4), not yet run on a GPU, hence opt-in.
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:
    from llvmlite import ir as _ir
    from numba import types as _types
    from numba.cuda import cgutils as _cgutils
    from numba.cuda.extending import intrinsic as _intrinsic

    def _ptr2(context, builder, arrty, arr, r, c, rt, ct):
        ary = context.make_array(arrty)(context, builder, value=arr)
        idx = [context.cast(builder, r, rt, _types.intp), context.cast(builder, c, ct, _types.intp)]
        return _cgutils.get_item_pointer(context, builder, arrty, ary, idx, wraparound=False)

    @_intrinsic
    def _ld4(typingctx, arr, r, c):
        """(arr[r, c], .., arr[r, c + 3]) with one coherent 16-byte load (float32 2-d C-contiguous, c % 4 == 0)."""
        if not (isinstance(arr, _types.Array) and arr.dtype == _types.float32 and arr.ndim == 2):
            return None
        sig = _types.UniTuple(_types.float32, 4)(arr, r, c)

        def codegen(context, builder, sig, args):
            ptr = _ptr2(context, builder, sig.args[0], args[0], args[1], args[2], sig.args[1], sig.args[2])
            f = _ir.FloatType()
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.LiteralStructType([f] * 4), [ptr.type]),
                                "ld.global.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l")
            res = builder.call(asm, [ptr])
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, k) for k in range(4)])

        return sig, codegen

    @_intrinsic
    def _st4(typingctx, arr, r, c, v0, v1, v2, v3):
        """arr[r, c:c + 4] = (v0, v1, v2, v3) with one 16-byte store."""
        if not (isinstance(arr, _types.Array) and arr.dtype == _types.float32 and arr.ndim == 2):
            return None
        sig = _types.void(arr, r, c, v0, v1, v2, v3)

        def codegen(context, builder, sig, args):
            ptr = _ptr2(context, builder, sig.args[0], args[0], args[1], args[2], sig.args[1], sig.args[2])
            f = _ir.FloatType()
            vals = [context.cast(builder, v, t, _types.float32) for v, t in zip(args[3:], sig.args[3:])]
            # side_effect: an asm with no outputs is otherwise dead code to LLVM (the whole kernel vanished: the
            # H200 run at 938dc6f timed it at the launch floor and the GPU test saw unwritten outputs)
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.VoidType(), [ptr.type] + [f] * 4),
                                "st.global.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,~{memory}", side_effect=True)
            builder.call(asm, [ptr] + vals)
            return context.get_dummy_value()

        return sig, codegen

    @_intrinsic
    def _ld4v(typingctx, arr, c):
        """(arr[c], .., arr[c + 3]) of a 1-d float32 array with one 16-byte ``ld.global.nc``."""
        if not (isinstance(arr, _types.Array) and arr.dtype == _types.float32 and arr.ndim == 1):
            return None
        sig = _types.UniTuple(_types.float32, 4)(arr, c)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            idx = [context.cast(builder, args[1], sig.args[1], _types.intp)]
            ptr = _cgutils.get_item_pointer(context, builder, sig.args[0], ary, idx, wraparound=False)
            f = _ir.FloatType()
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.LiteralStructType([f] * 4), [ptr.type]),
                                "ld.global.nc.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l")
            res = builder.call(asm, [ptr])
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, k) for k in range(4)])

        return sig, codegen

else:

    @cuda.jit(device=True)
    def _ld4(arr, r, c):
        return arr[r, c], arr[r, c + 1], arr[r, c + 2], arr[r, c + 3]

    @cuda.jit(device=True)
    def _st4(arr, r, c, v0, v1, v2, v3):
        arr[r, c] = v0
        arr[r, c + 1] = v1
        arr[r, c + 2] = v2
        arr[r, c + 3] = v3

    @cuda.jit(device=True)
    def _ld4v(arr, c):
        return arr[c], arr[c + 1], arr[c + 2], arr[c + 3]


VEC_MAX = 8  # float4 columns a thread at most (rows up to 8192 wide at 256 threads)


def _gen_norm_v_source(name: str, vpt: int, add, parts: bool = False) -> str:
    """``parts``: x is a GEMV's K-chunk partial sums, ``[ks * R, n]`` (chunk k's row r at ``k * R + r``), added in
    chunk order before the residual add: the fp32 adds of qgemv's in-kernel completion, in its order."""
    L = []
    a = L.append
    a(f"def {name}(x, h, mult, y, eps):" if add else f"def {name}(x, mult, y, eps):")
    a("    pdl_begin()")  # kernels._pdl: the next launch may start; the previous one's writes visible after
    a("    red = cuda.shared.array(64, np.float32)")
    a("    R = y.shape[0]")
    a("    n = y.shape[1]")
    if parts:
        a("    ks = x.shape[0] // R")
    a("    tid = cuda.threadIdx.x")
    a("    lane = tid & 31")
    a("    warp = tid >> 5")
    a("    nw = cuda.blockDim.x >> 5")
    a("    tpb = cuda.blockDim.x")
    a("    par = 0")
    a("    for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):")
    I = "        "
    for j in range(vpt):
        a(f"{I}c{j} = (tid + {j} * tpb) * 4")
        a(f"{I}ok{j} = c{j} < n")
        a(f"{I}cc{j} = c{j} if ok{j} else 0")
        if add:
            a(f"{I}a0, a1, a2, a3 = _ld4(x, r, cc{j})")
            if parts:
                a(f"{I}for kk in range(1, ks):")
                a(f"{I}    t0, t1, t2, t3 = _ld4(x, kk * R + r, cc{j})")
                for e in range(4):
                    a(f"{I}    a{e} += t{e}")
            a(f"{I}b0, b1, b2, b3 = _ld4(h, r, cc{j})")
            for e in range(4):
                a(f"{I}v{j}_{e} = b{e} + a{e}")
        else:
            a(f"{I}v{j}_0, v{j}_1, v{j}_2, v{j}_3 = _ld4(x, r, cc{j})")
        a(f"{I}m{j}_0, m{j}_1, m{j}_2, m{j}_3 = _ld4v(mult, cc{j})")
    a(f"{I}ss = np.float32(0.0)")
    for j in range(vpt):
        a(f"{I}if ok{j}:")
        if add:
            a(f"{I}    _st4(h, r, c{j}, v{j}_0, v{j}_1, v{j}_2, v{j}_3)")
        for e in range(4):
            a(f"{I}    ss += v{j}_{e} * v{j}_{e}")
    a(f"{I}v = warp_sum(ss)")
    a(f"{I}if lane == 0:")
    a(f"{I}    red[par * 32 + warp] = v")
    a(f"{I}cuda.syncthreads()")
    a(f"{I}tot = red[par * 32]")
    a(f"{I}for i in range(1, nw):")
    a(f"{I}    tot += red[par * 32 + i]")
    a(f"{I}par = 1 - par")
    a(f"{I}inv = np.float32(1.0) / np.float32(math.sqrt(tot / np.float32(n) + eps))")
    for j in range(vpt):
        a(f"{I}if ok{j}:")
        a(f"{I}    _st4(y, r, c{j}, " + ", ".join(f"v{j}_{e} * inv * m{j}_{e}" for e in range(4)) + ")")
    return "\n".join(L) + "\n"


_VCACHE: dict = {}


def get_norm_v_pyfunc(vpt: int, add: bool, parts: bool = False):
    key = ("py", vpt, add, parts)
    if key not in _VCACHE:
        name = f"{'add_' if add else ''}rms_norm_v{vpt}{'_parts' if parts else ''}"
        glb = {"cuda": cuda, "np": np, "math": math, "warp_sum": warp_sum, "_ld4": _ld4, "_st4": _st4,
               "_ld4v": _ld4v, "pdl_begin": pdl_begin}
        _VCACHE[key] = _kcache.build(name, _gen_norm_v_source(name, vpt, add, parts), glb, __name__)
    return _VCACHE[key]


def get_norm_v_kernel(vpt: int, add: bool, parts: bool = False):
    key = ("k", vpt, add, parts)
    if key not in _VCACHE:
        _VCACHE[key] = _kcache.kjit(get_norm_v_pyfunc(vpt, add, parts))
    return _VCACHE[key]


def norm_v_geometry(n: int, sim: bool = IS_SIM):
    """(threads per block, float4 columns a thread) of the vectorized kernels for rows of ``n`` (None when ``n``
    is not a multiple of 4 or too wide): about 4 float4 a thread, 32..256 threads (the simulator: 32)."""
    if n % 4 or n > 4 * 256 * VEC_MAX:
        return None
    nv = n // 4
    tpb = 32 if sim else min(256, max(32, -(-nv // 128) * 32))
    vpt = -(-nv // tpb)
    if vpt > VEC_MAX:
        return None
    return tpb, vpt


def fuse_on() -> bool:
    """``TENSORFOLD_NORM_FUSE=1`` (read at each forward): a one-row add + RMSNorm runs inside the GEMV that reads
    its output (:func:`fused_norm_lines`) instead of as its own launch. Off by default: session 37's decode A/B found
    no gain (2B and 9B, one stream, within noise; the prologue sits after the PDL wait, where the standalone launch
    overlapped)."""
    return os.environ.get("TENSORFOLD_NORM_FUSE", "0").strip() == "1"


def fuse_geometry(n: int):
    """(threads, float4 columns a thread) of the standalone vectorized kernel for rows of ``n``, which a fused
    GEMV prologue mirrors (:func:`fused_norm_lines`); None where the runtime would not take that kernel."""
    return norm_v_geometry(n) if _vec_default() else None


FUSED_ARGS = "nf_h, nf_d, nf_m, nf_ho, nf_eps"  # the arguments a GEMV kernel takes for a fused prologue


def fused_glb() -> dict:
    """Names :func:`fused_norm_lines` uses, for the generated kernel's globals."""
    return {"math": math, "warp_sum": warp_sum, "ldg_f32x4_2d": ldg_f32x4_2d, "_st4": _st4, "_ld4v": _ld4v,
            "lds4": lds4}


def fused_norm_lines(ind: str, geo, nthreads: int, k0: str, k1: str, klen: int = 0) -> list:
    """Source lines of a GEMV prologue (after its ``pdl_wait``) that does the one-row add + RMSNorm of
    :func:`launch_add_rms_norm` for it: ``v = nf_h[0] + nf_d[0]``, ``inv = 1 / sqrt(mean(v^2) + eps)``,
    ``x = v * inv * nf_m``. For its own K columns ``k0 .. k1`` (expressions of the kernel) the block leaves x in the
    shared array ``nf_xs`` (indexed by column; the GEMV reads x from there, not from global memory). One block a K
    range (``blockIdx.x == 0``) writes ``x[0, c]`` and the updated residual ``nf_ho[0, c] = v`` (a second buffer:
    every block reads all of ``nf_h``) for later readers; the other blocks' copies would be the same values.

    Every block reduces the whole row the way the standalone vectorized kernel does at its geometry ``geo`` =
    (threads, float4 a thread) (:func:`norm_v_geometry`): the real warps take its virtual warps in turn, each
    virtual lane's squares in the same order, the same butterfly, the warp partials in order. So x and the residual
    get the bits of the standalone launch (which rows of several streams get), whatever the GEMV's block size.

    Latency: the norm weight of the block's columns is loaded first, then every h / d load of the thread (one L2
    round trip in all); the sums of the block's columns wait in ``nf_xs`` across the block sum (kept in registers,
    they made the 9B / 27B SwiGLU kernels spill under their launch bounds), and x is made in place. After the last
    barrier nothing is loaded from global memory: against the plain GEMV, which loads x, the prologue adds the
    block sum and two barriers. ``klen`` > 0: the K range's length is that constant (qgemv's chunk)."""
    ntpb, vpt = geo
    nvw = ntpb // 32
    nwr = nthreads // 32
    rounds = -(-nvw // nwr)  # virtual warps a real warp takes (a round past them loads column 0, writes nothing)
    nst = -(-(klen or ntpb * vpt * 4) // (4 * nthreads))  # float4 of the K range a thread makes (at most)
    L = []
    a = L.append
    J = ind + "    "
    a(f"{ind}nf_red = cuda.shared.array(32, np.float32)")
    al = "" if IS_SIM else ", alignment=16"  # 16-byte loads of x from it (``lds4``; the simulator takes no alignment)
    a(f"{ind}nf_xs = cuda.shared.array({ntpb * vpt * 4}, np.float32{al})")
    a(f"{ind}nf_n = x.shape[1]")
    a(f"{ind}nf_tid = cuda.threadIdx.x")
    a(f"{ind}nf_lane = nf_tid & 31")
    a(f"{ind}nf_k0 = {k0}")
    a(f"{ind}nf_k1 = min({k1}, nf_n)")
    for it in range(nst):  # the norm weight (read-only) of the columns this thread makes
        a(f"{ind}nf_e{it} = nf_k0 + nf_tid * 4 + {it * 4 * nthreads}")
        a(f"{ind}nf_eok{it} = nf_e{it} < nf_k1")
        a(f"{ind}nf_m{it}_0, nf_m{it}_1, nf_m{it}_2, nf_m{it}_3 = _ld4v(nf_m, nf_e{it} if nf_eok{it} else 0)")
    for q in range(rounds):
        a(f"{ind}nf_vw{q} = {q * nwr} + (nf_tid >> 5)")
        for j in range(vpt):
            t = f"{q}_{j}"
            a(f"{ind}nf_c{t} = (nf_vw{q} * 32 + nf_lane + {j * ntpb}) * 4")
            a(f"{ind}nf_ok{t} = nf_c{t} < nf_n and nf_vw{q} < {nvw}")
            a(f"{ind}nf_cc{t} = nf_c{t} if nf_ok{t} else 0")
            a(f"{ind}nf_a{t}_0, nf_a{t}_1, nf_a{t}_2, nf_a{t}_3 = ldg_f32x4_2d(nf_d, 0, nf_cc{t})")
            a(f"{ind}nf_b{t}_0, nf_b{t}_1, nf_b{t}_2, nf_b{t}_3 = ldg_f32x4_2d(nf_h, 0, nf_cc{t})")
    # every warp calls the warp sum the same number of times (the simulator's warp sums are block barriers)
    for q in range(rounds):
        a(f"{ind}nf_ss = np.float32(0.0)")
        for j in range(vpt):  # a virtual lane's squares in the standalone kernel's order
            t = f"{q}_{j}"
            a(f"{ind}if nf_ok{t}:")
            a(f"{J}nf_in = nf_c{t} >= nf_k0 and nf_c{t} < nf_k1")
            for e in range(4):
                a(f"{J}nf_v = nf_b{t}_{e} + nf_a{t}_{e}")
                a(f"{J}nf_ss += nf_v * nf_v")
                a(f"{J}if nf_in:")
                a(f"{J}    nf_xs[nf_c{t} + {e}] = nf_v")
        a(f"{ind}nf_s = warp_sum(nf_ss)")
        a(f"{ind}if nf_lane == 0 and nf_vw{q} < {nvw}:")
        a(f"{J}nf_red[nf_vw{q}] = nf_s")
    a(f"{ind}cuda.syncthreads()")
    a(f"{ind}nf_tot = nf_red[0]")
    a(f"{ind}for nf_i in range(1, {nvw}):")
    a(f"{J}nf_tot += nf_red[nf_i]")
    a(f"{ind}nf_inv = np.float32(1.0) / np.float32(math.sqrt(nf_tot / np.float32(nf_n) + nf_eps))")
    # x made in place over v (each element read and written by one thread); the blocks of the grid's first column
    # (one a K range: the K split is another grid axis in both GEMVs) also write x and the residual out
    a(f"{ind}nf_out = cuda.blockIdx.x == 0")
    for it in range(nst):
        a(f"{ind}if nf_eok{it}:")
        for e in range(4):
            a(f"{J}nf_w{e} = nf_xs[nf_e{it} + {e}]")
            a(f"{J}nf_y{e} = nf_w{e} * nf_inv * nf_m{it}_{e}")
            a(f"{J}nf_xs[nf_e{it} + {e}] = nf_y{e}")
        a(f"{J}if nf_out:")
        a(f"{J}    _st4(nf_ho, 0, nf_e{it}, nf_w0, nf_w1, nf_w2, nf_w3)")
        a(f"{J}    _st4(x, 0, nf_e{it}, nf_y0, nf_y1, nf_y2, nf_y3)")
    a(f"{ind}cuda.syncthreads()")
    return L


def fused_args(norm, x, R: int, defer: bool = False):
    """(prologue geometry, extra kernel arguments) of a GEMV launch given ``norm`` = (h, d, mult, h_out, eps) or
    None (-> (None, ())); a ValueError where the fused add + RMSNorm cannot run (``norms.fused_norm_lines``)."""
    if norm is None:
        return None, ()
    h, d, mult, ho, eps = norm
    n = x.shape[1]
    geo = fuse_geometry(n)
    if R != 1 or defer or geo is None or not vec_aligned(x, h, d, mult, ho) or \
            not (tuple(h.shape) == tuple(d.shape) == tuple(ho.shape) == (1, n) and tuple(mult.shape) == (n,)):
        raise ValueError(f"GEMV with a fused add + RMSNorm: one row (R {R}), no deferred completion, rows of {n} that "
                         "the vectorized norm kernel takes, h / d / h_out [1, n], mult [n], 16-byte aligned")
    return geo, (h, d, mult, ho, np.float32(eps))


def _ptr(a) -> int:
    iface = getattr(a, "__cuda_array_interface__", None) or getattr(a, "__array_interface__", None)
    return int(iface["data"][0]) if iface else 1


def _vec_ok(*arrs) -> bool:
    """16-byte loads / stores need every row start 16-byte aligned (base pointer and row pitch) and unit column
    stride (a vector taken from a packed arena at an odd offset falls back to the scalar kernel)."""
    for a in arrs:
        if _ptr(a) % 16 or a.strides[-1] != 4 or (a.ndim == 2 and a.strides[0] % 16):
            return False
    return True


vec_aligned = _vec_ok  # public name: whether arrays suit the vectorized kernels (launch_add_rms_norm_parts needs it)


def _vec_default() -> bool:
    """The vectorized kernels are the default (``TENSORFOLD_NORM_VEC=0`` selects the scalar ones). Checked on the
    H200 at 6c27bec: GPU tests 5 passed; one 2048 / 4096 / 5120 row of add+RMSNorm 4.8 / 7.6 / 8.9 -> 2.2 / 2.6 /
    2.8 us (``benchmarks/results/gpu_session_2026-11-30_6c27bec.md``). (The first H200 run, at 938dc6f, measured a
    build whose 16-byte stores LLVM had dropped; ``_st4`` is side-effecting since.)"""
    return os.environ.get("TENSORFOLD_NORM_VEC", "1") == "1"


def launch_add_rms_norm(x, h, mult, y, eps, stream=0, max_blocks=None, vec=None):
    """``vec``: the vectorized one-pass kernel when the row length allows (else the scalar kernel); None = the
    environment's choice (``_vec_default``)."""
    vec = _vec_default() if vec is None else vec
    R = h.shape[0]
    g = R if max_blocks is None else min(R, max_blocks)
    geo = norm_v_geometry(h.shape[1]) if vec and _vec_ok(x, h, y, mult) else None
    if geo is not None:
        tpb, vpt = geo
        get_norm_v_kernel(vpt, True)[g, tpb, stream](x, h, mult, y, np.float32(eps))
        return
    add_rms_norm_k[g, _TPB, stream](x, h, mult, y, np.float32(eps))


def parts_ok(n: int) -> bool:
    """Whether :func:`launch_add_rms_norm_parts` takes rows of ``n`` (the vectorized geometry)."""
    return norm_v_geometry(n) is not None


def launch_add_rms_norm_parts(parts, h, mult, y, eps, stream=0, max_blocks=None):
    """:func:`launch_add_rms_norm` with x given as a GEMV's K-chunk partial sums ``parts [ks, R, n]`` (a deferred
    qgemv completion, ``qgemv.launch(..., defer=True)``), added in chunk order: the same bits as the in-kernel
    completion followed by :func:`launch_add_rms_norm`."""
    ks, R, n = parts.shape
    geo = norm_v_geometry(n)
    if geo is None or h.shape != (R, n) or not _vec_ok(parts.reshape((ks * R, n)), h, y, mult):
        raise ValueError(f"add_rms_norm_parts: rows of {n} (a multiple of 4), h [{R}, {n}], 16-byte aligned rows")
    g = R if max_blocks is None else min(R, max_blocks)
    tpb, vpt = geo
    get_norm_v_kernel(vpt, True, True)[g, tpb, stream](parts.reshape((ks * R, n)), h, mult, y, np.float32(eps))


def launch_rms_norm(x, mult, y, eps, stream=0, max_blocks=None, vec=None):
    vec = _vec_default() if vec is None else vec
    R = x.shape[0]
    g = R if max_blocks is None else min(R, max_blocks)
    geo = norm_v_geometry(x.shape[1]) if vec and _vec_ok(x, y, mult) else None
    if geo is not None:
        tpb, vpt = geo
        get_norm_v_kernel(vpt, False)[g, tpb, stream](x, mult, y, np.float32(eps))
        return
    rms_norm_k[g, _TPB, stream](x, mult, y, np.float32(eps))


def launch_gated_rms_norm(o, z, w, y, eps, head_dim, act="silu", stream=0, max_blocks=None):
    total = o.shape[0] * (o.shape[1] // head_dim)
    g = -(-total // 4)
    if max_blocks is not None:
        g = min(g, max_blocks)
    a = 0 if act in ("silu", "swish") else 1
    gated_rms_norm_k[g, 128, stream](o, z, w, y, np.float32(eps), np.int32(head_dim), np.int32(a))


_F2 = "float32[:, ::1]"
COMPILE_SPECS = [
    (add_rms_norm_k, f"void({_F2}, {_F2}, float32[::1], {_F2}, float32)"),
    (rms_norm_k, f"void({_F2}, float32[::1], {_F2}, float32)"),
    (gated_rms_norm_k, f"void({_F2}, {_F2}, float32[::1], {_F2}, float32, int32, int32)"),
]
HOT = {"add_rms_norm_k", "rms_norm_k", "gated_rms_norm_k"}
# the vectorized forms at the float4-per-thread counts of the 2B / 9B / 27B hidden sizes (2048 -> 4, 4096 -> 4,
# 5120 -> 5) and the largest
for _vpt in sorted({norm_v_geometry(n, False)[1] for n in (2048, 4096, 5120)} | {VEC_MAX}):
    for _add in (True, False):
        _f = get_norm_v_pyfunc(_vpt, _add)
        COMPILE_SPECS.append((_f, f"void({_F2}, {_F2}, float32[::1], {_F2}, float32)" if _add else
                              f"void({_F2}, float32[::1], {_F2}, float32)"))
        HOT.add(_f.__name__)
    # the partial-summing form of a deferred qgemv completion (TENSORFOLD_GEMV_DEFER=1)
    COMPILE_SPECS.append((get_norm_v_pyfunc(_vpt, True, True), f"void({_F2}, {_F2}, float32[::1], {_F2}, float32)"))
