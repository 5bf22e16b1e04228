"""Compile a start-up's kernels in worker processes, into the on-disk kernel cache (host side).

A cold start (empty kernel cache) spends almost all its time in numba compiling, one kernel after another, in the
first eager forwards: 144 s for the 9B synth on a fresh H200 machine (session 28). numba compiles under one global
lock, so threads would not help; processes do.

How:
1. :func:`recording`: inside it, launches made by this thread are not made; each dispatcher's argument types are
   noted instead (``CUDADispatcher.call`` is wrapped once, see :func:`install`; outside a recording the wrapper
   passes straight through). The caller runs the forwards it is about to run for real (eager, on its padding
   batches), so what is noted is exactly what those forwards would compile.
2. :func:`compile_ahead`: the noted signatures that are neither compiled in this process nor on disk are handed to
   ``fork``ed worker processes, one dispatcher per task (a dispatcher's cache index is one file; one writer each),
   the largest generated sources first. A worker compiles to PTX and saves the entry to the kernel cache; it makes
   no CUDA driver call (a forked child may not use the parent's CUDA context), so it does not link the cubin.
3. Back in this process, each new entry is loaded through numba's cache lookup, its cubin linked in a thread pool
   (the linker runs outside the GIL), and the entry saved again with the cubin, so later starts load the cubin
   instead of linking again. The caller then runs its forwards as before, with every kernel already in memory.

Everything falls back to compiling in this process: a worker that fails or is killed, a signature it could not
compile, a dispatcher without a disk cache (``_kcache`` could not make one), the simulator. The kernels that run
are always the ones this process compiled or loaded through numba's own cache lookup.

``TENSORFOLD_COMPILE_WORKERS``: how many workers, or ``auto`` (the default: the CPUs this process may use, at most
16); 0 or 1: off. ``TENSORFOLD_COMPILE_LOG=1`` prints each phase to stderr as it ends.

History: its first GPU run (session 29, 9B synth, 15 workers) failed in every worker: numba asked the driver for the
current context, which a forked child may not do ("CUDA initialized before forking"). ``_child_setup`` now answers
those lookups with the parent's context object; the compile tier checks it with fakes that fail as the driver does
in a child. Session 30, on the H200 (9B synth, empty cache, 15 workers): 30 kernels compiled in 40.3 s and linked
in 2.5 s; the load took 48.4 s against 175.2 s without workers (session 29), and the GPU test (same bits as an
in-process compile) passed. On by default since.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import warnings

from ._device import IS_SIM

__all__ = ["workers", "recording", "compile_ahead", "Ahead", "install", "run_pool"]

_TLS = threading.local()
_STATE = {"installed": False}


def workers() -> int:
    """Worker processes for :func:`compile_ahead` (``TENSORFOLD_COMPILE_WORKERS``; default ``auto``: min(16, CPUs));
    0 when off: set to 0 or 1, the simulator, no ``fork``, or the kernel cache off (the workers' only way to hand
    kernels back)."""
    if IS_SIM or not hasattr(os, "fork"):
        return 0
    from . import _kcache

    if not _kcache.cache_on():
        return 0
    v = os.environ.get("TENSORFOLD_COMPILE_WORKERS", "").strip() or "auto"
    if v.lower() == "auto":
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:
            n = os.cpu_count() or 1
        n = min(16, n)
    else:
        try:
            n = int(v)
        except ValueError:
            raise ValueError(f"TENSORFOLD_COMPILE_WORKERS={v!r}: expected a whole number of worker processes "
                             f"or 'auto'") from None
    return n if n >= 2 else 0


def install() -> bool:
    """Wrap ``CUDADispatcher.call`` once so that :func:`recording` can note launches instead of making them. False
    when numba-cuda's layout is not the expected one."""
    if _STATE["installed"]:
        return True
    from numba.cuda import dispatcher as _disp

    D = getattr(_disp, "CUDADispatcher", None)
    if D is None or not hasattr(D, "call") or not hasattr(D, "typeof_pyval"):
        return False
    orig_call = D.call

    def call(self, args, launch_config):
        rec = getattr(_TLS, "rec", None)
        if rec is None:
            return orig_call(self, args, launch_config)
        rec.append((self, tuple(self.typeof_pyval(a) for a in args)))
        return None

    call._tf_precompile = True
    D.call = call
    _STATE["installed"] = True
    return True


@contextlib.contextmanager
def recording():
    """Launches made by this thread inside are noted, not made; yields the list of (dispatcher, argument types)."""
    rec: list = []
    if not install():
        raise RuntimeError("precompile: numba-cuda's CUDADispatcher has not the expected layout")
    prev = getattr(_TLS, "rec", None)
    _TLS.rec = rec
    try:
        yield rec
    finally:
        _TLS.rec = prev


def run_pool(tasks: list, fn, n: int, timeout: float = 300.0, init=None) -> dict:
    """Run ``fn(task)`` for every task in ``n`` forked worker processes that take the next task from a shared
    counter (in list order); ``init()`` first in each worker. Returns {"workers", "exit_codes", "timed_out"}. A
    task's exception is the worker's business (``fn`` should catch its own); a worker that dies loses only its
    current task; after ``timeout`` seconds the workers left are killed (their tasks are lost, not wrong)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    nxt = ctx.Value("i", 0)

    def work():
        if init is not None:
            init()
        while True:
            with nxt.get_lock():
                i = nxt.value
                nxt.value = i + 1
            if i >= len(tasks):
                return
            fn(tasks[i])

    n = max(1, min(int(n), len(tasks)))
    procs = []
    import gc

    # the parent's objects are left out of the children's garbage collection: a collected device array's finalizer
    # would call the CUDA driver from a child
    gc.freeze()
    try:
        with warnings.catch_warnings():
            # Python 3.12 warns that fork() in a multi-threaded process may deadlock: the children here only compile
            # (Python, LLVM, NVVM) and never enter the CUDA driver, whose threads are the ones the parent has.
            warnings.simplefilter("ignore", DeprecationWarning)
            for _ in range(n):
                p = ctx.Process(target=work, daemon=True)
                p.start()
                procs.append(p)
    finally:
        gc.unfreeze()
    end = time.time() + timeout
    timed_out = False
    for p in procs:
        p.join(max(0.0, end - time.time()))
        if p.is_alive():
            timed_out = True
            p.kill()
            p.join()
    return {"workers": n, "exit_codes": [p.exitcode for p in procs], "timed_out": timed_out}


_PARENT: dict = {}  # the parent's CUDA context, captured before the fork (see _child_setup)


def _capture_parent() -> None:
    from numba.cuda.cudadrv import devices

    _PARENT["ctx"] = devices.get_context()


def _child_setup() -> None:
    """In a worker: answer numba's context and device lookups with the parent's context object (captured before the
    fork) instead of asking the driver. A forked child may not call the CUDA driver (it returns
    CUDA_ERROR_NOT_INITIALIZED; numba-cuda raises "CUDA initialized before forking"), and compiling asks for the
    current context only for the device's compute capability (PTX target, cache key)."""
    ctx = _PARENT.get("ctx")
    if ctx is None:
        return
    import numba.cuda.api as api
    import numba.cuda.compiler as compiler
    import numba.cuda.dispatcher as dispatcher
    from numba.cuda.cudadrv import devices

    def get_context(devnum=None):
        return ctx

    def get_current_device():
        return ctx.device

    devices.get_context = get_context
    api.current_context = get_context
    for m in (api, compiler, dispatcher):
        if hasattr(m, "get_current_device"):
            m.get_current_device = get_current_device


def _log(msg: str) -> None:
    if os.environ.get("TENSORFOLD_COMPILE_LOG", "").strip() == "1":
        print(f"tensorfold precompile: {msg}", file=sys.stderr, flush=True)


def _cost(d) -> int:
    """Ordering key: generated kernels by their source's length (the long ones take 3-8 s), then the rest."""
    return len(getattr(d.py_func, "_tf_source", "") or "")


def _compile_to_disk(task) -> None:
    """In a worker: compile each signature of one dispatcher to PTX and save it to the dispatcher's disk cache."""
    from numba.cuda.dispatcher import _Kernel

    d, sigs = task
    for at in sigs:
        try:
            k = _Kernel(d.py_func, at, **d.targetoptions)
            d._cache.save_overload(at, k)
        except Exception as e:  # noqa: BLE001 -- the parent compiles it again and reports a real error there
            # os.write, not print: a lock of sys.stderr held by another thread at the fork would hang the worker
            msg = f"tensorfold precompile: {d.py_func.__name__}{at}: {type(e).__name__}: {e}\n"
            os.write(2, msg.encode("utf-8", "replace"))


class Ahead:
    """What :func:`compile_ahead` did: ``compiled`` (dispatcher, types) pairs the workers compiled and this process
    loaded back, ``loaded`` pairs found on disk beforehand, ``missing`` pairs the workers did not deliver (compiled
    here later, as usual), the seconds of each phase, ``workers``."""

    def __init__(self):
        self.compiled: list = []
        self.loaded = 0
        self.missing = 0
        self.seconds = 0.0
        self.pool_seconds = 0.0
        self.link_seconds = 0.0
        self.workers = 0
        self.pool: dict = {}
        self.loaded_no_cubin = 0  # found on disk without a cubin for this device (linked here, in threads)
        self.loaded_seconds = 0.0  # reading the found entries, and linking those without a cubin

    def summary(self) -> str:
        return (f"{len(self.compiled)} kernels compiled by {self.workers} workers in {self.pool_seconds:.1f} s, "
                f"cubins linked in {self.link_seconds:.1f} s, {self.loaded} found in the cache "
                f"({self.loaded_no_cubin} without a cubin; {self.loaded_seconds:.1f} s), {self.missing} "
                f"left to compile here; {self.seconds:.1f} s in all")


def _link_all(kernels, n: int) -> None:
    """Link each kernel's cubin in ``n`` threads, each with this process's device current; a failure leaves that
    kernel to link at its first launch, as usual. The target is the one a launch asks for: numba's own choice of
    cc for the current device (``(9, 0, "a")`` on an H200, the arch-specific sm_90a), asked here in this thread;
    the cubin cache is keyed by it."""
    from concurrent.futures import ThreadPoolExecutor

    from numba import cuda

    if not kernels:
        return
    devnum = cuda.get_current_device().id
    cc = kernels[0]._codelibrary._ensure_cc(None)

    def link(k):
        try:
            cuda.select_device(devnum)
            k._codelibrary.get_cubin(cc=cc)
        except Exception:  # noqa: BLE001
            pass

    with ThreadPoolExecutor(max(1, n)) as ex:
        list(ex.map(link, kernels))


def _has_cubin(k) -> bool:
    """Whether kernel ``k`` holds a cubin for the target a launch here would ask for."""
    lib = k._codelibrary
    try:
        return bool(lib._cubin_cache.get(lib._ensure_cc(None)))
    except Exception:  # noqa: BLE001 -- cannot tell: treat as linked (its first launch links, as usual)
        return True


def _link_and_save(entries, n: int) -> None:
    """Link the cubins of ``entries`` ((dispatcher, types, kernel)) in ``n`` threads and save each entry again with
    its cubin, so that a later start loads it instead of linking."""
    _link_all([k for _, _, k in entries], n)
    for d, at, k in entries:
        if getattr(k._codelibrary, "_cubin_cache", None):
            _save_entry(d, at, k)


def _save_entry(d, at, k) -> None:
    """``d._cache.save_overload(at, k)`` for a kernel that was loaded from the cache. numba keys the entry by
    ``k.codegen``, which reads ``k.target_context``; a kernel rebuilt from the cache lacks that attribute, so the save
    failed with AttributeError (sessions 29-30: every warm start found its entries without cubins and linked them
    again). It is lent the dispatcher's context for the save only. A failure leaves the entry without its cubin
    (still correct; linked again at the next start) and is logged."""
    lent = not hasattr(k, "target_context")
    if lent:
        k.target_context = d.targetctx
    try:
        d._cache.save_overload(at, k)
    except Exception as e:  # noqa: BLE001
        _log(f"saving {getattr(d.py_func, '__name__', d)} with its cubin failed: {type(e).__name__}: {e}")
    finally:
        if lent:
            del k.target_context


def compile_ahead(records, n: int | None = None, link: bool = True) -> Ahead:
    """Compile the noted (dispatcher, types) pairs that this process lacks into the disk cache, in ``n`` workers
    (default :func:`workers`), and load them here (with ``link``, their cubins too: that needs a GPU). Pairs already
    on disk are loaded here as numba's own lookup would. Returns an :class:`Ahead`."""
    from numba.cuda.dispatcher import CUDACache

    t0 = time.time()
    res = Ahead()
    n = workers() if n is None else n
    todo: dict = {}
    for d, at in records:
        if getattr(d, "specialized", False) or at in d.overloads:
            continue
        if not isinstance(getattr(d, "_cache", None), CUDACache):
            continue
        ent = todo.setdefault(id(d), (d, []))
        if at not in ent[1]:
            ent[1].append(at)
    tasks = []
    found = []
    for d, sigs in todo.values():
        left = []
        for at in sigs:
            k = d._cache.load_overload(at, d.targetctx)
            if k is None:
                left.append(at)
            else:
                d.add_overload(k, at)
                found.append((d, at, k))
                res.loaded += 1
        if left:
            tasks.append((d, left))
    if link and found:  # entries saved before their cubin was linked: link them now in threads, save them again
        stale = [(d, at, k) for d, at, k in found if not _has_cubin(k)]
        res.loaded_no_cubin = len(stale)
        _link_and_save(stale, max(n, 1))
    res.loaded_seconds = time.time() - t0
    if n >= 2 and len(tasks) >= 2:
        tasks.sort(key=lambda t: -_cost(t[0]))
        sys.stdout.flush()
        sys.stderr.flush()
        _capture_parent()
        t1 = time.time()
        _log(f"{sum(len(t[1]) for t in tasks)} kernels of {len(tasks)} functions to {min(n, len(tasks))} workers "
             f"({res.loaded} found in the cache, {t1 - t0:.1f} s)")
        quiet = "TOKENIZERS_PARALLELISM" not in os.environ  # else every worker prints tokenizers' fork warning
        if quiet:
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            res.pool = run_pool(tasks, _compile_to_disk, n, init=_child_setup)
        finally:
            if quiet:
                os.environ.pop("TOKENIZERS_PARALLELISM", None)
        res.workers = res.pool["workers"]
        t2 = time.time()
        res.pool_seconds = t2 - t1
        _log(f"workers done in {t2 - t1:.1f} s: {res.pool}")
        got = []
        for d, sigs in tasks:
            for at in sigs:
                k = d._cache.load_overload(at, d.targetctx)
                if k is None:
                    res.missing += 1
                    continue
                d.add_overload(k, at)
                got.append((d, at, k))
        if link:
            _link_and_save(got, n)
        res.link_seconds = time.time() - t2
        _log(f"{len(got)} loaded back, {res.missing} missing, cubins linked and saved in {res.link_seconds:.1f} s")
        res.compiled = [(d, at) for d, at, _ in got]
    res.seconds = time.time() - t0
    return res
