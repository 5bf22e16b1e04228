"""Decode GEMV on tensor cores, built for bandwidth at one row:
``y[r, o] = sum_i x[r, i] * (s[o, g] q[o, i] + b[o, g])`` for 1..16 rows, MLX affine 2/4/8-bit weights straight
from their packing (bf16 scales and biases).

Owns ``plan`` / ``launch`` (reached through ``affine.plan_qgemv`` / ``affine.launch_qgemv``, which give this kernel
the weights of at least ``affine.V3_MIN_CODES`` = 2^25 codes), the generated kernels (``get_pyfunc`` /
``get_kernel``) and ``counters`` (the per-device arrival counters of the in-kernel split-K sum).

Reference mirrored: ``tensorfold.reference.ops.linear`` with ``affine_dequant`` (fp32 ``scale * q + bias``).

Why a second tensor-core GEMV. The first (``affine._gen_tc_source``) ran at 22-31 % of the copy bandwidth at one
row: its loop spent about 169 SASS instructions per 512 bytes of 4-bit weights (address arithmetic per load,
per-warp splitting of x into bf16 hi + lo, a bf16 subtract per code pair, two mma's per k-step) and kept few loads in
flight. This kernel spends about 60 (ptxas / nvdisasm on the sm_90 build):

- **x is prepared once per block**: block (bx, kz) splits K chunk ``kz`` of x into bf16 hi and lo parts, already in
  mma B-fragment order, into shared memory (one 8-byte shared load per lane and k-step in the loop), and sums each
  group of x over the same hi + lo values in a fixed order. An item of that preparation is (group, row, lane
  column): its values are contiguous, so they arrive in 16-byte loads, issued a batch at a time before any is used
  (session 15: 915 SASS instructions before the loop instead of 2,228; 136 registers at one n-tile instead of 168).
- **hi and lo are two columns of B.** Batch row ``r`` of an n-tile owns columns ``2r`` (hi) and ``2r + 1`` (lo),
  so one mma per k-step serves up to 4 rows with fp32-class x; the two C columns are added in the epilogue.
  Launches take up to 8 rows (two n-tiles); 9-16 rows are two launches. With bf16-only x an n-tile holds 8 rows:
  9-16 rows are one launch of two n-tiles (``rows16_on``, the default, at load depth 2, ``nt2_depth``) and 17-32
  one of four (``rows32_on``, opt-in: it loses to two 16-row launches at depth 2).
- **Codes stay offset by 128.** A 2- or 4-bit code or'ed into the mantissa of bf16 128 reads as ``128 + q``
  exactly (one ``lop3`` a pair, the magic held in a register); the epilogue uses ``acc += s * D + (b - 128 s) *
  sum_x`` with ``D = dot(128 + q, x)``. Because ``sum_x`` is taken over the same hi + lo values the mma sees, the
  offset cancels exactly up to fp32 rounding (8-bit codes decode exactly, offset 0).
- **Persistent warps, loads ahead.** After the preparation each of the block's ``nw`` warps walks the row tiles
  ``wid, wid + nwt, ...`` (``mt`` x 16 rows) over the chunk; a tile's iterations are unrolled with constant offsets
  and the weight / scale words of the next ``depth`` iterations (across into the next tile) are in flight while
  the current one computes.
- **Split-K without a second launch.** With several chunks (``ks > 1``) a tile's chunk sums go to ``ws[kz]``;
  every warp fences once at its end, counts its tiles' arrivals (one atomic counter per tile), and the warp that
  completes a tile adds its ``ks`` partials in chunk order and writes ``y``, then resets the counter (graph replays
  find it at zero). Counters are shared by every launch on a device: launches must not run concurrently. A warp
  sums all the tiles it completes together (``_completion_batched``, session 27): the warp whose main loop ends
  last completes most of its tiles, and summing them one at a time (a fence and an L2 round trip each) kept the
  kernel running 4-9 us past its last main loop.

Exactness: a row's result does not depend on how many rows share the launch, nor on which warp completes a tile:
an mma column depends only on its own B column; each chunk's groups are accumulated in order; the partials are
summed in chunk order 0..ks-1; the geometry (``nw``, ``mt``, ``cg``, hence ``ks``) is a function of (out, in, bits,
group) only.

Measured on the H200 (benchmarks/results/gemv3_2026-11-30_12da6be.md, graph replay, 4-bit g64, copy 4.24 TB/s),
µs at 1 / 8 rows, this kernel against the first tensor-core kernel: 9B gate+up 24576x4096 29.2 / 50.5 (46 % of copy
at one row) vs 43.3 / 53.1; 27B down 5120x17408 30.7 / 61.2 (39 %) vs 45.5 / 52.7; 2B head 248320x2048 105 / 171
(64 %) vs 169 / 195; 2B gate+up 12288x2048 12.3 / 21.4 vs 12.4 / 13.5 (why smaller weights keep the first kernel).
8 rows cost 1.6-2.0x one row (the issue's 1.5x is not met by this kernel); the 70 % target is not met either.

Where the time goes (session 19, benchmarks/results/session19_2026-12-01.md): without its arithmetic
(``TENSORFOLD_GEMV3_NOC=1``, a benchmark diagnostic) the kernel is only 8-10 % faster; its loads alone stream at
2.67 TB/s against 4.25 for a plain grid-stride read. Every warp reads 128 bytes from each of the 16 rows of its own
tile, so about 1,584 places in memory are read at once, where the plain read sweeps one window. The swept layout
(``sweep_pack``, plans with ``sw``; the runtime's default since session 20, ``TENSORFOLD_SWEPT``) stores each K
iteration of a 16-row unit as one piece (codes group by group, each group's 16 rows in turn, then the scales and
biases), a tile's pieces of one K chunk in a run, so a warp load covers 256 contiguous bytes and the per-iteration
offsets are constants; the kernel differs only in its address arithmetic (the same bits). Measured (session 20,
µs at 1 / 8 rows, MLX -> swept): 9B gate+up 28.1 / 46.4 -> 24.8 / 47.4, with the SwiGLU epilogue 29.8 / 42.2 ->
25.2 / 44.2; 9B down 18.6 / 31.0 -> 16.3 / 31.6; 27B gate+up 43.1 / 70.2 -> 38.3 / 73.6; 27B down 29.6 / 56.5 ->
26.5 / 58.1 (benchmarks/results/session20_2026-12-02.md).

bf16-only x (``V3Plan.xh``, session 21; the default since session 22, ``TENSORFOLD_GEMV3_XH=0`` restores hi + lo
x): x rounded to bf16, one B column a batch row, so 5-8 rows share one n-tile (``_gen_source(xh=1)``) and 1-4 rows
run the hi + lo loop with zero lo columns (``xh=2``), the same bits a row either way. Measured (µs at 1 / 4 / 8 rows,
hi + lo -> bf16 x, session 22): 9B gate+up SwiGLU 25.2 / 27.0 / 45.1 -> 25.6 / 26.9 / 34.9, 27B down 26.4 / 33.4 /
58.7 -> 26.2 / 33.1 / 47.9; decode at 1 / 8 streams 9B 332.0 / 1,522 -> 337.6 / 1,794 tok/s, 27B 126.5 / 517 ->
128.4 / 641 (benchmarks/results/session22_2026-12-02.md).

Where a launch's time goes (session 27, ``benchmarks/qgemv_timeline.py``: %globaltimer stamps a warp, launches back
to back in a graph with PDL). 9B gate+up with the SwiGLU epilogue, µs after the launch's first block starts: the
PDL wait returns at 4.6 (the previous kernel's end + 0.6), the x preparation takes 2.3 (2.0 of it waiting for x's
loads, queued behind the weight loads issued before the wait), the main loops stream at 4.1-4.3 TB/s (median 13.1 µs
a warp, max 14.9), the completion adds 1.3 (median) to 5 (max). The one-tile-at-a-time completion it replaced
took 3.2 (median) to 8.7; with it 9B gate+up ran 25.7 -> 23.2 µs, 27B gate+up 39.7 -> 34.5 (68.7 % of copy), 27B
down 26.1 -> 22.8, and eight rows 1.3-1.5x one row (benchmarks/results/session27_2026-12-03.md). Session 28 loads
x first and only prefetches the first tile's weights into L2 before the wait (``pre_mode`` 2), with the group
sums by quad shuffles (``xq_on``): 9B gate+up under PDL 25.2 -> 23.9 µs (SwiGLU, one row), 9B decode 351 -> 368
tok/s at one stream (benchmarks/results/session28_2026-12-03.md).

Lane layout (``g = lane >> 2``, ``t = lane & 3``): lane (g, t) owns output rows g and g + 8 of each 16-row tile
and, in every group, the contiguous words ``t * LW .. t * LW + LW - 1`` of those rows (``LW = group * bits / 128``);
the physical k order of every mma step is the lanes' own (``_lane_layout``, which ``affine``'s kernel uses too), and x's
B-fragments are built with the same permutation, which leaves each dot product unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from numba import cuda

from . import _kcache, norms
from ._codegen import single_assignment
from ._device import (CP_ASYNC_WAIT, IS_SIM, bf16_to_f32, cp_async_commit, devfn, env_choice, gemv_trigger_here,
                      ldg_f32x4_2d, pdl_trigger, pdl_wait, quad_sum, warp_sum_i)
from ._mma import mma_bf16, pack_bf16x2, split_bf16x2
from .activations import swiglu

__all__ = ["V3Plan", "plan", "launch", "supported", "get_pyfunc", "get_kernel", "counters", "new_counters",
           "sweep_pack", "sweep_pack_device", "sweep_piece", "sweep_shape", "glu_rows", "COMPILE_SPECS", "HOT",
           "FORMATS"]

FORMATS = ((4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (2, 64), (2, 128))  # LW = 1, 2 or 4 words
NCOUNTERS = 1 << 16
_XB_BYTES = 40960  # shared bytes of a chunk's x fragments and partial sums for 8 rows (a block holds one chunk)


def supported(bits: int, group: int, inp: int, scale_kind: str = "bf16") -> bool:
    return (bits, group) in FORMATS and inp % group == 0 and scale_kind == "bf16"


# ----------------------------------------------------------------------------------------------------------------
# loads by flat element offset (GPU: inline PTX; simulator: plain indexing)
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:
    from llvmlite import ir as _ir
    from numba import types as _types
    from numba.cuda.extending import intrinsic as _intrinsic

    def _ptr(context, builder, arrty, a, off, offty, elt_bits):
        ary = context.make_array(arrty)(context, builder, value=a)
        off = context.cast(builder, off, offty, _types.intp)
        p = builder.gep(ary.data, [off])
        return builder.bitcast(p, _ir.PointerType(_ir.IntType(elt_bits))) if elt_bits else p

    def _make_ld(n, bits_in, cache):
        """``f(arr, off) -> uint32 x n``: ``n`` 32-bit words at element offset ``off`` of a C-contiguous array
        (any element type; the address aligned to ``4 n`` bytes), ``ld.global.<cache>``."""
        regs = ", ".join(f"${k}" for k in range(n))
        vec = f".v{n}" if n > 1 else ""
        text = f"ld.global.{cache}{vec}.u32 {{{regs}}}, [${n}];" if n > 1 else f"ld.global.{cache}.u32 $0, [$1];"

        def typer(typingctx, arr, off):
            if not (isinstance(arr, _types.Array) and isinstance(off, _types.Integer)):
                return None
            ret = _types.UniTuple(_types.uint32, n) if n > 1 else _types.uint32
            sig = ret(arr, off)

            def codegen(context, builder, sig, args):
                p = _ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1], 0)
                i32 = _ir.IntType(32)
                p = builder.bitcast(p, _ir.PointerType(i32))
                st = _ir.LiteralStructType([i32] * n) if n > 1 else i32
                asm = _ir.InlineAsm(_ir.FunctionType(st, [p.type]), text, ",".join(["=r"] * n) + ",l")
                res = builder.call(asm, [p])
                if n == 1:
                    return res
                return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, k) for k in range(n)])

            return sig, codegen

        return typer

    def _t1(typingctx, arr, off):
        return _make_ld(1, 32, "nc")(typingctx, arr, off)

    def _t2(typingctx, arr, off):
        return _make_ld(2, 32, "nc")(typingctx, arr, off)

    def _t4(typingctx, arr, off):
        return _make_ld(4, 32, "nc")(typingctx, arr, off)

    ld_w1 = _intrinsic(_t1)
    ld_w2 = _intrinsic(_t2)
    ld_w4 = _intrinsic(_t4)

    @_intrinsic
    def pf_l2(typingctx, arr, off):
        """``prefetch.global.L2`` of the line holding element ``off`` of a C-contiguous array (no register, no
        response to the SM)."""
        if not (isinstance(arr, _types.Array) and isinstance(off, _types.Integer)):
            return None
        sig = _types.void(arr, off)

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1], 0)
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.VoidType(), [p.type]), "prefetch.global.L2 [$0];", "l",
                                side_effect=True)
            builder.call(asm, [p])
            return context.get_dummy_value()

        return sig, codegen

    @_intrinsic
    def ld_cg_f32(typingctx, arr, off):
        """``arr.flat[off]`` (float32) read through L2 only (``ld.global.cg``): partial sums other blocks wrote."""
        if not (isinstance(arr, _types.Array) and arr.dtype == _types.float32 and isinstance(off, _types.Integer)):
            return None
        sig = _types.float32(arr, off)

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1], 0)
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.FloatType(), [p.type]), "ld.global.cg.f32 $0, [$1];", "=f,l")
            return builder.call(asm, [p])

        return sig, codegen

    @_intrinsic
    def ld_cg_f32_if(typingctx, arr, off, c):
        """``arr.flat[off]`` through L2 only where ``c`` is true, else -0.0 (x + -0.0 is x, bit for bit): one
        predicated ``ld.global.cg``, no branch (as a branch a load, ptxas spilled in the completion)."""
        if not (isinstance(arr, _types.Array) and arr.dtype == _types.float32 and isinstance(off, _types.Integer)
                and isinstance(c, (_types.Boolean, _types.Integer))):
            return None
        sig = _types.float32(arr, off, c)

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1], 0)
            cv = context.cast(builder, args[2], sig.args[2], _types.int32)
            asm = _ir.InlineAsm(_ir.FunctionType(_ir.FloatType(), [p.type, _ir.IntType(32)]),
                                "{ .reg .pred p; setp.ne.s32 p, $2, 0; mov.f32 $0, 0f80000000; "
                                "@p ld.global.cg.f32 $0, [$1]; }", "=f,l,r")
            return builder.call(asm, [p, cv])

        return sig, codegen

else:

    def _flat(arr):
        return arr.reshape(-1)

    def _words(arr, off, n):
        """n 32-bit words starting at element ``off`` of ``arr`` (uint32 or uint16 elements)."""
        f = _flat(arr)
        if f.dtype == np.uint32:
            return [np.uint32(f[off + k]) for k in range(n)]
        out = []
        for k in range(n):
            lo, hi = int(f[off + 2 * k]), int(f[off + 2 * k + 1])
            out.append(np.uint32(lo | (hi << 16)))
        return out

    @cuda.jit(device=True)
    def ld_w1(arr, off):
        return _words(arr, off, 1)[0]

    @cuda.jit(device=True)
    def ld_w2(arr, off):
        w = _words(arr, off, 2)
        return w[0], w[1]

    @cuda.jit(device=True)
    def ld_w4(arr, off):
        w = _words(arr, off, 4)
        return w[0], w[1], w[2], w[3]

    @cuda.jit(device=True)
    def ld_cg_f32(arr, off):
        return arr.reshape(-1)[off]

    @cuda.jit(device=True)
    def ld_cg_f32_if(arr, off, c):
        return arr.reshape(-1)[off] if c else np.float32(-0.0)

    @cuda.jit(device=True)
    def pf_l2(arr, off):
        assert 0 <= off < arr.size, "pf_l2: offset outside the array"


if not IS_SIM:

    def _make_lop3_mask(mask):
        def typer(typingctx, a, c):
            if not (isinstance(a, _types.Integer) and isinstance(c, _types.Integer)):
                return None
            sig = _types.uint32(a, c)

            def codegen(context, builder, sig, args):
                i32 = _ir.IntType(32)
                va = context.cast(builder, args[0], sig.args[0], _types.uint32)
                vc = context.cast(builder, args[1], sig.args[1], _types.uint32)
                asm = _ir.InlineAsm(_ir.FunctionType(i32, [i32, i32]), f"lop3.b32 $0, $1, {mask:#x}, $2, 0xEA;",
                                    "=r,r,r")
                return builder.call(asm, [va, vc])

            return sig, codegen

        return typer

    def _m4(typingctx, a, c):
        return _make_lop3_mask(0x000F000F)(typingctx, a, c)

    def _m2(typingctx, a, c):
        return _make_lop3_mask(0x00030003)(typingctx, a, c)

    # (a & mask) | c in one LOP3 (ptxas otherwise splits the two constants into two instructions)
    andor_m4 = _intrinsic(_m4)
    andor_m2 = _intrinsic(_m2)

else:

    @cuda.jit(device=True)
    def andor_m4(a, c):
        return np.uint32((int(a) & 0x000F000F) | int(c))

    @cuda.jit(device=True)
    def andor_m2(a, c):
        return np.uint32((int(a) & 0x00030003) | int(c))


# ----------------------------------------------------------------------------------------------------------------
# cp.async (register-free prefetch into a shared ring; the ``stages`` form)
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:

    def _make_cpa(nbytes):
        def typer(typingctx, ring, si, half, garr, goff):
            if not (isinstance(ring, _types.Array) and ring.dtype == _types.uint64 and isinstance(garr, _types.Array)):
                return None
            if not all(isinstance(v, _types.Integer) for v in (si, half, goff)):
                return None
            sig = _types.void(ring, si, half, garr, goff)

            def codegen(context, builder, sig, args):
                i32, i8 = _ir.IntType(32), _ir.IntType(8)
                ra = context.make_array(sig.args[0])(context, builder, value=args[0])
                sidx = context.cast(builder, args[1], sig.args[1], _types.intp)
                sptr = builder.gep(ra.data, [sidx])
                bptr = builder.bitcast(sptr, _ir.PointerType(i8))
                hoff = builder.mul(context.cast(builder, args[2], sig.args[2], _types.intp),
                                   _ir.Constant(_ir.IntType(64), 4))
                bptr = builder.gep(bptr, [hoff])
                s32 = builder.ptrtoint(builder.addrspacecast(bptr, _ir.PointerType(i8, addrspace=3)), i32)
                gptr = _ptr(context, builder, sig.args[3], args[3], args[4], sig.args[4], 0)
                cache = "cg" if nbytes == 16 else "ca"
                asm = _ir.InlineAsm(_ir.FunctionType(_ir.VoidType(), [i32, gptr.type]),
                                    f"cp.async.{cache}.shared.global [$0], [$1], {nbytes};", "r,l,~{memory}",
                                    side_effect=True)
                builder.call(asm, [s32, gptr])
                return context.get_dummy_value()

            return sig, codegen

        return typer

    def _cpa4(typingctx, ring, si, half, garr, goff):
        return _make_cpa(4)(typingctx, ring, si, half, garr, goff)

    def _cpa8(typingctx, ring, si, half, garr, goff):
        return _make_cpa(8)(typingctx, ring, si, half, garr, goff)

    # ``cpa8(ring, si, 0, arr, off)``: 8 bytes at element ``off`` of ``arr`` -> ``ring[si]`` (uint64 shared);
    # ``cpa4(ring, si, half, arr, off)``: 4 bytes -> half ``half`` of ``ring[si]``; complete after commit + wait
    cpa4 = _intrinsic(_cpa4)
    cpa8 = _intrinsic(_cpa8)

else:

    @cuda.jit(device=True)
    def cpa8(ring, si, half, garr, goff):
        w = _words(garr, goff, 2)
        ring[si] = np.uint64(int(w[0]) | (int(w[1]) << 32))

    @cuda.jit(device=True)
    def cpa4(ring, si, half, garr, goff):
        w = int(_words(garr, goff, 1)[0])
        old = int(ring[si])
        ring[si] = np.uint64((old & 0xFFFFFFFF00000000) | w) if half == 0 else np.uint64((old & 0xFFFFFFFF) | (w << 32))



cpa_commit, _WAITS = cp_async_commit, CP_ASYNC_WAIT  # cp.async groups: _device's one definition


@devfn
def _bf_hi(v):
    """The bf16 in the high half of a word, as fp32 (the low half: ``bf16_to_f32``)."""
    return np.uint32(v & np.uint32(0xFFFF0000)).view(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# code generation
# ----------------------------------------------------------------------------------------------------------------


def _lane_layout(bits: int, group: int):
    """(LW, codes per lane per group, steps): per mma step (word j, [(lo, hi) lane-local code indices of the A/B
    slot 0 pair, of the slot 1 pair], [the word's pair numbers feeding slot 0, slot 1])."""
    lw = group * bits // 128
    cl = group // 4
    cpw = 32 // bits
    steps = []
    for j in range(lw):
        if bits == 8:
            steps.append((j, [(4 * j, 4 * j + 1), (4 * j + 2, 4 * j + 3)], [0, 1]))
        else:
            half = cpw // 2  # pair i of a word = codes (i, i + half), from the word shifted by bits * i
            for sl in range(half // 2):
                i0, i1 = 2 * sl, 2 * sl + 1
                steps.append((j, [(cpw * j + i0, cpw * j + i0 + half), (cpw * j + i1, cpw * j + i1 + half)],
                              [i0, i1]))
    assert len(steps) == group // 16
    return lw, cl, steps


def _decode_lines(bits: int, w: str, pre: str, ind: str) -> list[str]:
    """Lines decoding word ``w`` into bf16 pairs ``{pre}0..``: 2/4 bits as ``128 + q`` (no subtract), 8 bits exact."""
    L = []
    if bits == 8:
        # code k of the word (bits 8k..8k+7) through the fp32 magic 2^23 + q, exact, then packed to bf16 pairs
        for k in range(4):
            if k == 0:
                e = f"(({w} & np.uint32(0xFF)) | np.uint32(0x4B000000))"
            elif k < 3:
                e = f"((({w} >> np.uint32({8 * k})) & np.uint32(0xFF)) | np.uint32(0x4B000000))"
            else:
                e = f"(({w} >> np.uint32(24)) | np.uint32(0x4B000000))"
            L.append(f"{ind}{pre}f{k} = np.uint32{e}.view(np.float32) - _TWO23")
        L.append(f"{ind}{pre}0 = pack_bf16x2({pre}f0, {pre}f1)")
        L.append(f"{ind}{pre}1 = pack_bf16x2({pre}f2, {pre}f3)")
        return L
    fn = "andor_m4" if bits == 4 else "andor_m2"
    for i in range(32 // bits // 2):
        src = w if i == 0 else f"({w} >> np.uint32({bits * i}))"
        L.append(f"{ind}{pre}{i} = {fn}({src}, MAGIC)")  # MAGIC: 0x43004300 in a register
    return L


def _xprep_batch(a, I2, PB, T, nitems, RPN, nt, group, cl, nq, spg, steps, xh, X8, xq, xsh=False, one=False):
    """The x loads of one batch of ``PB`` items a thread (``_gen_source``'s x preparation); ``xsh``: one row of x
    from the fused norm prologue's shared array ``nf_xs`` (by column) instead of global memory. Items of rows past
    ``R`` load row ``R - 1`` and are zeroed (``live``). (Session 44's row-major form that skipped them,
    ``TENSORFOLD_GEMV3_XLIVE``, tied at one stream and lost 3.5 % at eight on an H100 in session 46: removed.)
    ``one``: the chunks-in-a-block form's items, (group, lane column) of row 0 only (its launches have one row)."""
    for k in range(PB):
        a(f"{I2}it{k} = min(tid + (kbat * {PB} + {k}) * {T}, {nitems - 1})")
        a(f"{I2}tt{k} = it{k} % 4")
        if one:
            a(f"{I2}gl{k} = it{k} // 4")
            a(f"{I2}base = kb + gl{k} * {group} + tt{k} * {cl}")
            for q in range(nq):
                a(f"{I2}q{k}_{q} = ldg_f32x4_2d(x, 0, base + {4 * q})")
            continue
        a(f"{I2}r{k} = (it{k} // 4) % {RPN * nt}")
        a(f"{I2}gl{k} = it{k} // {4 * RPN * nt}")
        a(f"{I2}rr = min(r{k}, R - 1)")
        a(f"{I2}live{k} = np.float32(1.0) if r{k} < R else np.float32(0.0)")
        a(f"{I2}base = kb + gl{k} * {group} + tt{k} * {cl}")
        for q in range(nq):
            if xsh:
                a(f"{I2}q{k}_{q} = lds4(nf_xs, base + {4 * q})")
            else:
                a(f"{I2}q{k}_{q} = ldg_f32x4_2d(x, rr, base + {4 * q})")


def _xprep_items(a, I2, PB, T, nitems, RPN, nt, spg, steps, xh, X8, xq, one=False):
    """One batch's items: B-fragment words into ``xb``; their k-step partial sums into ``xp`` (summed by a second
    pass) or, with ``xq``, summed over the steps in a lane and across the item's 4 lanes by ``quad_sum``, the
    group sum written to ``xs`` by the tt = 0 lane. Items past ``nitems`` are whole quads (``nitems`` and ``T`` are
    multiples of 4): with ``xq`` every lane computes and shuffles, only in-range items write.

    ``one`` (``xh = 2``, ``xq``, one n-tile): items of row 0 only (``_xprep_batch``'s), which also write the zero
    words and group sums of batch rows 1-3, so the fragments are those of the 4-row layout at R = 1."""
    for k in range(PB):
        if one:
            a(f"{I2}r{k} = 0")
            a(f"{I2}live{k} = np.float32(1.0)")
        guard = f"tid + (kbat * {PB} + {k}) * {T} < {nitems}"
        if xq:
            K = I2
        else:
            a(f"{I2}if {guard}:")
            K = I2 + "    "
        if X8:  # batch row r is B column r % 8 of n-tile r // 8: lanes 4 (r % 8) + tt
            a(f"{K}xrow = gl{k} * {spg * nt * 32} + (r{k} // 8) * 32 + tt{k} + 4 * (r{k} % 8)")
        else:  # batch row r: columns 2 (r % 4) (hi) and 2 (r % 4) + 1 (lo) of n-tile r // 4
            a(f"{K}xrow = gl{k} * {spg * nt * 32} + (r{k} // 4) * 32 + tt{k} + 8 * (r{k} % 4)")
        if not xq:
            a(f"{K}prow = (gl{k} * {RPN * nt} + r{k}) * {4 * spg} + tt{k} * {spg}")
        writes = []  # (xb offset, value expression) of the guarded stores
        for s_, (_, prs, _) in enumerate(steps):
            (l0, h0), (l1, h1) = prs
            vs = [f"q{k}_{c // 4}[{c % 4}] * live{k}" for c in (l0, h0, l1, h1)]
            if xh:
                a(f"{K}h0_{s_} = pack_bf16x2({vs[0]}, {vs[1]})")
                a(f"{K}h1_{s_} = pack_bf16x2({vs[2]}, {vs[3]})")
                writes.append((s_ * nt * 32, f"np.uint64(h0_{s_}) | (np.uint64(h1_{s_}) << np.uint64(32))"))
                if not X8:  # the lo column stays in the layout, zero
                    writes.append((s_ * nt * 32 + 4, "np.uint64(0)"))
                if one:  # batch rows 1-3 (hi and lo columns): zero
                    writes += [(s_ * nt * 32 + c, "np.uint64(0)") for c in (8, 12, 16, 20, 24, 28)]
                ps = f"(bf16_to_f32(h0_{s_}) + _bf_hi(h0_{s_})) + (bf16_to_f32(h1_{s_}) + _bf_hi(h1_{s_}))"
            else:
                a(f"{K}h0_{s_}, l0_{s_} = split_bf16x2({vs[0]}, {vs[1]})")
                a(f"{K}h1_{s_}, l1_{s_} = split_bf16x2({vs[2]}, {vs[3]})")
                writes.append((s_ * nt * 32, f"np.uint64(h0_{s_}) | (np.uint64(h1_{s_}) << np.uint64(32))"))
                writes.append((s_ * nt * 32 + 4, f"np.uint64(l0_{s_}) | (np.uint64(l1_{s_}) << np.uint64(32))"))
                ps = (f"((bf16_to_f32(h0_{s_}) + bf16_to_f32(l0_{s_})) + (_bf_hi(h0_{s_}) + _bf_hi(l0_{s_}))) + "
                      f"((bf16_to_f32(h1_{s_}) + bf16_to_f32(l1_{s_})) + (_bf_hi(h1_{s_}) + _bf_hi(l1_{s_})))")
            if not xq:
                for off, v in writes:
                    a(f"{K}xb[xrow + {off}] = {v}")
                writes = []
                a(f"{K}xp[prow + {s_}] = {ps}")
            elif s_ == 0:
                a(f"{K}ps{k} = {ps}")
            else:
                a(f"{K}ps{k} = ps{k} + ({ps})")
        if xq:
            a(f"{K}ps{k} = quad_sum(ps{k})")
            a(f"{K}if {guard}:")
            for off, v in writes:
                a(f"{K}    xb[xrow + {off}] = {v}")
            a(f"{K}    if tt{k} == 0:")
            if one:
                a(f"{K}        xs[gl{k} * {RPN * nt}] = ps{k}")
                for r_ in range(1, RPN):
                    a(f"{K}        xs[gl{k} * {RPN * nt} + {r_}] = np.float32(0.0)")
            else:
                a(f"{K}        xs[gl{k} * {RPN * nt} + r{k}] = ps{k} if r{k} < R else np.float32(0.0)")


def _gen_source(name: str, bits: int, group: int, nt: int, nw: int, mt: int, cg: int, u: int, depth: int,
                stages: int = 0, pb: int = 0, pf: int = 0, nwp: int = 0, kp: int = 1, glu: bool = False,
                noc: bool = False, sw: bool = False, xh: int = 0, defer: bool = False, cmp: int = 1,
                pre: int = 1, xq: bool = False, cmpu=(4, 8), nrm=None, cp: bool = False, rl: bool = False,
                kin: bool = False) -> str:
    """Kernel ``name(W, S, B, x, y, ws, cnt, R)``: block (bx, kz) prepares K chunk ``kz`` (``cg``
    groups) of x once, then each of its ``nw`` warps walks the row tiles ``wid, wid + nwt, ..`` (``wid = bx * nw +
    warp``, ``nwt = gridDim.x * nw``; a tile is ``mt`` x 16 rows) over the chunk, ``u`` groups an iteration, with the
    weight / scale words of ``depth`` iterations ahead in flight across tile boundaries. A tile's sums go to ``y``
    (one chunk) or to ``ws[kz]``; with several chunks every warp then fences once, counts its tiles' arrivals, and the
    warp that completes a tile adds its ``ks`` partials in chunk order.

    ``stages`` > 0 (formats with 2 words a lane and group, ``u`` 2 or 4): instead of a register ring, each lane
    copies its own weight and scale words of iteration ``q + stages - 1`` into a per-warp shared ring with
    ``cp.async`` (no registers held while in flight), then waits for iteration ``q``'s group and reads it back with
    8-byte shared loads. Only the load path differs: the arithmetic, hence every bit, is the same.

    ``pb``: x-preparation items a thread loads before using any (0: 8 for one n-tile, 4 for two). Larger batches
    take fewer L2 round trips and more registers (the kernel's register count is its peak: 140 -> 168 for the
    4-bit g64 one-n-tile kernel at 2 -> 8, 101 -> 140 with 2 groups an iteration).

    ``pf`` > 0, the prefetch form (formats with 2 words a lane and group, ``u`` 2 or 4): before ``pdl_wait`` each
    warp copies the weight and scale words of *all* its tiles (at most ``pf``) into dynamic shared memory with
    ``cp.async``, one commit group a tile, so a small weight streams in while the previous kernel still runs; after
    the x preparation a tile waits for its own group and reads its words back as the ``stages`` form does (the same
    arithmetic, hence the same bits). The dynamic array holds the x fragments first, then the warps' tiles; the
    launch gives its size (``V3Plan.pf_launch``). ``nwp`` (>= ``nw``): warps a block, the ones past ``nw`` only
    help with the x preparation. ``kp`` > 1 (prefetch form only): the block's tile warps are ``nw / kp`` tile slots
    times ``kp`` parts of the chunk; each warp sums its part's groups in order, and the part-0 warp of a slot adds
    the ``kp`` part sums in part order (through shared memory) before the tile goes out, so a tile's arithmetic is
    a function of the plan only.

    ``glu``: the SwiGLU epilogue for a fused gate | up weight (``out = 2 I`` rows, gate rows first, ``I % 8 == 0``):
    16-row m-tile ``T`` reads gate rows ``8 T .. 8 T + 7`` as its rows 0-7 and the matching up rows ``I + 8 T ..``
    as rows 8-15, so lane (g, t) holds a gate sum and its up sum, and ``y [R, I]`` gets ``swiglu(gate, up)``
    (``activations.swiglu``: the bits of the GEMV into ``[R, 2 I]`` followed by ``silu_mul_fused_k``). With
    several chunks the partials keep the physical tile-row columns of ``ws`` and the completing warp pairs them.

    ``sw``: W is in ``sweep_pack``'s layout with ``per = nit`` (register ring, u 2 or 4): a tile's lane bases point
    into the run of (chunk, 16-row unit), and iteration ``it`` adds the constant ``it`` pieces; scales and biases
    come from the same piece; rows need no clamping (the pack pads with zeros); the
    row count is ``S.shape[0]`` (the MLX scales are passed, not read). With ``glu`` the pack pairs gate and up rows
    (``glu_rows``), so the piece's rows g and g + 8 are the gate and up rows the epilogue pairs.

    ``noc`` (a diagnostic, ``TENSORFOLD_GEMV3_NOC=1``): the loads without the dequantize-and-mma work.

    ``pre`` (register ring only): 1 issues the first ``depth`` iterations' weight loads before ``pdl_wait``; 0 after
    it, right behind x's loads (x then does not queue behind them; the overlap with the previous kernel is lost);
    2 (``sw``; without it ``get_pyfunc`` makes it 1) as 0, with the first tile's run prefetched into L2 before the
    wait (``pf_l2``: the overlap kept, nothing in the SM's response path ahead of x); 3 and 4 prefetch the first 2
    and 3 tiles' runs (session 28: slower than 2, see ``pre_mode``).
    ``xq``: each x item's partial sums over its k-steps are added across the item's 4 lanes by two shuffles
    (``quad_sum``) into ``xs`` during the item pass, instead of through ``xp`` and a second pass and barrier: one
    block barrier in the x preparation instead of two, and another (fixed) order of the group sums' fp32 adds.

    ``xh`` (bf16-only x: x enters the tensor cores rounded to nearest bf16, no lo part; register ring only, no
    ``pf`` / ``stages`` / ``kp``):

    - ``xh = 1``: one B column a batch row, so an n-tile holds 8 rows instead of 4: a launch of up to 8 rows is one
      n-tile, one mma a k-step whatever its row count. Lane (g, t) holds batch rows ``8 n + 2 t`` and
      ``8 n + 2 t + 1`` (the mma's d0 / d1 and d2 / d3).
    - ``xh = 2``: the hi + lo kernel's layout (4 rows an n-tile) with every lo column zero, and only the hi
      columns' sums (d0, d2) accumulated: the cheaper loop for 1-4 rows. A column of an mma depends only on its own
      B column, the x values, group sums and accumulation order are those of ``xh = 1``, so a row gets the same
      bits from either form (tests/kernels/test_sim_qgemv.py checks it).

    ``nrm`` (one row): the add + RMSNorm that makes x runs in the kernel, ``norms.fused_norm_lines`` at the
    standalone kernel's geometry ``nrm``: the kernel takes ``norms.FUSED_ARGS`` after ``R``; each block makes its
    chunk of x in shared memory (``nf_xs``), which its x preparation reads instead of global x.

    ``kin`` (chunks in a block; one-row launches of swept plans, ``xh = 2``): a block's ``nw`` warps are the ``ks =
    nw`` K chunks of its tiles (warp = chunk, ``kz``), it prepares row 0 of all of x once (dynamic shared memory,
    chunk ``kz``'s fragments at ``kz * XBW``), and a tile's chunk sums meet in shared memory (``red``): after the
    loop one block barrier, then the tile's ``ks`` sums are added in chunk order and stored. The same partial sums
    and the same adds in the same order as the split-K completion, so the same bits, without its fence, arrival
    atomics and L2 round trips. A block walks the tiles ``bx, bx + gridDim.x, ..``, at most ``KIN_MT``."""
    nwp = max(nwp, nw)
    assert not kin or (sw and xh == 2 and nt == 1 and mt == 1 and xq and not (pf or stages or kp > 1 or glu or defer
                                                                             or nrm))
    assert not xh or not (pf or stages or kp > 1)
    X8 = xh == 1
    RPN = 8 if X8 else 4  # batch rows an n-tile
    assert not sw or (u in (2, 4) and not (pf or stages) and kp == 1)
    assert kp == 1 or (pf and nw % kp == 0 and cg % kp == 0 and (cg // kp) % u == 0)
    nts = nw // kp  # tile slots a block
    lw, cl, steps = _lane_layout(bits, group)
    spg = group // 16
    wpg = group * bits // 32
    off128 = bits != 8
    nit = cg // u
    assert cg % u == 0 and u in (1, 2, 4)
    swords = {1: 1, 2: 1, 4: 2}[u]
    ldw = {1: "ld_w1", 2: "ld_w2", 4: "ld_w4"}[lw]
    lds = {1: "ld_w1", 2: "ld_w2"}[swords]
    TR = 16 * mt
    if stages:
        assert lw == 2 and u in (2, 4) and 2 <= stages <= 8 and stages - 1 <= nit
    npw = mt * 2 * u  # ring pieces (8 bytes a lane) of weights an iteration, then the scale / bias pieces
    NP = npw + mt * 2 * (1 if u == 2 else 2)
    if pf:
        assert lw == 2 and u in (2, 4) and 1 <= pf <= len(_WAITS) and not stages
    XBW = cg * spg * nt * 32  # words (uint64) of the x fragments
    nitp = nit // kp  # iterations of a warp's part of the chunk
    SPW = pf * nitp  # ring stages a warp in the prefetch form: every iteration of its tiles
    NV = mt * nt * 2 * (2 if X8 else 1)  # accumulators a lane
    HS = [("a0", "a", 0), ("a1", "a", 1), ("b0", "b", 0), ("b1", "b", 1)] if X8 else [("a", "a", 0), ("b", "b", 0)]
    L = []
    a = L.append
    extra = ", " + norms.FUSED_ARGS if nrm else ""
    a(f"def {name}(W, S, B, x, y, ws, cnt, R{extra}):")
    if gemv_trigger_here("start"):
        a("    pdl_trigger()")  # kernels._pdl: the next launch may start now
    a("    tid = cuda.threadIdx.x")
    a("    lane = tid & 31")
    a("    warp = tid >> 5")
    a("    g = lane >> 2")
    a("    t = lane & 3")
    if pf:
        a("    xb = cuda.shared.array(0, _U64)")  # dynamic: x fragments, then the warps' prefetched tiles
        a("    wr = xb")
    elif kin:
        a("    xb = cuda.shared.array(0, _U64)")  # dynamic: every chunk's x fragments
        a(f"    red = cuda.shared.array({KIN_MT * nw * TR}, np.float32)")  # a tile's chunk sums
    elif xb_dynamic(group, cg, nt, xh, stages):
        a("    xb = cuda.shared.array(0, _U64)")  # dynamic: chunks past the static budget (``xb_dynamic``)
    else:
        a(f"    xb = cuda.shared.array({XBW}, np.uint64)")
    a(f"    xs = cuda.shared.array({cg * nt * RPN * (nw if kin else 1)}, np.float32)")
    if not xq:
        a(f"    xp = cuda.shared.array({cg * nt * RPN * 4 * spg}, np.float32)")
    a(f"    lastf = cuda.shared.array({nwp * 32}, np.int32)")
    if stages:
        a(f"    wr = cuda.shared.array({nw * stages * NP * 32}, np.uint64)")
    if kp > 1:
        a(f"    red = cuda.shared.array({kp * nts * NV * 32}, np.float32)")  # part sums of the slots' tiles
    # the swept layout (``sweep_pack``): W is [pieces, PW]; the (unread) MLX scales give the row count
    PWs = 16 * u * wpg + 16 * u  # words of a piece: 16 rows x u groups of codes, then their scales and biases
    a("    out = S.shape[0]" if sw else "    out = W.shape[0]")
    if sw:
        a("    nt16 = (out + 15) // 16")
    if glu:
        a("    hout = out >> 1")
    a("    bx = cuda.blockIdx.x")
    if kin:
        a("    kz = warp")
        a(f"    ks = {nw}")
        a("    nwt = cuda.gridDim.x")
        a("    wid = bx")
    else:
        a("    kz = cuda.blockIdx.y")
        a("    ks = cuda.gridDim.y")
    if kin:
        pass
    elif kp > 1:
        a(f"    ts = warp % {nts}")
        a(f"    kpi = warp // {nts}")
        a(f"    nwt = cuda.gridDim.x * {nts}")
        a(f"    wid = bx * {nts} + ts")
    else:
        a(f"    nwt = cuda.gridDim.x * {nw}")
        a(f"    wid = bx * {nw} + warp")
    a(f"    ntile = (out + {TR - 1}) // {TR}")
    if nwp > nw:
        a(f"    ntw = (ntile - wid + nwt - 1) // nwt if (wid < ntile and warp < {nw}) else 0")
    else:
        a("    ntw = (ntile - wid + nwt - 1) // nwt if wid < ntile else 0")
    a(f"    total = ntw * {nit}")
    a(f"    G0 = kz * {cg}")
    a(f"    G1 = G0 + kpi * {cg // kp}" if kp > 1 else "    G1 = G0")  # the first group of this warp's part
    a("    wpitch = W.shape[1]")
    a("    spitch = S.shape[1]")
    a("    MAGIC = np.uint32(0x43004300) | (np.uint32(R) >> np.uint32(31))")

    def bases(ind, suf, jexpr):
        """row offsets (weights, scales) of the lane's rows in tile ``jexpr`` of this warp (rows clamped)"""
        a(f"{ind}ob{suf} = (wid + ({jexpr}) * nwt) * {TR}")
        if sw:  # the run of (chunk, 16-row unit): its nit pieces in turn, each rows, then scales, then biases
            for m in range(mt):
                a(f"{ind}pu{suf} = (kz * nt16 + min((ob{suf} >> 4) + {m}, nt16 - 1)) * {nit * PWs}")
                for h, dr in (("a", 0), ("b", 8)):
                    a(f"{ind}wo{h}{m}{suf} = pu{suf} + (g + {dr}) * {wpg} + t * {lw}")
                    a(f"{ind}so{h}{m}{suf} = pu{suf} + {16 * u * wpg} + (g + {dr}) * {u // 2}")
            return
        for m in range(mt):
            for h, dr in (("a", 0), ("b", 8)):
                if glu:  # gate row (a) and its up row (b)
                    a(f"{ind}rr{suf} = min((ob{suf} >> 1) + {8 * m} + g, hout - 1)" + (" + hout" if dr else ""))
                else:
                    a(f"{ind}rr{suf} = min(ob{suf} + {16 * m + dr} + g, out - 1)")
                a(f"{ind}wo{h}{m}{suf} = rr{suf} * wpitch + G1 * {wpg} + t * {lw}")
                a(f"{ind}so{h}{m}{suf} = rr{suf} * spitch + G1")

    def loads(ind, pre, suf, it):
        """weight and scale / bias words of iteration ``it`` (a constant) of the tile whose bases end in ``suf``"""
        if sw:
            for m in range(mt):
                for h in ("a", "b"):
                    for uu in range(u):
                        names = ", ".join(f"{pre}w{h}{m}_{uu}_{j}" for j in range(lw))
                        a(f"{ind}{names} = {ldw}(W, wo{h}{m}{suf} + {it * PWs + uu * 16 * wpg})")
                    for nm, o8 in (("s", 0), ("b", 8 * u)):
                        names = ", ".join(f"{pre}{nm}{h}{m}_{k}" for k in range(swords))
                        a(f"{ind}{names} = {lds}(W, so{h}{m}{suf} + {it * PWs + o8})")
            return
        for m in range(mt):
            for h in ("a", "b"):
                for uu in range(u):
                    v = f"{pre}w{h}{m}_{uu}"
                    names = ", ".join(f"{v}_{j}" for j in range(lw))
                    a(f"{ind}{names} = {ldw}(W, wo{h}{m}{suf} + {(it * u + uu) * wpg})")
                if u == 1:
                    a(f"{ind}{pre}sel{h}{m} = (so{h}{m}{suf} + {it}) & 1")
                    a(f"{ind}{pre}s{h}{m} = ld_w1(S, so{h}{m}{suf} + {it} - {pre}sel{h}{m})")
                    a(f"{ind}{pre}b{h}{m} = ld_w1(B, so{h}{m}{suf} + {it} - {pre}sel{h}{m})")
                else:
                    for arr, nm in (("S", "s"), ("B", "b")):
                        names = ", ".join(f"{pre}{nm}{h}{m}_{k}" for k in range(swords))
                        a(f"{ind}{names} = {lds}({arr}, so{h}{m}{suf} + {it * u})")

    def piece(st, k):
        if pf:
            return f"{XBW} + ((warp * {SPW} + {st}) * {NP} + {k}) * 32 + lane"
        return f"((warp * {stages} + {st}) * {NP} + {k}) * 32 + lane"

    def copies(ind, st, suf, it, commit=True):
        """cp.async of iteration ``it``'s weight and scale / bias words (tile bases ``suf``) into ring stage ``st``"""
        a(f"{ind}cst = {st}")
        for m in range(mt):
            for hi, h in enumerate(("a", "b")):
                for uu in range(u):
                    k_ = (m * 2 + hi) * u + uu
                    a(f"{ind}cpa8(wr, {piece('cst', k_)}, 0, W, wo{h}{m}{suf} + {(it * u + uu) * wpg})")
                kb_ = npw + (m * 2 + hi) * (1 if u == 2 else 2)
                if u == 2:
                    a(f"{ind}cpa4(wr, {piece('cst', kb_)}, 0, S, so{h}{m}{suf} + {it * u})")
                    a(f"{ind}cpa4(wr, {piece('cst', kb_)}, 1, B, so{h}{m}{suf} + {it * u})")
                else:
                    a(f"{ind}cpa8(wr, {piece('cst', kb_)}, 0, S, so{h}{m}{suf} + {it * u})")
                    a(f"{ind}cpa8(wr, {piece('cst', kb_ + 1)}, 0, B, so{h}{m}{suf} + {it * u})")
        if commit:
            a(f"{ind}cpa_commit()")

    def reads(ind, st):
        """ring stage ``st`` back into the names the compute uses (``p0_...``)"""
        a(f"{ind}rst = {st}")
        for m in range(mt):
            for hi, h in enumerate(("a", "b")):
                for uu in range(u):
                    a(f"{ind}qv = wr[{piece('rst', (m * 2 + hi) * u + uu)}]")
                    a(f"{ind}p0_w{h}{m}_{uu}_0 = np.uint32(qv & np.uint64(0xFFFFFFFF))")
                    a(f"{ind}p0_w{h}{m}_{uu}_1 = np.uint32(qv >> np.uint64(32))")
                kb_ = npw + (m * 2 + hi) * (1 if u == 2 else 2)
                if u == 2:
                    a(f"{ind}qv = wr[{piece('rst', kb_)}]")
                    a(f"{ind}p0_s{h}{m}_0 = np.uint32(qv & np.uint64(0xFFFFFFFF))")
                    a(f"{ind}p0_b{h}{m}_0 = np.uint32(qv >> np.uint64(32))")
                else:
                    for nm, k in (("s", 0), ("b", 1)):
                        a(f"{ind}qv = wr[{piece('rst', kb_ + k)}]")
                        a(f"{ind}p0_{nm}{h}{m}_0 = np.uint32(qv & np.uint64(0xFFFFFFFF))")
                        a(f"{ind}p0_{nm}{h}{m}_1 = np.uint32(qv >> np.uint64(32))")

    def ring_names():
        names = []
        for m in range(mt):
            for h in ("a", "b"):
                for uu in range(u):
                    names += [f"w{h}{m}_{uu}_{j}" for j in range(lw)]
                if u == 1:
                    names += [f"s{h}{m}", f"b{h}{m}", f"sel{h}{m}"]
                else:
                    names += [f"s{h}{m}_{k}" for k in range(swords)] + [f"b{h}{m}_{k}" for k in range(swords)]
        return names

    assert depth <= nit
    bases("    ", "c", "0")
    if pf:
        # every tile of this warp (one commit group each, empty past ntw, so tile j waits for pf - 1 - j groups)
        for jt in range(pf):
            a(f"    if {jt} < ntw:")
            if jt:
                bases("        ", "c", str(jt))
            for it in range(nitp):
                copies("        ", jt * nitp + it, "c", it, commit=False)
            a("    cpa_commit()")
    elif stages:
        for qq in range(stages - 1):
            copies("    ", qq, "c", qq)
    elif pre >= 2 and sw:
        # the first pre - 1 tiles' runs of nit pieces (contiguous) into L2, a line a lane: no registers, no
        # responses that x's loads after the wait would queue behind; the ring's first loads then come from L2.
        # Tile 0 is clamped like the ring's bases (a warp without a tile prefetches the last run: in bounds); later
        # tiles only where the warp has them
        nl = -(-nit * PWs // 32)  # 128-byte lines of the run
        for jt in range(pre - 1):
            ind = "    " if jt == 0 else "        "
            if jt:
                a(f"    if {jt} < ntw:")
                a(f"        obq = (wid + {jt} * nwt) * {TR}")
            for m in range(mt):
                a(f"{ind}pfb = (kz * nt16 + min(({'obc' if jt == 0 else 'obq'} >> 4) + {m}, nt16 - 1)) * {nit * PWs}")
                for c in range(-(-nl // 32)):
                    a(f"{ind}if lane + {32 * c} < {nl}:")
                    a(f"{ind}    pf_l2(W, pfb + (lane + {32 * c}) * 32)")
    elif pre == 1:
        for d in range(depth):
            loads("    ", f"p{d}_", "c", d)
    # weights are never written by a kernel: the loads above run before the wait, overlapping the previous kernel's
    # tail under PDL (kernels._pdl); x, y, the workspace and the counters are touched only after it
    a("    pdl_wait()")
    if nrm:
        L.extend(norms.fused_norm_lines("    ", nrm, nwp * 32, f"G0 * {group}", f"(G0 + {cg}) * {group}",
                                        klen=cg * group))
    # ---- x preparation of the chunk, then the group sums. An item is (group, row, lane column tt): the 16-byte
    #      loads of its cl contiguous x values (every k-step's four values of that lane column lie there), then for
    #      each k-step its hi / lo fragment words and its partial sum. (Session 15: the earlier items, one a
    #      (group, step, tt, row) with four scalar loads and a runtime step switch, made the x preparation a third of
    #      the kernel's instructions, ncu.) The same values and sums, hence the same bits.
    I = "    "
    a(f"{I}kb = {0 if kin else 'G0'} * {group}")
    nitems = nw * cg * 4 if kin else cg * 4 * nt * RPN
    T = nwp * 32
    ipt = -(-nitems // T)  # items per thread
    nq = cl // 4  # 16-byte loads an item
    # a batch's x loads are all issued before any is used (a runtime loop over batches bounds the registers)
    # 8 16-byte loads: 136 registers at one n-tile, 168 at two (ptxas sm_90); bf16-only x has twice the items at one
    # n-tile (8 rows) and no lo split: 16 loads keep it one batch (one L2 round trip; 168 registers, no spills)
    PB = min(ipt, pb or max(1, (16 if X8 else 8) // nq))
    nb = -(-ipt // PB)
    # pre = 0: the batches unrolled (kbat a constant), the first weight loads issued right behind batch 0's x loads
    bats = [None] if pre == 1 else list(range(nb))
    for bat in bats:
        if bat is None:
            a(f"{I}for kbat in range({nb}):")
            I2 = I + "    "
        else:
            a(f"{I}kbat = {bat}")
            I2 = I
        _xprep_batch(a, I2, PB, T, nitems, RPN, nt, group, cl, nq, spg, steps, xh, X8, xq, xsh=bool(nrm), one=kin)
        if bat == 0 and not (pf or stages):
            for d in range(depth):
                loads(I2, f"p{d}_", "c", d)
        _xprep_items(a, I2, PB, T, nitems, RPN, nt, spg, steps, xh, X8, xq, one=kin)
    a(f"{I}cuda.syncthreads()")
    if not xq:
        a(f"{I}for e0 in range(0, {cg * nt * RPN}, {nwp * 32}):")
        a(f"{I}    e = e0 + tid")
        a(f"{I}    if e < {cg * nt * RPN}:")
        J = I + "        "
        a(f"{J}sm = xp[e * {4 * spg}]")
        a(f"{J}for kk in range(1, {4 * spg}):")
        a(f"{J}    sm += xp[e * {4 * spg} + kk]")
        a(f"{J}xs[e] = sm if e % {RPN * nt} < R else np.float32(0.0)")
        a(f"{I}cuda.syncthreads()")
    for m in range(mt):
        for n in range(nt):
            for h, _, _ in HS:
                a(f"    acc{m}_{n}_{h} = np.float32(0.0)")
    # ---- main loop over this warp's tiles; a tile's nit iterations unrolled, loads running depth iterations ahead
    #      (into the next tile at the end of one)
    a("    qg = 0")
    xbn, xsn = ("xb", "xs")
    if kin:  # this warp's chunk of the block's x fragments and group sums, as slices: indexed with an offset
        # instead, the loop's shared loads took 190 registers (ptxas sm_90), 118 as slices (session 54)
        a(f"    xw = xb[kz * {XBW}:(kz + 1) * {XBW}]")
        a(f"    xsw = xs[kz * {cg * nt * RPN}:(kz + 1) * {cg * nt * RPN}]")
        xbn, xsn = ("xw", "xsw")
    if noc:
        a("    xacc = np.uint32(0)")
    if pf:  # every warp runs pf rounds (block barriers between them when kp > 1)
        a(f"    for jt in range({pf}):")
        a("        if jt < ntw:")
        J = "            "
    else:
        a("    for jt in range(ntw):")
        J = "        "
    if pf:
        bases(J, "c", "jt")
        for jt in range(pf):  # tile jt's group complete: pf - 1 - jt later groups may still be in flight
            kw = "if" if jt == 0 else "elif"
            a(f"{J}{kw} jt == {jt}:")
            a(f"{J}    cpa_wait{pf - 1 - jt}()")
    else:
        bases(J, "n", "min(jt + 1, ntw - 1)")
    JT = J
    its = list(range(nit))
    if pf:  # words come from shared memory at any offset: one loop body instead of nit unrolled copies
        its = ["iq" if kp == 1 else f"(iq + kpi * {nitp})"]
        a(f"{J}for iq in range({nitp}):")
        J = J + "    "

    def lin(it, mult, c):
        return str(it * mult + c) if isinstance(it, int) else f"{it} * {mult} + {c}"

    for it in its:
        if pf:
            reads(J, f"jt * {nitp} + iq")
        elif stages:
            tgt = it + stages - 1
            st = f"(qg + {stages - 1}) % {stages}"
            if tgt < nit:
                copies(J, st, "c", tgt)
            else:
                copies(J, st, "n", tgt - nit)
            a(f"{J}cpa_wait{stages - 1}()")
            reads(J, f"qg % {stages}")
            a(f"{J}qg += 1")
        else:
            tgt = it + depth
            if tgt < nit:
                loads(J, f"p{depth}_", "c", tgt)
            else:
                loads(J, f"p{depth}_", "n", tgt - nit)
        if noc:  # diagnostic: the loads without the arithmetic (every word folded in, so none is dropped)
            a(f"{J}xacc = xacc ^ " + " ^ ".join(f"p0_{nm}" for nm in ring_names() if not nm.startswith("sel")))
        for uu in range(u if not noc else 0):
            for s_ in range(spg):
                for n in range(nt):
                    a(f"{J}qv = {xbn}[lane + {lin(it, u * spg * nt * 32, (uu * spg + s_) * nt * 32 + n * 32)}]")
                    a(f"{J}bf{s_}_{n}_0 = np.uint32(qv & np.uint64(0xFFFFFFFF))")
                    a(f"{J}bf{s_}_{n}_1 = np.uint32(qv >> np.uint64(32))")
            for n in range(nt):
                if X8:
                    for c in range(2):
                        a(f"{J}sx{n}_{c} = xs[2 * t + {lin(it, u * RPN * nt, uu * RPN * nt + RPN * n + c)}]")
                else:
                    a(f"{J}sx{n} = {xsn}[t + {lin(it, u * RPN * nt, uu * RPN * nt + RPN * n)}]")
            for m in range(mt):
                for h in ("a", "b"):
                    if u == 1:
                        a(f"{J}s{h} = _bf_hi(p0_s{h}{m}) if p0_sel{h}{m} else bf16_to_f32(p0_s{h}{m})")
                        a(f"{J}b{h} = _bf_hi(p0_b{h}{m}) if p0_sel{h}{m} else bf16_to_f32(p0_b{h}{m})")
                    else:
                        k, half = uu // 2, uu % 2
                        fn = "_bf_hi" if half else "bf16_to_f32"
                        a(f"{J}s{h} = {fn}(p0_s{h}{m}_{k})")
                        a(f"{J}b{h} = {fn}(p0_b{h}{m}_{k})")
                    if off128:
                        a(f"{J}b{h} = b{h} - np.float32(128.0) * s{h}")
                dec_done = set()
                for n in range(nt):
                    a(f"{J}d0, d1, d2, d3 = np.float32(0.0), np.float32(0.0), np.float32(0.0), np.float32(0.0)")
                    for s_, (j, prs, dec) in enumerate(steps):
                        if j not in dec_done:
                            for L2 in _decode_lines(bits, f"p0_wa{m}_{uu}_{j}", f"pa{j}_", J):
                                a(L2)
                            for L2 in _decode_lines(bits, f"p0_wb{m}_{uu}_{j}", f"pb{j}_", J):
                                a(L2)
                            dec_done.add(j)
                        i0, i1 = dec
                        a(f"{J}d0, d1, d2, d3 = mma_bf16(pa{j}_{i0}, pb{j}_{i0}, pa{j}_{i1}, pb{j}_{i1}, "
                          f"bf{s_}_{n}_0, bf{s_}_{n}_1, d0, d1, d2, d3)")
                    if X8:  # d0 / d1: rows g, columns 2t / 2t + 1; d2 / d3: rows g + 8
                        for h, hh, c, dv in (("a0", "a", 0, "d0"), ("a1", "a", 1, "d1"), ("b0", "b", 0, "d2"),
                                             ("b1", "b", 1, "d3")):
                            a(f"{J}acc{m}_{n}_{h} += s{hh} * {dv}")
                            a(f"{J}acc{m}_{n}_{h} += b{hh} * sx{n}_{c}")
                        continue
                    # hi + lo columns summed; with xh = 2 the lo columns are zero and only the hi sums are taken
                    # (xh = 1's products and sums)
                    da, db = ("d0", "d2") if xh == 2 else ("(d0 + d1)", "(d2 + d3)")
                    a(f"{J}acc{m}_{n}_a += sa * {da}")
                    a(f"{J}acc{m}_{n}_a += ba * sx{n}")
                    a(f"{J}acc{m}_{n}_b += sb * {db}")
                    a(f"{J}acc{m}_{n}_b += bb * sx{n}")
        for d in range(0 if (stages or pf) else depth):
            for nm in ring_names():
                a(f"{J}p{d}_{nm} = p{d + 1}_{nm}")
    J = JT
    accs = [f"acc{m}_{n}_{h}" for m in range(mt) for n in range(nt) for h, _, _ in HS]
    if kp > 1:
        # part sums through shared memory; the slot's part-0 warp adds them in part order and writes the tile
        for v, nm in enumerate(accs):
            a(f"{J}red[((kpi * {nts} + ts) * {NV} + {v}) * 32 + lane] = {nm}")
            a(f"{J}{nm} = np.float32(0.0)")
        a("        cuda.syncthreads()")
        a("        if jt < ntw and kpi == 0:")
        J = "            "
        for v, nm in enumerate(accs):
            a(f"{J}{nm} = red[(ts * {NV} + {v}) * 32 + lane]")
            for q in range(1, kp):
                a(f"{J}{nm} += red[(({q * nts} + ts) * {NV} + {v}) * 32 + lane]")
    # the tile's sums out, accumulators reset, the next tile's bases become current
    if noc:
        for nm in accs:
            a(f"{J}{nm} += np.float32(xacc & np.uint32(1))")
    cols = [("", 0)] if not X8 else [("0", 0), ("1", 1)]  # accumulator suffix, batch-row offset
    rowx = (lambda n, c: f"{8 * n + c} + 2 * t") if X8 else (lambda n, c: f"{4 * n} + t")
    for m in range(mt):
        for n in range(nt):
            if glu:
                for cs, c in cols:
                    a(f"{J}o = (obc >> 1) + {8 * m} + g")
                    a(f"{J}r = {rowx(n, c)}")
                    a(f"{J}if o < hout and r < R:")
                    a(f"{J}    if ks == 1:")
                    a(f"{J}        y[r, o] = swiglu(acc{m}_{n}_a{cs}, acc{m}_{n}_b{cs})")
                    a(f"{J}    else:")
                    a(f"{J}        ws[kz, r, obc + {16 * m} + g] = acc{m}_{n}_a{cs}")
                    a(f"{J}        ws[kz, r, obc + {16 * m + 8} + g] = acc{m}_{n}_b{cs}")
                    a(f"{J}acc{m}_{n}_a{cs} = np.float32(0.0)")
                    a(f"{J}acc{m}_{n}_b{cs} = np.float32(0.0)")
                continue
            for (h, dr), (cs, c) in [(hd, cc) for hd in (("a", 0), ("b", 8)) for cc in cols]:
                h = h + cs
                a(f"{J}o = obc + {16 * m + dr} + g")
                a(f"{J}r = {rowx(n, c)}")
                a(f"{J}if o < out and r < R:")
                if kin:  # this chunk's sum of the tile's row o, for the block's completion
                    a(f"{J}    red[(jt * {nw} + kz) * {TR} + {16 * m + dr} + g] = acc{m}_{n}_{h}")
                    a(f"{J}acc{m}_{n}_{h} = np.float32(0.0)")
                    continue
                a(f"{J}    if ks == 1:")
                a(f"{J}        y[r, o] = acc{m}_{n}_{h}")
                a(f"{J}    else:")
                a(f"{J}        ws[kz, r, o] = acc{m}_{n}_{h}")
                a(f"{J}acc{m}_{n}_{h} = np.float32(0.0)")
    if not pf:
        a(f"{J}obc = obn")
        for m in range(mt):
            for h in ("a", "b"):
                a(f"{J}wo{h}{m}c = wo{h}{m}n")
                a(f"{J}so{h}{m}c = so{h}{m}n")
    if kp > 1:
        a("        cuda.syncthreads()")  # red is rewritten by the next round
    if stages or pf:
        a("    cpa_wait0()")  # no copy may still be landing in shared memory when the block ends
    if kp > 1:
        a("    ntw = ntw if kpi == 0 else 0")  # only part-0 warps write tiles (and count their arrivals)
    # ---- several chunks: one fence, arrivals counted per tile, the completing warp sums the tile in chunk order
    if gemv_trigger_here("end"):
        a("    pdl_trigger()")
    if defer:  # several chunks: the partial sums stay in ws for the consumer (``launch(..., defer=True)``)
        return "\n".join(L) + "\n"
    if kin:  # the block's tiles: their chunk sums added in chunk order (every warp of a block has ntw tiles)
        a("    cuda.syncthreads()")
        a(f"    for e in range(tid, ntw * {TR}, {nw * 32}):")
        a(f"        jt = e // {TR}")
        a(f"        c = e - jt * {TR}")
        a(f"        o = (wid + jt * nwt) * {TR} + c")
        a("        if o < out:")
        a(f"            tot = red[jt * {nw * TR} + c]")
        for kk in range(1, nw):
            a(f"            tot += red[jt * {nw * TR} + {kk * TR} + c]")
        a("            y[0, o] = tot")
        return "\n".join(L) + "\n"
    if cmp == 2:
        _completion_batched(a, TR, glu, cmpu, cp, rl)
        return "\n".join(L) + "\n"
    _arrivals(a)
    # lastf is each warp's own, yet block barriers here: warp barriers (bar.warp.sync) made 9B gate + up 28.0 ->
    # 32.1 us and 9B down 18.5 -> 22.1 us at one row (session 19, call 3)
    a("            lastf[warp * 32 + lane] = isl")
    a("            cuda.syncthreads()")
    a("            for jj in range(min(32, mtw - j0)):")
    a("                if lastf[warp * 32 + jj] == 1:")
    a("                    cuda.threadfence()")
    a(f"                    ob = (wid + (j0 + jj) * nwt) * {TR}")
    if glu:  # output column (ob / 2 + j) pairs the tile's gate row and up row (8 apart in ws)
        a(f"                    for e0 in range(0, R * {TR // 2}, 32):")
        a("                        e = e0 + lane")
        a(f"                        r = e // {TR // 2}")
        a(f"                        j = e % {TR // 2}")
        a("                        o = (ob >> 1) + j")
        a("                        og = ob + (j >> 3) * 16 + (j & 7)")
        a("                        if r < R and o < hout:")
        a("                            tg = ld_cg_f32(ws, r * out + og)")
        a("                            tu = ld_cg_f32(ws, r * out + og + 8)")
        a("                            for kk in range(1, ks):")
        a("                                tg += ld_cg_f32(ws, (kk * R + r) * out + og)")
        a("                                tu += ld_cg_f32(ws, (kk * R + r) * out + og + 8)")
        a("                            y[r, o] = swiglu(tg, tu)")
    else:
        a(f"                    for e0 in range(0, R * {TR}, 32):")
        a("                        e = e0 + lane")
        a(f"                        r = e // {TR}")
        a(f"                        o = ob + e % {TR}")
        a("                        if r < R and o < out:")
        a("                            tot = ld_cg_f32(ws, r * out + o)")
        a("                            for kk in range(1, ks):")
        a("                                tot += ld_cg_f32(ws, (kk * R + r) * out + o)")
        a("                            y[r, o] = tot")
    a("                    if lane == 0:")
    a("                        cnt[wid + (j0 + jj) * nwt] = 0")
    a("            cuda.syncthreads()")
    return "\n".join(L) + "\n"



def _arrivals(a, pre=()) -> None:
    """The split-K completion's start (both forms): one fence a thread, then lane j of a warp counts the arrival of
    its tile j (a round of 32 tiles at a time); ``isl`` is 1 where this warp's chunk was the tile's last. ``pre``:
    lines emitted between the fence and the rounds."""
    a("    if ks > 1:")
    a("        cuda.threadfence()")
    a("        mtw = (ntile + nwt - 1) // nwt")
    for ln in pre:
        a(ln)
    a("        for j0 in range(0, mtw, 32):")
    a("            j = j0 + lane")
    a("            isl = 0")
    a("            if j < ntw:")
    a("                old = cuda.atomic.add(cnt, wid + j * nwt, 1)")
    a("                if old == ks - 1:")
    a("                    isl = 1")


CMP_EPL = 4  # batched completion: elements a lane sums at once (their partials' loads issued together)
CMP_KU = 8  # ... and partials loaded a round (the fixed default before session 31)
CMP_AUTO = "auto"  # the form picked per warp at run time (the default since session 31)
# (EPL, KU) forms of the picked-per-warp sets (plain, SwiGLU): the first whose 32 x EPL covers a warp's outputs. Two a
# kernel: a third form doubled a kernel's compile time again (SwiGLU 26 -> 97 s on the CI machine, against 46 s for
# two). ``auto`` is session 31's set. Session 45 tried wider plain forms past 64 outputs, opt-in: ``auto164`` (16 x
# 4: 64 partials in flight a lane, a quarter of the passes) and ``auto88`` (8 x 8). On the H100 (call 4, with the
# division-free indexing of all three) 16 x 4 was slower at every measured case (2B head at 8 rows 151.2 vs 139.3 µs,
# 27B down at 8 rows 73.5 vs 36.5; the passes' round trips were not the cost) and doubled the plain kernels' compile
# time (front end 27 s against 13-16); 8 x 8 was not timed. ``autog18`` (session 47, opt-in, untimed): SwiGLU warps
# of up to 32 outputs take 1 x 8 instead of 1 x 16. At one row the 9B / 27B gate | up (ks 4 / 5) loaded 32 partials
# an output (gate and up, 16 each, clamped to the last chunk) for 8 / 10; predicating them off as the plain 1-4-row
# kernels do (``cpred_mode``) took the SwiGLU kernel to 255 registers with spills (146 clamped), 1 x 8 stays at 147.
CMP_AUTO_SETS = {CMP_AUTO: {False: ((2, 16), (4, 8)), True: ((1, 16), (4, 8))},
                 "auto164": {False: ((2, 16), (16, 4)), True: ((1, 16), (4, 8))},
                 "auto88": {False: ((2, 16), (8, 8)), True: ((1, 16), (4, 8))},
                 "autog18": {False: ((2, 16), (4, 8)), True: ((1, 8), (4, 8))}}
CMP_AUTO_FORMS = CMP_AUTO_SETS[CMP_AUTO]
# Under the default ``auto`` (``unroll_for``), SwiGLU launches of at most this many K chunks take ``autog18``'s set
# (session 48, H200, one process, two rounds, tok/s at 1 / 8 streams, auto -> autog18 everywhere): 9B (gate | up
# ks 4) 404.3 / 403.7 -> 406.7 / 407.0, 2,220.9 / 2,220.3 -> 2,222.1 / 2,221.0; 27B (ks 5) 150.1 / 150.0 -> 149.7 /
# 149.6, 786.9 / 786.9 -> 787.1 / 787.4. The 27B loss is not explained (1 x 8 is one round of its 5 chunks too): the
# rule keeps what was measured.
GLU_G18_KS = 4


def _completion_batched(a, TR: int, glu: bool, cmpu=(CMP_EPL, CMP_KU), cp: bool = False, rl: bool = False) -> None:
    """The split-K completion (``cmp = 2``), appended to a kernel's source by ``_gen_source``. Every warp fences
    once and counts its tiles' arrivals (lane j: tile j, one atomic each, all at once), as ``cmp = 1`` does; then
    the tiles this warp completes (a mask the lanes share through ``warp_sum_i``) are summed together: one acquire
    fence, and each lane takes ``CMP_EPL`` of their outputs and loads ``CMP_KU`` chunk partials of each before
    adding any. ``cmp = 1`` handled a warp's completed tiles one after another with a fence and an L2 round trip each
    (session 27's timeline: the warp that finishes last completes most of its tiles, so the kernel's end trailed its
    last main loop by 4-9 us) and a block barrier a round. The partials are added in chunk order 0..ks-1, as before:
    the same bits. (``fence.acq_rel.gpu`` for the two fences instead of ``membar.gl``: 23.1 -> 23.0 us at 9B gate+up,
    within noise; session 27, call 3.)

    ``cmpu``: one (elements a lane, partials a round) form, or a key of ``CMP_AUTO_SETS`` (``CMP_AUTO``): the form
    picked per warp at run time from its element count ``nel`` (warp-uniform): of the set, the first whose
    ``32 x EPL`` covers ``nel``. At one row a warp completes 1-4 tiles of 16 (SwiGLU: 8) outputs, so 4 elements a
    lane left most lanes idle and loaded 8 partials a round: 9B down (ks 12) took two L2 round trips, 27B down
    (ks 17) three. A head's warp completes about 20-50 tiles, 128 outputs each at eight rows: there the outputs'
    index arithmetic is the kernel's tail (``_completion_form``), not the passes' round trips (session 45).

    ``cp`` (``cpred_mode``; by default the 1-4-row kernels): plain kernels predicate the partial loads past the
    last chunk off instead of clamping them to it (``_completion_form``).

    ``rl`` (``rst_mode``, the default since session 48): the completing lane sets its tile's counter back to zero
    after the warp's outputs are stored, not right after its arrival. Stored before the acquire fence, the reset was
    a store that fence had to wait for: one more L2 round trip on the launch's serial tail (store, fence, atomic,
    reset + fence, loads, store). The next launch counts only after this grid has ended (stream order; under PDL
    after its dependency wait), so any place in the kernel is early enough."""

    TRo = TR // 2 if glu else TR  # outputs of a tile a batch row
    _arrivals(a, ["        RO = R * out", f"        PT = R * {TRo}"])
    if not rl:  # every arrival of this launch is in: ready for the next one
        a("                    cnt[wid + j * nwt] = 0")
    a("            msk = warp_sum_i(isl << lane)")
    a("            if msk != 0:")
    a("                cuda.threadfence()")
    a("                nq = cuda.popc(msk)")
    a("                nel = nq * PT")
    # a lane's outputs are 32 apart in the flat (tile, row, column) order: (tile, rest) advances by (sq, sr) an
    # output, with at most one wrap of rest (sr < PT), instead of a 64-bit division an output (session 45)
    a("                sq = 32 // PT")
    a("                sr = 32 - sq * PT")
    # the position of msk's set bit number q (from 0): a branch-free binary search on the count of set bits below
    # a position (the largest t with popc(msk & (2^t - 1)) <= q). On the GPU lane l searches for q = l once (tpos)
    # and an output of tile ordinal qn takes lane qn's by a shuffle; the simulator (whose warp helpers are block
    # barriers, not allowed in this warp-divergent code) searches for qn at each output. Was a loop clearing qn
    # bits, an output.
    if not IS_SIM:
        _bit_search(a, "                ", "tpos", "lane")
    forms = CMP_AUTO_SETS[cmpu][glu] if isinstance(cmpu, str) else (tuple(cmpu),)
    for fi, (EPL, KU) in enumerate(forms):
        ind = "                "
        if len(forms) > 1:
            if fi < len(forms) - 1:
                a(f"{ind}{'if' if fi == 0 else 'elif'} nel <= {32 * EPL}:")
            else:
                a(f"{ind}else:")
            ind += "    "
        _completion_form(a, ind, TR, TRo, glu, EPL, KU, cp)
    if rl:  # after the tile's outputs (and every load of its partials) are issued
        a("                if isl == 1:")
        a("                    cnt[wid + j * nwt] = 0")


def _bit_search(a, ind: str, t: str, q: str) -> None:
    """Source lines setting ``t`` to the position of the set bit number ``q`` (from 0) of ``msk``, by a branch-free
    binary search: the largest ``t`` with ``popc(msk & (2^t - 1)) <= q`` (``t`` <= 31; for ``q`` at or past
    ``popc(msk)`` a position past the last set bit, never used)."""
    a(f"{ind}{t} = 0")
    for st in (16, 8, 4, 2, 1):
        a(f"{ind}{t} = {t} + {st} if cuda.popc(msk & ((1 << ({t} + {st})) - 1)) <= {q} else {t}")


def _completion_form(a, ind0: str, TR: int, TRo: int, glu: bool, EPL: int, KU: int, cp: bool = False) -> None:
    """One unroll of the batched completion: passes of ``32 x EPL`` outputs, each lane loading ``KU`` chunk partials
    of each of its ``EPL`` outputs a round before adding any (adds in chunk order).

    A lane's output ``ev`` (flat over the completed tiles, ``PT = R x TRo`` outputs a tile) is tile ordinal ``qi``
    and rest ``mi`` (row ``mi // TRo``, column ``mi % TRo``), carried from output to output and pass to pass by
    adding ``32 // PT`` / ``32 % PT`` (``sq`` / ``sr``) or ``32 EPL // PT`` / ``32 EPL % PT`` with one wrap of the
    rest: no division an output. A 64-bit division and a loop over the mask's bits an output had made the
    completion of a head's warp at eight rows (about 2,500 outputs) the launch's tail. H100, session 45 (calls 1 and
    4, µs, median / p90 / max over warps, then the launch without / with PDL): the 2B head at eight rows, completion
    23.0 / 50.4 / 63.2 -> 13.2 / 25.1 / 30.7, launch 173.0 / 171.0 -> 139.3 / 137.3; at one row 113.8 / 111.8 ->
    108.4 / 106.1; the 27B down at eight rows 39.8 / 37.9 -> 36.5 / 34.8. Outputs past ``nel`` take the last
    completed tile (their loads stay in bounds; nothing is stored)."""
    a(f"{ind0}pq = {32 * EPL} // PT")
    a(f"{ind0}pr = {32 * EPL} - pq * PT")
    a(f"{ind0}q0 = lane // PT")
    a(f"{ind0}m0 = lane - q0 * PT")
    a(f"{ind0}for e0 in range(0, nel, {32 * EPL}):")
    I = ind0 + "    "
    a(f"{I}qi = q0")
    a(f"{I}mi = m0")
    for i in range(EPL):
        if i:
            a(f"{I}qi = qi + sq")
            a(f"{I}mi = mi + sr")
            a(f"{I}qi = qi + 1 if mi >= PT else qi")
            a(f"{I}mi = mi - PT if mi >= PT else mi")
        a(f"{I}ok{i} = e0 + lane + {32 * i} < nel")
        a(f"{I}qn = min(qi, nq - 1)")
        a(f"{I}r{i} = mi // {TRo}")
        a(f"{I}c{i} = mi % {TRo}")
        if IS_SIM:
            _bit_search(a, I, "jj", "qn")
        else:
            a(f"{I}jj = cuda.shfl_sync(0xFFFFFFFF, tpos, qn)")
        a(f"{I}ob = (wid + (j0 + jj) * nwt) * {TR}")
        if glu:  # output (ob / 2 + c) pairs the tile's gate row and its up row, 8 apart in ws
            a(f"{I}o{i} = (ob >> 1) + c{i}")
            a(f"{I}ok{i} = ok{i} and o{i} < hout")
            # a partial last tile's outputs past hout would read past ws (their gate / up rows do not exist)
            a(f"{I}ad{i} = r{i} * out + (ob + (c{i} >> 3) * 16 + (c{i} & 7) if ok{i} else 0)")
        else:
            a(f"{I}o{i} = ob + c{i}")
            a(f"{I}ok{i} = ok{i} and o{i} < out")
            a(f"{I}ad{i} = r{i} * out + min(o{i}, out - 1)")
    halves = (("g", 0), ("u", 8)) if glu else (("t", 0),)

    def round_(ind, first):
        k0 = "0" if first else "kk0"
        for i in range(EPL):
            for h, dh in halves:
                for uu in range(KU):
                    # a round's first partial always exists (k0 < ks). ``cp`` (plain kernels, opt-in): the
                    # loads past the last chunk predicated off (they give -0.0, whose add changes no bit); else
                    # (the default) clamped to the last chunk, loaded again and not added (at ks 2, 8 loads an
                    # output for 2). SwiGLU kernels always clamp: predicated, ptxas gave their 5-8-row kernel
                    # 235-255 registers against 190 (session 46).
                    if first and uu == 0:
                        a(f"{ind}{h}{i}_0 = ld_cg_f32(ws, ad{i} + {dh} + 0 * RO)")
                    elif not cp:
                        a(f"{ind}{h}{i}_{uu} = ld_cg_f32(ws, ad{i} + {dh} + min({k0} + {uu}, ks - 1) * RO)")
                    elif uu == 0:
                        a(f"{ind}{h}{i}_0 = ld_cg_f32(ws, ad{i} + {dh} + {k0} * RO)")
                    else:
                        kk = f"{k0} + {uu}"
                        a(f"{ind}{h}{i}_{uu} = ld_cg_f32_if(ws, ad{i} + {dh} + ({kk}) * RO, {kk} < ks)")
        for i in range(EPL):
            for h, _ in halves:
                for uu in range(KU):
                    if first and uu == 0:
                        a(f"{ind}{h}s{i} = {h}{i}_0")
                    elif not cp:
                        a(f"{ind}{h}s{i} = {h}s{i} + {h}{i}_{uu} if {k0} + {uu} < ks else {h}s{i}")
                    else:
                        a(f"{ind}{h}s{i} = {h}s{i} + {h}{i}_{uu}")

    round_(I, True)
    a(f"{I}for kk0 in range({KU}, ks, {KU}):")
    round_(I + "    ", False)
    for i in range(EPL):
        a(f"{I}if ok{i}:")
        a(f"{I}    y[r{i}, o{i}] = " + (f"swiglu(gs{i}, us{i})" if glu else f"ts{i}"))
    a(f"{I}q0 = q0 + pq")
    a(f"{I}m0 = m0 + pr")
    a(f"{I}q0 = q0 + 1 if m0 >= PT else q0")
    a(f"{I}m0 = m0 - PT if m0 >= PT else m0")


_KCACHE: dict = {}


def xb_dynamic(group: int, cg: int, nt: int, xh: int = 0, stages: int = 0) -> bool:
    """Whether a register-ring kernel (``stages`` 0) keeps its x fragments in dynamic shared memory: when its x
    fragments and their partial products (``cg * nt * (group / 16) * (256 + 16 * rows)`` bytes, ``rows`` batch rows
    an n-tile: 8 for ``xh = 1``, else 4) pass ``_XB_BYTES``. Every plan ``plan`` makes stays within it (its budget
    counts two n-tiles of 4 rows); an explicit ``cg`` past it (``TENSORFOLD_GEMV3_CG``, benchmarks) would otherwise
    overflow the 48 KB of static shared memory. The same arithmetic either way."""
    return not stages and cg * nt * (group // 16) * (256 + 16 * (8 if xh == 1 else 4)) > _XB_BYTES


def xb_bytes(group: int, cg: int, nt: int) -> int:
    """Bytes of a block's x fragments (the ``xb`` array): 8 a lane, 32 lanes, ``group / 16`` k-steps a group."""
    return cg * (group // 16) * nt * 32 * 8


def get_pyfunc(bits, group, nt, nw, mt, cg, u, depth, stages=0, pb=0, pf=0, nwp=0, kp=1, glu=False, tag="",
               noc=False, sw=False, xh=0, defer=False, cmp=None, pre=None, xq=None, cmpu=None, nrm=None, cp=None,
               rl=None, kin=False):
    """``tag``: a name suffix only (the same source), for kernels that ``get_kernel`` compiles with other options
    (launch bounds, a register cap): numba's disk cache keys a kernel by its name and signature, not its options."""
    nwp = nwp if nwp > nw else 0
    glu = bool(glu)
    cmp = cmp_mode() if cmp is None else int(cmp)
    pre = (pre_mode() if pre is None else int(pre)) if not (pf or stages) else 1
    if pre >= 2 and not sw:  # the L2 prefetch walks swept runs: MLX-layout kernels keep the default order
        pre = 1
    xq = xq_on() if xq is None else bool(xq)
    cp = (cpred_for(xh) if cp is None else bool(cp)) and not glu and cmp == 2 and not defer
    rl = (rst_mode() == "late" if rl is None else bool(rl)) or cmp != 2 or defer  # cmp 1 resets late already
    cmpu = unroll_for(False, 0) if cmpu is None else (cmpu if isinstance(cmpu, str) else tuple(cmpu))
    if kin:  # no split-K completion in global memory: the completion knobs do not apply
        cmp, cp, rl, cmpu = 2, False, True, unroll_for(False, 0)
    key = ("py", bits, group, nt, nw, mt, cg, u, depth, stages, pb, pf, nwp, kp, glu, tag, noc, sw, int(xh),
           bool(defer), cmp, pre, xq, cmpu, tuple(nrm) if nrm else None, cp, rl, bool(kin))
    if key not in _KCACHE:
        name = (f"qgemv3_b{bits}_g{group}_n{nt}_w{nw}_m{mt}_c{cg}_u{u}_d{depth}" + (f"_s{stages}" if stages else "")
                + (f"_p{pb}" if pb else "") + (f"_f{pf}" if pf else "") + (f"_x{nwp}" if nwp else "")
                + (f"_k{kp}" if kp > 1 else "") + ("_glu" if glu else "") + ("_noc" if noc else "")
                + ("_sw" if sw else "") + {0: "", 1: "_xh", 2: "_xz"}[int(xh)] + ("_df" if defer else "")
                + ("_c1" if cmp == 1 and not defer else "") + ("" if pre == 1 else f"_e{pre}") + ("_q" if xq else "")
                + ("" if cmpu == (CMP_EPL, CMP_KU) or cmp != 2 or defer else
                   "_va" if cmpu == CMP_AUTO else f"_v{cmpu[4:]}" if isinstance(cmpu, str) else
                   f"_v{cmpu[0]}x{cmpu[1]}")
                + (f"_nf{nrm[0]}x{nrm[1]}" if nrm else "")
                + ("_cp" if cp else "") + ("" if rl else "_re") + ("_kin" if kin else "") + tag)
        src = single_assignment(_gen_source(name, bits, group, nt, nw, mt, cg, u, depth, stages, pb, pf, nwp, kp,
                                            glu, noc, sw, int(xh), bool(defer), cmp, pre, xq, cmpu, nrm, cp, rl,
                                            bool(kin)))
        glb = {"cuda": cuda, "np": np, "mma_bf16": mma_bf16, "pack_bf16x2": pack_bf16x2, "split_bf16x2": split_bf16x2,
               "bf16_to_f32": bf16_to_f32, "_bf_hi": _bf_hi, "ld_w1": ld_w1, "ld_w2": ld_w2, "ld_w4": ld_w4,
               "ld_cg_f32": ld_cg_f32, "ld_cg_f32_if": ld_cg_f32_if, "ldg_f32x4_2d": ldg_f32x4_2d,
               "andor_m4": andor_m4, "andor_m2": andor_m2,
               "_TWO23": np.float32(8388608.0), "swiglu": swiglu, "warp_sum_i": warp_sum_i, "quad_sum": quad_sum,
               "pf_l2": pf_l2,
               "cpa4": cpa4, "cpa8": cpa8, "cpa_commit": cpa_commit, "pdl_trigger": pdl_trigger, "pdl_wait": pdl_wait,
               "_U64": np.dtype(np.uint64) if IS_SIM else np.uint64}  # the simulator's dynamic array wants a dtype
        glb.update({f"cpa_wait{n}": f for n, f in _WAITS.items()})
        if nrm:
            glb.update(norms.fused_glb())
        fn = _kcache.build(name, src, glb, __name__)
        _KCACHE[key] = fn
    return _KCACHE[key]


def _noc() -> bool:
    """``TENSORFOLD_GEMV3_NOC=1``, a diagnostic for benchmarks only (wrong results): the register-ring kernels issue
    their loads and skip the dequantize-and-mma work, so a run shows what the load structure alone costs."""
    return os.environ.get("TENSORFOLD_GEMV3_NOC", "0").strip() == "1"


def cmp_mode() -> int:
    """``TENSORFOLD_GEMV3_CMP`` (read when a kernel is generated): the split-K completion, 2 (the default: a warp's
    completed tiles summed together, ``_completion_batched``) or 1 (one tile at a time, the code before session
    27). The same bits either way."""
    return int(env_choice("TENSORFOLD_GEMV3_CMP", "2", ("1", "2"), "qgemv split-K completion"))


def cmp_unroll():
    """``TENSORFOLD_GEMV3_CMPU`` (read when a kernel is generated): the batched completion's unroll. ``auto`` (the
    default since session 31, ``CMP_AUTO``) picks it per warp at run time from the outputs the warp completes
    (plain: 2x16 up to 64, else 4x8; SwiGLU: 1x16 up to 32, else 4x8; ``CMP_AUTO_FORMS``); ``auto164`` / ``auto88``
    take 16x4 / 8x8 for plain warps past 64 outputs (session 45, opt-in: ``CMP_AUTO_SETS``; kernel names ``_v164``
    / ``_v88``); ``autog18`` 1x8 for SwiGLU warps up to 32 outputs (session 47, ``_vg18``; since session 48 what
    ``auto`` gives SwiGLU launches of at most ``GLU_G18_KS`` chunks, ``unroll_for``; ``auto31`` keeps session
    31's sets everywhere); a fixed ``EPLxKU`` (elements a lane sums at once x chunk partials it loads a round)
    forces one form, ``4x8`` the only one before session 31. The adds stay in chunk order: the same bits.

    Measured on the H200 (session 31, call 1; µs at one row, under PDL, plain / SwiGLU): 9B down 4x8 13.9 / 14.7,
    2x16 12.8 / 13.1, 1x16 12.7 / 12.8; 27B down 21.1 / 21.5, 20.1 / 20.9, 21.0 / 20.0; 9B gate+up SwiGLU 22.7,
    22.7, 20.1; 27B gate+up SwiGLU 32.5, 33.1, 33.0. At eight rows 2x16 / 1x16 were slower (27B down 32.6 ->
    35.3 / 40.8). 27B decode with 2x16 everywhere: 146.2 -> 147.9 tok/s at one stream, 766.6 -> 745.0 at eight."""
    v = env_choice("TENSORFOLD_GEMV3_CMPU", CMP_AUTO,
                   (*CMP_AUTO_SETS, "auto31", "4x8", "2x16", "1x16", "4x16", "2x8", "1x32"), "qgemv completion unroll")
    if v in CMP_AUTO_SETS or v == "auto31":
        return v
    e, k = v.split("x")
    return int(e), int(k)


def unroll_for(glu: bool, ks: int):
    """The completion unroll a launch of ``ks`` K chunks takes (``get_kernel``'s ``cmpu``), from ``cmp_unroll``:
    under ``auto`` (the default) SwiGLU launches of at most ``GLU_G18_KS`` chunks take ``autog18``'s set (1 x 8 for
    warps of up to 32 outputs: at one row the 9B gate | up, ks 4, loads 16 partials an output instead of 32), the
    others ``CMP_AUTO``'s; ``auto31`` is ``CMP_AUTO``'s set everywhere (the default of sessions 31-47). Any other
    setting is taken as it is. Which partials are loaded only: the same bits."""
    v = cmp_unroll()
    if v == "auto31":
        return CMP_AUTO
    return "autog18" if v == CMP_AUTO and glu and ks <= GLU_G18_KS else v


def pre_mode() -> int:
    """``TENSORFOLD_GEMV3_PRE`` (read when a kernel is generated): 2 (the default since session 28) loads x first and
    prefetches the first tile's run of weights into L2 before the PDL wait (swept plans; MLX-layout kernels make it
    1, ``get_pyfunc``); 1 issues the first ``depth`` iterations' weight loads into registers before the wait (the
    order before session 28); 0 issues them right after x's loads; 3 / 4 prefetch 2 / 3 tiles. Load order only:
    the same bits.

    Measured on the H200 under PDL (session 28, benchmarks/results/session28_2026-12-03.md), 9B gate+up at one row,
    µs plain / SwiGLU: PRE 1 22.6 / 25.2, 2 21.8 / 23.9, 3 23.7 / 25.5, 4 25.3 / 27.1 (more prefetch competes
    with the previous launch's own loads). With ``xq_on`` (both defaults) 9B decode went 351.5 / 350.8 -> 367.2 /
    369.7 tok/s at one stream and 1,948.9 / 2,007.7 -> 2,110.8 / 2,121.6 at eight (two rounds, one process)."""
    return int(env_choice("TENSORFOLD_GEMV3_PRE", "2", ("0", "1", "2", "3", "4"), "qgemv first weight loads"))


def xq_on() -> bool:
    """``TENSORFOLD_GEMV3_XQ`` (read when a kernel is generated): 1 (the default since session 28) adds x's group
    sums by quad shuffles in the item pass, one block barrier fewer (``_gen_source``'s ``xq``); 0 the two-pass sums
    before it. Another fixed order of the same adds: other bits than 0, the same for every row count and form.
    Measured (session 28, 9B gate+up at PRE=3, one row, under PDL): 23.7 -> 22.9 µs plain, 25.5 -> 24.9 SwiGLU."""
    return env_choice("TENSORFOLD_GEMV3_XQ", "1", ("0", "1"), "qgemv x group sums") == "1"


def cpred_mode() -> str:
    """``TENSORFOLD_GEMV3_CPRED`` (read when a kernel is generated): whether plain kernels' batched completion
    predicates its partial loads past the last chunk off (kernel names ``_cp``) or clamps them to the last chunk,
    loaded again and not added. ``auto`` (the default since session 47) predicates them in the 1-4-row bf16-x
    kernels (``xmode`` 2, names ``_xz``) and clamps them elsewhere; ``1`` predicates them in every plain kernel, ``0``
    nowhere. The same bits either way (simulator and GPU tests); SwiGLU kernels always clamp (``_completion_form``).

    Measured on an H100 (session 47, one process a geometry, two rounds, tok/s, 0 -> 1): 27B 126.6 / 126.6 ->
    128.9 / 128.8 at one stream, 695.7 / 696.2 -> 693.4 / 693.2 at eight; 9B 359.1 / 359.1 -> 362.1 / 362.7,
    2,056.3 / 2,056.2 -> 2,052.7 at eight; 2B a tie. The 2B head's own time did not move (108.2 / 139.9 µs at 1 / 8
    rows either way). ``auto`` takes the one-stream side: 0 -> auto, 27B 126.5 / 126.6 -> 129.3 / 129.3 at one
    stream, 9B 358.4 / 358.3 -> 361.9 / 362.2; eight streams a tie (same call)."""
    return env_choice("TENSORFOLD_GEMV3_CPRED", "auto", ("0", "1", "auto"),
                      "qgemv completion loads past the last chunk")


def rst_mode() -> str:
    """``TENSORFOLD_GEMV3_RST`` (read when a kernel is generated): where the batched completion sets a tile's
    arrival counter back to zero: ``late`` (the default since session 48), after the completing warp's outputs are
    stored; ``early`` (kernel names ``_re``), right after the arrival, as before (``_completion_batched``). The same
    bits either way."""
    return env_choice("TENSORFOLD_GEMV3_RST", "late", ("late", "early"), "qgemv arrival counter reset")


def cpred_for(xh: int) -> bool:
    """Whether a plain kernel of x form ``xh`` (``xmode``) predicates its completion loads (``cpred_mode``)."""
    m = cpred_mode()
    return m == "1" or (m == "auto" and int(xh) == 2)


def _xh_on() -> bool:
    """``TENSORFOLD_GEMV3_XH`` (read when a plan is made): 1 (the default) plans bf16-only x, 0 bf16 hi + lo."""
    return os.environ.get("TENSORFOLD_GEMV3_XH", "1").strip() != "0"


def _lb_on() -> bool:
    """``TENSORFOLD_GEMV3_LB=0``: one-n-tile kernels without launch bounds (the code before session 18)."""
    return os.environ.get("TENSORFOLD_GEMV3_LB", "1").strip() != "0"


def get_kernel(bits, group, nt, nw, mt, cg, u, depth, stages=0, pb=0, maxreg=0, pf=0, nwp=0, kp=1, glu=False,
               sw=False, xh=0, defer=False, nrm=None, cmpu=None, kin=False):
    """``maxreg`` > 0: registers capped there (``max_registers``), so more blocks fit an SM (the one-n-tile kernel
    peaks at 168 registers in its x preparation; under 128 it spills only there, not in the loop: ptxas on sm_90).
    ``cmpu``: the completion unroll (``unroll_for``; default: ``cmp_unroll``'s setting for a launch of unknown
    ``ks``)."""
    cmpu = unroll_for(False, 0) if cmpu is None else cmpu
    key = ("k", bits, group, nt, nw, mt, cg, u, depth, stages, pb, maxreg, pf, nwp, kp, bool(glu), _lb_on(), _noc(),
           sw, int(xh), bool(defer), cmp_mode(), pre_mode(), xq_on(), cmpu, tuple(nrm) if nrm else None,
           cpred_mode(), rst_mode(), bool(kin))
    if key not in _KCACHE:
        kw, tag = ({"max_registers": maxreg}, f"_r{maxreg}") if maxreg and not IS_SIM else ({}, "")
        if kin and not IS_SIM:  # the chunks-in-a-block form: its blocks an SM (``kin_blocks_per_sm``)
            kw["launch_bounds"] = (32 * nw, kin_blocks_per_sm(nw))
            tag = f"_lb{kin_blocks_per_sm(nw)}"
        elif nt == 1 and not (maxreg or pf or stages or IS_SIM) and _lb_on():
            # launch bounds of the default geometry (3 blocks of 32 nw threads an SM): told the occupancy, ptxas
            # keeps the next iteration's weight loads early in the loop. Without them it placed them next to their
            # uses in the SwiGLU-epilogue kernel (104 registers; 9B gate + up 36.1 against 29.3 us plain, session
            # 18; benchmarks/sass_loads.py shows the placement). Register allocation only: the same bits.
            kw["launch_bounds"] = (32 * nw, 3)
            tag = "_lb3"
        _KCACHE[key] = _kcache.jit(get_pyfunc(bits, group, nt, nw, mt, cg, u, depth, stages, pb, pf, nwp, kp, glu,
                                              tag, _noc(), sw, xh, defer, cmpu=cmpu, nrm=nrm, kin=kin), **kw)
    return _KCACHE[key]


# ----------------------------------------------------------------------------------------------------------------
# planning and launch
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class V3Plan:
    """Geometry of one weight shape (a function of the shape only): ``nw`` warps a block walking row tiles of ``mt``
    x 16 rows, K chunks of ``cg`` groups (``ks = ng / cg`` chunks, grid.y), ``u`` groups an iteration, loads
    ``depth`` iterations ahead, about ``blocks`` blocks in all (``grid_x`` of them share a chunk)."""

    out: int
    inp: int
    bits: int
    group: int
    nw: int
    mt: int
    cg: int
    u: int
    depth: int
    blocks: int = 396
    stages: int = 0  # > 0: the cp.async ring form for one-n-tile launches (1-4 rows) where it applies
    pb: int = 0  # x-preparation batch (0: the measured default)
    occ1: int = 0  # > 0: one-n-tile launches run occ1 blocks an SM, registers capped (27B: 85.8 vs 100.4 tok/s; off)
    pf: int = 0  # > 0: the prefetch form, at most pf tiles a warp (one-n-tile launches; see ``pf_geom``)
    nwp: int = 0  # warps a block in the prefetch form (>= nw; the rest help with the x preparation)
    kp: int = 1  # prefetch form: parts of a chunk a tile is split into inside a block (nw = tile slots x kp)
    sw: int = 0  # the swept weight layout (``sweep_pack``): 1 rows in order, 2 gate / up paired (SwiGLU epilogue)
    xh: int = 0  # 1: x as bf16 only (register ring plans only): 1-4 rows take ``_gen_source``'s xh = 2, 5-8 xh = 1

    @property
    def per(self) -> int:
        """iterations of one K chunk: the run length of the swept layout this plan reads (``sweep_pack(per=)``)"""
        return self.cg // self.u

    # ---- the prefetch form: every tile's words in dynamic shared memory, one block an SM
    def _nit_np(self):
        np_ = self.mt * 2 * self.u + self.mt * 2 * (1 if self.u == 2 else 2)
        return self.cg // self.u, np_

    def smem_bytes(self, nt: int, nw: int, pf: int) -> tuple[int, int]:
        """(static, dynamic) shared bytes of a prefetch-form block of ``nw`` tile warps holding ``pf`` tiles each"""
        spg = self.group // 16
        nit, np_ = self._nit_np()
        red = self.kp * (nw // self.kp) * self.mt * nt * 2 * 32 * 4 if self.kp > 1 else 0
        static = self.cg * nt * 4 * 4 + self.cg * nt * 4 * 4 * spg * 4 + max(nw, self.nwp) * 32 * 4 + red
        return static, 8 * (self.cg * spg * nt * 32 + nw * pf * (nit // self.kp) * np_ * 32)

    def pf_geom(self, nt: int) -> tuple[int, int, int]:
        """(tile warps a block, tiles a warp, blocks a chunk) of a prefetch-form launch of ``nt`` n-tiles: the plan's
        own at one n-tile; two n-tiles (twice the x fragments) keep as many tiles a warp as fit, else fewer tile
        slots (``kp`` warps each). Neither changes a bit: a tile's parts and chunks are summed the same way."""
        ntile = -(-self.out // (16 * self.mt))
        for nts in range(self.nw // self.kp, 0, -1):
            nw = nts * self.kp
            for pf in range(self.pf, 0, -1):
                st, dy = self.smem_bytes(nt, nw, pf)
                if st + dy <= smem_max():
                    return nw, pf, -(-ntile // (nts * pf))
        raise ValueError(f"qgemv: no prefetch geometry of {self.out}x{self.inp} fits shared memory at {nt} n-tiles")

    def pf_launch(self, nt: int) -> tuple[int, int, int, int, int]:
        """(tile warps a block, tiles a warp, blocks a chunk, threads a block, dynamic shared bytes) of a
        prefetch-form launch of ``nt`` n-tiles"""
        nw, pf, gx = self.pf_geom(nt)
        return nw, pf, gx, 32 * max(nw, self.nwp), self.smem_bytes(nt, nw, pf)[1]

    def depth_for(self, nt: int) -> int:
        """iterations of weight loads in flight a warp for a launch of ``nt`` n-tiles: the plan's, but
        ``nt2_depth`` for 16-row (two-n-tile bf16-x, register-ring) launches"""
        if nt == 2 and self.xh and not (self.pf or self.stages_for(nt)):
            return max(self.depth, min(nt2_depth(), self.cg // self.u))  # at most a chunk's iterations
        return self.depth

    def stages_for(self, nt: int) -> int:
        """the ring depth a launch of ``nt`` n-tiles uses (0: the register ring); the ring must fit beside the
        x fragments in 48 KB of static shared memory, so two-n-tile launches keep the register ring"""
        if self.pf or not self.stages or nt != 1 or self.group * self.bits // 128 != 2 or self.u not in (2, 4):
            return 0
        st = min(self.stages, self.cg // self.u + 1)
        np_ = self._nit_np()[1]
        xb = self.cg * (self.group // 16) * 32 * 8 + self.cg * 4 * 4 + self.cg * 4 * 4 * (self.group // 16) * 4
        while st >= 2 and xb + self.nw * st * np_ * 32 * 8 + self.nw * 128 > 48 * 1024:
            st -= 1
        return st if st >= 2 else 0

    @property
    def ks(self) -> int:
        return self.inp // self.group // self.cg

    @property
    def tpb(self) -> int:
        return 32 * max(self.nw, self.nwp)

    @property
    def workspace_shape(self):
        return None if self.ks == 1 else (self.ks, 16, self.out)

    def grid_x(self, nt: int = 2) -> int:
        """blocks sharing one chunk (each prepares that chunk of x once); one-n-tile launches of a plan with
        ``occ1`` use ``occ1`` blocks an SM instead (the launch geometry, never the chunking, so the same bits)"""
        if self.pf:
            return self.pf_geom(nt)[2]
        ntile = -(-self.out // (16 * self.mt))
        blocks = self.occ1 * SMS if (self.occ1 and nt == 1) else self.blocks
        if nt >= 2 and self.xh:  # 16- and 32-row launches: the blocks resident at once (no second wave)
            blocks = min(blocks, nt2_occ() * SMS)
        return max(1, min(-(-ntile // self.nw), blocks // self.ks))

    def maxreg_for(self, nt: int) -> int:
        """the register cap of a launch of ``nt`` n-tiles (0: none): with ``occ1``, what lets ``occ1`` blocks of
        ``tpb`` threads share an SM's 65,536 registers"""
        if not self.occ1 or nt != 1:
            return 0
        return min(255, 65536 // (self.occ1 * self.tpb) // 8 * 8)


# default tuning (the H200 comparison at 863b5bc / 12da6be, benchmarks/results/gemv3_2026-11-30_12da6be.md):
# 4 warps, one 16-row tile, 4 groups an iteration, loads one iteration ahead, 396 blocks (3 a SM). Overridable for
# benchmarks: TENSORFOLD_GEMV3="nw,mt,u,depth,blocks,stages,pb,occ1" (stages: the cp.async ring for 1-4 rows,
# 0 = off; pb: the x-preparation batch; both slower at every shape on the H200 in session 11, see
# benchmarks/results/session11_2026-11-30.md; occ1: blocks an SM for one-n-tile launches with registers capped to
# fit, slower end to end: 27B one stream 85.8 vs 100.4 tok/s, session12_2026-11-30.md)
_DEF = dict(nw=4, mt=1, u=4, depth=1, blocks=396, stages=0, pb=0, occ1=0)
SMS = 132  # the H200's SMs: the default 396 blocks are 3 an SM
SMEM_MAX = 227 * 1024 - 1024  # shared bytes a block may use on sm_90 (opt-in), less a margin
_SMEM: list = []


def smem_max() -> int:
    """Shared bytes a prefetch-form block may use: the device's opt-in limit less 1 KB (``SMEM_MAX``, the H200's,
    in the simulator or when the attribute cannot be read), so a plan never asks a smaller GPU for more."""
    if not _SMEM:
        v = SMEM_MAX
        if not IS_SIM:
            try:
                v = int(cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) - 1024
            except Exception:  # noqa: BLE001 -- no device or no such attribute: the H200 figure
                v = SMEM_MAX
        _SMEM.append(v)
    return _SMEM[0]


def _tuning():
    v = os.environ.get("TENSORFOLD_GEMV3", "")
    d = dict(_DEF)
    if v:
        d.update(dict(zip(["nw", "mt", "u", "depth", "blocks", "stages", "pb", "occ1"],
                          [int(p) for p in v.split(",")])))
    return d


def _cg_override(out: int, inp: int, ng: int, u: int, blocks: int):
    """``TENSORFOLD_GEMV3_CG`` (measurements; unset by default): ``"OUTxIN=CG[/BLOCKS],..."`` gives the plans of
    those weight shapes ``CG`` groups a K chunk (and ``BLOCKS`` blocks), past the default shared-memory budget if
    asked (``xb_dynamic``). -> (cg or None, blocks). Still a function of the shape only, so the exactness rule holds
    within one setting."""
    v = os.environ.get("TENSORFOLD_GEMV3_CG", "").strip()
    for item in (t.strip() for t in v.split(",") if t.strip()):
        try:
            shape, val = item.split("=")
            o, i = (int(t) for t in shape.lower().split("x"))
            c, _, b = val.partition("/")
            c, b = int(c), int(b) if b else blocks
        except ValueError:
            raise ValueError(f"TENSORFOLD_GEMV3_CG: {item!r} is not OUTxIN=CG or OUTxIN=CG/BLOCKS") from None
        if (o, i) != (out, inp):
            continue
        if c <= 0 or ng % c or c % u or b <= 0:
            raise ValueError(f"TENSORFOLD_GEMV3_CG: {item!r}: CG must divide the {ng} groups of a row and be a "
                             f"multiple of {u} (groups an iteration); BLOCKS must be positive")
        return c, b
    return None, blocks


def plan(out: int, inp: int, bits: int, group: int, nw=None, mt=None, u=None, depth=None, blocks=None,
         cg=None, stages=None, pb=None, occ1=None) -> V3Plan:
    """Chunks: the largest divisor of the group count whose x fragments for 8 rows fit the shared-memory budget
    and that still gives ``blocks * nw`` (tile, chunk) pairs; groups an iteration a divisor of the chunk."""
    tu = _tuning()
    nw = nw or tu["nw"]
    mt = mt or tu["mt"]
    u = u or tu["u"]
    depth = depth or tu["depth"]
    blocks = blocks or tu["blocks"]
    stages = tu["stages"] if stages is None else stages
    pb = tu["pb"] if pb is None else pb
    occ1 = tu["occ1"] if occ1 is None else occ1
    ng = inp // group
    while u > 1 and ng % u:
        u //= 2
    per = group // 16 * 2 * 32 * 8 + 2 * 4 * 4 * (group // 16) * 4  # shared bytes a group for two n-tiles
    ntile = -(-out // (16 * mt))
    cands = [c for c in range(ng, 0, -1) if ng % c == 0 and c % u == 0 and c * per <= _XB_BYTES]
    if not cands:
        cands = [u]
    if cg is None:
        cg, blocks = _cg_override(out, inp, ng, u, blocks)
    if cg is None:
        cg = cands[-1]
        for c in cands:
            if ntile * (ng // c) >= blocks * nw:
                cg = c
                break
    return V3Plan(out, inp, bits, group, nw, mt, cg, u, min(depth, cg // u), blocks, stages, pb, occ1,
                  xh=int(_xh_on() and not stages))


def pf_tuning() -> dict | None:
    """``TENSORFOLD_GEMV_PF``: unset or ``0`` off (the default: slower end to end on the H200, see ``plan_pf``);
    ``1`` on with the defaults; else ``minks,nwp,maxpf,maxw,maxkp`` (the fewest chunks to try, warps a block at
    least, the most tiles a warp, the most tile warps a block, the most parts a tile)."""
    v = os.environ.get("TENSORFOLD_GEMV_PF", "0").strip()
    if v == "0":
        return None
    d = dict(minks=1, nwp=8, maxpf=4, maxw=12, maxkp=8)
    if v != "1":
        d.update(dict(zip(["minks", "nwp", "maxpf", "maxw", "maxkp"], [int(x) for x in v.split(",")])))
    return d


def plan_pf(out: int, inp: int, bits: int, group: int, sms: int = SMS, tuning: dict | None = None) -> V3Plan | None:
    """The prefetch form for a weight whose words fit the GPU's shared memory at one block an SM (None when they
    do not, or off). Order of preference: the fewest K chunks (each chunk after the first costs the split-K
    completion); then the fewest groups a warp sums (tiles a warp x groups of its part: the compute after the wait
    is a warp's serial chain); then the fewest warps. Every block is resident at one n-tile (``sms`` blocks), and
    two n-tiles must fit too. Formats with 2 words a lane and group (4-bit g64, 8-bit g32, 2-bit g128). A function
    of the shape only.

    Off by default (``TENSORFOLD_GEMV_PF=1`` turns it on). Measured on the H200 (benchmarks/results/
    session14_2026-12-01.md), 2B decode at 1 / 8 streams, tok/s: 595.9 / 2,498 with it against 621.4 / 4,126
    without (9B: 253.1 / 1,296 against 268.7 / 1,513). The copies do not hide behind the previous kernel in the
    graph, and after the wait the block's dequantize-and-mma work (about 60 instructions a warp for 16 rows x 64
    codes) runs with no memory left to overlap: at the 2B sizes that work is as long as the transfer."""
    tu = pf_tuning() if tuning is None else tuning
    if tu is None or group * bits // 128 != 2 or inp % group:
        return None
    ng = inp // group
    ntile = -(-out // 16)
    for ks in range(max(1, tu["minks"]), ng + 1):
        if ng % ks:
            continue
        cg = ng // ks
        per = max(1, sms // ks)  # blocks a chunk
        best, key = None, None
        for kp in range(1, tu["maxkp"] + 1):
            if cg % kp:
                continue
            cgp = cg // kp
            u = 4 if cgp % 4 == 0 else (2 if cgp % 2 == 0 else 0)
            if not u:
                continue
            for nts in range(1, tu["maxw"] // kp + 1):
                pf = -(-ntile // (nts * per))
                if pf > tu["maxpf"] or pf > len(_WAITS):
                    continue
                nw = nts * kp
                p = V3Plan(out, inp, bits, group, nw=nw, mt=1, cg=cg, u=u, depth=1, blocks=per * ks, pf=pf,
                           nwp=max(nw, tu["nwp"]), kp=kp)
                if sum(p.smem_bytes(1, nw, pf)) > smem_max():
                    continue
                try:
                    p.pf_geom(2)
                except ValueError:
                    continue
                k = (pf * cgp, nw)
                if key is None or k < key:
                    best, key = p, k
        if best is not None:
            return best
    return None


def sweep_piece(i, T, nu: int, per: int):
    """Index of piece ``(i, T)`` (K iteration ``i``, 16-row unit ``T`` of ``nu``) in ``sweep_pack``'s order with
    runs of ``per`` iterations (numbers or integer arrays)."""
    return ((i // per) * nu + T) * per + i % per


def sweep_shape(out: int, inp: int, bits: int, group: int, u: int) -> tuple[int, int]:
    """(pieces, words a piece) of ``sweep_pack``'s layout"""
    wpg = group * bits // 32
    return (inp // group // u) * (-(-out // 16)), 16 * u * wpg + 16 * u


def glu_rows(out: int) -> np.ndarray:
    """The row order of a gate | up weight (``out = 2 I``) in the SwiGLU epilogue's tiles: unit ``T`` holds gate
    rows ``8 T .. 8 T + 7``, then up rows ``I + 8 T ..``, as the MLX-layout epilogue kernel reads them."""
    if out % 16:
        raise ValueError(f"glu_rows: a gate | up weight needs out % 16 == 0 (out {out})")
    t = np.arange(out // 16)[:, None] * 8 + np.arange(8)[None, :]
    return np.concatenate([t, t + out // 2], axis=1).reshape(-1)


def sweep_pack(P, S, B, bits: int, group: int, u: int, glu: bool = False, per: int = 1) -> np.ndarray:
    """The swept layout of an MLX-packed weight (``P`` uint32 [out, in * bits / 32], bf16 ``S`` / ``B`` uint16
    [out, in / group]), for plans with ``sw``: piece ``(i, T)`` (K iteration ``i`` of ``u`` groups, 16-row unit
    ``T``) holds the code words of those groups group by group (each group's 16 rows in turn, so one warp load of
    a group's words for 8 rows covers 256 contiguous bytes), then the rows' scales, then their biases (``16 u``
    bf16 each, row by row). The pieces lie in runs of ``per`` iterations: piece ``(i, T)`` is number
    ``sweep_piece(i, T, units, per)``: the runs of one span of ``per`` iterations for every unit, in unit order,
    each holding its ``per`` pieces in turn. A qgemv plan reads it with ``per = cg / u`` (a run is one tile's whole
    K chunk, so its per-iteration offsets are constants); ``per = 1`` puts one iteration's pieces of every unit
    side by side. Either way one warp load covers 256 contiguous bytes and a chunk's warps read one region, where
    the MLX layout has every warp reading 128 bytes from each of 16 rows of its own tile. Rows past ``out`` are
    zero. The same values reach the same arithmetic: the same bits.
    ``glu``: rows in ``glu_rows`` order, for plans with ``sw = 2`` (the SwiGLU epilogue's launches only)."""
    P, S, B = np.asarray(P), np.asarray(S), np.asarray(B)
    if glu:
        idx = glu_rows(S.shape[0])
        P, S, B = P[idx], S[idx], B[idx]
    out, ng = S.shape
    wpg = group * bits // 32
    if ng % u or P.shape != (out, ng * wpg) or B.shape != S.shape:
        raise ValueError(f"sweep_pack: P {P.shape}, S {S.shape}, B {B.shape} do not form a {bits}-bit g{group} "
                         f"weight in iterations of {u} groups")
    nu, ni = -(-out // 16), ng // u
    if ni % per:
        raise ValueError(f"sweep_pack: {ni} iterations do not split into runs of {per}")
    rows = nu * 16

    def pad(a):
        return a if rows == out else np.concatenate([a, np.zeros((rows - out,) + a.shape[1:], a.dtype)])

    w = pad(P.astype(np.uint32)).reshape(nu, 16, ni, u, wpg).transpose(2, 0, 3, 1, 4).reshape(ni, nu, 16 * u * wpg)
    sb = [pad(a.astype(np.uint16)).reshape(nu, 16, ni, u).transpose(2, 0, 1, 3).reshape(ni, nu, 16 * u)
          for a in (S, B)]
    sb = np.ascontiguousarray(np.concatenate(sb, axis=2))  # [ni, nu, 32 u] uint16: scales then biases
    full = np.concatenate([w, sb.view(np.uint32)], axis=2)  # [ni, nu, words]
    full = full.reshape(ni // per, per, nu, -1).transpose(0, 2, 1, 3)  # runs: [span, unit, iteration in span]
    return np.ascontiguousarray(full.reshape(ni * nu, -1))


@cuda.jit
def _sweep_k(P, S, B, out_, u, wpg, gl, per):
    """one word of ``sweep_pack``'s layout a thread (grid-stride): piece ``q = sweep_piece(i, T, units, per)``,
    word ``w``; ``gl``: rows in ``glu_rows`` order"""
    rows, ng = S.shape
    half = rows // 2
    pw = 16 * u * wpg + 16 * u
    nu = out_.shape[0] // (ng // u)
    n = out_.shape[0] * pw
    for e in range(cuda.grid(1), n, cuda.gridsize(1)):
        q = e // pw
        w = e - q * pw
        span = q // (nu * per)
        rem = q - span * nu * per
        T = rem // per
        i = span * per + rem - T * per
        if w < 16 * u * wpg:
            g_ = w // (16 * wpg)  # the piece's codes: group by group, each group's 16 rows in turn
            rr = (w // wpg) % 16
            r = T * 16 + rr
            if gl:
                r = T * 8 + rr if rr < 8 else half + T * 8 + rr - 8
            v = P[r, (i * u + g_) * wpg + w % wpg] if r < rows else np.uint32(0)
        else:
            w2 = w - 16 * u * wpg  # a word of two bf16: scales (first 8 u words), then biases
            A = S if w2 < 8 * u else B
            w2 = w2 % (8 * u)
            rr = w2 // (u // 2)
            r = T * 16 + rr
            if gl:
                r = T * 8 + rr if rr < 8 else half + T * 8 + rr - 8
            c = i * u + 2 * (w2 % (u // 2))
            v = (np.uint32(A[r, c]) | (np.uint32(A[r, c + 1]) << np.uint32(16))) if r < rows else np.uint32(0)
        out_[q, w] = v


def sweep_pack_device(P, S, B, bits: int, group: int, u: int, glu: bool = False, stream=0, per: int = 1):
    """``sweep_pack`` on the device: a new device array from device ``P`` / ``S`` / ``B`` (the same words)."""
    out, ng = S.shape
    if glu and out % 16:
        raise ValueError(f"sweep_pack_device: a gate | up weight needs out % 16 == 0 (out {out})")
    shape = sweep_shape(out, ng * group, bits, group, u)
    if ng % u or u not in (2, 4) or (ng // u) % per or tuple(P.shape) != (out, ng * (group * bits // 32)):
        raise ValueError(f"sweep_pack_device: P {tuple(P.shape)}, S {tuple(S.shape)} do not form a {bits}-bit "
                         f"g{group} weight in iterations of {u} groups, runs of {per}")
    dst = np.empty(shape, np.uint32) if IS_SIM else cuda.device_array(shape, np.uint32, stream=stream)
    n = shape[0] * shape[1]
    _sweep_k[min(4096, -(-n // 256)), 256, stream](P, S, B, dst, np.int32(u), np.int32(group * bits // 32),
                                                   np.int32(1 if glu else 0), np.int32(per))
    return dst


_COUNTERS: dict = {}


def _scratch():
    key = 0 if IS_SIM else id(cuda.current_context())
    if key not in _COUNTERS:
        cnt, dummy = np.zeros(NCOUNTERS, np.int32), np.zeros((1, 1, 1), np.float32)
        _COUNTERS[key] = (cnt, dummy) if IS_SIM else (cuda.to_device(cnt), cuda.to_device(dummy))
    return _COUNTERS[key]


def counters():
    """The default arrival counters of the in-kernel split-K sum (zeros; every launch leaves them at zero), shared by
    the launches that pass none. Also allocates the stand-in workspace of one-chunk launches: call it before
    capturing a graph."""
    return _scratch()[0]


def new_counters():
    """A private zeroed set of arrival counters (``launch(..., cnt=)``): launches that may run concurrently on
    different streams (two runners) must not share counters; launches in one stream may (each touches them only
    after its PDL wait, when the previous launch has completed)."""
    z = np.zeros(NCOUNTERS, np.int32)
    return z if IS_SIM else cuda.to_device(z)


def nt_for(R: int, xh: bool = False) -> int:
    """n-tiles of a launch of R <= 8 rows (4 rows, hi and lo columns each, an n-tile; with ``xh`` 8 rows; with
    ``xh``, 9-16 rows are two n-tiles of 8 under ``rows16_on``, 17-32 four under ``rows32_on``)"""
    if R <= (8 if xh else 4):
        return 1
    return 2 if R <= 16 or not xh else 4


def rows16_on() -> bool:
    """``TENSORFOLD_GEMV3_R16`` (read at each launch): 1 (the default) lets a bf16-x (``xh``) launch take up to 16
    rows, two n-tiles of 8 (``_gen_source(nt=2, xh=1)``), so that 9-16 rows read the weights once instead of twice
    (a 32-row decode step makes two launches a linear, not four); 0 keeps launches of at most 8 rows. The same bits
    either way: an mma column depends only on its own B column, a row's x values, group sums and accumulation order
    are those of a one-n-tile launch, and the plan (hence ks) is the shape's. The kernel takes 190 registers at the
    9B gate+up (no spills; ptxas sm_90), so 2 blocks an SM fit (``nt2_occ``). Session 51, H100: 9B decode at 16 /
    32 streams 2,389 / 2,567 -> 2,583 / 2,825 tok/s; at 9B in_proj a 16-row launch 30.5 us against 2 x 18.0."""
    return env_choice("TENSORFOLD_GEMV3_R16", "1", ("0", "1"), "qgemv rows a launch") == "1"


def rows32_on() -> bool:
    """``TENSORFOLD_GEMV3_R32`` (read at each launch, with ``rows16_on``): 1 lets a bf16-x launch take 17-32 rows,
    four n-tiles of 8 (``_gen_source(nt=4, xh=1)``), so a 32-stream step reads each weight once; 0 (the default)
    stops at 16. The same bits, as for 16 rows. ptxas sm_90 at 9B: plain 180, SwiGLU 200 registers, no spills (2
    blocks an SM, ``nt2_occ``); 64 KB of x fragments a block in dynamic shared memory at cg 16. Session 52 (H100,
    decode tok/s at 32 streams): against 16-row launches at depth 1 it won (9B +7 %, 27B +11 %), but against 16-row
    launches at depth 2 (``nt2_depth``, the default) it ties at 9B (3,016 vs 3,040) and loses at 27B (871 vs 961);
    it wins a little at 2B (8,192 vs 8,079). Depth 2 at four n-tiles reaches 255 registers and spills."""
    return env_choice("TENSORFOLD_GEMV3_R32", "0", ("0", "1"), "qgemv rows a launch past 16") == "1"


def nt2_occ() -> int:
    """``TENSORFOLD_GEMV3_NT2OCC``: blocks an SM a 16- or 32-row (two- or four-n-tile bf16-x) launch is sized for.
    The kernels take 180-200 registers at 9B (ptxas sm_90), so 2 of the plan's 3 blocks of 128 threads fit; at 3 the
    launch's last third ran as a second wave (session 51: a 16-row launch cost more than two 8-row ones). The launch
    geometry only, never the chunking: the same bits."""
    return int(env_choice("TENSORFOLD_GEMV3_NT2OCC", "2", ("2", "3"), "qgemv 16- / 32-row blocks an SM"))


def nt2_depth() -> int:
    """``TENSORFOLD_GEMV3_NT2DEPTH``: weight-load iterations in flight a warp in 16-row launches (default 2 since
    session 52; 1 is the plans' depth). At 2 blocks an SM a 16-row launch has two thirds of an 8-row launch's warps,
    hence of its loads in flight; depth 2 doubles a warp's. ptxas sm_90, 9B shapes: plain 190 -> 184 registers,
    SwiGLU 176 -> 249, no spills, so still 2 blocks an SM. Load scheduling only: the same bits. H100, 9B at 16 rows:
    in_proj 30.2 -> 27.7 us, gate+up 47.9 -> 42.9; decode at 16 streams: 9B +7 %, 27B +19 %."""
    return int(env_choice("TENSORFOLD_GEMV3_NT2DEPTH", "2", ("1", "2"), "qgemv 16-row load depth"))


def _launch_rows(p: "V3Plan", R: int, ws, out: int, defer: bool, nrm) -> int:
    """Rows a launch takes: 16 where ``rows16_on`` and the plan allows it (bf16-only x on the register ring, no
    deferred completion, no fused norm, a workspace of min(R, 16) rows when ks > 1), 32 past 16 rows where
    ``rows32_on`` too and the workspace holds min(R, 32) rows, else 8."""
    if R > 8 and rows16_on() and p.xh and not (p.pf or p.stages or defer or nrm):
        for n in ((32, 16) if R > 16 and rows32_on() else (16,)):
            if p.ks == 1 or ws.size >= p.ks * min(R, n) * out:
                return n
    return 8


KIN_MT = 8  # the chunks-in-a-block form: tiles a block at most (its ``red`` holds their chunk sums)
KIN_MAX_KS = 12  # ... and K chunks (warps a block) at most


def kin_mode() -> bool:
    """``TENSORFOLD_GEMV3_KIN`` (read at launch): 1 runs one-row launches of plain swept plans with 2 to
    ``KIN_MAX_KS`` K chunks in the chunks-in-a-block form (``_gen_source``'s ``kin``: a tile's chunk sums added in
    shared memory instead of through the workspace, arrival counters and fences); 0 (the default) the split-K
    form. The same bits either way."""
    return env_choice("TENSORFOLD_GEMV3_KIN", "0", ("0", "1"), "qgemv one-row chunks in a block") == "1"


def kin_blocks_per_sm(ks: int) -> int:
    """Blocks of ``ks`` warps an SM the chunks-in-a-block form is bounded to (its launch bounds): about the 12
    warps an SM of the split-K plans (3 blocks of 4 warps), at most 3; ``TENSORFOLD_GEMV3_KIN_BPS`` (measurements)
    lowers that bound. (ptxas sm_90, 9B in_proj, 4 chunks: 118 registers unbounded, no spills at 3 blocks' 168;
    the split-K kernel takes 154.)"""
    cap = int(os.environ.get("TENSORFOLD_GEMV3_KIN_BPS", "3") or 3)
    return max(1, min(3, cap, 12 // ks))


def kin_smem(p: "V3Plan") -> int:
    """Dynamic shared bytes of a chunks-in-a-block launch: every chunk's x fragments"""
    return p.ks * xb_bytes(p.group, p.cg, 1)


def kin_grid(p: "V3Plan") -> int:
    """Blocks of a chunks-in-a-block launch: one wave of ``kin_blocks_per_sm`` blocks an SM (fewer where shared
    memory holds fewer), never more than the row tiles"""
    ntile = -(-p.out // (16 * p.mt))
    per_sm = kin_blocks_per_sm(p.ks)
    static = p.cg * 4 * p.ks * 4 + KIN_MT * p.ks * 16 * 4 + p.ks * 32 * 4 + 1024
    per_sm = max(1, min(per_sm, (smem_max() + 1024) // (kin_smem(p) + static)))
    return min(ntile, per_sm * SMS)


def kin_ok(p: "V3Plan", R: int, glu: bool, defer: bool, nrm) -> bool:
    """Whether a launch of ``R`` rows takes the chunks-in-a-block form (``kin_mode``)"""
    if R != 1 or glu or defer or nrm or not kin_mode():
        return False
    if not (p.sw and p.xh and p.mt == 1 and not (p.pf or p.stages or p.kp > 1) and 2 <= p.ks <= KIN_MAX_KS):
        return False
    if not xq_on() or kin_smem(p) > smem_max() - 16 * 1024:
        return False
    return -(-p.out // 16) <= KIN_MT * kin_grid(p)


def xmode(R: int, xh: bool) -> int:
    """``_gen_source``'s x form for a launch of R <= 8 rows: 0 hi + lo; with bf16-only x, 2 (zero lo columns, the
    hi + lo loop) for 1-4 rows and 1 (8 rows an n-tile) for 5-8, and for 9-32 under ``rows16_on`` /
    ``rows32_on`` (the same bits a row either way)"""
    return 0 if not xh else (2 if R <= 4 else 1)


_DYN_SET: set = set()


def _allow_dyn(nbytes: int):
    """A pre-launch callback raising the compiled kernel's dynamic shared-memory limit to ``nbytes`` (once a
    kernel, context and size; above 48 KB a launch fails without it)."""

    def cb(kernel, cfg):
        cuf = kernel._codelibrary.get_cufunc()
        key = (id(cuf), nbytes)
        if key in _DYN_SET:
            return
        from numba.cuda.cudadrv.driver import binding, driver

        attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attr, int(nbytes), cuf.handle, cuf.device.id)
        _DYN_SET.add(key)

    return cb


def defer_ok(p, R: int, glu: bool = False) -> bool:
    """Whether a launch of plan ``p`` over ``R`` rows can defer its completion (``launch(..., defer=True)``): a
    register-ring qgemv plan with several K chunks, at most 8 rows (one launch), no epilogue."""
    return isinstance(p, V3Plan) and p.ks > 1 and R <= 8 and not glu and not p.pf


def launch(W, S, B, x, y, p: V3Plan, R: int, ws=None, stream=0, glu=False, cnt=None, defer=False, norm=None):
    """y[:R] = x[:R] @ dequant(W, S, B).T: launches of up to 8 rows, or 16 under ``rows16_on``, or 32 under
    ``rows32_on`` too (a column's arithmetic does not depend on the others, so any split gives the same bits).
    ``ws``: float32 holding at least ``ks * min(R, 8) * out`` values when ks > 1 (the chunks' partial sums; the
    launches reuse it in turn; 16- / 32-row launches need ``ks * min(R, 16 / 32) * out``, else they take fewer).
    ``glu``: W is a fused gate | up weight (``out = 2 I``, ``I % 8 == 0``) and ``y [R, I]`` gets ``swiglu(gate,
    up)`` (see ``_gen_source``). ``cnt``: the arrival counters (default: the shared :func:`counters`; see
    :func:`new_counters`). ``defer`` (ks > 1, at most 8
    rows, no epilogue, register-ring plans): the chunks' partial sums are left in ``ws [ks, R, out]`` and y is not
    written; a consumer adds them in chunk order (``norms.launch_add_rms_norm_parts``), the same fp32 adds in the
    same order as the in-kernel completion, so the same bits, without the completion's fence, arrival count and
    second pass over the partials inside the GEMV. ``norm`` = (h, d, mult, h_out, eps) (one row, no deferred
    completion): x is first made in the kernel as ``norms.launch_add_rms_norm(d, h, mult, x, eps)`` would make it,
    the updated residual going to ``h_out`` instead of ``h`` (``norms.fused_norm_lines``; the same bits)."""
    out = S.shape[0] if p.sw else W.shape[0]
    if p.sw:
        want = sweep_shape(out, p.inp, p.bits, p.group, p.u)
        if tuple(W.shape) != want or bool(glu) != (p.sw == 2) or p.pf:
            raise ValueError(f"qgemv: a swept plan needs W from sweep_pack {want} (got {tuple(W.shape)}), the "
                             f"SwiGLU epilogue exactly when its rows are paired (sw {p.sw}, glu {bool(glu)}), no "
                             "prefetch form")
    cnt = counters() if cnt is None else cnt
    if glu and (out % 16 or y.shape[1] != out // 2):
        raise ValueError(f"qgemv: the SwiGLU epilogue needs out % 16 == 0 and y [R, out / 2] (out {out}, y "
                         f"{tuple(y.shape)})")
    if -(-out // (16 * p.mt)) > NCOUNTERS:
        raise ValueError(f"qgemv: {out} rows need more than {NCOUNTERS} arrival counters")
    if p.ks > 1 and ws is None:
        raise ValueError("qgemv: ks > 1 needs a workspace ws [ks, R, out] float32")
    if p.xh and (p.pf or p.stages or p.kp > 1):
        raise ValueError("qgemv: bf16-only x (xh) takes the register-ring plans only")
    if defer and not (defer_ok(p, R, glu) and ws is not None and ws.shape == (p.ks, R, out)):
        raise ValueError(f"qgemv: a deferred completion needs ks > 1 (ks {p.ks}), at most 8 rows (R {R}), no "
                         f"epilogue, a register-ring plan and ws [ks, R, out] = {(p.ks, R, out)}")
    nrm, nargs = norms.fused_args(norm, x, R, defer)
    step = _launch_rows(p, R, ws, out, defer, nrm)
    for r0 in range(0, R, step):
        n = min(step, R - r0)
        nt = nt_for(n, p.xh)
        if kin_ok(p, n, glu, defer, nrm):
            k = get_kernel(p.bits, p.group, 1, p.ks, p.mt, p.cg, p.u, p.depth_for(1), glu=False, sw=True, xh=2,
                           kin=True)
            dyn = kin_smem(p)
            cfg = k[(kin_grid(p), 1), 32 * p.ks, stream, dyn]
            if not IS_SIM:
                cfg.pre_launch_callbacks.append(_allow_dyn(dyn))
            cfg(W, S, B, x[r0:r0 + 1], y[r0:r0 + 1], _scratch()[1], cnt, np.int32(1))
            continue
        if p.ks > 1:
            w3 = ws if ws.shape == (p.ks, n, out) else ws.reshape(-1)[:p.ks * n * out].reshape((p.ks, n, out))
        else:
            w3 = _scratch()[1]  # not read (never y itself: the simulator copies every argument back)
        if p.pf:
            nw, pf, gx, tpb, dyn = p.pf_launch(nt)
            k = get_kernel(p.bits, p.group, nt, nw, p.mt, p.cg, p.u, 1, pf=pf, nwp=p.nwp, kp=p.kp, glu=glu, nrm=nrm)
        else:
            xm, st = xmode(n, p.xh), p.stages_for(nt)
            k = get_kernel(p.bits, p.group, nt, p.nw, p.mt, p.cg, p.u, p.depth_for(nt), st, p.pb, p.maxreg_for(nt),
                           glu=glu, sw=bool(p.sw), xh=xm, defer=defer, nrm=nrm, cmpu=unroll_for(glu, p.ks))
            gx, tpb = p.grid_x(nt), p.tpb
            dyn = xb_bytes(p.group, p.cg, nt) if xb_dynamic(p.group, p.cg, nt, xm, st) else 0
        cfg = k[(gx, p.ks), tpb, stream, dyn]
        if dyn and not IS_SIM:
            cfg.pre_launch_callbacks.append(_allow_dyn(dyn))  # above 48 KB a launch fails without it
        cfg(W, S, B, x[r0:r0 + n], y[r0:r0 + n], w3, cnt, np.int32(n), *nargs)
    return y


# ----------------------------------------------------------------------------------------------------------------
# compile tier
# ----------------------------------------------------------------------------------------------------------------

_SIG = ("void(uint32[:, ::1], uint16[:, ::1], uint16[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, :, ::1], "
        "int32[::1], int32)")


def _specs():
    """Every kernel the default plans launch for the real 4-bit g64 shapes that take this path (>= 2^25 codes:
    9B in_proj / q_proj / gate+up / down, 27B in_proj / q_proj / gate+up / down, the 2B / 9B / 27B heads), each
    other format once, and each opt-in or opt-out form once (one shape, one n-tile unless the form is about
    n-tiles). A qgemv compile takes 30-75 s of numba's front end on the CI machine (session 53), so the opt-in
    forms, which no default plan launches, are not repeated per shape or n-tile (CI's time limit)."""
    specs, hot, seen = [], set(), set()

    def add(f, sig=_SIG, is_hot=True):  # each kernel once, in the order first named
        if f.__name__ not in seen:
            seen.add(f.__name__)
            specs.append((f, sig))
            if is_hot:
                hot.add(f.__name__)

    # the MLX layout (opt-out: TENSORFOLD_SWEPT; the runtime sweeps every qgemv weight) at the plans of the real
    # shapes, one n-tile (their plans share one geometry, so one kernel)
    for out, inp in ((24576, 4096), (34816, 5120), (5120, 17408), (248320, 2048), (248320, 4096), (248320, 5120),
                     (4096, 12288), (12352, 4096), (10240, 4096), (16480, 5120), (14336, 5120), (5120, 6144)):
        p = plan(out, inp, 4, 64)
        add(get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth))
    for bits, group in FORMATS:
        if (bits, group) != (4, 64):
            p = plan(24576, 4096, bits, group)
            add(get_pyfunc(bits, group, 1, p.nw, p.mt, p.cg, p.u, p.depth), is_hot=False)
    # the prefetch form (opt-in, TENSORFOLD_GEMV_PF=1) at the 2B gate+up (tiles in two parts), one n-tile
    p = plan_pf(12288, 2048, 4, 64, tuning=dict(minks=1, nwp=8, maxpf=4, maxw=12, maxkp=8))
    if p is not None:
        nw, pf, _ = p.pf_geom(1)
        add(get_pyfunc(4, 64, 1, nw, p.mt, p.cg, p.u, 1, pf=pf, nwp=p.nwp, kp=p.kp))
    # the swept layout with hi + lo x (opt-out: TENSORFOLD_GEMV3_XH=0) at 9B gate+up, one n-tile
    p = plan(24576, 4096, 4, 64)
    add(get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth, sw=True), is_hot=False)
    # bf16-only x (the default, TENSORFOLD_GEMV3_XH): one n-tile, 8 rows (xh 1), 1-4 rows (xh 2), plain / SwiGLU
    for glu in (False, True):
        for xm in (1, 2):
            add(get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth, glu=glu, sw=True, xh=xm))
    # the x preparation's order before session 28 (opt-in: TENSORFOLD_GEMV3_PRE=1, TENSORFOLD_GEMV3_XQ=0; the
    # specs above take the defaults, PRE=2 + XQ=1), SwiGLU at 1-4 rows
    add(get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth, glu=True, sw=True, xh=2, pre=1, xq=False))
    # the batched completion's fixed unroll (opt-in since session 31, TENSORFOLD_GEMV3_CMPU=4x8; the default picks
    # it per warp) at the 9B down, 1-4 rows
    pd = plan(4096, 12288, 4, 64)
    add(get_pyfunc(4, 64, 1, pd.nw, pd.mt, pd.cg, pd.u, pd.depth, sw=True, xh=2, cmpu=(4, 8)))
    # the arrival counters reset right after the arrival (opt-in since session 48, TENSORFOLD_GEMV3_RST=early) at
    # the 9B down, 1-4 rows
    add(get_pyfunc(4, 64, 1, pd.nw, pd.mt, pd.cg, pd.u, pd.depth, sw=True, xh=2, rl=False))
    # SwiGLU warps of up to 32 outputs at 1 x 8 (``autog18``: the default's set at 9B gate+up, ks 4, since session
    # 48, ``unroll_for``), 1-4 and 5-8 rows
    for xm in (1, 2):
        add(get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth, glu=True, sw=True, xh=xm,
                       cmpu=unroll_for(True, p.ks)))
    # 9-16 rows a launch (the default, TENSORFOLD_GEMV3_R16; hot: decode at 9-16 streams): two n-tiles of 8
    # bf16-x rows at 9B gate+up, plain and SwiGLU, at depth 2 (the default, TENSORFOLD_GEMV3_NT2DEPTH), and plain at
    # the plan's depth (TENSORFOLD_GEMV3_NT2DEPTH=1)
    for depth, glu in ((2, False), (2, True), (p.depth, False)):
        add(get_pyfunc(4, 64, 2, p.nw, p.mt, p.cg, p.u, depth, glu=glu, sw=True, xh=1,
                       cmpu=unroll_for(glu, p.ks)), is_hot=depth == 2)
    # 17-32 rows a launch (opt-in, TENSORFOLD_GEMV3_R32=1): four n-tiles of 8 at 9B gate+up, plain
    add(get_pyfunc(4, 64, 4, p.nw, p.mt, p.cg, p.u, p.depth, sw=True, xh=1, cmpu=unroll_for(False, p.ks)),
        is_hot=False)
    # the deferred completion (TENSORFOLD_GEMV_DEFER=1) at the 9B / 27B down and 27B out_proj, 1-4 / 8 rows
    for out, inp in ((4096, 12288), (5120, 17408), (5120, 6144)):
        pd = plan(out, inp, 4, 64)
        for xm in (1, 2):
            add(get_pyfunc(4, 64, 1, pd.nw, pd.mt, pd.cg, pd.u, pd.depth, sw=True, xh=xm, defer=True), is_hot=False)
    # the fused add + RMSNorm prologue (opt-in, TENSORFOLD_NORM_FUSE=1) in the one-row kernel of a consumer of a
    # norm: the 27B gate | up (SwiGLU; test_compile_bounds checks it under the launch bounds too)
    sig_n = _SIG[:-1] + ", float32[:, ::1], float32[:, ::1], float32[::1], float32[:, ::1], float32)"
    pn = plan(34816, 5120, 4, 64)
    add(get_pyfunc(4, 64, 1, pn.nw, pn.mt, pn.cg, pn.u, pn.depth, glu=True, sw=True, xh=xmode(1, pn.xh),
                   nrm=norms.norm_v_geometry(5120, False), cmpu=unroll_for(True, pn.ks)), sig_n)
    # a K chunk past the static budget (x fragments in dynamic shared memory; TENSORFOLD_GEMV3_CG), 8-row bf16 x
    add(get_pyfunc(4, 64, 1, p.nw, p.mt, 32, p.u, p.depth, sw=True, xh=1), is_hot=False)
    # one-row launches with a tile's K chunks in one block (opt-in, TENSORFOLD_GEMV3_KIN=1) at the 9B in_proj (4
    # chunks; a block's warps are its chunks)
    pk = plan(12352, 4096, 4, 64)
    add(get_pyfunc(4, 64, 1, pk.ks, pk.mt, pk.cg, pk.u, pk.depth, sw=True, xh=2, kin=True), is_hot=False)
    specs.append((_sweep_k.py_func if hasattr(_sweep_k, "py_func") else _sweep_k,
                  "void(uint32[:, ::1], uint16[:, ::1], uint16[:, ::1], uint32[:, ::1], int32, int32, int32, int32)"))
    # the completion's loads past the last chunk predicated off at 5-8 rows (TENSORFOLD_GEMV3_CPRED=1; the 1-4-row
    # kernels above predicate them by default) and clamped at 1-4 rows (CPRED=0), the 2B head
    ph = plan(248320, 2048, 4, 64)
    for xm, cp in ((1, True), (2, False)):
        add(get_pyfunc(4, 64, 1, ph.nw, ph.mt, ph.cg, ph.u, ph.depth, sw=True, xh=xm, cp=cp))
    # the cp.async ring form and a small x-preparation batch (opt-in, TENSORFOLD_GEMV3=...), 9B gate+up
    p = plan(24576, 4096, 4, 64, u=2, stages=4, pb=2)
    add(get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth, p.stages_for(1), p.pb), is_hot=False)
    return specs, hot


COMPILE_SPECS, HOT = _specs()
