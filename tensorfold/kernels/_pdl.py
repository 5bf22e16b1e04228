"""Programmatic dependent launch (PDL) of PDL-aware kernels while a decode graph is captured (host side).

Inside a replayed graph, each kernel boundary costs about 1-2 µs (session 12): the next kernel's blocks are
scheduled only after the previous kernel has drained, and its first weight loads then pay the full DRAM latency.
On cc >= 9.0 a launch carrying the programmatic-stream-serialization attribute may start while the previous kernel
in the stream still runs (once every block of that kernel has called ``pdl_trigger`` or exited); it runs up to its
``pdl_wait``, which returns when the previous kernel has completed and its writes are visible. A GEMV issues its
first weight loads before that wait, so they overlap the previous kernel's tail.

A kernel is *aware* when its code names ``_device.pdl_wait`` or ``pdl_begin`` (its contract: every block waits before its first read
of activations or metadata and its first global write; weights may be read before, and so may data that no kernel
of the same graph writes before it: the recurrent kernels of ``delta_rule`` load the segment metadata and the
committed state first, both written only by host copies or by earlier forwards). Whatever the previous kernel may
write is read with coherent loads, never ``ld.global.nc``: that form promises read-only data for the kernel's whole
lifetime, so ptxas may issue it before the wait (session 33: the 2B LM head read stale x in verify graphs; the
rule is in ``_device``'s docstring, the compile tier checks it). Only aware kernels are given
the attribute, and only inside ``scope()`` (``glue.capture_graph`` opens it). An unaware kernel is launched the
usual way and waits for the complete previous kernel, so a chain stays ordered: a kernel's completion implies its
wait returned, hence that its predecessor completed.

Measured on the H200 (benchmarks/results/session13_2026-11-30.md, decode tok/s at 1 stream, PDL off -> on, each pair
in one process sequence on one GPU): 2B 572.7 -> 623.2, 9B 259.4 -> 267.7, 27B 101.5 -> 104.2 with the GEMVs
signalling after their main loop (``_device.pdl_trigger_mode`` ``gemv_end``, the default). Every kernel signalling
at its start was slower at 2B (561.3 vs 596.7 off): the next GEMV's blocks then take SM slots while the current
one still runs. The gain is small because a boundary in a replayed graph was already cheap (about 0.9 µs a kernel
at 2B: 1,488 µs of kernel time in a 1,705 µs step, session 12); the GEMVs' own time is the lever.

``TENSORFOLD_PDL=0`` turns the attribute off (the kernels keep their instructions, which are no-ops then). The
simulator and devices below cc 9.0 never use it. numba-cuda's ``_Kernel.launch`` has no launch-attribute
parameter, so ``install`` wraps it (and the dispatcher's ``call``, which knows the kernel's Python function):
outside a scope, or for an unaware kernel, the original runs unchanged.
"""

from __future__ import annotations

import contextlib
import os
import threading

from ._device import IS_SIM

__all__ = ["aware", "enabled", "scope", "install", "active", "launches", "plain"]

_TLS = threading.local()
# launches: PDL launches made; plain: names of unaware kernels launched inside a scope (tests read both)
_STATE: dict = {"installed": False, "ok": None, "launches": 0, "plain": set()}


def aware(py_func) -> bool:
    """Whether a kernel's Python function calls ``pdl_wait`` or ``pdl_begin`` (by name, as its module or generated
    source binds it)."""
    code = getattr(py_func, "__code__", None)
    return code is not None and ("pdl_wait" in code.co_names or "pdl_begin" in code.co_names)


def enabled() -> bool:
    """``TENSORFOLD_PDL`` unset or "1" on a cc >= 9.0 device with a launch path that takes the attribute."""
    if IS_SIM or os.environ.get("TENSORFOLD_PDL", "1").strip() == "0":
        return False
    if _STATE["ok"] is None:
        _STATE["ok"] = _probe()
    return bool(_STATE["ok"])


def _probe() -> bool:
    try:
        from numba import cuda
        from cuda.core import LaunchConfig

        LaunchConfig(grid=1, block=1, programmatic_stream_serialization=True)
        return tuple(cuda.get_current_device().compute_capability) >= (9, 0) and install()
    except Exception:  # noqa: BLE001 -- an older cuda.core / numba-cuda layout, or no device: plain launches
        return False


def launches() -> int:
    """How many launches this process made with the PDL attribute."""
    return _STATE["launches"]


def plain() -> set:
    """Names of kernels launched inside a scope without the attribute (not PDL-aware)."""
    return set(_STATE["plain"])


def active() -> bool:
    return bool(getattr(_TLS, "on", False))


@contextlib.contextmanager
def scope(on: bool = True):
    """Launches made inside (this thread) give aware kernels the PDL attribute, when ``enabled()``."""
    prev = active()
    _TLS.on = bool(on) and enabled()
    try:
        yield
    finally:
        _TLS.on = prev


def install() -> bool:
    """Wrap numba-cuda's ``CUDADispatcher.call`` (notes whether the dispatcher's function is aware: a kernel loaded
    from the on-disk cache has no Python function of its own) and ``_Kernel.launch`` (launches with the attribute
    when in a scope and aware), once. False when numba-cuda's layout is not the expected one."""
    if _STATE["installed"]:
        return True
    from numba.cuda import dispatcher as _disp
    from cuda.core import LaunchConfig, launch as _core_launch

    K = getattr(_disp, "_Kernel", None)
    D = getattr(_disp, "CUDADispatcher", None)
    if K is None or D is None or not all(hasattr(K, a) for a in ("launch", "_prepare_args", "argument_types")) \
            or not hasattr(D, "call"):
        return False
    orig_launch, orig_call = K.launch, D.call

    def call(self, args, launch_config):
        if not getattr(_TLS, "on", False):  # eager launches: untouched, no per-launch work
            return orig_call(self, args, launch_config)
        prev = getattr(_TLS, "aware", None)
        _TLS.aware = (self, aware(self.py_func))
        try:
            return orig_call(self, args, launch_config)
        finally:
            _TLS.aware = prev

    def launch(self, args, griddim, blockdim, stream=0, sharedmem=0):
        if not getattr(_TLS, "on", False):
            return orig_launch(self, args, griddim, blockdim, stream, sharedmem)
        cur = getattr(_TLS, "aware", None)
        if cur is None or not cur[1] or getattr(self, "debug", False):
            _STATE["plain"].add(cur[0].py_func.__name__ if cur else getattr(self, "entry_name", "?"))
            return orig_launch(self, args, griddim, blockdim, stream, sharedmem)
        cufunc = self._codelibrary.get_cufunc()
        retr, kernelargs = [], []
        for t, v in zip(self.argument_types, args):
            self._prepare_args(t, v, stream, retr, kernelargs)
        config = LaunchConfig(grid=griddim, block=blockdim, shmem_size=sharedmem,
                              programmatic_stream_serialization=True)
        _core_launch(stream, config, cufunc.kernel, *kernelargs)
        _STATE["launches"] += 1
        for wb in retr:
            wb()

    call._tf_pdl = launch._tf_pdl = True
    D.call, K.launch = call, launch
    _STATE["installed"] = True
    return True
