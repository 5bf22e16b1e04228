"""Compile tier for the bulk-copy helpers (``kernels._bulk``: ``cp.async.bulk`` + mbarriers, sm_90 only).

``test_compile`` compiles every kernel for cc 8.0, 8.9 and 9.0 from one front end, so it cannot hold kernels that
only sm_90 assembles. Here ``bench_gemv3``'s bulk floor kernel (per-warp rings filled by bulk copies, the only user
of the helpers since session 26 removed the qgemv form built on them) is compiled to PTX for cc 9.0 and assembled
by ``ptxas`` (when on PATH). Checks: the PTX holds the mbarrier init, the bulk copy with its ``expect_tx``, the
parity wait and both fences; ptxas accepts it with no spills or stack. The PDL-aware regions read beside it
(``bench_kernels.py --floor``'s floor of a decode GEMV) must be seen as aware by ``_pdl`` and carry both the
dependency wait and the signal to dependents, or under ``--pdl`` it would not chain as the GEMVs do.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WANT = ("mbarrier.init.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64", "cp.async.bulk.shared",
        "mbarrier.try_wait.parity.shared::cta.b64", "fence.mbarrier_init", "fence.proxy.async.shared::cta")
PDL_WANT = ("griddepcontrol.wait", "griddepcontrol.launch_dependents")


def _worker() -> int:
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from tests.kernels import test_compile as tc

    err = tc._setup_compiler()
    if err:
        print(json.dumps({"skip": err}))
        return 0
    from numba import cuda

    import bench_gemv3

    tc._STATE["dev"].compute_capability = (9, 0)

    def compile_one(fn, sig, want, **extra):
        rec = {"kernel": fn.__name__, **extra}
        try:
            ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
            rec["missing"] = [w for w in want if w not in ptx]
            rec["ptxas"] = tc._run_ptxas(ptx, (9, 0))
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"compile: {type(e).__name__}: {str(e)[:1500]}"
        return rec

    from tensorfold.kernels import _device, _pdl

    rec = compile_one(bench_gemv3._bulk_kernel().py_func, "void(uint32[::1], uint32[::1], int64, int64)", WANT)
    _device.pdl_target(True)  # the setup turns the sm_90-only instructions off for its multi-cc front end
    fn = bench_gemv3._region_kernel(aware=True).py_func
    rec2 = compile_one(fn, "void(uint32[::1], uint32[::1])", PDL_WANT, aware=_pdl.aware(fn))
    print(json.dumps({"results": [rec, rec2]}))
    return 0


def test_bulk_helpers_sm90():
    from test_compile import run_worker

    rs = run_worker(__file__)["results"]
    for r in rs:
        print(r)
        assert "error" not in r, r
        assert not r["missing"], r
        rep = r["ptxas"]
        if rep is not None:
            assert "error" not in rep, r
            assert not (rep.get("spill_st") or rep.get("spill_ld") or rep.get("stack")), r
    assert [r["kernel"] for r in rs] == ["read_bulk", "aware_regions"], rs
    assert rs[1]["aware"], rs[1]


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(pytest.main([__file__, "-s", "-q"]))
