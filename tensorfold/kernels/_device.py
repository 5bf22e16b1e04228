"""Device helpers shared by every kernel module (issue 3, part A owns this file).

What lives here
- ``IS_SIM``: True when numba's CUDA simulator is active (``NUMBA_ENABLE_CUDASIM=1`` before numba is imported).
- ``devfn``: the decorator for small device helpers (``cuda.jit(device=True, forceinline=True)`` on the GPU,
  ``cuda.jit(device=True)`` in the simulator, which knows no ``forceinline``).
- Warp reductions ``warp_sum(v)``, ``warp_max(v)``, ``warp_min(v)``: xor-butterfly over the 32 lanes with
  ``shfl_xor_sync`` on the GPU (every lane gets the same result; offsets 16, 8, 4, 2, 1). The simulator has no
  shuffles: its versions write the lane values to a block-wide shared buffer, ``syncthreads()``, replay the same
  butterfly in Python on the lane values (same order, so the same rounding), ``syncthreads()`` again.
  **Simulator rule:** there the warp helpers are block barriers, so call them from block-uniform control flow
  (every live thread of the block reaches the call; threads that already returned are fine) and use blocks whose
  size is a multiple of 32. Kernels written that way behave the same on both.
- ``warp_sum_i`` / ``warp_argmax``: the same for int32 sums and (value, index) argmax with lowest index on ties.
- bf16: the package stores bf16 as ``uint16`` raw bits (see ``tensorfold.model.bf16``) in host and device arrays.
  ``bf16_to_f32(u16) -> float32`` (exact) and ``f32_to_bf16(f) -> uint16`` (round to nearest even, NaN stays a
  quiet NaN) are integer bit manipulation, identical on the GPU and in the simulator.
- e4m3 (OCP FP8 E4M3FN, bias 7, max 448, 0x7F/0xFF = NaN, no infinities): ``f32_to_e4m3(f) -> uint8`` (round to
  nearest even, saturates to +-448 for finite and infinite overflow, NaN -> 0x7F) and ``e4m3_to_f32(u8)``; integer
  bit manipulation, identical on the GPU and in the simulator. The numpy twins live in ``tensorfold.reference.kv8``.
- ``ldg_u32x4(arr, i) -> (u0, u1, u2, u3)``: one 16-byte ``ld.global.nc.v4.u32`` of ``arr[i:i+4]`` (arr a 1-d
  uint32 device array; ``i`` a multiple of 4 and the array's base 16-byte aligned: device allocations are 256-byte
  aligned, so row starts of C-contiguous arrays whose row length in words is a multiple of 4 qualify).
  ``ldg_u32x4_2d(arr, r, i)`` does the same on a row of a 2-d C-contiguous array (both for weights);
  ``ldg_f32x4_2d(arr, r, i)`` the same for float32 activations with a coherent ``ld.global.v4.f32``. Simulator: four
  plain loads.
- For other modules' load intrinsics (GPU only): ``asm_vec_load(builder, ptr, n, "f32" | "u32", nc)`` emits the one
  vector load every module uses (affine's flat loads, attention's q / cache / partial loads, the prompt GEMM's x
  sums), so the rule below lives in one place; ``item_ptr`` is the pointer to ``arr[idx...]`` in a codegen.
- **No ``.nc`` load of anything a kernel writes** (activations, caches, logits, partial sums): ``ld.global.nc``
  promises the data is read-only for the kernel's whole lifetime, and under programmatic dependent launch
  (``kernels._pdl``) a kernel's lifetime overlaps its predecessor's writes, so ptxas may schedule such a load above
  ``griddepcontrol.wait``. Session 33 (H200): the 2B LM head (``qgemv3 ..._sw_xh``, whose x addresses depend only on
  its parameters) read stale x in the verify graphs, whose head directly follows the final RMSNorm; its x loads
  were ``.nc``. Weights (never written by a kernel) keep ``.nc``.

Reference mirrored: ``tensorfold.model.bf16`` (bf16), ``tensorfold.reference.kv8`` (e4m3).
No launch geometry of its own (device functions only).
"""

from __future__ import annotations

import math
import os

import numpy as np
from numba import cuda

__all__ = [
    "IS_SIM",
    "lds4",
    "FULL_MASK",
    "devfn",
    "warp_sum",
    "quad_sum",
    "warp_max",
    "warp_min",
    "warp_sum_i",
    "warp_argmax",
    "bf16_to_f32",
    "f32_to_bf16",
    "f32_to_e4m3",
    "e4m3_to_f32",
    "ldg_u32x4",
    "ldg_u32x4_2d",
    "ldg_f32x4_2d",
    "pdl_wait",
    "pdl_trigger",
    "pdl_begin",
    "gemv_trigger_here",
    "pdl_target",
    "pdl_trigger_mode",
    "COMPILE_SPECS",
    "HOT",
]


def _sim_active() -> bool:
    try:
        from numba.cuda import config as _cfg  # numba-cuda >= 0.2x

        return bool(getattr(_cfg, "ENABLE_CUDASIM", False))
    except Exception:  # pragma: no cover - very old layouts
        return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


IS_SIM: bool = _sim_active()

if not IS_SIM:  # numba's front end, faster on big generated kernels (same IR; _fastlive says how and why)
    from . import _fastlive

    _fastlive.install()

FULL_MASK = 0xFFFFFFFF

if IS_SIM:

    def devfn(fn):
        return cuda.jit(device=True)(fn)

else:

    def devfn(fn):
        return cuda.jit(device=True, forceinline=True)(fn)


# ----------------------------------------------------------------------------------------------------------------
# compile-time fix: numba-cuda 0.30.4's Lower._find_singly_assigned_variable is O(variables x block length) (it
# rescans the whole block for every variable); our generated, fully unrolled GEMV kernels have thousands of
# variables in one block, which made one kernel take 20 s to 260 s to lower. This is the same computation in one
# pass over each block (same result set), installed once when the real compiler is in use.
# ----------------------------------------------------------------------------------------------------------------


def _install_fast_singly_assigned():
    try:
        from collections import defaultdict

        from numba.cuda import lowering as _low
        from numba.cuda.core import ir as _ir
        from numba.cuda.core.analysis import compute_use_defs, must_use_alloca
    except Exception:  # pragma: no cover - other numba-cuda layouts: keep theirs
        return False
    Lower = getattr(_low, "Lower", None)
    if Lower is None or not hasattr(Lower, "_find_singly_assigned_variable"):
        return False
    if getattr(Lower, "_tf_fast_sav", False):
        return True

    def _find_singly_assigned_variable(self):
        func_ir = self.func_ir
        blocks = func_ir.blocks
        sav = set()
        if not func_ir.func_id.is_generator:
            use_defs = compute_use_defs(blocks)
            alloca_vars = must_use_alloca(blocks)
            var_assign_map = defaultdict(set)
            for blk, vl in use_defs.defmap.items():
                for var in vl:
                    var_assign_map[var].add(blk)
            var_use_map = defaultdict(set)
            for blk, vl in use_defs.usemap.items():
                for var in vl:
                    var_use_map[var].add(blk)
            counts: dict = {}
            for label, block in self.blocks.items():
                for stmt in block.find_insts(_ir.assign_types):
                    key = (label, stmt.target.name)
                    counts[key] = counts.get(key, 0) + 1
            for var in var_assign_map:
                if var not in alloca_vars and len(var_assign_map[var]) == 1:
                    if len(var_use_map[var]) == 0:
                        [defblk] = var_assign_map[var]
                        if counts.get((defblk, var), 0) == 1:
                            sav.add(var)
        self._singly_assigned_vars = sav
        self._blk_local_varmap = {}

    Lower._find_singly_assigned_variable = _find_singly_assigned_variable
    Lower._tf_fast_sav = True
    return True


if not IS_SIM:
    _install_fast_singly_assigned()


# ----------------------------------------------------------------------------------------------------------------
# simulator fix: numba-cuda's FakeCUDAShared.array looks up / creates a block's shared array per call site without
# a lock, so two simulated threads reaching a `cuda.shared.array(...)` first at the same time can each create one
# and then write to different arrays (seen as rare flaky results). Serialise the lookup-or-create.
# ----------------------------------------------------------------------------------------------------------------


def _install_sim_shared_lock():
    try:
        import sys
        import threading

        from numba.cuda.simulator import kernelapi as _ka
    except Exception:  # pragma: no cover
        return False
    cls = getattr(_ka, "FakeCUDAShared", None)
    if cls is None or getattr(cls, "_tf_locked", False):
        return cls is not None
    orig = cls.array
    lock = threading.RLock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0:
            return orig(self, shape, dtype, alignment)
        # the caller's (file, line), the key numba's version takes from traceback.extract_stack(...)[-2][0:2];
        # read from the frame directly (extract_stack stats every file on the stack through linecache, which
        # dominated simulator time for kernels calling device functions with shared buffers in a loop)
        f = sys._getframe(1)
        caller = (f.f_code.co_filename, f.f_lineno)
        res = self._allocations.get(caller)  # found: a plain dict read (atomic under the GIL)
        if res is not None:
            return res
        with lock:
            res = self._allocations.get(caller)
            if res is None:
                if isinstance(dtype, type) or isinstance(dtype, np.dtype) or isinstance(dtype, str):
                    res = np.empty(shape, dtype)
                else:
                    from numba.cuda.np import numpy_support

                    res = np.empty(shape, numpy_support.as_dtype(dtype))
                self._allocations[caller] = res
        return res

    cls.array = array
    cls._tf_locked = True
    return True


# ----------------------------------------------------------------------------------------------------------------
# simulator speed: numba-cuda's BlockManager.run starts one new OS thread per simulated thread of every block (about
# 80 us each) and waits for them by polling in a busy Python loop (every live thread's flags, is_alive(), a rebuilt
# set per pass), which competes for the GIL with the simulated threads. Same semantics, cheaper: simulated threads
# run on a pool of reused worker threads (each one a BlockThread: threadIdx / blockIdx / syncthreads as before, set
# per block), and the barrier is one condition variable. A block's threads all start before any barrier can release;
# `syncthreads()` releases when every thread of the block still running has reached it (threads that returned do
# not count, as in numba's version); the first thread to raise aborts the others (their pending and later barriers
# raise) and its exception is re-raised. Blocks still run one at a time; debug launches keep numba's own threads.
# ----------------------------------------------------------------------------------------------------------------


def _install_sim_block_barrier():
    try:
        import threading

        from numba.cuda.simulator import kernel as _k
        from numba.cuda.simulator.kernelapi import Dim3
    except Exception:  # pragma: no cover
        return False
    BM = getattr(_k, "BlockManager", None)
    BT = getattr(_k, "BlockThread", None)
    if BM is None or BT is None or not hasattr(BT, "syncthreads"):
        return False
    if getattr(BM, "_tf_barrier", False):
        return True
    thread_run = BT.run  # runs self._target, stores an exception (with tid/ctaid in its message) in self.exception
    orig_block_run = BM.run
    free: list = []  # idle workers
    free_lock = threading.Lock()

    def _release(m):  # holding m._tf_cond
        m._tf_blocked = 0
        m._tf_gen += 1
        m._tf_cond.notify_all()

    def _finish(m, exc):
        with m._tf_cond:
            m._tf_live -= 1
            if exc is not None and m._tf_failed is None:
                m._tf_failed = exc
            if m._tf_blocked and m._tf_blocked == m._tf_live:
                _release(m)
            m._tf_cond.notify_all()

    class _Worker(BT):
        def __init__(self):
            threading.Thread.__init__(self, daemon=True)
            self._tf_wake = threading.Event()
            self._tf_job = None
            self._manager = None
            self.debug = False
            self.abort = False
            self.exception = None

        def run(self):
            while True:
                self._tf_wake.wait()
                self._tf_wake.clear()
                m, target, grid_point, block_point = self._tf_job
                self._tf_job = None
                self.blockIdx = Dim3(*grid_point)
                self.threadIdx = Dim3(*block_point)
                bd = Dim3(*m._block_dim)
                self.thread_id = self.threadIdx.x + bd.x * (self.threadIdx.y + bd.y * self.threadIdx.z)
                self.exception = None
                with m._tf_cond:  # against run_block's abort of this block
                    self._manager = m
                    self.abort = m._tf_aborted
                self._target, self._args, self._kwargs = target, (), {}
                try:
                    thread_run(self)
                finally:
                    exc = self.exception  # read before the worker can be handed another job
                    with free_lock:  # back in the pool before the block can complete: the next block reuses it
                        free.append(self)
                    _finish(m, exc)

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            m = self._manager
            with m._tf_cond:
                gen = m._tf_gen
                m._tf_blocked += 1
                if m._tf_blocked == m._tf_live:
                    _release(m)
                else:
                    while m._tf_gen == gen and not self.abort:
                        m._tf_cond.wait()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    def run_block(self, grid_point, *args):
        if self._debug:
            return orig_block_run(self, grid_point, *args)
        self._tf_cond = threading.Condition(threading.Lock())
        self._tf_blocked = 0
        self._tf_gen = 0
        self._tf_failed = None
        self._tf_aborted = False
        points = list(np.ndindex(*self._block_dim))

        def target():
            self._f(*args)

        with free_lock:
            take = min(len(free), len(points))
            workers = [free.pop() for _ in range(take)]
        new = [_Worker() for _ in range(len(points) - len(workers))]
        workers += new
        self._tf_live = len(points)
        for w, bp in zip(workers, points):
            w._tf_job = (self, target, grid_point, bp)
        for w in new:
            w.start()
        for w in workers:
            w._tf_wake.set()
        with self._tf_cond:
            while self._tf_live > 0 and self._tf_failed is None:
                self._tf_cond.wait()
            failed = self._tf_failed
            if failed is not None:
                self._tf_aborted = True
                for w in workers:
                    if w._manager is self:  # started on this block (later starters take _tf_aborted)
                        w.abort = True
                self._tf_cond.notify_all()
        if failed is not None:
            raise failed[0].with_traceback(failed[1])

    BM.run = run_block
    BM._tf_barrier = True
    return True


if IS_SIM:
    _install_sim_shared_lock()
    _install_sim_block_barrier()


# ----------------------------------------------------------------------------------------------------------------
# warp reductions
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:

    @devfn
    def warp_sum(v):
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 16)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 8)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 4)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 2)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 1)
        return v

    @devfn
    def warp_sum_i(v):
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 16)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 8)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 4)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 2)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 1)
        return v

    @devfn
    def quad_sum(v):
        """Sum over the 4 lanes ``4 j .. 4 j + 3`` (every lane of the quad gets it): (v0 + v1) + (v2 + v3)."""
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 1)
        v = v + cuda.shfl_xor_sync(FULL_MASK, v, 2)
        return v

    @devfn
    def warp_max(v):
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, 16))
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, 8))
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, 4))
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, 2))
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, 1))
        return v

    @devfn
    def warp_min(v):
        v = min(v, cuda.shfl_xor_sync(FULL_MASK, v, 16))
        v = min(v, cuda.shfl_xor_sync(FULL_MASK, v, 8))
        v = min(v, cuda.shfl_xor_sync(FULL_MASK, v, 4))
        v = min(v, cuda.shfl_xor_sync(FULL_MASK, v, 2))
        v = min(v, cuda.shfl_xor_sync(FULL_MASK, v, 1))
        return v

    @devfn
    def warp_argmax(v, idx):
        """Max value and its index over the warp; ties -> lowest index. NaN values must be masked by the caller."""
        off = 16
        while off > 0:
            ov = cuda.shfl_xor_sync(FULL_MASK, v, off)
            oi = cuda.shfl_xor_sync(FULL_MASK, idx, off)
            if ov > v or (ov == v and oi < idx):
                v = ov
                idx = oi
            off >>= 1
        return v, idx

else:

    def _sim_tid():
        return cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)

    def _sim_butterfly(vals, lane, op, offs=(16, 8, 4, 2, 1)):
        # same pairing and order as the shfl_xor chain above (over len(vals) lanes)
        for off in offs:
            vals = [op(vals[i], vals[i ^ off]) for i in range(len(vals))]
        return vals[lane]

    def _add(a, b):
        return a + b

    def _max(a, b):
        return max(a, b)

    def _min(a, b):
        return min(a, b)

    def _make_sim_reduce(op, width=32, offs=(16, 8, 4, 2, 1)):
        def red(v):
            buf = cuda.shared.array(1024, np.object_)
            tid = _sim_tid()
            buf[tid] = v
            cuda.syncthreads()
            base = tid - (tid % width)
            out = _sim_butterfly(list(buf[base : base + width]), tid % width, op, offs)
            cuda.syncthreads()
            return out

        return red

    quad_sum = cuda.jit(device=True)(_make_sim_reduce(_add, 4, (1, 2)))
    warp_sum = cuda.jit(device=True)(_make_sim_reduce(_add))
    warp_sum_i = cuda.jit(device=True)(_make_sim_reduce(_add))
    warp_max = cuda.jit(device=True)(_make_sim_reduce(_max))
    warp_min = cuda.jit(device=True)(_make_sim_reduce(_min))

    def _argmax_op(a, b):
        if b[0] > a[0] or (b[0] == a[0] and b[1] < a[1]):
            return b
        return a

    _warp_argmax_pair = _make_sim_reduce(_argmax_op)

    @cuda.jit(device=True)
    def warp_argmax(v, idx):
        return _warp_argmax_pair((v, idx))


# ----------------------------------------------------------------------------------------------------------------
# bf16 <-> f32 (uint16 storage)
# ----------------------------------------------------------------------------------------------------------------


def env_choice(name, default: str, choices, what: str) -> str:
    """A kernel switch: the environment variable ``name`` (stripped; unset or empty: ``default``; ``name`` None: just
    ``default``, checked), which must be one of ``choices`` (a ValueError naming ``what`` and the variable
    otherwise). Read at each call, so a launch follows the environment of the moment."""
    v = ((os.environ.get(name) if name else None) or default).strip()
    if v not in choices:
        raise ValueError(f"{what}: {name or 'value'} {v!r} not one of {', '.join(choices)}")
    return v


@devfn
def bf16_to_f32(u):
    return np.uint32(np.uint32(u) << np.uint32(16)).view(np.float32)


@devfn
def f32_to_bf16(f):
    b = np.float32(f).view(np.uint32)
    if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):  # NaN: keep sign + top bits, force quiet
        return np.uint16((b >> np.uint32(16)) | np.uint32(0x0040))
    lsb = (b >> np.uint32(16)) & np.uint32(1)
    return np.uint16((b + np.uint32(0x7FFF) + lsb) >> np.uint32(16))


# ----------------------------------------------------------------------------------------------------------------
# e4m3 (FP8 E4M3FN) <-> f32
# ----------------------------------------------------------------------------------------------------------------


@devfn
def f32_to_e4m3(f):
    b = np.float32(f).view(np.uint32)
    sign = np.uint32((b >> np.uint32(24)) & np.uint32(0x80))
    a = b & np.uint32(0x7FFFFFFF)
    if a > np.uint32(0x7F800000):
        return np.uint8(0x7F)
    if a >= np.uint32(0x43E00000):  # |f| >= 448 (incl. inf): saturate
        return np.uint8(sign | np.uint32(0x7E))
    if a >= np.uint32(0x3C800000):  # |f| >= 2^-6: normal e4m3
        r = (a + np.uint32(0x7FFFF) + ((a >> np.uint32(20)) & np.uint32(1))) >> np.uint32(20)
        return np.uint8(sign | (r - np.uint32(960)))
    e = np.int32(a >> np.uint32(23))  # biased f32 exponent, <= 120 here
    if e == 0:
        return np.uint8(sign)  # f32 subnormal: far below the e4m3 grid
    s = np.int32(141) - e  # 14 - (e - 127): shift that turns the 24-bit significand into units of 2^-9
    if s >= 26:
        return np.uint8(sign)
    m = (a & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
    q = m >> np.uint32(s)
    rem = m & ((np.uint32(1) << np.uint32(s)) - np.uint32(1))
    half = np.uint32(1) << np.uint32(s - 1)
    if rem > half or (rem == half and (q & np.uint32(1)) == np.uint32(1)):
        q = q + np.uint32(1)
    return np.uint8(sign | q)


@devfn
def e4m3_to_f32(u):
    v = np.uint32(u)
    sign = (v & np.uint32(0x80)) << np.uint32(24)
    e = (v >> np.uint32(3)) & np.uint32(0xF)
    m = v & np.uint32(7)
    if e == np.uint32(0xF) and m == np.uint32(7):
        return np.uint32(0x7FC00000 | sign).view(np.float32)
    if e == np.uint32(0):
        mag = np.float32(m) * np.float32(0.001953125)  # m * 2^-9, exact
        if sign != np.uint32(0):
            return -mag
        return mag
    return np.uint32(sign | ((e + np.uint32(120)) << np.uint32(23)) | (m << np.uint32(20))).view(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# 16-byte loads
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    def item_ptr(context, builder, arrty, arr, idx_types, idx_vals):
        """The LLVM pointer to ``arr[idx...]`` (no wraparound, no bounds check) inside an intrinsic's codegen."""
        idxs = [context.cast(builder, v, t, types.intp) for v, t in zip(idx_vals, idx_types)]
        ary = context.make_array(arrty)(context, builder, value=arr)
        return cgutils.get_item_pointer(context, builder, arrty, ary, idxs, wraparound=False)

    def asm_vec_load(builder, ptr, n, ptx_type, nc):
        """One vector load ``ld.global[.nc].v{n}.{ptx_type}`` (``f32`` or ``u32``) at ``ptr`` -> n LLVM values.
        The one builder for every kernel module's vector loads, so that the PDL rule is applied in one place:
        ``nc=True`` only for weights (nothing writes them while a kernel runs). ``nc=False`` is a coherent load,
        marked side-effecting so that LLVM keeps it after ``griddepcontrol.wait`` (ptxas may issue a ``.nc`` load
        before the wait, session 33)."""
        reg, lt = ("f", ir.FloatType()) if ptx_type == "f32" else ("r", ir.IntType(32))
        regs = ", ".join(f"${k}" for k in range(n))
        asm = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([lt] * n), [ptr.type]),
                           f"ld.global{'.nc' if nc else ''}.v{n}.{ptx_type} {{{regs}}}, [${n}];",
                           ",".join([f"={reg}"] * n) + ",l", side_effect=not nc)
        res = builder.call(asm, [ptr])
        return [builder.extract_value(res, k) for k in range(n)]

    def _make_ldg_v4(ndim, elt, ptx_type, nc=True):
        """An intrinsic ``f(arr, *idx) -> 4-tuple``: one 16-byte ``ld.global.nc.v4`` (``nc=False``: a coherent
        ``ld.global.v4``, kept in program order by LLVM) of ``arr[idx..., i:i+4]`` for a C-contiguous ``ndim``-d
        array of ``elt`` (the last index a multiple of 4, the address 16-byte aligned)."""

        def typer(typingctx, arr, *idx):
            if not (isinstance(arr, types.Array) and arr.ndim == ndim and arr.dtype == elt):
                return None
            if len(idx) != ndim or not all(isinstance(t, types.Integer) for t in idx):
                return None
            sig = types.UniTuple(elt, 4)(arr, *idx)

            def codegen(context, builder, sig, args):
                ptr = item_ptr(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
                return context.make_tuple(builder, sig.return_type, asm_vec_load(builder, ptr, 4, ptx_type, nc))

            return sig, codegen

        return typer

    def _ldg_u32x4_1(typingctx, arr, i):
        return _make_ldg_v4(1, types.uint32, "u32")(typingctx, arr, i)

    def _ldg_u32x4_2(typingctx, arr, r, i):
        return _make_ldg_v4(2, types.uint32, "u32")(typingctx, arr, r, i)

    def _ldg_f32x4_2(typingctx, arr, r, i):
        return _make_ldg_v4(2, types.float32, "f32", nc=False)(typingctx, arr, r, i)

    # numba's @intrinsic reads the typer's parameter names, hence the fixed-arity wrappers above
    ldg_u32x4 = intrinsic(_ldg_u32x4_1)
    ldg_u32x4_2d = intrinsic(_ldg_u32x4_2)
    ldg_f32x4_2d = intrinsic(_ldg_f32x4_2)

    @intrinsic
    def lds4(typingctx, arr, i):
        """``(arr[i], .., arr[i + 3])`` of a 1-d float32 array with one 16-byte vector load (an LLVM ``<4 x float>``
        load, align 16: the caller's array, e.g. a shared array made with ``alignment=16``, and ``i % 4 == 0``).
        An ordinary load: LLVM keeps it after the block barriers before it."""
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.float32
                and isinstance(i, types.Integer)):
            return None
        sig = types.UniTuple(types.float32, 4)(arr, i)

        def codegen(context, builder, sig, args):
            ptr = item_ptr(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
            vty = ir.VectorType(ir.FloatType(), 4)
            v = builder.load(builder.bitcast(ptr, vty.as_pointer(ptr.type.addrspace)), align=16)
            vals = [builder.extract_element(v, ir.Constant(ir.IntType(32), k)) for k in range(4)]
            return context.make_tuple(builder, sig.return_type, vals)

        return sig, codegen

else:

    @cuda.jit(device=True)
    def lds4(arr, i):
        return (arr[i], arr[i + 1], arr[i + 2], arr[i + 3])

    @cuda.jit(device=True)
    def ldg_f32x4_2d(arr, r, i):
        return (arr[r, i], arr[r, i + 1], arr[r, i + 2], arr[r, i + 3])

    @cuda.jit(device=True)
    def ldg_u32x4(arr, i):
        return (arr[i], arr[i + 1], arr[i + 2], arr[i + 3])

    @cuda.jit(device=True)
    def ldg_u32x4_2d(arr, r, i):
        return (arr[r, i], arr[r, i + 1], arr[r, i + 2], arr[r, i + 3])


# ----------------------------------------------------------------------------------------------------------------
# cp.async groups (sm_80+): ``cp_async_commit()`` closes the copies issued so far into a group,
# ``CP_ASYNC_WAIT[n]()`` waits until at most n groups are still in flight. The simulator copies at issue time, so
# both are no-ops there. (The copies themselves are the kernels' own: their shapes differ.)
# ----------------------------------------------------------------------------------------------------------------

if not IS_SIM:

    def _asm_void(text):
        def typer(typingctx):
            sig = types.void()

            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)
                builder.call(asm, [])
                return context.get_dummy_value()

            return sig, codegen

        return intrinsic(typer)

    cp_async_commit = _asm_void("cp.async.commit_group;")
    CP_ASYNC_WAIT = {n: _asm_void(f"cp.async.wait_group {n};") for n in range(8)}

else:

    @cuda.jit(device=True)
    def cp_async_commit():
        pass

    CP_ASYNC_WAIT = {n: cp_async_commit for n in range(8)}


# ----------------------------------------------------------------------------------------------------------------
# programmatic dependent launch (sm_90+): ``pdl_trigger()`` lets the launch that follows this kernel in its stream
# start its blocks now (their loads of data no kernel writes -- weights -- overlap this kernel's tail);
# ``pdl_wait()`` returns once the kernel before this one has completed and its writes are visible; ``pdl_begin()``
# is both, the first statement of most kernels. A kernel that calls ``pdl_wait`` / ``pdl_begin`` before its first
# read of activations / metadata and its first global write, in every block, is "PDL-aware" (``kernels._pdl.aware``) and may be launched with the programmatic
# serialization attribute (``kernels._pdl``); launched without it both are no-ops. Only cc >= 9.0 has the
# instructions: the code generator emits them when the target is sm_90 or newer (``pdl_target``), nothing below.
# The simulator runs launches one after another: no-ops there.
# ----------------------------------------------------------------------------------------------------------------

_PDL_TARGET: list = [None]  # None: decided from the current device at a kernel's first code generation


def pdl_target(on) -> None:
    """Force (True / False) or reset (None) whether generated code carries the griddepcontrol instructions: the
    compile tier sets it per target cc; at run time it follows the device (cc >= 9.0)."""
    _PDL_TARGET[0] = on


def _pdl_emit() -> bool:
    if _PDL_TARGET[0] is None:
        try:
            _PDL_TARGET[0] = tuple(cuda.get_current_device().compute_capability) >= (9, 0)
        except Exception:  # noqa: BLE001 -- no device (PTX-only compiles): plain code
            _PDL_TARGET[0] = False
    return bool(_PDL_TARGET[0])


def pdl_trigger_mode() -> str:
    """Where kernels signal their dependents (``TENSORFOLD_PDL_TRIGGER``, read when code is generated; part of the
    kernel-cache digest): ``gemv_end`` (default: the GEMVs after their main loop, the others at their start),
    ``start`` (every kernel at its start; slower at 2B, benchmarks/results/session13_2026-11-30.md) or ``none`` (no
    instruction: dependents start as the kernel exits)."""
    m = os.environ.get("TENSORFOLD_PDL_TRIGGER", "gemv_end").strip() or "gemv_end"
    if m not in ("start", "gemv_end", "none"):
        raise ValueError(f"TENSORFOLD_PDL_TRIGGER={m!r}: expected start, gemv_end or none")
    return m


def gemv_trigger_here(at: str) -> bool:
    """Whether a GEMV generator emits ``pdl_trigger()`` at ``at`` ("start" or "end": after its main loop)."""
    return (pdl_trigger_mode() == "gemv_end") == (at == "end")


_TRIGGER = "griddepcontrol.launch_dependents;"
_WAIT = "griddepcontrol.wait;"

if not IS_SIM:

    def _asm_pdl(*texts):
        def typer(typingctx):
            sig = types.void()

            def codegen(context, builder, sig, args):
                if _pdl_emit():
                    for text in texts:
                        if text == _TRIGGER and pdl_trigger_mode() == "none":
                            continue
                        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)
                        builder.call(asm, [])
                return context.get_dummy_value()

            return sig, codegen

        return intrinsic(typer)

    pdl_wait = _asm_pdl(_WAIT)
    pdl_trigger = _asm_pdl(_TRIGGER)
    pdl_begin = _asm_pdl(_TRIGGER, _WAIT)  # a kernel's first statement: the usual pair

else:

    @cuda.jit(device=True)
    def pdl_wait():
        pass

    pdl_trigger = pdl_begin = pdl_wait


# ----------------------------------------------------------------------------------------------------------------
# a probe kernel so the compile tier checks every helper on every architecture
# ----------------------------------------------------------------------------------------------------------------


def _probe_kernel(xf, xu16, xu8, w, out_f, out_u16, out_u8, out_i):
    i = cuda.grid(1)
    n = xf.size
    v = np.float32(0.0)
    if i < n:
        v = xf[i]
    s = warp_sum(v)
    mx = warp_max(v)
    mn = warp_min(v)
    si = warp_sum_i(np.int32(i))
    am_v, am_i = warp_argmax(v, np.int32(i))
    q = ldg_u32x4(w, (i % 4) * 4)
    if i < n:
        out_f[i] = s + mx + mn + am_v + bf16_to_f32(xu16[i]) + e4m3_to_f32(xu8[i]) + np.float32(q[0] + q[3])
        out_u16[i] = f32_to_bf16(xf[i])
        out_u8[i] = f32_to_e4m3(xf[i])
        out_i[i] = si + am_i


COMPILE_SPECS = [
    (
        _probe_kernel,
        "void(float32[::1], uint16[::1], uint8[::1], uint32[::1], float32[::1], uint16[::1], uint8[::1], int32[::1])",
    ),
]
HOT: set = set()

_ = math  # keep the import for kernels that star-import helpers
