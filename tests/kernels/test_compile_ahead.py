"""``kernels._precompile``: start-up kernels compiled in forked workers into the on-disk kernel cache (no GPU).

- ``run_pool`` (pure host): every task runs exactly once over the workers; a worker that dies loses only the task
  it held.
- Recording: launches inside ``recording()`` are noted with numba's own argument typing and not made (a kernel
  that would write its output leaves it untouched).
- The compile tier (a worker process without the simulator; numba's context and device lookups answer with a
  fake device in the parent and fail in a forked child, as the driver does after a fork): a real hand-written
  kernel and a real generated ``qgemv`` kernel are compiled by two forked workers into a fresh kernel cache (the
  parent compiles none); the parent loads each entry through numba's own cache lookup, and the PTX it loads equals
  the PTX of the same kernel compiled serially in the parent (the oracle), line for line once numba's per-process
  compile counters are taken out of the mangled names (and its declarations sorted). A second pass (records of
  kernels not yet in memory: a fresh dispatcher's view) finds everything on disk.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mark(d, t):
    i, die = t
    if die:
        os._exit(3)
    with open(os.path.join(d, f"t{i}"), "a") as f:
        f.write(f"{os.getpid()}\n")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
@pytest.mark.parametrize("n", [1, 3])
def test_run_pool_each_task_once(n):
    import functools

    from tensorfold.kernels._precompile import run_pool

    rng = np.random.default_rng()
    m = int(rng.integers(9, 17))
    with tempfile.TemporaryDirectory() as d:
        res = run_pool([(i, False) for i in range(m)], functools.partial(_mark, d), n, timeout=120)
        assert res["workers"] == n and not res["timed_out"] and res["exit_codes"] == [0] * n
        for i in range(m):
            with open(os.path.join(d, f"t{i}")) as f:
                assert len(f.read().split()) == 1, f"task {i} ran more than once"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_run_pool_dead_worker_loses_one_task():
    import functools

    from tensorfold.kernels._precompile import run_pool

    m = 10
    with tempfile.TemporaryDirectory() as d:
        res = run_pool([(i, i == 4) for i in range(m)], functools.partial(_mark, d), 2, timeout=120)
        assert sorted(res["exit_codes"]) == [0, 3]
        done = sorted(int(f[1:]) for f in os.listdir(d))
        assert done == [i for i in range(m) if i != 4]


def test_recording_notes_and_skips():
    """Outside the simulator (typing only; nothing compiled or launched, so no GPU is needed)."""
    import subprocess

    code = (
        "import json, numpy as np\n"
        "from numba import cuda\n"
        "from tensorfold.kernels import _precompile as P\n"
        "@cuda.jit\n"
        "def k(a, x):\n"
        "    i = cuda.grid(1)\n"
        "    if i < a.size:\n"
        "        a.flat[i] = x\n"
        "a = np.random.default_rng().standard_normal(4).astype(np.float32)\n"
        "b = a.copy()\n"
        "with P.recording() as rec:\n"
        "    k[1, 32](a, 1.5)\n"
        "    k[2, 32](np.ones((2, 2), np.int32), 3)\n"
        "print(json.dumps({'n': len(rec), 'same': bool((a == b).all()), 'compiled': len(k.overloads),\n"
        "                  'types': [[str(t) for t in at] for _, at in rec]}))\n")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    assert data["n"] == 2 and data["same"] and data["compiled"] == 0, data
    assert data["types"][0][0].startswith("array(float32, 1d, C") and data["types"][0][1] == "float64", data
    assert data["types"][1][0].startswith("array(int32, 2d, C") and data["types"][1][1] == "int64", data


def _unversioned(ptx: str) -> str:
    """PTX with numba's per-process compile counters taken out of the mangled names (``B2v5`` -> ``Bv``; a
    function's n-th compile in a process gets tag ``vn``) and its device functions' environment declarations
    sorted: the same kernel compiled in another process, or after other compiles, differs only there."""
    import re

    lines = re.sub(r"B\d+v\d+", "Bv", ptx).splitlines()
    # the environment-pointer declarations of the device functions come in the order they were compiled
    common = sorted(ln for ln in lines if ln.startswith(".common .global"))
    return "\n".join(common + [ln for ln in lines if not ln.startswith(".common .global")])


def _worker() -> int:
    tmp = tempfile.mkdtemp(prefix="tf_ahead_")
    os.environ["TENSORFOLD_KERNEL_CACHE"] = "1"
    os.environ["TENSORFOLD_CACHE_DIR"] = tmp
    sys.path.insert(0, ROOT)
    from tests.kernels import test_compile as tc

    err = tc._setup_compiler()
    if err:
        print(json.dumps({"skip": err}))
        return 0
    import types as _types

    import numba.cuda.api as _api
    import numba.cuda.codegen as _cg
    import numba.cuda.compiler as _comp
    import numba.cuda.dispatcher as _disp
    from numba.core import sigutils
    from numba.cuda.cudadrv import devices as _devices

    # No driver here: numba's context and device lookups answer with a fake device of cc 9.0 -- in this process
    # only. In a forked worker they fail, as the driver's own calls fail in a child of a process that used CUDA
    # (numba-cuda: "CUDA initialized before forking"); _precompile must not reach them there.
    parent = os.getpid()
    fake_ctx = _types.SimpleNamespace(device=tc._STATE["dev"]())

    def here_only(v):
        def lookup(*a, **kw):
            if os.getpid() != parent:
                raise RuntimeError("CUDA initialized before forking (the test's driver stand-in)")
            return v
        return lookup

    _devices.get_context = here_only(fake_ctx)
    _api.current_context = _devices.get_context
    for m in (_api, _comp, _disp):
        m.get_current_device = here_only(fake_ctx.device)
    # the cache index keys entries by (CUDA runtime version, device cc): a fixed version, the context's cc
    _cg.JITCUDACodegen.magic_tuple = lambda self: ((12, 0), _devices.get_context().device.compute_capability)
    from numba.cuda.dispatcher import CUDACache, _Kernel

    from tensorfold.kernels import _kcache, _precompile, activations, qgemv

    picks = [activations.COMPILE_SPECS[0], qgemv.COMPILE_SPECS[0]]
    recs, disp = [], []
    for fn, sig in picks:
        fn = getattr(fn, "py_func", fn)
        d = _kcache.jit(fn)
        if not isinstance(d._cache, CUDACache):
            print(json.dumps({"error": f"{fn.__name__}: no disk cache ({type(d._cache).__name__})"}))
            return 0
        at, _ = sigutils.normalize_signature(sig)
        recs += [(d, at), (d, at)]  # noted twice: compiled once
        disp.append((d, at))
    made = [0]  # kernels compiled in this (the parent) process
    init = _Kernel.__init__

    def counting_init(self, *a, **kw):
        made[0] += 1
        init(self, *a, **kw)

    _Kernel.__init__ = counting_init
    res = _precompile.compile_ahead(recs, n=2, link=False)  # no driver here to link cubins
    parent_compiled = made[0]
    _Kernel.__init__ = init
    out = {"compiled": len(res.compiled), "workers": res.workers, "exit_codes": res.pool.get("exit_codes"),
           "parent_compiled": parent_compiled, "missing": res.missing, "kernels": []}
    for d, at in disp:
        loaded = d.overloads.get(at)  # put in memory by compile_ahead, from the worker's cache entry
        k = d._cache.load_overload(at, d.targetctx)
        oracle = _Kernel(d.py_func, at, **d.targetoptions)
        ptx_w = None if k is None else k._codelibrary.get_asm_str()
        out["kernels"].append({"name": d.py_func.__name__, "in_memory": loaded is not None,
                               "in_memory_same": loaded is not None and ptx_w is not None
                               and loaded._codelibrary.get_asm_str() == ptx_w, "on_disk": k is not None,
                               "same_ptx": ptx_w is not None and _unversioned(ptx_w) == _unversioned(
                                   oracle._codelibrary.get_asm_str()),
                               "ptx_len": len(ptx_w or "")})
    for d, at in disp:
        d.overloads.pop(at, None)  # as a fresh process would see them: not in memory
    again = _precompile.compile_ahead(recs, n=2, link=False)
    out["again"] = {"compiled": len(again.compiled), "loaded": again.loaded}
    # an entry loaded from the cache, given a cubin (a stand-in: no driver here to link one), saved again: a fresh
    # load must bring the cubin back (numba's save reads k.target_context, which a rebuilt kernel lacks)
    d, at = disp[0]
    k = d._cache.load_overload(at, d.targetctx)
    fake = os.urandom(64)
    k._codelibrary._cubin_cache[(9, 0, "a")] = fake
    _precompile._link_all = lambda kernels, n: None
    _precompile._link_and_save([(d, at, k)], 1)
    k2 = d._cache.load_overload(at, d.targetctx)
    out["resaved_cubin"] = k2 is not None and k2._codelibrary._cubin_cache.get((9, 0, "a")) == fake
    out["no_context_left"] = not hasattr(k, "target_context")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))
    return 0


def test_compile_ahead_workers_fill_the_cache():
    from test_compile import run_worker

    data = run_worker(__file__)
    print(data)
    assert "error" not in data, data
    assert data["compiled"] == 2 and data["workers"] == 2 and data["exit_codes"] == [0, 0], data
    assert data["parent_compiled"] == 0 and data["missing"] == 0, data  # the workers compiled, the parent loaded
    for k in data["kernels"]:
        assert k["in_memory"] and k["in_memory_same"], k
        assert k["on_disk"] and k["ptx_len"] > 1000, k
        assert k["same_ptx"], k
    assert data["again"] == {"compiled": 0, "loaded": 2}, data
    assert data["resaved_cubin"] and data["no_context_left"], data


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(pytest.main([__file__, "-s", "-q"]))
