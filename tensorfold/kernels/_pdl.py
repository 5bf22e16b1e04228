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

The same wrapper launches thread-block clusters (session 42): inside ``cluster(n)`` a launch carries the cluster
shape ``(n, 1, 1)`` (with the PDL attribute too when in a scope and aware). Only kernels written for it may be
launched so (``delta_rule``'s cluster tail); ``cluster_ok`` says whether this process can.
"""

from __future__ import annotations

import contextlib
import os
import threading

from ._device import IS_SIM

__all__ = ["aware", "enabled", "scope", "install", "active", "launches", "plain", "cluster", "cluster_ok",
           "cluster_refused"]

_TLS = threading.local()
# launches: PDL launches made; plain: names of unaware kernels launched inside a scope (tests read both)
_STATE: dict = {"installed": False, "ok": None, "launches": 0, "plain": set(), "cl_ok": None, "cl_grid": None}


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


def cluster_ok() -> bool:
    """Whether launches can carry a cluster shape (:func:`cluster`): a cc >= 9.0 device, and the launch wrapper of
    :func:`install` in place. Decided once a process."""
    if IS_SIM:
        return False
    if _STATE["cl_ok"] is None:
        try:
            from numba import cuda
            from cuda.core import LaunchConfig

            LaunchConfig(grid=1, block=1, cluster=1)
            # cuda.core >= 0.4 reads ``grid`` as clusters when a cluster shape is given; older ones as blocks
            _STATE["cl_grid"] = "number of clusters" in (LaunchConfig.__doc__ or "")
            _STATE["cl_ok"] = tuple(cuda.get_current_device().compute_capability) >= (9, 0) and install()
        except Exception:  # noqa: BLE001 -- no cluster launch here: callers take their other path
            _STATE["cl_ok"] = False
    return bool(_STATE["cl_ok"])


def cluster_refused(err: Exception) -> None:
    """A cluster launch raised (before anything ran): no more cluster launches in this process, with a warning
    that names the error; the caller then takes its other path."""
    import warnings

    _STATE["cl_ok"] = False
    warnings.warn(f"tensorfold: cluster launches are off for this process ({type(err).__name__}: {err})",
                  RuntimeWarning, stacklevel=2)


@contextlib.contextmanager
def cluster(n: int):
    """Launches made inside (this thread) run as clusters of ``n`` blocks along x (the grid's x a multiple of ``n``;
    with the PDL attribute too when in a :func:`scope` and aware). The caller checks :func:`cluster_ok` first."""
    prev = getattr(_TLS, "cluster", None)
    _TLS.cluster = int(n)
    try:
        yield
    finally:
        _TLS.cluster = prev


def install() -> bool:
    """Wrap numba-cuda's ``CUDADispatcher.call`` (notes whether the dispatcher's function is aware: a kernel loaded
    from the on-disk cache has no Python function of its own) and ``_Kernel.launch`` (launches with the attribute
    when in a scope and aware, and with the cluster shape inside :func:`cluster`), once. False when numba-cuda's layout is not the expected one."""
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
        cl = getattr(_TLS, "cluster", None)
        on = getattr(_TLS, "on", False)
        if not on and not cl:
            return orig_launch(self, args, griddim, blockdim, stream, sharedmem)
        cur = getattr(_TLS, "aware", None) if on else None
        pdl = cur is not None and cur[1] and not getattr(self, "debug", False)
        if on and not pdl:
            _STATE["plain"].add(cur[0].py_func.__name__ if cur else getattr(self, "entry_name", "?"))
            if not cl:
                return orig_launch(self, args, griddim, blockdim, stream, sharedmem)
        cufunc = self._codelibrary.get_cufunc()
        retr, kernelargs = [], []
        for t, v in zip(self.argument_types, args):
            self._prepare_args(t, v, stream, retr, kernelargs)
        kw = {}
        if cl:
            g = tuple(griddim) if isinstance(griddim, (tuple, list)) else (griddim,)
            if g[0] % cl:
                raise ValueError(f"cluster launch: grid x {g[0]} is not a multiple of the cluster size {cl}")
            if _STATE["cl_grid"]:
                g = (g[0] // cl,) + g[1:]
            griddim, kw["cluster"] = g, (cl,) + (1,) * (len(g) - 1)
        config = LaunchConfig(grid=griddim, block=blockdim, shmem_size=sharedmem,
                              programmatic_stream_serialization=pdl, **kw)
        _core_launch(stream, config, cufunc.kernel, *kernelargs)
        _STATE["launches"] += pdl
        for wb in retr:
            wb()

    call._tf_pdl = launch._tf_pdl = True
    D.call, K.launch = call, launch
    _STATE["installed"] = True
    return True
