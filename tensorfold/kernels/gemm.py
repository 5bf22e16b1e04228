"""Tensor-core prompt GEMM for MLX affine-quantized weights (bits 2, 4, 8; groups 32, 64, 128).

Owns
- ``launch_qgemm(W, S, B, x, y, bits, group, *, stream=0, rows=None)``: ``y[r, o] = sum_i x[r, i] * (s[o, g] *
  q[o, i] + b[o, g])``, the same contract as ``affine.launch_qgemm`` (W uint32 ``[out, in*bits/32]`` MLX packing,
  S / B ``[out, in/group]`` as bf16 bits (uint16), float16 or float32, x float32 ``[R, in]``, y float32
  ``[R, out]``). Formats this kernel does not cover (bits 3/5/6, ``in`` not a multiple of 64, other groups) are
  passed on to ``affine.launch_qgemm`` (fp32 FMA).
- ``get_gemm_pyfunc`` / ``get_gemm_kernel``: the generated kernels (one per bits x group x scale dtype x geometry).

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

Simulator: ``mma_bf16`` is a block barrier there (see ``_mma``); every thread runs the same compute loop, so the
kernel is block-uniform. Keep simulated shapes tiny.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import _device, affine
from ._device import IS_SIM, bf16_to_f32, ldg_f32x4_2d, ldg_u32x4_2d
from ._mma import fma_bf16x2, mma_bf16, pack_bf16x2, split_bf16x2

__all__ = ["launch_qgemm", "get_gemm_kernel", "get_gemm_pyfunc", "supported", "GEO", "COMPILE_SPECS", "HOT"]

BK = 64  # codes of K per stage (4 mma k-steps)
GEO = (4, 2, 2, 4)  # NWO warps along out, NWR warps along rows, MT m16 tiles / warp, NT n8 tiles / warp
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


def supported(inp: int, bits: int, group: int) -> bool:
    """True when the tensor-core kernel handles the format (else launch_qgemm uses affine.launch_qgemm)."""
    return bits in _BITS and group in _GROUPS and inp % BK == 0 and inp % group == 0


def tile(geo=GEO):
    """(outputs, rows) per block."""
    NWO, NWR, MT, NT = geo
    return NWO * MT * 16, NWR * NT * 8


def launch_qgemm(W, S, B, x, y, bits: int, group: int, *, stream=0, rows=None, geo=GEO):
    """y[:R] = x[:R] @ dequant(W, S, B).T (R = rows or x.shape[0]); tensor cores for bits 2/4/8 with ``in`` a
    multiple of 64, else ``affine.launch_qgemm``. ``stream`` may be a graph builder."""
    out, inp = W.shape[0], x.shape[1]
    R = int(rows if rows is not None else x.shape[0])
    if R <= 0:
        return y
    if not supported(inp, bits, group):
        return affine.launch_qgemm(W, S, B, x, y, bits, group, stream=stream, rows=R)
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
    return specs, hot


COMPILE_SPECS, HOT = _specs()

_ = (_device,)
