"""Tensor-core prompt GEMM for MLX affine-quantized weights (bits 2, 4, 8; groups 32, 64, 128).

Owns
- ``launch_qgemm(W, S, B, x, y, bits, group, *, stream=0, rows=None, geo=None, impl=None, ws=None)``:
  ``y[r, o] = sum_i x[r, i] * (s[o, g] * q[o, i] + b[o, g])``, the same contract as ``affine.launch_qgemm`` (W uint32
  ``[out, in*bits/32]`` MLX packing, S / B ``[out, in/group]`` as bf16 bits (uint16), float16 or float32, x float32
  ``[R, in]``, y float32 ``[R, out]``). Two kernels: **v3** (default, ``IMPL`` / ``TENSORFOLD_GEMM``; 4 / 8 bits,
  groups 64 / 128; described in the v3 section below) and **v1** (this docstring; every bits 2/4/8 x group
  32/64/128 with ``in`` a multiple of 64; ``TENSORFOLD_GEMM=v1`` or ``impl="v1"`` uses it for all). Formats neither
  covers (bits 3/5/6, other groups) go to ``affine.launch_qgemm`` (fp32 FMA). ``ws`` = ``workspace(rows, in)``: v3's
  scratch (the runtime passes static buffers so that graph capture never allocates; without it a module cache that
  only grows is used).
- ``get_gemm_pyfunc`` / ``get_gemm_kernel`` (v1), ``get_gemm3_pyfunc`` / ``get_gemm3_kernel`` / ``get_xprep_kernel``
  (v3): the generated kernels (one per bits x group x scale dtype x geometry).

Measured (benchmarks/results/gemm_2026-11-30_c34fb3f.md, H200, 4-bit g64, 2B / 9B / 27B gate/up and down, 512 and
4096 rows, graph replay): v3 91-135 TFLOP/s (both launches), v1 53-65, torch bf16 matmul 406-801. v3 is 1.4-2.3x
v1 (down shapes least: the x pre-pass is 18-34 % of v3's time there). GPU accuracy of both: max error /
(|x| @ |W|) 1.7e-7 .. 3.9e-7 (tolerance 1e-5).

Reference mirrored: ``tensorfold.reference.ops.linear`` with ``affine_dequant``.

Arithmetic (MLX's ``qdot`` form on tensor cores). The mma's A operand is the integer codes ``q`` in bf16 (exact:
codes < 256), the B operand is x split into a bf16 high part and a bf16 residual (``split_bf16x2``; x = hi + lo to
about 2^-17 relative). For every quantization group, ``d = q . x_hi + q . x_lo`` is accumulated by two chained
``mma.sync.m16n8k16`` (fp32 accumulation; the products ``q * bf16`` are exact), then
``acc += s * d + b * sum_x(group)`` in fp32 and ``d`` restarts at zero. ``sum_x`` of a (row, group) is the sum of
16-element partial sums (each in natural order), added in k order.

Code decoding (no int->float conversions): for 2 and 4 bits, ``(w >> sh) & 0x000F000F | 0x43004300`` (4 bits;
``0x00030003`` for 2 bits) is the bf16 pair ``(128 + q_k, 128 + q_{k+half})`` where ``half`` = codes per half word,
and ``fma.rn.bf16x2(v, 1, -128)`` leaves ``(q_k, q_{k+half})`` exactly. 8-bit codes go through the fp32 magic
``(q | 0x4B000000) - 2^23`` and ``cvt.rn.bf16x2.f32`` (exact). Within one mma k-step of 16 codes the physical k
order is therefore a permutation of the logical order (4 bits: pairs (0,4) (1,5) (2,6) (3,7) (8,12) ...; 2 bits:
(0,8) (1,9) ...; 8 bits: natural); the x fragments are built with the same permutation, which leaves every dot
product unchanged (see the ``_mma`` docstring).

Geometry (from the shape only, never from the row count): a block of ``32 * NWO * NWR`` threads computes a tile of
``BO = NWO * MT * 16`` outputs x ``BR = NWR * NT * 8`` rows; each warp a tile of ``MT`` m16 x ``NT`` n8 mma tiles
(default 4 x 2 warps, 2 x 4 tiles: 128 outputs x 64 rows, 256 threads). K advances in stages of 64 codes: the
block's threads load the next stage's weights (16-byte loads), x (16-byte loads) and scales / biases into registers
while the warps compute the current stage from shared memory; then the registers are decoded / split into shared
memory in mma fragment order (one 16-byte shared load per fragment set; lane slots XOR-swizzled so that the
16-byte stores of the producers are free of bank conflicts). Grid ``(ceil(out / BO), ceil(R / BR))``.

Exactness rule: a row's result does not depend on the other rows of the launch: a column of an mma result depends
only on the same column of B (one x row), the K order and the per-group epilogue are fixed, rows past R read the
last valid row and are not written.

v1 measured on the H200 (benchmarks/results/gemm_2026-11-30_9150064.md, ``python benchmarks/bench_gemm.py``, graph
replay): 4-bit g64 at 9B / 27B gate/up and down shapes, 512 and 4096 rows: 52.6-64.2 TFLOP/s (old fp32-FMA
``affine.qgemm`` 11.4-14.4, torch bf16 matmul 621-790); 2/8 bits and groups 32/128: 52-58 TFLOP/s. The default
geometry (166-177 registers, one block per SM) beat the smaller-tile / 128-register variants (36-40 TFLOP/s). GPU
accuracy (tests/kernels/test_gpu_gemm.py formats): max error / (|x| @ |W|) about 3.5e-7.

Simulator: ``mma_bf16`` is a block barrier there (see ``_mma``); every thread runs the same compute loop, so the
kernel is block-uniform. Keep simulated shapes tiny.
"""

from __future__ import annotations

import os

import numpy as np
from numba import cuda

from . import _device, affine
from . import _kcache
from ._codegen import single_assignment
from ._device import CP_ASYNC_WAIT, IS_SIM, bf16_to_f32, cp_async_commit, ldg_f32x4_2d, ldg_u32x4_2d
from ._mma import fma_bf16x2, mma_bf16, pack_bf16x2, split_bf16x2

__all__ = ["launch_qgemm", "get_gemm_kernel", "get_gemm_pyfunc", "supported", "GEO", "COMPILE_SPECS", "HOT"]

BK = 64  # codes of K per stage (4 mma k-steps)
GEO = (4, 2, 2, 4)  # NWO warps along out, NWR warps along rows, MT m16 tiles / warp, NT n8 tiles / warp
_BITS = (2, 4, 8)
_GROUPS = (32, 64, 128)
IMPL = os.environ.get("TENSORFOLD_GEMM", "v3").strip().lower() or "v3"  # "v3" or "v1" (see launch_qgemm)


# ----------------------------------------------------------------------------------------------------------------
# 16-byte shared-memory load / store (ld.shared.v4.u32 / st.shared.v4.u32 through an addrspace(3) pointer)
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    from ._device import asm_vec_load, item_ptr

    _I32 = ir.IntType(32)
    _V4 = ir.VectorType(_I32, 4)

    def _shared_v4_ptr(context, builder, arrty, arr, idx, ity):
        ary = context.make_array(arrty)(context, builder, value=arr)
        idx = context.cast(builder, idx, ity, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, arrty, ary, [idx], wraparound=False)
        vptr = builder.bitcast(ptr, ir.PointerType(_V4))
        return builder.addrspacecast(vptr, ir.PointerType(_V4, addrspace=3))

    @intrinsic
    def lds_u32x4(typingctx, arr, i):
        """``arr[i:i+4]`` of a 1-d uint32 shared array (i a multiple of 4) in one 16-byte shared load."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.uint32):
            return None
        if not isinstance(i, types.Integer):
            return None
        sig = types.UniTuple(types.uint32, 4)(arr, i)

        def codegen(context, builder, sig, args):
            sptr = _shared_v4_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            v = builder.load(sptr, align=16)
            vals = [builder.extract_element(v, ir.Constant(_I32, k)) for k in range(4)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

    @intrinsic
    def lds_f32x4(typingctx, arr, i):
        """``arr[i:i+4]`` of a 1-d float32 shared array (i a multiple of 4) in one 16-byte shared load."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.float32):
            return None
        if not isinstance(i, types.Integer):
            return None
        sig = types.UniTuple(types.float32, 4)(arr, i)

        def codegen(context, builder, sig, args):
            sptr = _shared_v4_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            v = builder.load(sptr, align=16)
            vals = [builder.bitcast(builder.extract_element(v, ir.Constant(_I32, k)), ir.FloatType())
                    for k in range(4)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

    @intrinsic
    def sts_u32x4(typingctx, arr, i, a, b, c, d):
        """``arr[i:i+4] = (a, b, c, d)`` on a 1-d uint32 shared array in one 16-byte shared store."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.uint32):
            return None
        for v in (i, a, b, c, d):
            if not isinstance(v, types.Integer):
                return None
        sig = types.void(arr, i, a, b, c, d)

        def codegen(context, builder, sig, args):
            sptr = _shared_v4_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            vec = ir.Constant(_V4, ir.Undefined)
            for k in range(4):
                v = context.cast(builder, args[2 + k], sig.args[2 + k], types.uint32)
                vec = builder.insert_element(vec, v, ir.Constant(_I32, k))
            builder.store(vec, sptr, align=16)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def lds_u32x2(typingctx, arr, i):
        """``arr[i:i+2]`` of a 1-d uint32 shared array (i even) in one 8-byte shared load."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.uint32):
            return None
        if not isinstance(i, types.Integer):
            return None
        sig = types.UniTuple(types.uint32, 2)(arr, i)
        _V2 = ir.VectorType(_I32, 2)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [idx], wraparound=False)
            vptr = builder.addrspacecast(builder.bitcast(ptr, ir.PointerType(_V2)), ir.PointerType(_V2, addrspace=3))
            v = builder.load(vptr, align=8)
            vals = [builder.extract_element(v, ir.Constant(_I32, k)) for k in range(2)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

    def _cp_async_typer(ndim):
        """``cp_async16(sarr, si, garr, *gidx)``: 16 bytes from ``garr[gidx...]`` (uint32, C-contiguous, 16-byte
        aligned address) to ``sarr[si:si+4]`` (1-d uint32 shared array) with ``cp.async.cg`` (L2 only, no registers);
        complete after ``cp_async_commit`` + ``cp_async_wait{N}``."""

        def typer(typingctx, sarr, si, garr, *gidx):
            if not (isinstance(sarr, types.Array) and sarr.ndim == 1 and sarr.dtype == types.uint32):
                return None
            if not (isinstance(garr, types.Array) and garr.ndim == ndim and garr.dtype == types.uint32):
                return None
            if len(gidx) != ndim or not all(isinstance(v, types.Integer) for v in (si, *gidx)):
                return None
            sig = types.void(sarr, si, garr, *gidx)

            def codegen(context, builder, sig, args):
                sa = context.make_array(sig.args[0])(context, builder, value=args[0])
                sidx = context.cast(builder, args[1], sig.args[1], types.intp)
                sptr = cgutils.get_item_pointer(context, builder, sig.args[0], sa, [sidx], wraparound=False)
                s32 = builder.ptrtoint(builder.addrspacecast(sptr, ir.PointerType(_I32, addrspace=3)), _I32)
                ga = context.make_array(sig.args[2])(context, builder, value=args[2])
                gi = [context.cast(builder, v, t, types.intp) for v, t in zip(args[3:], sig.args[3:])]
                gptr = cgutils.get_item_pointer(context, builder, sig.args[2], ga, gi, wraparound=False)
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I32, gptr.type]),
                                   "cp.async.cg.shared.global [$0], [$1], 16;", "r,l,~{memory}", side_effect=True)
                builder.call(asm, [s32, gptr])
                return context.get_dummy_value()

            return sig, codegen

        return typer

    def _cp1(typingctx, sarr, si, garr, i):
        return _cp_async_typer(1)(typingctx, sarr, si, garr, i)

    def _cp2(typingctx, sarr, si, garr, r, i):
        return _cp_async_typer(2)(typingctx, sarr, si, garr, r, i)

    cp_async16 = intrinsic(_cp2)
    cp_async16_1d = intrinsic(_cp1)

    def _ld_typer(ndim):
        """``arr[idx...]`` without numba's negative-index wraparound (indices must be in range)."""

        def typer(typingctx, arr, *idx):
            if not (isinstance(arr, types.Array) and arr.ndim == ndim):
                return None
            if len(idx) != ndim or not all(isinstance(v, types.Integer) for v in idx):
                return None
            sig = arr.dtype(arr, *idx)

            def codegen(context, builder, sig, args):
                ary = context.make_array(sig.args[0])(context, builder, value=args[0])
                ii = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], sig.args[1:])]
                ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, ii, wraparound=False)
                return builder.load(ptr)

            return sig, codegen

        return typer

    @intrinsic
    def ldg_f32x2_2d(typingctx, arr, r, i):
        """``arr[r, i:i+2]`` of a 2-d C-contiguous float32 array (i even) in one coherent 8-byte ``ld.global.v2``
        (activations: no ``.nc``, ``_device``'s rule)."""
        if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.dtype == types.float32):
            return None
        if not (isinstance(r, types.Integer) and isinstance(i, types.Integer)):
            return None
        sig = types.UniTuple(types.float32, 2)(arr, r, i)

        def codegen(context, builder, sig, args):
            ptr = item_ptr(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
            return context.make_tuple(builder, sig.return_type, asm_vec_load(builder, ptr, 2, "f32", nc=False))

        return sig, codegen

    @intrinsic
    def stg_u32x4(typingctx, arr, i, a, b, c, d):
        """``arr[i:i+4] = (a, b, c, d)`` on a 1-d uint32 global array (i a multiple of 4, 16-byte aligned) in one
        16-byte store."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.uint32):
            return None
        for v in (i, a, b, c, d):
            if not isinstance(v, types.Integer):
                return None
        sig = types.void(arr, i, a, b, c, d)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [idx], wraparound=False)
            vec = ir.Constant(_V4, ir.Undefined)
            for k in range(4):
                v = context.cast(builder, args[2 + k], sig.args[2 + k], types.uint32)
                vec = builder.insert_element(vec, v, ir.Constant(_I32, k))
            builder.store(vec, builder.bitcast(ptr, ir.PointerType(_V4)), align=16)
            return context.get_dummy_value()

        return sig, codegen

    def _ld2(typingctx, arr, r, i):
        return _ld_typer(2)(typingctx, arr, r, i)

    ld2 = intrinsic(_ld2)

    @intrinsic
    def and_or(typingctx, a, m, c):
        """``(a & m) | c`` on uint32 in one ``lop3.b32`` (ptxas does not fuse two immediates into one LOP3)."""
        for v in (a, m, c):
            if not isinstance(v, types.Integer):
                return None
        sig = types.uint32(a, m, c)

        def codegen(context, builder, sig, args):
            regs = [context.cast(builder, v, t, types.uint32) for v, t in zip(args, sig.args)]
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32] * 3), "lop3.b32 $0, $1, $2, $3, 0xEA;", "=r,r,r,r")
            return builder.call(asm, regs)

        return sig, codegen


else:

    @cuda.jit(device=True)
    def lds_u32x2(arr, i):
        return (arr[i], arr[i + 1])

    # the simulator copies at issue time; commit / wait are no-ops
    @cuda.jit(device=True)
    def cp_async16(sarr, si, garr, r, i):
        for k in range(4):
            sarr[si + k] = garr[r, i + k]

    @cuda.jit(device=True)
    def cp_async16_1d(sarr, si, garr, i):
        for k in range(4):
            sarr[si + k] = garr[i + k]

    @cuda.jit(device=True)
    def and_or(a, m, c):
        return np.uint32((np.uint32(a) & np.uint32(m)) | np.uint32(c))

    @cuda.jit(device=True)
    def ldg_f32x2_2d(arr, r, i):
        return (arr[r, i], arr[r, i + 1])

    @cuda.jit(device=True)
    def stg_u32x4(arr, i, a, b, c, d):
        arr[i] = a
        arr[i + 1] = b
        arr[i + 2] = c
        arr[i + 3] = d

    @cuda.jit(device=True)
    def ld2(arr, r, i):
        return arr[r, i]

    @cuda.jit(device=True)
    def lds_u32x4(arr, i):
        return (arr[i], arr[i + 1], arr[i + 2], arr[i + 3])

    @cuda.jit(device=True)
    def lds_f32x4(arr, i):
        return (arr[i], arr[i + 1], arr[i + 2], arr[i + 3])

    @cuda.jit(device=True)
    def sts_u32x4(arr, i, a, b, c, d):
        arr[i] = a
        arr[i + 1] = b
        arr[i + 2] = c
        arr[i + 3] = d


# ----------------------------------------------------------------------------------------------------------------
# code layout: which codes each bf16 pair of an mma k-step holds
# ----------------------------------------------------------------------------------------------------------------


def step_pairs(bits: int):
    """The 8 bf16 pairs of one k-step of 16 codes, as (code of the low half, code of the high half) relative to the
    step; pair p sits at lane t = p >> 1, register slot p & 1 (slot 0: k = 2t, 2t+1; slot 1: k = 2t+8, 2t+9)."""
    if bits == 2:
        return [(p, p + 8) for p in range(8)]
    if bits == 4:
        return [(p, p + 4) for p in range(4)] + [(8 + p, 12 + p) for p in range(4)]
    if bits == 8:
        return [(2 * p, 2 * p + 1) for p in range(8)]
    raise ValueError(bits)


def _pair_source(bits: int, s: int, p: int, w: str):
    """(word index in the 16-byte chunk, expression of the decoded bf16 pair) for pair p of step s of a chunk;
    ``w`` formats the word's variable name from its index."""
    if bits == 2:
        j, sh = s, 2 * p
        m = "0x00030003"
    elif bits == 4:
        j, sh = 2 * s + (p >> 2), 4 * (p & 3)
        m = "0x000F000F"
    else:
        j = p >> 1
        b0 = 16 * (p & 1)
        v = w(j)
        q0 = f"(np.uint32((({v} >> np.uint32({b0})) & np.uint32(0xFF)) | np.uint32(0x4B000000)).view(np.float32) - _TWO23)"
        q1 = f"(np.uint32((({v} >> np.uint32({b0 + 8})) & np.uint32(0xFF)) | np.uint32(0x4B000000)).view(np.float32) - _TWO23)"
        return j, f"pack_bf16x2({q0}, {q1})"
    v = w(j)
    sv = f"({v} >> np.uint32({sh}))" if sh else v
    return j, f"fma_bf16x2(({sv} & np.uint32({m})) | np.uint32(0x43004300), _ONE2, _NEG128)"


def _scale_expr3(arr: str, row: str, col: str, sk: str) -> str:
    if sk == "bf16":
        return f"bf16_to_f32(ld2({arr}, {row}, {col}))"
    return f"np.float32(ld2({arr}, {row}, {col}))"


def _scale_expr(arr: str, row: str, col: str, sk: str) -> str:
    if sk == "bf16":
        return f"bf16_to_f32({arr}[{row}, {col}])"
    return f"np.float32({arr}[{row}, {col}])"


def _pos(lane: str) -> str:
    """Swizzled 16-byte slot of a lane inside a (tile, step) block of 32 slots: bank-conflict-free for the readers
    (8 consecutive lanes) and for the producers (8 lanes g = 0..7 of one t)."""
    return f"({lane} ^ (({lane} >> 3) & 3))"


# ----------------------------------------------------------------------------------------------------------------
# kernel source generation
# ----------------------------------------------------------------------------------------------------------------


def _gen_source(name: str, bits: int, group: int, sk: str, geo=GEO) -> str:
    """Source of one kernel. Temporaries get unique names (numba's SSA pass is slow on many re-definitions); the
    only re-defined variables are the loop-carried prefetch registers and accumulators."""
    NWO, NWR, MT, NT = geo[:4]
    TPB = 32 * NWO * NWR
    BO, BR = NWO * MT * 16, NWR * NT * 8
    NMT, NNT = BO // 16, BR // 8
    SPC = 8 // bits  # k-steps per 16-byte chunk of a weight row
    CPR = BK // (16 * SPC)  # chunks per row per stage
    WPS = BK * bits // 32  # words per row per stage
    NA = (BO // 2) * CPR  # producer items: (row pair g / g + 8 of an m-tile, chunk)
    NX = BR * 4  # (row, k-step)
    G = max(1, BK // group)  # groups per stage (g128: one group spans two stages)
    NSB = BO * G
    SPG = group // 16  # k-steps per group
    NSLOT = max(4, SPG)  # partial x sums kept per row
    pairs = step_pairs(bits)
    uA, uX, uS = -(-NA // TPB), -(-NX // TPB), -(-NSB // TPB)

    L = []
    a = L.append
    a(f"def {name}(W, S, B, x, y, R):")
    a("    tid = cuda.threadIdx.x")
    a("    lane = tid & 31")
    a("    warp = tid >> 5")
    a("    g = lane >> 2")
    a("    t = lane & 3")
    a(f"    mypos = {_pos('lane')} * 4")
    a(f"    wo = warp % {NWO}")
    a(f"    wr = warp // {NWO}")
    # 16-byte aligned: read / written with 16-byte shared accesses
    a(f"    As = cuda.shared.array({NMT * 4 * 32 * 4}, np.uint32, alignment=16)")
    a(f"    Xs = cuda.shared.array({NNT * 4 * 32 * 4}, np.uint32, alignment=16)")
    a(f"    ssm = cuda.shared.array(({G}, {BO}), np.float32)")
    a(f"    bsm = cuda.shared.array(({G}, {BO}), np.float32)")
    a(f"    psx = cuda.shared.array({BR * NSLOT}, np.float32, alignment=16)")
    a("    out = W.shape[0]")
    a("    K = x.shape[1]")
    a(f"    nst = K // {BK}")
    a(f"    o0 = cuda.blockIdx.x * {BO}")
    a(f"    r0 = cuda.blockIdx.y * {BR}")
    a("    zero = np.float32(0.0)")
    # per-thread constants of the producers (independent of the stage)
    for u in range(uA):
        a(f"    itA{u} = tid + {u * TPB}")
        a(f"    rpA{u} = itA{u} % {BO // 2}")
        a(f"    ciA{u} = min(itA{u} // {BO // 2}, {CPR - 1})")
        a(f"    orowA{u} = o0 + (rpA{u} >> 3) * 16 + (rpA{u} & 7)")
        a(f"    rlA{u} = min(orowA{u}, out - 1)")
        a(f"    rhA{u} = min(orowA{u} + 8, out - 1)")
        a(f"    abA{u} = (rpA{u} >> 3) * {4 * 32 * 4} + ciA{u} * {SPC * 32 * 4}")
        a(f"    agA{u} = (rpA{u} & 7) * 4")
        for tt in range(4):
            a(f"    apA{u}_{tt} = abA{u} + ({_pos(f'(agA{u} + {tt})')}) * 4")
    for u in range(uX):
        a(f"    itX{u} = tid + {u * TPB}")
        a(f"    nX{u} = itX{u} % {BR}")
        a(f"    ksX{u} = (itX{u} // {BR}) & 3")
        a(f"    xrX{u} = min(r0 + nX{u}, R - 1)")
        a(f"    xbX{u} = (nX{u} >> 3) * {4 * 32 * 4} + ksX{u} * {32 * 4}")
        a(f"    xgX{u} = (nX{u} & 7) * 4")
        for tt in range(4):
            a(f"    xpX{u}_{tt} = xbX{u} + ({_pos(f'(xgX{u} + {tt})')}) * 4")
    for u in range(uS):
        a(f"    itS{u} = tid + {u * TPB}")
        a(f"    olS{u} = itS{u} % {BO}")
        a(f"    glS{u} = (itS{u} // {BO}) % {G}")
        a(f"    soS{u} = min(o0 + olS{u}, out - 1)")

    # ---- producer: global loads of stage `stv` into registers (loop-carried names)
    def load(ind, stv):
        for u in range(uA):
            a(f"{ind}wl{u} = ldg_u32x4_2d(W, rlA{u}, {stv} * {WPS} + ciA{u} * 4)")
            a(f"{ind}wh{u} = ldg_u32x4_2d(W, rhA{u}, {stv} * {WPS} + ciA{u} * 4)")
        for u in range(uX):
            for f in range(4):
                a(f"{ind}xv{u}_{f} = ldg_f32x4_2d(x, xrX{u}, {stv} * {BK} + ksX{u} * 16 + {4 * f})")
        for u in range(uS):
            a(f"{ind}sv{u} = {_scale_expr('S', f'soS{u}', f'({stv} * {BK}) // {group} + glS{u}', sk)}")
            a(f"{ind}bv{u} = {_scale_expr('B', f'soS{u}', f'({stv} * {BK}) // {group} + glS{u}', sk)}")

    # ---- producer: decode / split registers into shared memory (stage `stv`)
    def store(ind, stv, tag):
        for u in range(uA):
            if NA % TPB or (u + 1) * TPB > NA:
                a(f"{ind}if itA{u} < {NA}:")
                i2 = ind + "    "
            else:
                i2 = ind
            for s in range(SPC):
                for tt in range(4):
                    regs = []
                    for half in ("l", "h"):
                        for slot in range(2):
                            p = 2 * tt + slot
                            _, expr = _pair_source(bits, s, p, lambda j, half=half, u=u: f"w{half}{u}[{j}]")
                            regs.append(expr)
                    # register order a0 (g, slot 0), a1 (g + 8, slot 0), a2 (g, slot 1), a3 (g + 8, slot 1)
                    a0, a2, a1, a3 = regs[0], regs[1], regs[2], regs[3]
                    a(f"{i2}sts_u32x4(As, apA{u}_{tt} + {s * 32 * 4}, {a0}, {a1}, {a2}, {a3})")
        for u in range(uX):
            if NX % TPB or (u + 1) * TPB > NX:
                a(f"{ind}if itX{u} < {NX}:")
                i2 = ind + "    "
            else:
                i2 = ind

            def xe(c, u=u):
                return f"xv{u}_{c // 4}[{c % 4}]"

            for tt in range(4):
                c00, c01 = pairs[2 * tt]
                c10, c11 = pairs[2 * tt + 1]
                v = f"{tag}{u}_{tt}"
                a(f"{i2}h0{v}, l0{v} = split_bf16x2({xe(c00)}, {xe(c01)})")
                a(f"{i2}h1{v}, l1{v} = split_bf16x2({xe(c10)}, {xe(c11)})")
                a(f"{i2}sts_u32x4(Xs, xpX{u}_{tt}, h0{v}, h1{v}, l0{v}, l1{v})")
            a(f"{i2}psx[nX{u} * {NSLOT} + {f'({stv} & 1) * 4 + ' if SPG > 4 else ''}ksX{u}] = ("
              + " + ".join(xe(c) for c in range(16)) + ")")
        for u in range(uS):
            a(f"{ind}if itS{u} < {NSB}:")
            a(f"{ind}    ssm[glS{u}, olS{u}] = sv{u}")
            a(f"{ind}    bsm[glS{u}, olS{u}] = bv{u}")

    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                a(f"    acc{i}_{j}_{c} = zero")
                if SPG > 4:
                    a(f"    d{i}_{j}_{c} = zero")
    load("    ", "0")
    store("    ", "0", "p")
    a("    cuda.syncthreads()")
    a("    for st in range(nst):")
    I = "        "
    a(f"{I}if st + 1 < nst:")
    load(I + "    ", "(st + 1)")
    cur = {}  # current name of each d accumulator
    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                cur[i, j, c] = f"d{i}_{j}_{c}" if SPG > 4 else "zero"
    for S in range(4):
        for i in range(MT):
            a(f"{I}fa{i}_{S} = lds_u32x4(As, ((wo * {MT} + {i}) * 4 + {S}) * 128 + mypos)")
        for j in range(NT):
            a(f"{I}fb{j}_{S} = lds_u32x4(Xs, ((wr * {NT} + {j}) * 4 + {S}) * 128 + mypos)")
        for i in range(MT):
            for j in range(NT):
                fa, fb = f"fa{i}_{S}", f"fb{j}_{S}"
                for h in range(2):
                    ins = ", ".join(cur[i, j, c] for c in range(4))
                    outs = [f"e{i}_{j}_{c}_{S}{h}" for c in range(4)]
                    a(f"{I}{', '.join(outs)} = mma_bf16({fa}[0], {fa}[1], {fa}[2], {fa}[3], {fb}[{2 * h}], "
                      f"{fb}[{2 * h + 1}], {ins})")
                    for c in range(4):
                        cur[i, j, c] = outs[c]
        if (S + 1) % min(SPG, 4) == 0:
            # group epilogue: acc += s * d + b * sum_x(group); d restarts at zero
            gl = S // SPG if SPG <= 4 else 0
            E = I
            if SPG > 4:
                a(f"{I}if (st & 1) == 1:")
                E = I + "    "
            slots = list(range(S + 1 - SPG, S + 1)) if SPG <= 4 else list(range(SPG))
            for i in range(MT):
                for hh in range(2):
                    a(f"{E}es{i}_{hh}_{S} = ssm[{gl}, wo * {MT * 16} + {i * 16 + 8 * hh} + g]")
                    a(f"{E}eb{i}_{hh}_{S} = bsm[{gl}, wo * {MT * 16} + {i * 16 + 8 * hh} + g]")
            for j in range(NT):
                for cc in range(2):
                    rn = f"(wr * {NT * 8} + {j * 8 + cc} + 2 * t) * {NSLOT}"
                    v = f"pv{j}_{cc}_{S}"
                    terms = []
                    for q4 in sorted({sl // 4 for sl in slots}):
                        a(f"{E}{v}_{q4} = lds_f32x4(psx, {rn} + {4 * q4})")
                    terms = [f"{v}_{sl // 4}[{sl % 4}]" for sl in slots]
                    a(f"{E}sx{j}_{cc}_{S} = (" + " + ".join(terms) + ")")
            for i in range(MT):
                for j in range(NT):
                    for c in range(4):
                        hh, cc = c >> 1, c & 1
                        a(f"{E}acc{i}_{j}_{c} += es{i}_{hh}_{S} * {cur[i, j, c]} + eb{i}_{hh}_{S} * sx{j}_{cc}_{S}")
            if SPG > 4:
                for i in range(MT):
                    for j in range(NT):
                        for c in range(4):
                            a(f"{E}d{i}_{j}_{c} = zero")
                a(f"{I}else:")
                for i in range(MT):
                    for j in range(NT):
                        for c in range(4):
                            a(f"{E}d{i}_{j}_{c} = {cur[i, j, c]}")
            else:
                for k in cur:
                    cur[k] = "zero"
    a(f"{I}cuda.syncthreads()")
    a(f"{I}if st + 1 < nst:")
    store(I + "    ", "(st + 1)", "q")
    a(f"{I}cuda.syncthreads()")
    # ---- write back
    for i in range(MT):
        for hh in range(2):
            a(f"    yo{i}_{hh} = o0 + wo * {MT * 16} + {i * 16 + 8 * hh} + g")
    for j in range(NT):
        for cc in range(2):
            a(f"    yr{j}_{cc} = r0 + wr * {NT * 8} + {j * 8 + cc} + 2 * t")
    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                hh, cc = c >> 1, c & 1
                a(f"    if yo{i}_{hh} < out and yr{j}_{cc} < R:")
                a(f"        y[yr{j}_{cc}, yo{i}_{hh}] = acc{i}_{j}_{c}")
    return "\n".join(L) + "\n"


_KCACHE: dict = {}


def _build(name: str, src: str):
    glb = {
        "cuda": cuda,
        "np": np,
        "bf16_to_f32": bf16_to_f32,
        "ldg_u32x4_2d": ldg_u32x4_2d,
        "ldg_f32x4_2d": ldg_f32x4_2d,
        "lds_u32x4": lds_u32x4,
        "lds_f32x4": lds_f32x4,
        "sts_u32x4": sts_u32x4,
        "lds_u32x2": lds_u32x2,
        "ld2": ld2,
        "stg_u32x4": stg_u32x4,
        "ldg_f32x2_2d": ldg_f32x2_2d,
        "and_or": and_or,
        "cp_async16": cp_async16,
        "cp_async16_1d": cp_async16_1d,
        "cp_async_commit": cp_async_commit,
        "cp_async_wait0": CP_ASYNC_WAIT[0],
        "cp_async_wait1": CP_ASYNC_WAIT[1],
        "cp_async_wait2": CP_ASYNC_WAIT[2],
        "mma_bf16": mma_bf16,
        "pack_bf16x2": pack_bf16x2,
        "fma_bf16x2": fma_bf16x2,
        "split_bf16x2": split_bf16x2,
        "_TWO23": np.float32(8388608.0),
        "_ONE2": np.uint32(0x3F803F80),
        "_NEG128": np.uint32(0xC300C300),
        "_M4": np.uint32(0x000F000F),
        "_MAGIC": np.uint32(0x43004300),
    }
    return _kcache.build(name, single_assignment(src), glb, __name__)


def _geo_name(geo) -> str:
    return "x".join(str(v) for v in geo)


def get_gemm_pyfunc(bits: int, group: int, sk: str = "bf16", geo=GEO):
    key = ("py", bits, group, sk, tuple(geo))
    if key not in _KCACHE:
        name = f"tcgemm_b{bits}_g{group}_{sk}_{_geo_name(geo)}"
        _KCACHE[key] = _build(name, _gen_source(name, bits, group, sk, tuple(geo)))
    return _KCACHE[key]


def get_gemm_kernel(bits: int, group: int, sk: str = "bf16", geo=GEO):
    key = ("k", bits, group, sk, tuple(geo))
    if key not in _KCACHE:
        _KCACHE[key] = _kcache.jit(get_gemm_pyfunc(bits, group, sk, geo))
    return _KCACHE[key]


def supported(inp: int, bits: int, group: int) -> bool:
    """True when the tensor-core kernel handles the format (else launch_qgemm uses affine.launch_qgemm)."""
    return bits in _BITS and group in _GROUPS and inp % BK == 0 and inp % group == 0


def tile(geo=GEO):
    """(outputs, rows) per block."""
    NWO, NWR, MT, NT = geo
    return NWO * MT * 16, NWR * NT * 8


def launch_qgemm(W, S, B, x, y, bits: int, group: int, *, stream=0, rows=None, geo=None, impl=None, ws=None):
    """y[:R] = x[:R] @ dequant(W, S, B).T (R = rows or x.shape[0]); ``stream`` may be a graph builder.

    ``impl`` (default ``IMPL``, from ``TENSORFOLD_GEMM``): "v3" uses the pre-split + cp.async kernel for 4 / 8 bits
    with groups 64 / 128 (two launches: ``xprep`` then ``tc3gemm``; scratch from ``ws`` = ``workspace(rows, in)``
    or a module cache) and v1 for the other tensor-core formats; "v1" uses v1 for bits 2/4/8 with ``in`` a multiple
    of 64. Everything else goes to ``affine.launch_qgemm``. ``geo`` is the chosen kernel's geometry."""
    out, inp = W.shape[0], x.shape[1]
    R = int(rows if rows is not None else x.shape[0])
    if R <= 0:
        return y
    if (impl or IMPL) == "v3" and supported3(inp, bits, group):
        geo = tuple(geo) if geo is not None else geo3(bits, group)
        sk = affine._scale_kind(S)
        k = get_gemm3_kernel(bits, group, sk, geo, XLO, DQ and sk == "bf16")
        return _launch3(k, (W, S, B), (), x, y, bits, group, R, out, stream, geo, ws)
    geo = GEO if geo is None else tuple(geo)
    if not supported(inp, bits, group):
        return affine.launch_qgemm(W, S, B, x, y, bits, group, stream=stream, rows=R)
    k = get_gemm_kernel(bits, group, affine._scale_kind(S), geo)
    bo, br = tile(geo)
    tpb = 32 * geo[0] * geo[1]
    k[(-(-out // bo), -(-R // br)), tpb, stream](W, S, B, x, y, np.int32(R))
    return y


# ================================================================================================================
# v3: x pre-split once per GEMM (``xprep``) + cp.async ring of raw codes and ready x fragments (``tc3`` kernels)
# ================================================================================================================
#
# Layout of the pre-split x (``XF``, uint32, flat): for row tile ``nt`` (8 rows), k-step ``ks`` (16 codes) and lane
# ``l = 4 * g + t``: the 4 words (hi slot 0, hi slot 1, lo slot 0, lo slot 1) of the mma B fragment of row
# ``8 * nt + g`` at ``((nt * KS + ks) * 32 + l) * 4``. The k permutation inside a stage of 64 codes is chosen so
# that lane t decodes only the codes 16t .. 16t+15 of the stage (one 8-byte shared load per weight row for 4 bits,
# 16 bytes for 8 bits): physical (k-step S, slot, half h) of lane t holds logical code ``16t + 8*slot + S + 4h``
# (4 bits: nibbles S and S+4 of word 2t+slot) or ``16t + 8*slot + 4*(S>>1) + 2*(S&1) + h`` (8 bits: bytes
# 2(S&1), 2(S&1)+1 of word 4t + 2*slot + (S>>1)). A k-step therefore mixes codes of the whole stage, so v3 needs a
# group of at least 64 (one or two stages per group). ``SXT[gi, n]`` (float32) is the sum of x over row n's group gi:
# 16-element partial sums in natural order, added in k order (the same order as v1). XF / SXT rows are padded to a
# multiple of RPAD; rows past R repeat row R - 1 (never written back).
#
# tc3gemm (geometry NWO x NWR warps, each MT m16 x NT n8 tiles, NSTG stages): a block computes BO = NWO*MT*16
# outputs x BR = NWR*NT*8 rows. Per stage of 64 codes its threads issue cp.async copies of the raw weight words
# (BO rows x 32 / 64 bytes) and of the ready x fragments (BR/8 tiles x 2 KiB) into ring slot (st + NSTG-1) % NSTG,
# after ``cp.async.wait_group NSTG-2`` + one barrier made stage st visible and freed that slot. Each warp then loads
# its rows' words (8 / 16 bytes per row and lane), decodes the A fragments in registers (4 bits: ``lop3`` +
# ``fma.bf16x2`` per pair), reads each B fragment with one 16-byte shared load and chains hi then lo mma's into the
# group's ``d``; at the group's end ``acc = (acc + s * d) + b * sum_x`` (scales and sums loaded at the group's start).
# Per output the mma chain and the epilogue are the same in every geometry (bit-identical, tested), and a row's
# result never depends on the other rows (mma columns are independent; xprep and the epilogue are per row).
# Measured geometries: benchmarks/results/gemm_2026-11-30_c34fb3f.md (12 or 16 warps per SM: 122-132 TFLOP/s at 9B
# gate/up; 8 warps: 97-107).

# NWO warps along out, NWR warps along rows, MT m16 tiles / warp, NT n8 tiles / warp, cp.async stages[, minimum
# resident blocks per SM: launch bounds that cap registers (65536 / (threads * blocks)); absent or 0: none]
# (a 6th entry of 2 caps 8 x 1 x 2 x 4 at 128 registers: ptxas then spills 4-32 bytes depending on cc and stages)
GEO3 = (4, 1, 2, 4, 3)  # 128 threads, 128 outputs x 32 rows, 3 stages: 160-170 registers, 3 blocks per SM
_BITS3 = (4, 8)
_GROUPS3 = (64, 128)
XPREP_TPB = 64
XPREP2_TPB = 128  # 4 warps: 4 row tiles of 8 rows
# pre-pass kernel of v3 (see launch_xprep): "2" (xprep2, coalesced) by default since session 15: ncu put xprep at
# 108 us for 4,096 x 2,048 (lg_throttle: 4-byte stores, 64-byte strided loads); 2B prompts 4,096 / 16,384 tokens ran
# 15,843 / 10,755 tok/s with xprep and 16,779 / 11,181 with xprep2 (same bits)
XPREP = os.environ.get("TENSORFOLD_XPREP", "2").strip() or "2"
# TENSORFOLD_GEMM_XLO=0 (opt-in): tc3gemm multiplies the codes by the bf16 high part of x only, one mma a k-step
# instead of two (x as bf16 activations, about 2^-9 relative; the group sums keep the full x). Prompt rows then differ
# from step rows by more than fp32 rounding; the runtime's prompt-vs-step KL test passes with it (session 15). 2B
# prompts of 512 / 4,096 / 16,384 tokens: +9.3 / 7.2 / 4.6 %. With bf16 scales the dq kernel below (the default)
# takes x's high part only anyway; this switch then matters only with TENSORFOLD_GEMM_DQ=0 or other scale dtypes.
XLO = os.environ.get("TENSORFOLD_GEMM_XLO", "1").strip() != "0"
# The prompt GEMM's default since session 16 (TENSORFOLD_GEMM_DQ=0 turns it off): bf16 scales' weights dequantized to
# bf16 in the registers (one rounding of s q + b, as MLX's own bf16 dequantization) and met by x's bf16 high part
# (``_gen_source3``'s ``dq``): bf16 x bf16 products with fp32 accumulation, what a bf16 engine computes. Other scale
# dtypes keep the hi + lo kernel. H200, 2B prompts of 512 / 4,096 / 16,384 tokens: 17,990 / 16,660 / 11,122 tok/s
# off, 20,240 / 18,637 / 11,990 on (+12.5 / 11.9 / 7.8 %); the runtime's prompt-vs-step KL test passes with it
# (benchmarks/results/session16_2026-12-01.md). Decode steps never use this kernel.
DQ = os.environ.get("TENSORFOLD_GEMM_DQ", "1").strip() != "0"
RPAD = 64  # XF / SXT rows are padded to a multiple of this (every row tile BR divides it: no clamps in the kernel)
SMEM_LIMIT = 48 * 1024  # static shared memory per block


def _pair_codes3(bits: int, S: int, slot: int):
    """Logical codes (relative to 16t of the stage) of the bf16 pair in k-step S, register slot ``slot``."""
    if bits == 4:
        return (8 * slot + S, 8 * slot + S + 4)
    c = 8 * slot + 4 * (S >> 1) + 2 * (S & 1)
    return (c, c + 1)


def _decode3(bits: int, S: int, slot: int, w) -> str:
    """Expression of the decoded bf16 pair (k-step S, slot) from a lane's words ``w(j)`` of one weight row."""
    if bits == 4:
        v = w(slot)
        sv = f"({v} >> np.uint32({4 * S}))" if S else v
        return f"fma_bf16x2(and_or({sv}, _M4, _MAGIC), _ONE2, _NEG128)"
    v = w(2 * slot + (S >> 1))
    b0 = 16 * (S & 1)
    q0 = f"(np.uint32((({v} >> np.uint32({b0})) & np.uint32(0xFF)) | np.uint32(0x4B000000)).view(np.float32) - _TWO23)"
    q1 = f"(np.uint32((({v} >> np.uint32({b0 + 8})) & np.uint32(0xFF)) | np.uint32(0x4B000000)).view(np.float32) - _TWO23)"
    return f"pack_bf16x2({q0}, {q1})"


def smem3(bits: int, geo) -> int:
    NWO, NWR, MT, NT, NSTG = geo[:5]
    return NSTG * (NWO * MT * 16 * 2 * bits + NWR * NT * 512) * 4


def _emit_x16(a, bits: int, sum_to: str, base: str, vec_store: bool):
    """xprep / xprep2's shared step (12 spaces in): x[xr, kb:kb+16] in four 16-byte loads, their sum in natural
    order assigned through ``sum_to`` (``"s = s + "`` or ``"p = "``), and the four k-steps' bf16 hi / lo fragment
    words stored from ``XF[base]`` on (one 16-byte store a k-step when ``vec_store``, else four 4-byte ones)."""
    I = "            "
    for k in range(4):
        a(f"{I}v{k} = ldg_f32x4_2d(x, xr, kb{f' + {4 * k}' if k else ''})")

    def xe(c):
        return f"v{c // 4}[{c % 4}]"

    a(f"{I}{sum_to}(" + " + ".join(xe(c) for c in range(16)) + ")")
    a(f"{I}base = {base}")
    for S in range(4):
        c00, c01 = _pair_codes3(bits, S, 0)
        c10, c11 = _pair_codes3(bits, S, 1)
        a(f"{I}h0_{S}, l0_{S} = split_bf16x2({xe(c00)}, {xe(c01)})")
        a(f"{I}h1_{S}, l1_{S} = split_bf16x2({xe(c10)}, {xe(c11)})")
        if vec_store:
            a(f"{I}stg_u32x4(XF, base + {S * 128}, h0_{S}, h1_{S}, l0_{S}, l1_{S})")
        else:
            for j, v in enumerate((f"h0_{S}", f"h1_{S}", f"l0_{S}", f"l1_{S}")):
                a(f"{I}XF[base + {S * 128 + j}] = {v}")


def _gen_xprep(name: str, bits: int) -> str:
    L = []
    a = L.append
    a(f"def {name}(x, XF, SXT, R):")
    a(f"    n = cuda.blockIdx.x * {XPREP_TPB} + cuda.threadIdx.x")
    a("    gi = cuda.blockIdx.y")
    a("    Rp = SXT.shape[1]")
    a("    if n < Rp:")
    a("        KS = x.shape[1] // 16")
    a("        grp = x.shape[1] // SXT.shape[0]")
    a("        xr = min(n, R - 1)")
    a("        nt = n >> 3")
    a("        gl = n & 7")
    a("        s = np.float32(0.0)")
    a("        for b in range(grp // 16):")
    a("            kb = gi * grp + b * 16")
    _emit_x16(a, bits, "s = s + ", "((nt * KS + (kb >> 6) * 4) * 32 + gl * 4 + ((kb >> 4) & 3)) * 4", False)
    a("        SXT[gi, n] = s")
    return "\n".join(L) + "\n"


def _gen_xprep2(name: str, bits: int) -> str:
    """xprep with one warp per (8-row tile, group): lane (g, t) reads 64 contiguous bytes of row 8*nt + g per stage
    and writes its own fragment words, so a warp's four 16-byte stores per k-step cover 512 contiguous bytes (xprep:
    one thread per (row, group), 16-byte pieces 64 bytes apart). Group sums in the same order as xprep (partials of
    16 in natural order added in k order: the lanes' partials go through shared memory). Same output bits."""
    L = []
    a = L.append
    a(f"def {name}(x, XF, SXT, R):")
    a("    tid = cuda.threadIdx.x")
    a("    lane = tid & 31")
    a("    t = lane & 3")
    a(f"    nt = cuda.blockIdx.x * {XPREP2_TPB // 32} + (tid >> 5)")
    a("    gi = cuda.blockIdx.y")
    a("    Rp = SXT.shape[1]")
    a("    KS = x.shape[1] // 16")
    a("    grp = x.shape[1] // SXT.shape[0]")
    a("    ok = nt * 8 < Rp")
    a("    n = nt * 8 + (lane >> 2)")
    a("    xr = min(n, R - 1)")
    a(f"    ps = cuda.shared.array({XPREP2_TPB}, np.float32)")
    a("    s = np.float32(0.0)")
    a("    for st in range(grp // 64):")
    a("        p = np.float32(0.0)")
    a("        if ok:")
    a("            kb = gi * grp + st * 64 + t * 16")
    _emit_x16(a, bits, "p = ", "((nt * KS + (kb >> 6) * 4) * 32 + lane) * 4", True)
    a("        ps[tid] = p")
    a("        cuda.syncthreads()")
    a("        if ok and t == 0:")
    a("            s = s + ps[tid]")
    a("            s = s + ps[tid + 1]")
    a("            s = s + ps[tid + 2]")
    a("            s = s + ps[tid + 3]")
    a("        cuda.syncthreads()")
    a("    if ok and t == 0:")
    a("        SXT[gi, n] = s")
    return "\n".join(L) + "\n"


def _gen_source3(name: str, bits: int, group: int, sk: str, geo=GEO3, xlo: bool = True, dq: bool = False,
                 sw: int = 0, glu: bool = False, per: int = 1) -> str:
    """``sw`` = ``u`` (2 or 4; ``dq`` only): W is in ``qgemv.sweep_pack``'s layout with ``u`` groups an iteration
    (the runtime's single copy of a decode weight, which the GEMVs read in that order), and the kernel is
    ``name(W, Wh, XF, SXT, y, R, out, ng)``: ``W`` the flat words, ``Wh`` the same memory as uint16 (scales and
    biases), ``out`` rows, ``ng`` groups along K; ``per``, the layout's run length, is compiled in (a division by a
    runtime value per stage made 9B / 27B prompts 19-24 % slower, session 20). A stage's 16-byte chunk of row ``p``
    lies in piece ``sweep_piece(gi // u, p // 16)``, group slot ``gi % u``, row ``p % 16``; scales / biases at the
    piece's tail. The values
    reaching the arithmetic are the same, hence the same bits. ``glu``: the rows are in ``qgemv.glu_rows`` order
    (gate and up rows paired); the store puts physical row ``p`` back at its logical column.

    ``dq`` (the default for bf16 scales, ``gemm.DQ``; ``TENSORFOLD_GEMM_DQ=0`` turns it off): each code pair is
    dequantized to bf16 in the registers, ``fma.rn.bf16x2(q, s, b)`` (one rounding of ``s q + b``, as MLX's bf16
    dequantization), and meets x's bf16 high part only, so a k-step is one mma, the accumulators run over the whole
    K, and there is no per-group epilogue. ptxas (sm_90, 4-bit g64, default geometry): a 290-instruction main loop
    instead of 415, 124 registers instead of 166 (four blocks an SM). Prompt rows then carry bf16-class weights and
    x (the runtime's prompt-vs-step KL test bounds the effect)."""
    assert not dq or (sk == "bf16" and bits in (4, 8))
    assert not sw or (dq and sw in (2, 4))
    assert not glu or sw
    if dq:
        xlo = False
    wpg = group * bits // 32  # words of one row's group
    PWs = 16 * sw * wpg + 16 * sw  # words of a swept piece
    NWO, NWR, MT, NT, NSTG = geo[:5]
    TPB = 32 * NWO * NWR
    BO, BR = NWO * MT * 16, NWR * NT * 8
    NNT = BR // 8
    WPS = 2 * bits  # words of a weight row per stage (64 codes)
    CW = WPS // 4  # 16-byte chunks of a weight row per stage
    WSZ, XSZ = BO * WPS, NNT * 512  # words per stage buffer
    SPS = group // 64  # stages per group
    NCW, NCX = BO * CW, NNT * 128
    uW, uX = -(-NCW // TPB), -(-NCX // TPB)
    LW = bits // 2  # words a lane reads per weight row per stage (2 for 4 bits, 4 for 8 bits)
    if smem3(bits, geo) > SMEM_LIMIT:
        raise ValueError(f"gemm v3 geometry {geo} at {bits} bits needs {smem3(bits, geo)} bytes of shared memory "
                         f"(limit {SMEM_LIMIT})")
    assert 2 <= NSTG <= 4 and RPAD % BR == 0
    L = []
    a = L.append
    if sw:
        a(f"def {name}(W, Wh, XF, SXT, y, R, out, ng):")
    else:
        a(f"def {name}(W, S, B, XF, SXT, y, R):")
    a("    tid = cuda.threadIdx.x")
    a("    lane = tid & 31")
    a("    warp = tid >> 5")
    a("    g = lane >> 2")
    a("    t = lane & 3")
    a(f"    wo = warp % {NWO}")
    a(f"    wr = warp // {NWO}")
    a(f"    Ws = cuda.shared.array({NSTG * WSZ}, np.uint32, alignment=16)")
    a(f"    Xs = cuda.shared.array({NSTG * XSZ}, np.uint32, alignment=16)")
    if sw:
        a(f"    nst = ng * {SPS}")
        a("    KS = nst * 4")
        a("    nu = (out + 15) >> 4")
        a(f"    rstr = {per * PWs}")  # words of one (span, unit) run
        a("    sstr = nu * rstr")  # words of one span of per iterations (every unit's run)
        if glu:
            a("    hout = out >> 1")
    else:
        a("    out = W.shape[0]")
        a(f"    KS = W.shape[1] * {32 // bits} // 16")
        a("    nst = KS // 4")
        a(f"    ng = nst // {SPS}")
    a(f"    o0 = cuda.blockIdx.x * {BO}")
    a(f"    r0 = cuda.blockIdx.y * {BR}")
    a(f"    nt0 = cuda.blockIdx.y * {NNT}")
    a("    zero = np.float32(0.0)")
    for u in range(uW):
        a(f"    qW{u} = tid + {u * TPB}")
        a(f"    rowW{u} = min(o0 + qW{u} // {CW}, out - 1)")
        a(f"    cW{u} = (qW{u} % {CW}) * 4")
        if sw:  # the chunk's words in its piece, less the stage's part
            a(f"    pW{u} = (rowW{u} >> 4) * rstr + (rowW{u} & 15) * {wpg} + cW{u}")
    for u in range(uX):
        a(f"    qX{u} = tid + {u * TPB}")
        a(f"    gX{u} = (nt0 + qX{u} // 128) * KS * 128 + (qX{u} % 128) * 4")
    for i in range(MT):
        for hh in range(2):
            a(f"    so{i}_{hh} = min(o0 + wo * {MT * 16} + {i * 16 + 8 * hh} + g, out - 1)")
        a(f"    ar{i} = ((wo * {MT} + {i}) * 16 + g) * {WPS} + t * {LW}")
        if sw:  # a row's scale / bias slot 0 (uint16 index) in its piece of iteration 0
            for hh in range(2):
                a(f"    sp{i}_{hh} = 2 * ((so{i}_{hh} >> 4) * rstr + {16 * sw * wpg}) + (so{i}_{hh} & 15) * {sw}")
    a(f"    sr = r0 + wr * {NT * 8} + 2 * t")  # rows 2t, 2t+1 of n-tile j: sr + 8j (< Rp: RPAD padding)
    for j in range(NT):
        a(f"    bo{j} = (wr * {NT} + {j}) * 512 + lane * 4")

    def issue(ind, stv, bufv):
        if sw:  # the stage's place in a run: iteration ssi = gi // u in span ssi // per, slot ssi % per
            a(f"{ind}sgi = ({stv}) // {SPS}")
            a(f"{ind}ssi = sgi // {sw}")
            a(f"{ind}sso = (ssi // {per}) * sstr + (ssi % {per}) * {PWs} + (sgi % {sw}) * {16 * wpg} + "
              f"(({stv}) % {SPS}) * {WPS}")
        for u in range(uW):
            i2 = ind
            if (u + 1) * TPB > NCW:
                a(f"{ind}if qW{u} < {NCW}:")
                i2 = ind + "    "
            if sw:
                a(f"{i2}cp_async16_1d(Ws, {bufv} * {WSZ} + qW{u} * 4, W, pW{u} + sso)")
            else:
                a(f"{i2}cp_async16(Ws, {bufv} * {WSZ} + qW{u} * 4, W, rowW{u}, {stv} * {WPS} + cW{u})")
        for u in range(uX):
            i2 = ind
            if (u + 1) * TPB > NCX:
                a(f"{ind}if qX{u} < {NCX}:")
                i2 = ind + "    "
            a(f"{i2}cp_async16_1d(Xs, {bufv} * {XSZ} + qX{u} * 4, XF, gX{u} + {stv} * 512)")

    for p in range(NSTG - 1):
        a(f"    if {p} < nst:")
        issue("        ", str(p), str(p))
        a("    cp_async_commit()")
    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                a(f"    acc{i}_{j}_{c} = zero")
    a("    ring = 0")
    a("    for gi in range(ng):")
    I = "        "
    cur = {}
    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                cur[i, j, c] = f"acc{i}_{j}_{c}" if dq else "zero"
    def _scales():
        if dq:  # the group's scales and biases as bf16 pairs (both halves the same row's value)
            if sw:
                a(f"{I}sgo = 2 * ((gi // {sw * per}) * sstr + (gi // {sw} % {per}) * {PWs}) + gi % {sw}")
            for i in range(MT):
                for hh in range(2):
                    for arr, nm in (("S", "es"), ("B", "eb")):
                        if sw:
                            a(f"{I}{nm}r{i}_{hh} = np.uint32(Wh[sp{i}_{hh} + sgo + {0 if nm == 'es' else 16 * sw}])")
                        else:
                            a(f"{I}{nm}r{i}_{hh} = np.uint32(ld2({arr}, so{i}_{hh}, gi))")
                        a(f"{I}{nm}{i}_{hh} = {nm}r{i}_{hh} | ({nm}r{i}_{hh} << np.uint32(16))")
            return
        # the group's scales, biases and x sums (used by the group epilogue)
        for i in range(MT):
            for hh in range(2):
                a(f"{I}es{i}_{hh} = {_scale_expr3('S', f'so{i}_{hh}', 'gi', sk)}")
                a(f"{I}eb{i}_{hh} = {_scale_expr3('B', f'so{i}_{hh}', 'gi', sk)}")
        for j in range(NT):
            a(f"{I}sx{j} = ldg_f32x2_2d(SXT, gi, sr + {8 * j})")

    for k in range(SPS):
        stv = f"(gi * {SPS} + {k})" if SPS > 1 else "gi"
        a(f"{I}st{k} = {stv}")
        a(f"{I}cp_async_wait{NSTG - 2}()")
        a(f"{I}cuda.syncthreads()")
        if NSTG & (NSTG - 1) == 0:
            a(f"{I}bc{k} = st{k} & {NSTG - 1}")
            a(f"{I}bn{k} = (st{k} + {NSTG - 1}) & {NSTG - 1}")
        else:  # ring slots of this stage and of the one issued now, carried (no division)
            a(f"{I}bc{k} = ring")
            a(f"{I}bn{k} = ring - 1 if ring > 0 else {NSTG - 1}")
            a(f"{I}ring = ring + 1 if ring < {NSTG - 1} else 0")
        a(f"{I}if st{k} + {NSTG - 1} < nst:")
        issue(I + "    ", f"(st{k} + {NSTG - 1})", f"bn{k}")
        a(f"{I}cp_async_commit()")
        a(f"{I}bw{k} = bc{k} * {WSZ}")
        a(f"{I}bx{k} = bc{k} * {XSZ}")
        if k == 0:  # loaded now, used after the group's mma's
            _scales()
        for i in range(MT):
            ld = "lds_u32x2" if LW == 2 else "lds_u32x4"
            a(f"{I}ua{i}_{k} = {ld}(Ws, bw{k} + ar{i})")
            a(f"{I}va{i}_{k} = {ld}(Ws, bw{k} + ar{i} + {8 * WPS})")
        for S in range(4):
            for i in range(MT):
                regs = []
                for slot in range(2):
                    for half in ("u", "v"):
                        regs.append(_decode3(bits, S, slot, lambda j, half=half, i=i: f"{half}a{i}_{k}[{j}]"))
                # a0 (g, slot 0), a1 (g + 8, slot 0), a2 (g, slot 1), a3 (g + 8, slot 1)
                for r in range(4):
                    if dq:
                        a(f"{I}fa{i}_{k}{S}_{r} = fma_bf16x2({regs[r]}, es{i}_{r & 1}, eb{i}_{r & 1})")
                    else:
                        a(f"{I}fa{i}_{k}{S}_{r} = {regs[r]}")
            for j in range(NT):
                a(f"{I}fb{j}_{k}{S} = lds_u32x4(Xs, bx{k} + bo{j} + {S * 128})")
            for i in range(MT):
                fa = ", ".join(f"fa{i}_{k}{S}_{r}" for r in range(4))
                for j in range(NT):
                    fb = f"fb{j}_{k}{S}"
                    for h in range(2 if xlo else 1):  # hi, then lo (xlo=False: the bf16 high part only)
                        ins = ", ".join(cur[i, j, c] for c in range(4))
                        outs = [f"e{i}_{j}_{c}_{k}{S}{h}" for c in range(4)]
                        a(f"{I}{', '.join(outs)} = mma_bf16({fa}, {fb}[{2 * h}], {fb}[{2 * h + 1}], {ins})")
                        for c in range(4):
                            cur[i, j, c] = outs[c]
    # group epilogue: acc += s * d + b * sum_x(group) (dq: the mma's carried the accumulators through the group)
    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                hh, cc = c >> 1, c & 1
                if dq:
                    a(f"{I}acc{i}_{j}_{c} = {cur[i, j, c]}")
                else:
                    a(f"{I}acc{i}_{j}_{c} = (acc{i}_{j}_{c} + es{i}_{hh} * {cur[i, j, c]}) + eb{i}_{hh} * sx{j}[{cc}]")
    for i in range(MT):
        for hh in range(2):
            if glu:  # physical row p = 16 T + 8 hh + g holds gate row 8 T + g (hh 0) or up row hout + 8 T + g
                a(f"    yo{i}_{hh} = ((o0 + wo * {MT * 16} + {i * 16}) >> 1) + g" + (" + hout" if hh else ""))
                a(f"    yq{i}_{hh} = o0 + wo * {MT * 16} + {i * 16 + 8 * hh} + g")  # physical, for the bound
            else:
                a(f"    yo{i}_{hh} = o0 + wo * {MT * 16} + {i * 16 + 8 * hh} + g")
    for j in range(NT):
        for cc in range(2):
            a(f"    yr{j}_{cc} = r0 + wr * {NT * 8} + {j * 8 + cc} + 2 * t")
    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                hh, cc = c >> 1, c & 1
                a(f"    if {'yq' if glu else 'yo'}{i}_{hh} < out and yr{j}_{cc} < R:")
                a(f"        y[yr{j}_{cc}, yo{i}_{hh}] = acc{i}_{j}_{c}")
    return "\n".join(L) + "\n"


def get_xprep_pyfunc(bits: int):
    key = ("xp", bits)
    if key not in _KCACHE:
        name = f"xprep_b{bits}"
        _KCACHE[key] = _build(name, _gen_xprep(name, bits))
    return _KCACHE[key]


def get_xprep_kernel(bits: int):
    key = ("xpk", bits)
    if key not in _KCACHE:
        _KCACHE[key] = _kcache.jit(get_xprep_pyfunc(bits))
    return _KCACHE[key]


def get_xprep2_pyfunc(bits: int):
    key = ("xp2", bits)
    if key not in _KCACHE:
        name = f"xprep2_b{bits}"
        _KCACHE[key] = _build(name, _gen_xprep2(name, bits))
    return _KCACHE[key]


def get_xprep2_kernel(bits: int):
    key = ("xp2k", bits)
    if key not in _KCACHE:
        _KCACHE[key] = _kcache.jit(get_xprep2_pyfunc(bits))
    return _KCACHE[key]


def launch_xprep(x, XF, SXT, R: int, bits: int, stream=0, version=None):
    """The v3 pre-pass: XF / SXT (flat / ``[in/group, Rp]``) from x rows 0..R-1. ``version`` (default ``XPREP``, from
    ``TENSORFOLD_XPREP``): "1" = xprep, "2" = xprep2 (coalesced, same bits; the default: 4-6 % faster prompts at 2B)."""
    Rp, ng = SXT.shape[1], SXT.shape[0]
    if (version or XPREP) == "2":
        get_xprep2_kernel(bits)[(-(-Rp // (XPREP2_TPB // 4)), ng), XPREP2_TPB, stream](x, XF, SXT, np.int32(R))
    else:
        get_xprep_kernel(bits)[(-(-Rp // XPREP_TPB), ng), XPREP_TPB, stream](x, XF, SXT, np.int32(R))


def get_gemm3_pyfunc(bits: int, group: int, sk: str = "bf16", geo=GEO3, xlo: bool = True, dq: bool = False,
                     sw: int = 0, glu: bool = False, per: int = 1):
    key = ("py3", bits, group, sk, tuple(geo), xlo, dq, sw, glu, per)
    if key not in _KCACHE:
        name = (f"tc3gemm_b{bits}_g{group}_{sk}_{_geo_name(geo)}" + ("_dq" if dq else ("" if xlo else "_hi"))
                + (f"_sw{sw}p{per}" if sw else "") + ("_glu" if glu else ""))
        _KCACHE[key] = _build(name, _gen_source3(name, bits, group, sk, tuple(geo), xlo, dq, sw, glu, per))
    return _KCACHE[key]


def get_gemm3_kernel(bits: int, group: int, sk: str = "bf16", geo=GEO3, xlo: bool = True, dq: bool = False,
                     sw: int = 0, glu: bool = False, per: int = 1):
    key = ("k3", bits, group, sk, tuple(geo), xlo, dq, sw, glu, per)
    if key not in _KCACHE:
        f = get_gemm3_pyfunc(bits, group, sk, geo, xlo, dq, sw, glu, per)
        lb = (32 * geo[0] * geo[1], geo[5]) if len(geo) > 5 and geo[5] and not IS_SIM else None
        if lb:  # an optional 6th geometry entry: minimum resident blocks per SM (launch bounds; caps registers)
            _KCACHE[key] = _kcache.jit(f, launch_bounds=lb)
        else:
            _KCACHE[key] = _kcache.jit(f)
    return _KCACHE[key]


def swept_ok(inp: int, bits: int, group: int) -> bool:
    """Whether prompt GEMMs can read a weight in ``qgemv.sweep_pack``'s layout (``launch_qgemm_swept``): the v3
    kernel's formats with its dequantize-in-registers form (bf16 scales)."""
    return IMPL == "v3" and DQ and supported3(inp, bits, group)


def launch_qgemm_swept(W, x, y, bits: int, group: int, u: int, out: int, *, glu: bool = False, per: int = 1,
                       stream=0, rows=None, ws=None, geo=None):
    """``launch_qgemm`` for a weight in ``qgemv.sweep_pack``'s layout (``W`` uint32 ``[pieces, words]``, ``u``
    groups an iteration, runs of ``per`` iterations, ``out`` rows; ``glu``: rows in ``qgemv.glu_rows`` order,
    written back to their logical columns). The same bits as ``launch_qgemm`` on the MLX layout with bf16 scales."""
    inp = x.shape[1]
    R = int(rows if rows is not None else x.shape[0])
    if not swept_ok(inp, bits, group):
        raise ValueError(f"launch_qgemm_swept: {bits}-bit g{group} with in {inp} has no swept prompt GEMM")
    if R <= 0:
        return y
    geo = geo3(bits, group) if geo is None else tuple(geo)
    k = get_gemm3_kernel(bits, group, "bf16", geo, False, True, u, glu, per)
    Wf = W.reshape(W.size)
    return _launch3(k, (Wf, Wf.view(np.uint16)), (np.int32(out), np.int32(inp // group)), x, y, bits, group, R,
                    out, stream, geo, ws)


def supported3(inp: int, bits: int, group: int) -> bool:
    """True when the v3 kernel handles the format (4 / 8 bits, groups 64 / 128, ``in`` a multiple of the group)."""
    return bits in _BITS3 and group in _GROUPS3 and inp % group == 0


def geo3(bits: int, group: int) -> tuple:
    """v3's default geometry for a format (from the format only, never from the row count)."""
    return GEO3


def tile3(geo=GEO3):
    NWO, NWR, MT, NT = geo[:4]
    return NWO * MT * 16, NWR * NT * 8


def workspace(rows: int, inp: int):
    """Device scratch for v3 launches of up to ``rows`` rows and ``in`` <= ``inp``: (XF uint32, SXT float32), flat.
    Pass it as ``ws=`` (e.g. from the runtime's static buffers, so that graph capture never allocates)."""
    rp = -(-max(1, rows) // RPAD) * RPAD
    return _alloc(rp * inp, rp * max(1, inp // 64))


_WS: list = []  # module scratch when no ws is passed: grown, never freed (a captured graph may still use an old one)


def _alloc(nx: int, ns: int):
    if IS_SIM:
        return np.zeros(nx, np.uint32), np.zeros(ns, np.float32)
    return cuda.device_array(nx, np.uint32), cuda.device_array(ns, np.float32)


def _scratch(ws, Rp: int, inp: int, ng: int):
    if ws is None:
        if not _WS or _WS[-1][0].size < Rp * inp or _WS[-1][1].size < Rp * ng:
            px, ps = (_WS[-1][0].size, _WS[-1][1].size) if _WS else (0, 0)
            _WS.append(_alloc(max(px, Rp * inp), max(ps, Rp * ng)))
        ws = _WS[-1]
    XF, SX = ws
    if XF.size < Rp * inp or SX.size < Rp * ng:
        raise ValueError(f"gemm workspace too small for {Rp} rows x {inp}")
    return XF[: Rp * inp], SX[: Rp * ng].reshape((ng, Rp))


def _launch3(k, wargs, tail, x, y, bits, group, R, out, stream, geo, ws):
    """The v3 launches: ``xprep`` of x's R rows into the scratch, then kernel ``k`` with the weight arguments
    ``wargs``, the scratch, y, R and the extra arguments ``tail``, on the grid of ``out`` x R."""
    inp = x.shape[1]
    XF, SXT = _scratch(ws, -(-R // RPAD) * RPAD, inp, inp // group)
    launch_xprep(x, XF, SXT, R, bits, stream)
    bo, br = tile3(geo)
    k[(-(-out // bo), -(-R // br)), 32 * geo[0] * geo[1], stream](*wargs, XF, SXT, y, np.int32(R), *tail)
    return y


# ----------------------------------------------------------------------------------------------------------------
# compile tier
# ----------------------------------------------------------------------------------------------------------------

_G = "void(uint32[:, ::1], uint16[:, ::1], uint16[:, ::1], float32[:, ::1], float32[:, ::1], int32)"
_GF = "void(uint32[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], int32)"
_GH = "void(uint32[:, ::1], float16[:, ::1], float16[:, ::1], float32[:, ::1], float32[:, ::1], int32)"


_G3 = "void(uint32[:, ::1], {s}[:, ::1], {s}[:, ::1], uint32[::1], float32[:, ::1], float32[:, ::1], int32)"
_G3S = "void(uint32[::1], uint16[::1], uint32[::1], float32[:, ::1], float32[:, ::1], int32, int32, int32)"


def _specs():
    specs, hot = [], set()
    for bits in _BITS:
        for group in _GROUPS:
            f = get_gemm_pyfunc(bits, group, "bf16")
            specs.append((f, _G))
            hot.add(f.__name__)
    specs.append((get_gemm_pyfunc(4, 64, "f32"), _GF))
    specs.append((get_gemm_pyfunc(4, 64, "f16"), _GH))
    # v3
    for sk, sty in (("bf16", "uint16"), ("f32", "float32"), ("f16", "float16")):
        for bits in _BITS3:
            for group in _GROUPS3:
                if sk != "bf16" and (bits, group) != (4, 64):
                    continue
                f = get_gemm3_pyfunc(bits, group, sk, geo3(bits, group))
                specs.append((f, _G3.format(s=sty)))
                hot.add(f.__name__)
    specs.append((get_gemm3_pyfunc(4, 64, "bf16", geo3(4, 64), xlo=False), _G3.format(s="uint16")))  # opt-in
    specs.append((get_gemm3_pyfunc(4, 64, "bf16", geo3(4, 64), dq=True), _G3.format(s="uint16")))  # opt-in
    from . import qgemv as _Q

    for bits in _BITS3:  # swept (the runtime's single-copy decode layout) as qgemv's plans lay it out: plain and
        for group in _GROUPS3:  # gate | up paired
            qp = _Q.plan(24576, 4096, bits, group)
            for glu in (False, True):
                f = get_gemm3_pyfunc(bits, group, "bf16", geo3(bits, group), False, True, qp.u, glu, qp.per)
                specs.append((f, _G3S))
                hot.add(f.__name__)
    for bits in _BITS3:
        for f in (get_xprep_pyfunc(bits), get_xprep2_pyfunc(bits)):
            specs.append((f, "void(float32[:, ::1], uint32[::1], float32[:, ::1], int32)"))
            hot.add(f.__name__)
    return specs, hot


COMPILE_SPECS, HOT = _specs()

_ = (_device,)
