"""Tensor-core helpers: ``mma.sync`` m16n8k16 on bf16 inputs with fp32 accumulation, and bf16x2 packing.

What lives here (device functions only; simulator versions are chosen at import time like ``_device``)
- ``mma_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)``: one warp-wide
  ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``. Every lane of the warp must call it together (it is a
  warp collective). Registers are ``uint32`` holding two bf16 each (the lower 16 bits hold the element with the
  lower index) and fp32 accumulators. With ``g = lane >> 2`` and ``t = lane & 3``, the PTX fragment layout is:

  ======  ==========================================  =============================
  reg     elements (low half, high half)              matrix
  ======  ==========================================  =============================
  a0      A[g,   2t], A[g,   2t+1]                    A is 16 x 16 (M x K), row
  a1      A[g+8, 2t], A[g+8, 2t+1]
  a2      A[g,   2t+8], A[g,   2t+9]
  a3      A[g+8, 2t+8], A[g+8, 2t+9]
  b0      B[2t, g], B[2t+1, g]                        B is 16 x 8 (K x N), col
  b1      B[2t+8, g], B[2t+9, g]
  c0, c1  C[g, 2t], C[g, 2t+1]                        C, D are 16 x 8 fp32
  c2, c3  C[g+8, 2t], C[g+8, 2t+1]
  ======  ==========================================  =============================

  ``D = A @ B + C``. The K order inside one mma is the hardware's own and fixed, so a column of D depends only on
  the same column of B (and on A and C): results for one N column do not change with what the other columns hold.
  Since a dot product is invariant under a permutation of K, a kernel may map logical k to any physical positions
  as long as A and B use the same map (the map can only depend on ``t`` and the register slot).
- ``pack_bf16x2(lo, hi) -> uint32``: two fp32 rounded to bf16 (nearest even) and packed, ``lo`` in the low half
  (``cvt.rn.bf16x2.f32``).
- ``fma_bf16x2(a, b, c) -> uint32``: element-wise ``a * b + c`` on packed bf16 pairs (``fma.rn.bf16x2``); exact
  when the result is representable, e.g. turning the magic-biased code ``128 + q`` into ``q`` with ``b = 1, c = -128``.
- ``split_bf16x2(x0, x1) -> (hi, lo)``: the pair ``(x0, x1)`` as a packed bf16 "high" part plus a packed bf16
  residual, ``x ~= hi + lo`` to about 2^-17 relative. Two mma's (one on ``hi``, one on ``lo``) then give an fp32 x
  times exact integer codes to about fp32 accuracy, since ``q * bf16`` products are exact in fp32.

Simulator: ``mma_bf16`` publishes each lane's registers through a block-wide shared buffer, ``syncthreads()``, and
every lane computes its D elements in float64 from the decoded bf16 values, rounded once to fp32 (the hardware
accumulates in fp32 in its own order: a GPU-vs-simulator difference of about 1e-7 relative, within every test's
tolerance). Like the simulated warp reductions it is a block barrier there: call it from block-uniform control
flow with blocks whose size is a multiple of 32.

Requires sm_80 or later (bf16 mma, cvt to bf16x2, fma.bf16x2). Reference: PTX ISA "Matrix fragments for
mma.m16n8k16 with floating point type".
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ._device import IS_SIM, bf16_to_f32, devfn, f32_to_bf16

__all__ = ["mma_bf16", "pack_bf16x2", "fma_bf16x2", "split_bf16x2", "COMPILE_SPECS", "HOT"]


if not IS_SIM:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    _F32 = ir.FloatType()
    _I32 = ir.IntType(32)

    @intrinsic
    def mma_bf16(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        for v in (a0, a1, a2, a3, b0, b1):
            if not isinstance(v, types.Integer):
                return None
        for v in (c0, c1, c2, c3):
            if not isinstance(v, types.Float):
                return None
        sig = types.UniTuple(types.float32, 4)(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

        def codegen(context, builder, sig, args):
            regs = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[:6], sig.args[:6])]
            accs = [context.cast(builder, v, t, types.float32) for v, t in zip(args[6:], sig.args[6:])]
            st = ir.LiteralStructType([_F32] * 4)
            fnty = ir.FunctionType(st, [_I32] * 6 + [_F32] * 4)
            asm = ir.InlineAsm(
                fnty,
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
            )
            res = builder.call(asm, regs + accs)
            vals = [builder.extract_value(res, k) for k in range(4)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

    @intrinsic
    def pack_bf16x2(typingctx, lo, hi):
        if not (isinstance(lo, types.Float) and isinstance(hi, types.Float)):
            return None
        sig = types.uint32(lo, hi)

        def codegen(context, builder, sig, args):
            l = context.cast(builder, args[0], sig.args[0], types.float32)
            h = context.cast(builder, args[1], sig.args[1], types.float32)
            # cvt.rn.bf16x2.f32 d, a, b: a goes to the upper half, b to the lower half
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_F32, _F32]), "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f")
            return builder.call(asm, [h, l])

        return sig, codegen

    @intrinsic
    def fma_bf16x2(typingctx, a, b, c):
        for v in (a, b, c):
            if not isinstance(v, types.Integer):
                return None
        sig = types.uint32(a, b, c)

        def codegen(context, builder, sig, args):
            regs = [context.cast(builder, v, t, types.uint32) for v, t in zip(args, sig.args)]
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32] * 3), "fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r")
            return builder.call(asm, regs)

        return sig, codegen

else:

    def _sim_tid():
        return cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)

    def _pair(u):
        u = int(u) & 0xFFFFFFFF
        lo = np.uint32((u & 0xFFFF) << 16).view(np.float32)
        hi = np.uint32((u >> 16) << 16).view(np.float32)
        return float(lo), float(hi)

    # where each lane's register halves land: A (16 x 16) from a0..a3, B (16 x 8) from b0, b1; index [lane, reg,
    # half] into the flattened matrices (the fragment table in the module docstring)
    def _fragment_index():
        ia = np.zeros((32, 4, 2), np.intp)
        ib = np.zeros((32, 2, 2), np.intp)
        for ln in range(32):
            g, t = ln >> 2, ln & 3
            for h in range(2):
                ia[ln, 0, h] = g * 16 + 2 * t + h
                ia[ln, 1, h] = (g + 8) * 16 + 2 * t + h
                ia[ln, 2, h] = g * 16 + 2 * t + 8 + h
                ia[ln, 3, h] = (g + 8) * 16 + 2 * t + 8 + h
                ib[ln, 0, h] = (2 * t + h) * 8 + g
                ib[ln, 1, h] = (2 * t + 8 + h) * 8 + g
        return ia.reshape(-1), ib.reshape(-1)

    _IA, _IB = _fragment_index()

    @cuda.jit(device=True)
    def mma_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        buf = cuda.shared.array(1024, np.object_)
        tid = _sim_tid()
        buf[tid] = (a0, a1, a2, a3, b0, b1)
        cuda.syncthreads()
        base = tid - (tid % 32)
        lanes = [buf[base + j] for j in range(32)]
        cuda.syncthreads()
        # every lane decodes the whole warp's registers (vectorised): [lane, reg] uint32 -> (low, high) bf16 halves
        # as fp32 -> float64, scattered into A and B by the fragment layout
        R = np.array([[int(v) & 0xFFFFFFFF for v in regs] for regs in lanes], np.uint32)
        halves = np.stack([R << np.uint32(16), (R >> np.uint32(16)) << np.uint32(16)], axis=-1)
        with np.errstate(invalid="ignore"):  # signalling-NaN codes: quieted silently, as float() does
            vals = halves.view(np.float32).astype(np.float64)  # [lane, reg, half]
        A = np.zeros((16, 16))
        Bm = np.zeros((16, 8))
        A.reshape(-1)[_IA] = vals[:, :4].reshape(-1)
        Bm.reshape(-1)[_IB] = vals[:, 4:].reshape(-1)
        lane = tid % 32
        g, t = lane >> 2, lane & 3
        D = A @ Bm
        return (np.float32(D[g, 2 * t] + float(c0)), np.float32(D[g, 2 * t + 1] + float(c1)),
                np.float32(D[g + 8, 2 * t] + float(c2)), np.float32(D[g + 8, 2 * t + 1] + float(c3)))

    @cuda.jit(device=True)
    def pack_bf16x2(lo, hi):
        return np.uint32(np.uint32(f32_to_bf16(hi)) << np.uint32(16) | np.uint32(f32_to_bf16(lo)))

    @cuda.jit(device=True)
    def fma_bf16x2(a, b, c):
        al, ah = _pair(a)
        bl, bh = _pair(b)
        cl, ch = _pair(c)
        lo = f32_to_bf16(np.float32(al * bl + cl))  # one rounding of the exact product-sum (as the hardware)
        hi = f32_to_bf16(np.float32(ah * bh + ch))
        return np.uint32(np.uint32(hi) << np.uint32(16) | np.uint32(lo))


@devfn
def split_bf16x2(x0, x1):
    hi = pack_bf16x2(x0, x1)
    r0 = np.float32(x0) - bf16_to_f32(np.uint16(hi & np.uint32(0xFFFF)))
    r1 = np.float32(x1) - bf16_to_f32(np.uint16(hi >> np.uint32(16)))
    return hi, pack_bf16x2(r0, r1)


# ----------------------------------------------------------------------------------------------------------------
# a probe kernel: one warp multiplies a 16x16 bf16 tile by a 16x8 tile (tests and the compile tier)
# ----------------------------------------------------------------------------------------------------------------


def _probe_mma(A, Bt, C, D, X, HL):
    """A uint16 [16, 16] bf16 bits, Bt uint16 [8, 16] (B transposed), C/D float32 [16, 8]; X float32 [64] split
    into HL uint32 [64] (hi, lo pairs of X[2i], X[2i+1] at HL[2i], HL[2i+1])."""
    lane = cuda.threadIdx.x
    g = lane >> 2
    t = lane & 3
    a0 = np.uint32(A[g, 2 * t]) | (np.uint32(A[g, 2 * t + 1]) << np.uint32(16))
    a1 = np.uint32(A[g + 8, 2 * t]) | (np.uint32(A[g + 8, 2 * t + 1]) << np.uint32(16))
    a2 = np.uint32(A[g, 2 * t + 8]) | (np.uint32(A[g, 2 * t + 9]) << np.uint32(16))
    a3 = np.uint32(A[g + 8, 2 * t + 8]) | (np.uint32(A[g + 8, 2 * t + 9]) << np.uint32(16))
    b0 = np.uint32(Bt[g, 2 * t]) | (np.uint32(Bt[g, 2 * t + 1]) << np.uint32(16))
    b1 = np.uint32(Bt[g, 2 * t + 8]) | (np.uint32(Bt[g, 2 * t + 9]) << np.uint32(16))
    d0, d1, d2, d3 = mma_bf16(a0, a1, a2, a3, b0, b1, C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t],
                              C[g + 8, 2 * t + 1])
    D[g, 2 * t] = d0
    D[g, 2 * t + 1] = d1
    D[g + 8, 2 * t] = d2
    D[g + 8, 2 * t + 1] = d3
    hi, lo = split_bf16x2(X[2 * lane], X[2 * lane + 1])
    one = np.uint32(0x3F803F80)
    HL[2 * lane] = fma_bf16x2(hi, one, np.uint32(0))
    HL[2 * lane + 1] = lo


COMPILE_SPECS = [
    (_probe_mma, "void(uint16[:, ::1], uint16[:, ::1], float32[:, ::1], float32[:, ::1], float32[::1], uint32[::1])"),
]
HOT: set = set()
