"""Compile tier: every kernel signature of every module in ``tensorfold.kernels`` compiles to PTX for cc 8.0, 8.9
and 9.0 (real compiler, no GPU), and ``ptxas -v`` reports registers, spills and stack (local memory) per kernel.

One subprocess (``NUMBA_ENABLE_CUDASIM=0``) runs ``python tests/kernels/test_compile.py --worker``: it imports each
module listed in ``tensorfold.kernels.KERNEL_MODULES`` (a module not written yet is reported as absent), compiles
each ``COMPILE_SPECS`` entry to PTX for every cc (numba's front end once per entry, NVVM per cc: see
``_compile_task``; ``TF_COMPILE_PER_CC=1`` calls ``numba.cuda.compile_ptx`` per cc) and assembles the PTX with
``ptxas -arch=sm_XX -v``; the specs are spread over a fork pool of one process per core (at most 4;
``TF_COMPILE_PROCS`` overrides).
The test fails on any compile or assembly error, and on spills (spill stores/loads or a stack frame) in kernels a
module names in its ``HOT`` set. It skips only when NVVM (libnvvm from the pip CUDA wheels) is absent; without
``ptxas`` on PATH it still checks the PTX compile and says that registers were not checked.

Note: numba compiles ``device=True`` functions lazily for "the current device", which needs a driver; the worker
replaces that lookup with the target cc being compiled (no GPU needed). ptxas of the CUDA 13.0 toolkit accepts PTX
ISA <= 9.0 while NVVM from the pip wheels writes 9.x: the worker lowers the ``.version`` line to what ptxas accepts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

CCS = ((8, 0), (8, 9), (9, 0))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ----------------------------------------------------------------------------------------------------------------
# worker (runs in the subprocess)
# ----------------------------------------------------------------------------------------------------------------


_STATE: dict = {}


def _setup_compiler():
    """Patch numba's device lookup (no driver needed) and check NVVM; returns an error string or None."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)

    class _FakeDev:
        compute_capability = (9, 0)

    import numba.cuda.dispatcher as _disp

    _disp.get_current_device = lambda: _FakeDev()
    _STATE["dev"] = _FakeDev
    from numba import cuda

    def _probe(a):
        a[0] = 1.0

    try:
        cuda.compile_ptx(_probe, "void(float32[::1])", cc=(9, 0))
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        if "nvvm" in msg.lower():
            return f"NVVM unavailable: {msg[:200]}"
        raise
    return None


def _run_ptxas(ptx: str, cc):
    import tempfile

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return None
    ver = _STATE.get("ptx_ver")
    if ver:
        ptx = re.sub(r"^\.version \d+\.\d+", f".version {ver}", ptx, count=1, flags=re.M)
    fd, path = tempfile.mkstemp(suffix=".ptx")
    with os.fdopen(fd, "w") as f:
        f.write(ptx)
    try:
        cmd = [ptxas, f"-arch=sm_{cc[0]}{cc[1]}", "-v", path, "-o", os.devnull]
        p = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        os.unlink(path)
    if p.returncode != 0 and "Unsupported .version" in p.stderr and not ver:
        m = re.search(r"current version is '(\d+\.\d+)'", p.stderr)
        if m:
            _STATE["ptx_ver"] = m.group(1)
            return _run_ptxas(ptx, cc)
    if p.returncode != 0:
        return {"error": p.stderr[-800:]}
    txt = p.stderr + p.stdout
    regs = [int(x) for x in re.findall(r"Used (\d+) registers", txt)]
    stack = [int(x) for x in re.findall(r"(\d+) bytes stack frame", txt)]
    sst = [int(x) for x in re.findall(r"(\d+) bytes spill stores", txt)]
    sld = [int(x) for x in re.findall(r"(\d+) bytes spill loads", txt)]
    smem = [int(x) for x in re.findall(r"(\d+) bytes smem", txt)]
    return {
        "regs": max(regs) if regs else None,
        "stack": max(stack) if stack else 0,
        "spill_st": max(sst) if sst else 0,
        "spill_ld": max(sld) if sld else 0,
        "smem": max(smem) if smem else 0,
    }


def _front_end():
    """numba-cuda's "compile a kernel to a code library" step (typing + lowering to LLVM IR), or None."""
    try:
        from numba.cuda.compiler import _compile_pyfunc_with_fixup
    except ImportError:  # pragma: no cover - other numba-cuda layouts: compile_ptx per cc
        return None
    return _compile_pyfunc_with_fixup


def _compile_task(task):
    """Compile one COMPILE_SPECS entry for every cc (runs in a forked pool worker).

    The front end (typing + lowering to LLVM IR, about 80% of a compile) runs once, for the lowest cc; NVVM (LLVM IR
    -> PTX for ``compute_XX``) and ptxas (``sm_XX``) run for every cc. This is what ``cuda.compile_ptx(fn, sig,
    cc=cc)`` does per cc, minus repeating the front end: numba-cuda's lowering reads the compute capability only for
    choices with thresholds below every cc here (fp64 atomics at 6.0, fast tanh at 7.5) and tensorfold's kernels
    read none, so the LLVM IR is the same for all three (checked at 1e2102d: identical IR for cc 8.0 and 9.0 up to
    the flags hash in mangled names). ``TF_COMPILE_PER_CC=1`` runs ``compile_ptx`` per cc instead. The one
    sm_90-only choice, the PDL instructions (``_device.pdl_target``), is off here, so the IR is valid for every cc;
    ``test_pdl_forms_sm90`` compiles the PDL forms."""
    import importlib

    from numba import cuda

    from tensorfold.kernels import _device

    _device.pdl_target(False)

    modname, idx = task
    mod = importlib.import_module(f"tensorfold.kernels.{modname}")
    fn, sig = mod.COMPILE_SPECS[idx]
    hot = set(getattr(mod, "HOT", set()))
    name = getattr(fn, "__name__", str(fn))
    fn = getattr(fn, "py_func", fn)
    front = None if os.environ.get("TF_COMPILE_PER_CC") == "1" else _front_end()
    lib = None
    lib_error = None
    if front is not None:
        _STATE["dev"].compute_capability = CCS[0]
        t0 = time.time()
        try:
            lib, _ = front(fn, sig, device=False, abi="numba", cc=CCS[0])
        except Exception as e:  # noqa: BLE001
            lib_error = f"compile: {type(e).__name__}: {str(e)[:1500]}"
        front_s = time.time() - t0
    out = []
    for cc in CCS:
        _STATE["dev"].compute_capability = cc
        rec = {"module": modname, "kernel": name, "sig": sig, "cc": f"{cc[0]}{cc[1]}", "hot": name in hot}
        t0 = time.time()
        try:
            if lib_error is not None:
                raise RuntimeError(lib_error)
            if front is not None:
                codes = lib.get_asm_strs(cc=cc)
                if len(codes) != 1:
                    raise RuntimeError(f"{len(codes)} PTX modules (compile_ptx expects one)")
                ptx = codes[0]
            else:
                ptx, _ = cuda.compile_ptx(fn, sig, cc=cc)
        except Exception as e:  # noqa: BLE001
            rec["error"] = lib_error or f"compile: {type(e).__name__}: {str(e)[:1500]}"
            out.append(rec)
            continue
        rec["compile_s"] = round(time.time() - t0 + (front_s if front is not None and cc == CCS[0] else 0), 2)
        rep = _run_ptxas(ptx, cc)
        if rep is None:
            rec["ptxas"] = "absent"
        elif "error" in rep:
            rec["error"] = "ptxas: " + rep["error"]
        else:
            rec.update(rep)
        out.append(rec)
    return out


def _worker() -> int:
    import importlib
    import multiprocessing

    skip = _setup_compiler()
    if skip:
        print(json.dumps({"skip": skip}))
        return 0
    import tensorfold.kernels as K

    results = []
    tasks = []
    for modname in K.KERNEL_MODULES:
        try:
            mod = importlib.import_module(f"tensorfold.kernels.{modname}")
        except ModuleNotFoundError as e:
            if e.name == f"tensorfold.kernels.{modname}":
                results.append({"module": modname, "absent": True})
                continue
            results.append({"module": modname, "error": f"import: {e!r}"})
            continue
        except Exception as e:  # noqa: BLE001
            results.append({"module": modname, "error": f"import: {e!r}"})
            continue
        specs = getattr(mod, "COMPILE_SPECS", None)
        if specs is None:
            results.append({"module": modname, "error": "no COMPILE_SPECS"})
            continue
        tasks += [(modname, i) for i in range(len(specs))]
    nproc = max(1, min(int(os.environ.get("TF_COMPILE_PROCS", os.cpu_count() or 1)), 4))
    if nproc > 1 and "fork" in multiprocessing.get_all_start_methods():
        with multiprocessing.get_context("fork").Pool(nproc) as pool:
            parts = pool.map(_compile_task, tasks, chunksize=1)
    else:
        parts = [_compile_task(t) for t in tasks]
    for p in parts:
        results += p
    print(json.dumps({"results": results, "ptxas": shutil.which("ptxas"), "procs": nproc}))
    return 0


# ----------------------------------------------------------------------------------------------------------------
# the test
# ----------------------------------------------------------------------------------------------------------------


def _format(results) -> str:
    lines = [f"{'module':10s} {'kernel':44s} {'cc':>3s} {'regs':>4s} {'stack':>5s} {'spill':>5s} {'smem':>6s} {'s':>5s}"]
    for r in results:
        if r.get("absent"):
            lines.append(f"{r['module']:10s} (module absent)")
            continue
        if "kernel" not in r:
            lines.append(f"{r['module']:10s} ERROR {r.get('error')}")
            continue
        if "error" in r:
            lines.append(f"{r['module']:10s} {r['kernel'][:44]:44s} {r['cc']:>3s} ERROR {r['error'][:300]}")
            continue
        sp = r.get("spill_st", 0) + r.get("spill_ld", 0)
        lines.append(
            f"{r['module']:10s} {r['kernel'][:44]:44s} {r['cc']:>3s} {str(r.get('regs')):>4s} {r.get('stack', 0):5d} "
            f"{sp:5d} {r.get('smem', 0):6d} {r.get('compile_s', 0):5.1f}" + ("  HOT" if r.get("hot") else "")
        )
    return "\n".join(lines)


def find_spec(modname: str, name: str):
    """For a compile worker: ``(py_function, signature)`` of the ``COMPILE_SPECS`` entry named ``name`` in
    ``tensorfold.kernels.<modname>``; None after printing a ``missing`` line (a renamed kernel: a default switch
    changed) that lists what the module has."""
    import importlib

    mod = importlib.import_module(f"tensorfold.kernels.{modname}")
    hit = next(((f, s) for f, s in mod.COMPILE_SPECS if getattr(f, "__name__", "") == name), None)
    if hit is None:
        have = sorted(getattr(f, "__name__", "?") for f, _ in mod.COMPILE_SPECS)
        print(json.dumps({"missing": name, "have": have}))
        return None
    return getattr(hit[0], "py_func", hit[0]), hit[1]


def run_worker(path: str, drop_env=()) -> dict:
    """Run ``path --worker`` in a fresh process (no simulator, no kernel disk cache: generated sources are exec'd
    as before, no files in the user's cache) and return the JSON of its last ``{`` line; skips the test when the
    worker reports ``skip``. ``drop_env``: environment variables the worker must not inherit."""
    env = dict(os.environ)
    for k in drop_env:
        env.pop(k, None)
    env["NUMBA_ENABLE_CUDASIM"] = "0"
    env["TENSORFOLD_KERNEL_CACHE"] = "0"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, os.path.abspath(path), "--worker"], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=3600)
    assert p.returncode == 0, f"compile worker failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    data = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    if "skip" in data:
        pytest.skip(data["skip"])
    return data


def test_compile_tier():
    data = run_worker(__file__)
    results = data["results"]
    print(_format(results))
    if data["ptxas"] is None:
        print("ptxas not on PATH: registers and spills NOT checked (PTX compile only)")
    errors = [r for r in results if "error" in r]
    assert not errors, "compile errors:\n" + _format(errors)
    spills = [
        r
        for r in results
        if r.get("hot") and (r.get("spill_st", 0) or r.get("spill_ld", 0) or r.get("stack", 0))
    ]
    assert not spills, "hot kernels spill / use local memory:\n" + _format(spills)
    assert any("kernel" in r for r in results), "no kernels compiled"


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(pytest.main([__file__, "-s", "-q"]))
