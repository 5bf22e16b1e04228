"""Compile tier for the cluster-tail fused GDN kernels (``delta_rule.gdn_fused_step_cl`` / ``gdn_fused_recurrent_cl``,
sm_90 only: thread-block cluster barriers and distributed shared memory).

``test_compile`` compiles every kernel for cc 8.0, 8.9 and 9.0 from one front end, so it cannot hold kernels that
only sm_90 assembles. Here both kernels are compiled to PTX for cc 9.0 with their real signature (``SIG_FUSED``) and
the PDL instructions on (as the GPU build), and assembled by ``ptxas`` (when on PATH). Checks: the PTX holds the
cluster barrier's two halves and the ``mapa`` of the distributed reads, and none of the counter tail's fence or
atomic; the kernels are PDL-aware and read nothing through ``ld.global.nc`` (as ``test_compile_pdl`` asks of the
counter-tail kernel); ptxas accepts them with no spills or stack (they are hot kernels).
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WANT = ("barrier.cluster.arrive;", "barrier.cluster.arrive.relaxed;", "barrier.cluster.wait;", "mapa.u64",
        "griddepcontrol.wait")
NOT = ("membar.gl", "atom.")


def _worker() -> int:
    sys.path.insert(0, ROOT)
    from tests.kernels import test_compile as tc

    err = tc._setup_compiler()
    if err:
        print(json.dumps({"skip": err}))
        return 0
    from numba import cuda

    from tensorfold.kernels import _device, _pdl, delta_rule as dr

    tc._STATE["dev"].compute_capability = (9, 0)
    _device.pdl_target(True)
    out = []
    for fn in (dr.gdn_fused_step_cl, dr.gdn_fused_recurrent_cl):
        rec = {"kernel": fn.__name__}
        try:
            ptx, _ = cuda.compile_ptx(fn, dr.SIG_FUSED, cc=(9, 0))
            rec["aware"] = _pdl.aware(fn)
            rec["nc"] = sorted(set(re.findall(r"ld\.global\.nc(?:\.v\d)?\.(\w+)", ptx)))
            rec["missing"] = [w for w in WANT if w not in ptx]
            rec["unwanted"] = [w for w in NOT if w in ptx]
            rec["ptxas"] = tc._run_ptxas(ptx, (9, 0))
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"compile: {type(e).__name__}: {str(e)[:1500]}"
        out.append(rec)
    print(json.dumps({"results": out}))
    return 0


def test_cluster_tail_sm90():
    from test_compile import assert_clean, run_worker

    res = run_worker(__file__)["results"]
    assert len(res) == 2
    for r in res:
        print(r)
        assert_clean(r)
        assert not r["missing"] and not r["unwanted"], r
        # PDL-aware, and no .nc load (they read only what earlier kernels write, or parameters: test_compile_pdl)
        assert r["aware"] and not r["nc"], r


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(pytest.main([__file__, "-s", "-q"]))
