"""Compile tier for qgemv's launch bounds (session 18): one-n-tile kernels (1-4 rows) are compiled with
``launch_bounds=(32 nw, 3)``, the default plan's 3 blocks an SM, so that ptxas places the next iteration's weight
loads early in the loop.

Checks, for the 9B gate + up plan (plain and SwiGLU-epilogue forms) and the 27B down plan:
- ``qgemv.get_kernel`` passes those bounds for one n-tile, and none for two n-tiles or with a register cap. It
  names each compiled form apart (``_lb3``, ``_rN``), because numba's disk cache keys a kernel by name and
  signature only. The compile options are captured from the jit call, so no GPU is needed.
- The sm_90 PTX compiled with the bounds carries ``.maxntid 128`` and ``.minnctapersm 3``. When ptxas is on PATH,
  the kernel assembles within 170 registers (65,536 / 384 threads) without spills or a stack frame.
- The same for a one-row kernel with the fused add + RMSNorm prologue (opt-in; the 27B gate | up): the first form
  of the prologue, which kept the row's sums in registers across the block sum, spilled 56 bytes in the SwiGLU
  kernels under these bounds.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = ((24576, 4096, False), (24576, 4096, True), (5120, 17408, False))
FUSED = ((34816, 5120, True),)  # opt-in: one kernel (a qgemv compile costs 30-75 s of CI time)


def _worker() -> int:
    sys.path.insert(0, ROOT)
    from tests.kernels import test_compile as tc

    err = tc._setup_compiler()
    if err:
        print(json.dumps({"skip": err}))
        return 0
    from numba import cuda

    from tensorfold.kernels import _device, _kcache, qgemv as Q

    _device.pdl_target(True)
    seen = []
    _kcache.jit = lambda fn, **kw: seen.append((fn.__name__, kw)) or fn  # capture the options, compile nothing
    out = []
    for o, i, glu in SHAPES:
        p = Q.plan(o, i, 4, 64)
        rec = {"shape": [o, i, glu]}
        for nt, maxreg in ((1, 0), (2, 0), (1, 128)):
            seen.clear()
            Q._KCACHE.clear()
            Q.get_kernel(4, 64, nt, p.nw, p.mt, p.cg, p.u, p.depth, maxreg=maxreg, glu=glu)
            rec[f"nt{nt}_r{maxreg}"] = {"name": seen[0][0], "kw": {k: list(v) if isinstance(v, tuple) else v
                                                                     for k, v in seen[0][1].items()}}
        f = Q.get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth, glu=glu)
        ptx, _ = cuda.compile_ptx(f, Q._SIG, cc=(9, 0), launch_bounds=(32 * p.nw, 3))
        rec["maxntid"] = bool(re.search(rf"\.maxntid\s+{32 * p.nw}\b", ptx))
        rec["minnctapersm"] = bool(re.search(r"\.minnctapersm\s+3\b", ptx))
        rec["ptxas"] = tc._run_ptxas(ptx, (9, 0))
        rec["nw"] = p.nw
        out.append(rec)
    # a one-row kernel with the fused add + RMSNorm prologue (TENSORFOLD_NORM_FUSE=1) as the runtime launches it
    # (swept, bf16 x, 1-4 rows), under the same bounds
    from tensorfold.kernels import norms

    sig_n = Q._SIG[:-1] + ", float32[:, ::1], float32[:, ::1], float32[::1], float32[:, ::1], float32)"
    fused = []
    for o, i, glu in FUSED:
        p = Q.plan(o, i, 4, 64)
        f = Q.get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth, glu=glu, sw=True, xh=Q.xmode(1, p.xh),
                         nrm=norms.norm_v_geometry(i, False))
        ptx, _ = cuda.compile_ptx(f, sig_n, cc=(9, 0), launch_bounds=(32 * p.nw, 3))
        fused.append({"shape": [o, i, glu], "nw": p.nw, "ptxas": tc._run_ptxas(ptx, (9, 0))})
    print(json.dumps({"results": out, "fused": fused}))
    return 0


def test_qgemv_launch_bounds():
    from test_compile import run_worker

    res = run_worker(__file__, drop_env=("TENSORFOLD_GEMV3_LB",))
    for r in res["fused"]:  # the prologue's values must not push the one-row kernels into spills (session 36)
        print(r)
        rep = r["ptxas"]
        if rep is not None:
            assert "error" not in rep, rep
            assert rep["regs"] <= 65536 // (3 * 32 * r["nw"]), rep
            assert not (rep["spill_st"] or rep["spill_ld"] or rep["stack"]), rep
    for r in res["results"]:
        print(r)
        nthr = 32 * r["nw"]
        one, two, cap = r["nt1_r0"], r["nt2_r0"], r["nt1_r128"]
        assert one["kw"] == {"launch_bounds": [nthr, 3]} and one["name"].endswith("_lb3"), r
        assert "launch_bounds" not in two["kw"] and not two["name"].endswith("_lb3"), r
        assert cap["kw"] == {"max_registers": 128} and cap["name"].endswith("_r128"), r
        assert len({one["name"], two["name"], cap["name"]}) == 3, r
        assert r["maxntid"] and r["minnctapersm"], r
        rep = r["ptxas"]
        if rep is None:
            print("ptxas not on PATH: registers and spills NOT checked")
            continue
        assert "error" not in rep, rep
        assert rep["regs"] <= 65536 // (3 * nthr), rep
        assert not (rep["spill_st"] or rep["spill_ld"] or rep["stack"]), rep


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(pytest.main([__file__, "-s", "-q"]))
