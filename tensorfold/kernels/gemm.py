"""Tensor-core prompt GEMM for MLX affine-quantized weights (bits 2, 4, 8; groups 32, 64, 128).

Owns
- ``launch_qgemm(W, S, B, x, y, bits, group, *, stream=0, rows=None)``: ``y[r, o] = sum_i x[r, i] * (s[o, g] *
  q[o, i] + b[o, g])``, the same contract as ``affine.launch_qgemm`` (W uint32 ``[out, in*bits/32]`` MLX packing,
  S / B ``[out, in/group]`` as bf16 bits (uint16), float16 or float32, x float32 ``[R, in]``, y float32
  ``[R, out]``). Formats this kernel does not cover (bits 3/5/6, ``in`` not a multiple of 64, other groups) are
  passed on to ``affine.launch_qgemm`` (fp32 FMA).
- ``get_gemm_pyfunc`` / ``get_gemm_kernel``: the generated v1 kernels (one per bits x group x scale dtype x
  geometry); ``get_gemm_pyfunc_v2`` / ``get_gemm_kernel_v2`` the v2 kernels (bits 4 and 8).
- Kernel choice: ``launch_qgemm(..., impl=)`` with ``"old"`` (v1 for every format) or ``"new"`` (v2 for 4 / 8 bits,
  v1 for 2 bits); without ``impl`` the environment variable ``TENSORFOLD_GEMM=old|new``, else ``IMPL`` (``"old"``:
  v1 measured faster, see below).

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

Measured on the H200 (benchmarks/results/gemm_2026-11-30_9150064.md, ``python benchmarks/bench_gemm.py``, graph
replay): 4-bit g64 at 9B / 27B gate/up and down shapes, 512 and 4096 rows: 52.6-64.2 TFLOP/s (old fp32-FMA
``affine.qgemm`` 11.4-14.4, torch bf16 matmul 621-790); 2/8 bits and groups 32/128: 52-58 TFLOP/s. The default
geometry (166-177 registers, one block per SM) beat the smaller-tile / 128-register variants (36-40 TFLOP/s). GPU
accuracy (tests/kernels/test_gpu_gemm.py formats): max error / (|x| @ |W|) about 3.5e-7.

v2 (``impl="new"``): the same arithmetic per output (mma chain over k, hi then lo per k-step, restarting per
group; ``sum_x`` of a (row, group) is the left-to-right sum of 8-element partial sums, so v2 equals v1 to about
2e-7 relative, not bit for bit). Stages of 32 codes (2 k-steps); shared memory is double-buffered (decoded codes,
split x, scales, partial x sums), so a stage needs one barrier: the producers decode the prefetched registers of
stage st + 1 into the other buffer after the warps' mma's of stage st. One loop iteration is one quantization
group (its stages unrolled, the mma chain stays in registers, static buffer parity). The producer work is spread
over all threads (a weight chunk's 4 lanes t over up to 4 threads, an x k-step's two halves over 2 threads).
Measured on the H200 (benchmarks/results/gemm_2026-11-30_e5fb61a.md, same command): v2 at 4x2x2x4 36.5-47.1
TFLOP/s vs v1 51.8-64.8 at 2B / 9B / 27B gate/up and down, 512 and 4096 rows (torch bf16 552-778); at 9B gate/up
the v2 geometry 2x2x4x4 (128 threads, 255 registers, two blocks per SM) reached 66.2 / 66.7 vs v1 59.2 / 61.6
(other shapes not measured; it spills 8 bytes at 4-bit g128 for sm_80). Reading: v2's 32-code stages cover a
stage's global loads with only 32 mma's per warp (v1: 64) and each weight chunk is loaded by up to 4 threads, so
the kernel stays latency-bound on the global -> register -> shared path; the next step is a deeper pipeline
(cp.async ring of raw codes and x), not the barrier layout.

Simulator: ``mma_bf16`` is a block barrier there (see ``_mma``); every thread runs the same compute loop, so the
kernel is block-uniform. Keep simulated shapes tiny.
"""

from __future__ import annotations

import os

import numpy as np
from numba import cuda

from . import _device, affine
from ._device import IS_SIM, bf16_to_f32, ldg_f32x4_2d, ldg_u32x4_2d
from ._mma import fma_bf16x2, mma_bf16, pack_bf16x2, split_bf16x2

__all__ = ["launch_qgemm", "get_gemm_kernel", "get_gemm_pyfunc", "get_gemm_kernel_v2", "get_gemm_pyfunc_v2",
           "impl_default", "supported", "GEO", "GEO2", "IMPL", "COMPILE_SPECS", "HOT"]

BK = 64  # codes of K per stage (4 mma k-steps)
GEO = (4, 2, 2, 4)  # NWO warps along out, NWR warps along rows, MT m16 tiles / warp, NT n8 tiles / warp
GEO2 = (4, 2, 2, 4)  # the v2 kernel's default geometry (the one the GPU tests ran; 2x2x4x4 was faster, see above)
IMPL = "old"  # default kernel generation (TENSORFOLD_GEMM=old|new overrides; see impl_default): v1, the faster
_BITS = (2, 4, 8)
_GROUPS = (32, 64, 128)


# ----------------------------------------------------------------------------------------------------------------
# 16-byte shared-memory load / store (ld.shared.v4.u32 / st.shared.v4.u32 through an addrspace(3) pointer)
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

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

else:

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
        "mma_bf16": mma_bf16,
        "pack_bf16x2": pack_bf16x2,
        "fma_bf16x2": fma_bf16x2,
        "split_bf16x2": split_bf16x2,
        "_TWO23": np.float32(8388608.0),
        "_ONE2": np.uint32(0x3F803F80),
        "_NEG128": np.uint32(0xC300C300),
    }
    exec(compile(src, f"<tensorfold.kernels.gemm:{name}>", "exec"), glb)
    fn = glb[name]
    fn.__module__ = __name__
    fn._tf_source = src
    return fn


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
        _KCACHE[key] = cuda.jit(get_gemm_pyfunc(bits, group, sk, geo))
    return _KCACHE[key]


# ----------------------------------------------------------------------------------------------------------------
# v2 kernel: double-buffered shared memory, one barrier per stage, balanced producers (bits 4 and 8)
# ----------------------------------------------------------------------------------------------------------------

BK2 = 32  # codes of K per stage of the v2 kernel (2 mma k-steps)
_BITS2 = (4, 8)


def _mselect(cands, mask: str) -> str:
    """``cands[th]`` for a per-thread ``th`` in ``range(len(cands))`` (a power of two) without branches: a tree of
    ``a ^ ((a ^ b) & m)`` on uint32 words, with ``m`` the per-thread all-ones / zero mask of a bit of ``th``
    (variables ``{mask}{bit}``)."""
    n = len(cands)
    if len(set(cands)) == 1:
        return cands[0]
    half = n // 2
    lo, hi = _mselect(cands[:half], mask), _mselect(cands[half:], mask)
    if lo == hi:
        return lo
    return f"({lo} ^ (({lo} ^ {hi}) & {mask}{half.bit_length() - 1}))"


def _pair_rt(bits: int, s: int, tl: int, slot: int, TH: int, TPT: int, w: str, mask: str, shv: str) -> str:
    """Decoded bf16 pair for lane t = th * TPT + tl (``th`` per thread: words chosen by ``_mselect`` with the
    masks ``{mask}{bit}``), register slot ``slot``, k-step ``s`` of a 16-byte chunk held in the 4-tuple ``w``;
    ``shv`` names the per-thread shift variable (4 bits)."""
    ps = [2 * (k * TPT + tl) + slot for k in range(TH)]
    if bits == 4:
        word = _mselect([f"{w}[{2 * s + (p >> 2)}]" for p in ps], mask)
        shs = {4 * (p & 3) for p in ps}
        sh = f"np.uint32({shs.pop()})" if len(shs) == 1 else shv
        return f"fma_bf16x2((({word} >> {sh}) & np.uint32(0x000F000F)) | np.uint32(0x43004300), _ONE2, _NEG128)"
    if bits == 8:
        word = _mselect([f"{w}[{p >> 1}]" for p in ps], mask)
        b0 = 16 * slot
        q0 = f"(np.uint32((({word} >> np.uint32({b0})) & np.uint32(0xFF)) | np.uint32(0x4B000000)).view(np.float32) - _TWO23)"
        q1 = f"(np.uint32((({word} >> np.uint32({b0 + 8})) & np.uint32(0xFF)) | np.uint32(0x4B000000)).view(np.float32) - _TWO23)"
        return f"pack_bf16x2({q0}, {q1})"
    raise ValueError(bits)


def _gen_source_v2(name: str, bits: int, group: int, sk: str, geo=GEO) -> str:
    """Source of one v2 kernel (see the module docstring, "v2"). Same arithmetic as the v1 kernel per output (the
    mma chain over k, hi then lo per k-step, restarting per group; the group epilogue ``acc += s * d + b * sum_x``)
    except that ``sum_x`` of a (row, group) is the left-to-right sum of 8-element partial sums (each in natural
    order), so v2 and v1 agree to rounding, not bit for bit."""
    NWO, NWR, MT, NT = geo[:4]
    TPB = 32 * NWO * NWR
    BO, BR = NWO * MT * 16, NWR * NT * 8
    NMT, NNT = BO // 16, BR // 8
    NS = BK2 // 16  # k-steps per stage
    SPC = 8 // bits  # k-steps per 16-byte chunk of a weight row
    CPR = NS // SPC  # chunks per row per stage
    WPS = BK2 * bits // 32  # words per row per stage
    SPS = group // BK2  # stages per group
    NSLOT = group // 8  # 8-element partial x sums per (row, group)
    ASZ, XSZ = NMT * NS * 128, NNT * NS * 128  # words per buffer
    PSZ = BR * NSLOT
    # producers: weights (row pair, chunk, part of the 4 lanes t), x (row, k-step, half)
    TH = 1
    while TH < 4 and (BO // 2) * CPR * TH * 2 <= TPB:
        TH *= 2
    XH = 2 if BR * NS * 2 <= TPB else 1
    NA, NX, NSB = (BO // 2) * CPR * TH, BR * NS * XH, BO
    uA, uX, uS = -(-NA // TPB), -(-NX // TPB), -(-NSB // TPB)
    pairs = step_pairs(bits)
    TPT = 4 // TH  # lanes t per weight item
    TPX = 4 // XH  # lanes t per x item

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
    a(f"    As = cuda.shared.array({2 * ASZ}, np.uint32, alignment=16)")
    a(f"    Xs = cuda.shared.array({2 * XSZ}, np.uint32, alignment=16)")
    a(f"    ssm = cuda.shared.array((2, {BO}), np.float32)")
    a(f"    bsm = cuda.shared.array((2, {BO}), np.float32)")
    a(f"    psx = cuda.shared.array({2 * PSZ}, np.float32, alignment=16)")
    a("    out = W.shape[0]")
    a("    K = x.shape[1]")
    a(f"    nst = K // {BK2}")
    a(f"    o0 = cuda.blockIdx.x * {BO}")
    a(f"    r0 = cuda.blockIdx.y * {BR}")
    a("    zero = np.float32(0.0)")
    a(f"    fa0 = ((wo * {MT}) * {NS}) * 128 + mypos")
    a(f"    fb0 = ((wr * {NT}) * {NS}) * 128 + mypos")
    for u in range(uA):
        a(f"    itA{u} = tid + {u * TPB}")
        a(f"    rpA{u} = itA{u} % {BO // 2}")
        a(f"    ciA{u} = (itA{u} // {BO // 2}) % {CPR}")
        a(f"    thA{u} = min((itA{u} // {BO // 2}) // {CPR}, {TH - 1})")
        a(f"    orowA{u} = o0 + (rpA{u} >> 3) * 16 + (rpA{u} & 7)")
        a(f"    rlA{u} = min(orowA{u}, out - 1)")
        a(f"    rhA{u} = min(orowA{u} + 8, out - 1)")
        a(f"    abA{u} = (rpA{u} >> 3) * {NS * 128} + ciA{u} * {SPC * 128}")
        a(f"    agA{u} = (rpA{u} & 7) * 4 + thA{u} * {TPT}")
        for tl in range(TPT):
            a(f"    apA{u}_{tl} = abA{u} + ({_pos(f'(agA{u} + {tl})')}) * 4")
            if bits == 4 and TH > 1:
                for slot in range(2):
                    a(f"    shA{u}_{tl}_{slot} = np.uint32(4 * ((2 * (thA{u} * {TPT} + {tl}) + {slot}) & 3))")
        for b in range(max(TH.bit_length() - 1, 0)):
            a(f"    mA{u}_{b} = np.uint32(((thA{u} >> {b}) & 1) * 0xFFFFFFFF)")
    for u in range(uX):
        a(f"    itX{u} = tid + {u * TPB}")
        a(f"    nX{u} = itX{u} % {BR}")
        a(f"    ksX{u} = (itX{u} // {BR}) % {NS}")
        a(f"    xhX{u} = min((itX{u} // {BR}) // {NS}, {XH - 1})")
        a(f"    xrX{u} = min(r0 + nX{u}, R - 1)")
        a(f"    xcX{u} = ksX{u} * 16 + xhX{u} * {16 // XH}")
        a(f"    xbX{u} = (nX{u} >> 3) * {NS * 128} + ksX{u} * 128")
        a(f"    xgX{u} = (nX{u} & 7) * 4 + xhX{u} * {TPX}")
        for tl in range(TPX):
            a(f"    xpX{u}_{tl} = xbX{u} + ({_pos(f'(xgX{u} + {tl})')}) * 4")
        a(f"    xsX{u} = nX{u} * {NSLOT} + ksX{u} * 2 + xhX{u}")
    for u in range(uS):
        a(f"    itS{u} = tid + {u * TPB}")
        a(f"    olS{u} = min(itS{u}, {BO - 1})")
        a(f"    soS{u} = min(o0 + olS{u}, out - 1)")

    def load(ind, stv, scales=True):
        for u in range(uA):
            a(f"{ind}wl{u} = ldg_u32x4_2d(W, rlA{u}, {stv} * {WPS} + ciA{u} * 4)")
            a(f"{ind}wh{u} = ldg_u32x4_2d(W, rhA{u}, {stv} * {WPS} + ciA{u} * 4)")
        for u in range(uX):
            for f in range(4 // XH):
                a(f"{ind}xv{u}_{f} = ldg_f32x4_2d(x, xrX{u}, {stv} * {BK2} + xcX{u} + {4 * f})")
        for u in range(uS if scales else 0):
            a(f"{ind}sv{u} = {_scale_expr('S', f'soS{u}', f'({stv} * {BK2}) // {group}', sk)}")
            a(f"{ind}bv{u} = {_scale_expr('B', f'soS{u}', f'({stv} * {BK2}) // {group}', sk)}")

    def store(ind, bpar, gpar, sub, tag, scales=True):
        """Decode / split the prefetched registers into buffer ``bpar`` (expression), group parity ``gpar``,
        stage ``sub`` (static) of its group."""
        a(f"{ind}ab{tag} = {bpar} * {ASZ}")
        a(f"{ind}xb{tag} = {bpar} * {XSZ}")
        a(f"{ind}gp{tag} = {gpar}")
        a(f"{ind}pb{tag} = gp{tag} * {PSZ} + {sub * NS * 2}")
        for u in range(uA):
            if NA % TPB or (u + 1) * TPB > NA:
                a(f"{ind}if itA{u} < {NA}:")
                i2 = ind + "    "
            else:
                i2 = ind
            for s in range(SPC):
                for tl in range(TPT):
                    exprs = []
                    for half in ("l", "h"):
                        for slot in range(2):
                            exprs.append(_pair_rt(bits, s, tl, slot, TH, TPT, f"w{half}{u}", f"mA{u}_",
                                                  f"shA{u}_{tl}_{slot}"))
                    # register order a0 (g, slot 0), a1 (g + 8, slot 0), a2 (g, slot 1), a3 (g + 8, slot 1)
                    a0, a2, a1, a3 = exprs[0], exprs[1], exprs[2], exprs[3]
                    a(f"{i2}sts_u32x4(As, ab{tag} + apA{u}_{tl} + {s * 128}, {a0}, {a1}, {a2}, {a3})")
        for u in range(uX):
            if NX % TPB or (u + 1) * TPB > NX:
                a(f"{ind}if itX{u} < {NX}:")
                i2 = ind + "    "
            else:
                i2 = ind

            def xe(c, u=u):
                return f"xv{u}_{c // 4}[{c % 4}]"

            for tl in range(TPX):
                c00, c01 = pairs[2 * tl]
                c10, c11 = pairs[2 * tl + 1]
                v = f"{tag}{u}_{tl}"
                a(f"{i2}h0{v}, l0{v} = split_bf16x2({xe(c00)}, {xe(c01)})")
                a(f"{i2}h1{v}, l1{v} = split_bf16x2({xe(c10)}, {xe(c11)})")
                a(f"{i2}sts_u32x4(Xs, xb{tag} + xpX{u}_{tl}, h0{v}, h1{v}, l0{v}, l1{v})")
            for hx in range(2 // XH):
                a(f"{i2}psx[pb{tag} + xsX{u} + {hx}] = (" + " + ".join(xe(8 * hx + c) for c in range(8)) + ")")
        for u in range(uS if scales else 0):
            a(f"{ind}if itS{u} < {NSB}:")
            a(f"{ind}    ssm[gp{tag}, olS{u}] = sv{u}")
            a(f"{ind}    bsm[gp{tag}, olS{u}] = bv{u}")

    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                a(f"    acc{i}_{j}_{c} = zero")
    load("    ", "0")
    store("    ", "0", "0", 0, "p")
    a("    cuda.syncthreads()")
    # one iteration = one quantization group = SPS stages, unrolled (the mma chain of a group stays in registers)
    a(f"    ngr = nst // {SPS}")
    a("    for gi in range(ngr):")
    I = "        "
    cur = {}
    for i in range(MT):
        for j in range(NT):
            for c in range(4):
                cur[i, j, c] = "zero"
    for k in range(SPS):
        st = f"(gi * {SPS} + {k})"
        bp = f"{k & 1}" if SPS % 2 == 0 else f"((gi + {k}) & 1)"
        bpn = f"{(k + 1) & 1}" if SPS % 2 == 0 else f"((gi + {k + 1}) & 1)"
        last = k == SPS - 1
        if last:
            a(f"{I}if gi + 1 < ngr:")
            load(I + "    ", f"({st} + 1)")
        else:
            load(I, f"({st} + 1)", scales=False)
        a(f"{I}abuf{k} = {bp} * {ASZ} + fa0")
        a(f"{I}xbuf{k} = {bp} * {XSZ} + fb0")
        for S in range(NS):
            for i in range(MT):
                a(f"{I}fa{i}_{k}{S} = lds_u32x4(As, abuf{k} + {(i * NS + S) * 128})")
            for j in range(NT):
                a(f"{I}fb{j}_{k}{S} = lds_u32x4(Xs, xbuf{k} + {(j * NS + S) * 128})")
            for h in range(2):  # all hi mma's of the k-step, then all lo's (a tile's chain order stays hi, lo)
                for i in range(MT):
                    for j in range(NT):
                        fa, fb = f"fa{i}_{k}{S}", f"fb{j}_{k}{S}"
                        ins = ", ".join(cur[i, j, c] for c in range(4))
                        outs = [f"e{i}_{j}_{c}_{k}{S}{h}" for c in range(4)]
                        a(f"{I}{', '.join(outs)} = mma_bf16({fa}[0], {fa}[1], {fa}[2], {fa}[3], {fb}[{2 * h}], "
                          f"{fb}[{2 * h + 1}], {ins})")
                        for c in range(4):
                            cur[i, j, c] = outs[c]
        if last:
            # group epilogue: acc += s * d + b * sum_x(group)
            a(f"{I}gq = gi & 1")
            a(f"{I}pq = gq * {PSZ}")
            for i in range(MT):
                for hh in range(2):
                    a(f"{I}es{i}_{hh} = ssm[gq, wo * {MT * 16} + {i * 16 + 8 * hh} + g]")
                    a(f"{I}eb{i}_{hh} = bsm[gq, wo * {MT * 16} + {i * 16 + 8 * hh} + g]")
            for j in range(NT):
                for cc in range(2):
                    rn = f"pq + (wr * {NT * 8} + {j * 8 + cc} + 2 * t) * {NSLOT}"
                    v = f"pv{j}_{cc}"
                    for q4 in range(NSLOT // 4):
                        a(f"{I}{v}_{q4} = lds_f32x4(psx, {rn} + {4 * q4})")
                    terms = [f"{v}_{sl // 4}[{sl % 4}]" for sl in range(NSLOT)]
                    a(f"{I}sx{j}_{cc} = (" + " + ".join(terms) + ")")
            for i in range(MT):
                for j in range(NT):
                    for c in range(4):
                        hh, cc = c >> 1, c & 1
                        a(f"{I}acc{i}_{j}_{c} += es{i}_{hh} * {cur[i, j, c]} + eb{i}_{hh} * sx{j}_{cc}")
            a(f"{I}if gi + 1 < ngr:")
            store(I + "    ", bpn, "(gi + 1) & 1", 0, f"q{k}")
        else:
            store(I, bpn, "gi & 1", k + 1, f"q{k}", scales=False)
        a(f"{I}cuda.syncthreads()")
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


def get_gemm_pyfunc_v2(bits: int, group: int, sk: str = "bf16", geo=None):
    geo = tuple(geo or GEO2)
    key = ("py2", bits, group, sk, geo)
    if key not in _KCACHE:
        name = f"tcgemm2_b{bits}_g{group}_{sk}_{_geo_name(geo)}"
        _KCACHE[key] = _build(name, _gen_source_v2(name, bits, group, sk, geo))
    return _KCACHE[key]


def get_gemm_kernel_v2(bits: int, group: int, sk: str = "bf16", geo=None):
    geo = tuple(geo or GEO2)
    key = ("k2", bits, group, sk, geo)
    if key not in _KCACHE:
        _KCACHE[key] = cuda.jit(get_gemm_pyfunc_v2(bits, group, sk, geo))
    return _KCACHE[key]


def impl_default() -> str:
    """The kernel generation used when ``launch_qgemm`` gets no ``impl``: ``TENSORFOLD_GEMM`` (``old`` / ``new``),
    else ``IMPL``."""
    v = os.environ.get("TENSORFOLD_GEMM", "").strip().lower()
    return v if v in ("old", "new") else IMPL


def supported(inp: int, bits: int, group: int) -> bool:
    """True when the tensor-core kernel handles the format (else launch_qgemm uses affine.launch_qgemm)."""
    return bits in _BITS and group in _GROUPS and inp % BK == 0 and inp % group == 0


def tile(geo=GEO):
    """(outputs, rows) per block."""
    NWO, NWR, MT, NT = geo
    return NWO * MT * 16, NWR * NT * 8


def launch_qgemm(W, S, B, x, y, bits: int, group: int, *, stream=0, rows=None, geo=None, impl=None):
    """y[:R] = x[:R] @ dequant(W, S, B).T (R = rows or x.shape[0]); tensor cores for bits 2/4/8 with ``in`` a
    multiple of 64, else ``affine.launch_qgemm``. ``stream`` may be a graph builder. ``impl``: ``"new"`` (the v2
    kernel for bits 4 / 8, v1 for 2 bits) or ``"old"`` (v1 for all); default ``impl_default()``. ``geo``: the
    block / warp geometry (default ``GEO2`` for v2, ``GEO`` for v1)."""
    out, inp = W.shape[0], x.shape[1]
    R = int(rows if rows is not None else x.shape[0])
    if R <= 0:
        return y
    if not supported(inp, bits, group):
        return affine.launch_qgemm(W, S, B, x, y, bits, group, stream=stream, rows=R)
    impl = impl or impl_default()
    if impl == "new" and bits in _BITS2:
        geo = tuple(geo or GEO2)
        k = get_gemm_kernel_v2(bits, group, affine._scale_kind(S), geo)
    else:
        geo = tuple(geo or GEO)
        k = get_gemm_kernel(bits, group, affine._scale_kind(S), geo)
    bo, br = tile(geo)
    tpb = 32 * geo[0] * geo[1]
    k[(-(-out // bo), -(-R // br)), tpb, stream](W, S, B, x, y, np.int32(R))
    return y


# ----------------------------------------------------------------------------------------------------------------
# compile tier
# ----------------------------------------------------------------------------------------------------------------

_G = "void(uint32[:, ::1], uint16[:, ::1], uint16[:, ::1], float32[:, ::1], float32[:, ::1], int32)"
_GF = "void(uint32[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], int32)"
_GH = "void(uint32[:, ::1], float16[:, ::1], float16[:, ::1], float32[:, ::1], float32[:, ::1], int32)"


def _specs():
    specs, hot = [], set()
    for bits in _BITS:
        for group in _GROUPS:
            f = get_gemm_pyfunc(bits, group, "bf16")
            specs.append((f, _G))
            hot.add(f.__name__)
    specs.append((get_gemm_pyfunc(4, 64, "f32"), _GF))
    specs.append((get_gemm_pyfunc(4, 64, "f16"), _GH))
    for bits in _BITS2:
        for group in _GROUPS:
            f = get_gemm_pyfunc_v2(bits, group, "bf16")
            specs.append((f, _G))
            hot.add(f.__name__)
    for sk, sig in (("f32", _GF), ("f16", _GH)):
        f = get_gemm_pyfunc_v2(4, 64, sk)
        specs.append((f, sig))
        hot.add(f.__name__)
    return specs, hot


COMPILE_SPECS, HOT = _specs()

_ = (_device,)
