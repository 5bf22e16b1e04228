"""Bulk copies global -> shared on the Hopper copy engine (``cp.async.bulk`` with an mbarrier), for kernels that
stream data through a shared ring instead of holding the next loads in registers.

Used today by ``benchmarks/bench_gemv3.py --floor-bulk`` only. Session 26 built a qgemv form on them (each warp
streaming its swept pieces through 2-8 stages) and measured it slower at every shape, 1 and 8 rows, than the
register ring (9B gate+up 24.7 -> 26.8 us at 4 stages, 27B down 26.4 -> 29.2 us; the plain floor read through
4-stage rings of 2.3 KB pieces 12.4 us against 9.9 us for register loads at 28 MB), and its GPU test failed at
three of four shapes; that form is removed (benchmarks/results/session26_2026-12-03.md).

GPU (sm_90 only; the callers choose these kernels only where ``available()``):

- ``mbar_init(bars, i, count)``: mbarrier ``bars[i]`` (a uint64 shared array) expects ``count`` arrivals a phase.
- ``mbar_fence_init()``: makes the initialised barriers visible to the copy engine (once, before the first copy).
- ``bulk_g2s(dst, di, src, si, nbytes, bars, bi)``: one thread copies ``nbytes`` (a multiple of 16; both addresses
  16-byte aligned) from word ``si`` of the C-contiguous uint32 array ``src`` (flat offset, any shape) to element ``di``
  of the 1-d shared uint32 or uint64 array ``dst``, and arrives on ``bars[bi]`` announcing those bytes (``expect_tx``): the
  barrier's phase completes when the bytes have landed.
- ``mbar_try_wait(bars, i, parity) -> uint32``: 1 once phase ``parity`` (0 / 1) of ``bars[i]`` has completed (the
  hardware suspends the thread a while before it answers 0).
- ``fence_async()``: orders this thread's earlier generic-proxy shared accesses (after a warp barrier, the warp's
  reads of a ring stage) before the copy engine's next write of that stage.

Simulator: the copy happens at issue (word by word), the barrier calls are no-ops and a wait answers 1 at once, so
a kernel's arithmetic, hence its bits, is the same as on the GPU.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ._device import IS_SIM

__all__ = ["available", "mbar_init", "mbar_fence_init", "bulk_g2s", "mbar_try_wait", "fence_async"]


_CC: list = []


def available(cc=None) -> bool:
    """Whether bulk-copy kernels can run: the simulator always, a GPU from cc 9.0 (``cc``: a target's, else the
    current device's, read once: launches ask at every call)."""
    if IS_SIM:
        return True
    if cc is None:
        if not _CC:
            try:
                _CC.append(tuple(cuda.get_current_device().compute_capability))
            except Exception:  # noqa: BLE001
                return False
        cc = _CC[0]
    return tuple(cc) >= (9, 0)


if not IS_SIM:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    from ._device import _asm_void

    _I32 = ir.IntType(32)

    def _saddr(context, builder, arrty, arr, idx, idxty):
        """32-bit shared-window address of ``arr[idx]`` (a 1-d shared array)"""
        ary = context.make_array(arrty)(context, builder, value=arr)
        i = context.cast(builder, idx, idxty, types.intp)
        p = cgutils.get_item_pointer(context, builder, arrty, ary, [i], wraparound=False)
        return builder.ptrtoint(builder.addrspacecast(p, ir.PointerType(p.type.pointee, addrspace=3)), _I32)

    def _is_bars(t):
        return isinstance(t, types.Array) and t.ndim == 1 and t.dtype == types.uint64

    def _bar_op(text, ret):
        """An intrinsic ``f(bars, i, v)``: inline PTX ``text`` on the shared address of ``bars[i]`` ($a) and the
        int32 ``v`` ($v); ``ret`` True: it yields a uint32 ($0), else nothing."""
        cons = ("=r," if ret else "") + "r,r,~{memory}"
        text = text.replace("$a", "$1" if ret else "$0").replace("$v", "$2" if ret else "$1")

        def typer(typingctx, bars, i, v):
            if not (_is_bars(bars) and isinstance(i, types.Integer) and isinstance(v, types.Integer)):
                return None
            sig = (types.uint32 if ret else types.void)(bars, i, v)

            def codegen(context, builder, sig, args):
                a = _saddr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
                c = context.cast(builder, args[2], sig.args[2], types.int32)
                asm = ir.InlineAsm(ir.FunctionType(_I32 if ret else ir.VoidType(), [_I32, _I32]), text, cons,
                                   side_effect=True)
                res = builder.call(asm, [a, c])
                return res if ret else context.get_dummy_value()

            return sig, codegen

        return intrinsic(typer)

    mbar_init = _bar_op("mbarrier.init.shared::cta.b64 [$a], $v;", False)
    mbar_try_wait = _bar_op("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$a], $v; "
                            "selp.u32 $0, 1, 0, p; }", True)
    mbar_fence_init = _asm_void("fence.mbarrier_init.release.cluster;")
    fence_async = _asm_void("fence.proxy.async.shared::cta;")

    @intrinsic
    def bulk_g2s(typingctx, dst, di, src, si, nbytes, bars, bi):
        if not (isinstance(dst, types.Array) and dst.ndim == 1 and dst.dtype in (types.uint32, types.uint64)):
            return None
        if not (isinstance(src, types.Array) and src.layout == "C" and src.dtype == types.uint32 and _is_bars(bars)):
            return None
        if not all(isinstance(v, types.Integer) for v in (di, si, nbytes, bi)):
            return None
        sig = types.void(dst, di, src, si, nbytes, bars, bi)

        def codegen(context, builder, sig, args):
            d = _saddr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            m = _saddr(context, builder, sig.args[5], args[5], args[6], sig.args[6])
            sa = context.make_array(sig.args[2])(context, builder, value=args[2])
            off = context.cast(builder, args[3], sig.args[3], types.intp)
            gp = builder.gep(sa.data, [off])
            n = context.cast(builder, args[4], sig.args[4], types.int32)
            text = ("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [$2], $3; "
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $3, [$2]; }")
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I32, gp.type, _I32, _I32]), text,
                               "r,l,r,r,~{memory}", side_effect=True)
            builder.call(asm, [d, gp, m, n])
            return context.get_dummy_value()

        return sig, codegen

else:

    @cuda.jit(device=True)
    def mbar_init(bars, i, count):
        pass

    @cuda.jit(device=True)
    def mbar_fence_init():
        pass

    fence_async = mbar_fence_init

    @cuda.jit(device=True)
    def bulk_g2s(dst, di, src, si, nbytes, bars, bi):
        flat = src.reshape(src.size)
        if dst.dtype.itemsize == 8:
            for k in range(nbytes // 8):
                dst[di + k] = np.uint64(flat[si + 2 * k]) | (np.uint64(flat[si + 2 * k + 1]) << np.uint64(32))
        else:
            for k in range(nbytes // 4):
                dst[di + k] = flat[si + k]

    @cuda.jit(device=True)
    def mbar_try_wait(bars, i, parity):
        return np.uint32(1)
