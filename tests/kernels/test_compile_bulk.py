"""Compile tier for the bulk-copy forms (``kernels._bulk``: ``cp.async.bulk`` + mbarriers, sm_90 only).

``test_compile`` compiles every kernel for cc 8.0, 8.9 and 9.0 from one front end, so it cannot hold kernels that
only sm_90 assembles. Here the qgemv bulk-ring kernels the runtime would launch under ``TENSORFOLD_GEMV3_BULK`` --
9B gate + up (plain and the SwiGLU epilogue), 9B down (several chunks, also deferred), 1-4 rows and 8 rows, 2 / 4
/ 8 stages -- and ``bench_gemv3``'s bulk floor kernel are compiled to PTX for cc 9.0 with the PDL instructions on
and assembled by ``ptxas`` (when on PATH), without launch bounds (as ``qgemv.get_kernel`` builds them). Checks:
the PTX holds the bulk copy and the mbarrier wait; the first bulk copy comes before ``griddepcontrol.wait`` (the
ring starts filling while the previous kernel runs); ptxas reports no spills or stack for the GEMV kernels.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _worker() -> int:
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from tests.kernels import test_compile as tc

    err = tc._setup_compiler()
    if err:
        print(json.dumps({"skip": err}))
        return 0
    from numba import cuda

    from tensorfold.kernels import _device
    from tensorfold.kernels import qgemv as Q

    _device.pdl_target(True)
    tc._STATE["dev"].compute_capability = (9, 0)
    out = []
    cases = []
    for o, i, glu, defer in ((24576, 4096, False, False), (24576, 4096, True, False), (4096, 12288, False, False),
                             (4096, 12288, False, True)):
        p = Q.plan(o, i, 4, 64)
        for xm in (2, 1):
            for bk in (2, 4, 8):
                if bk != 4 and (glu or defer or xm == 1):
                    continue
                f = Q.get_pyfunc(4, 64, 1, p.nw, p.mt, p.cg, p.u, p.depth, glu=glu, sw=True, xh=xm, defer=defer,
                                 bk=bk)
                cases.append((f, Q._SIG, True))
    import bench_gemv3

    cases.append((bench_gemv3._bulk_kernel().py_func, "void(uint32[::1], uint32[::1], int64, int64)", False))
    for fn, sig, gemv in cases:
        rec = {"kernel": fn.__name__, "gemv": gemv}
        try:
            ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"compile: {type(e).__name__}: {str(e)[:1500]}"
            out.append(rec)
            continue
        ib, iw = ptx.find("cp.async.bulk.shared"), ptx.find("griddepcontrol.wait")
        rec.update(bulk=ib >= 0, try_wait="mbarrier.try_wait.parity" in ptx, bulk_before_wait=(0 <= ib < iw))
        rep = tc._run_ptxas(ptx, (9, 0))
        rec["ptxas"] = rep
        out.append(rec)
    print(json.dumps({"results": out}))
    return 0


def test_bulk_forms_sm90():
    from test_compile import run_worker

    res = run_worker(__file__)["results"]
    assert len(res) >= 8
    for r in res:
        print(r)
        assert "error" not in r, r
        assert r["bulk"] and r["try_wait"], r
        rep = r["ptxas"]
        if rep is not None:
            assert "error" not in rep, r
            if r["gemv"]:
                assert not (rep.get("spill_st") or rep.get("spill_ld") or rep.get("stack")), r
        if r["gemv"]:
            assert r["bulk_before_wait"], r


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(pytest.main([__file__, "-s", "-q"]))
