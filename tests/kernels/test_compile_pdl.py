"""Compile tier for the programmatic-dependent-launch forms (``_device.pdl_wait`` / ``pdl_trigger``, sm_90 only).

``test_compile`` compiles every kernel with the PDL instructions off (its front end is shared by cc 8.0, 8.9 and
9.0, and sm_80 has no ``griddepcontrol``). Here a sample of the decode kernels -- an elementwise kernel, the vector
add + RMSNorm, the tensor-core GEMV (pipelined form), the bandwidth GEMV ``qgemv3``, the fused GDN step, the
attention partials and the sampler's first kernel -- is compiled to PTX for cc 9.0 with the instructions on and
assembled by ``ptxas`` (when on PATH), and for cc 8.0 with them off. Checks: the sm_90 PTX holds both
instructions; the GEMVs issue a weight load (``ld.global.nc``) or, qgemv's swept default, an L2 prefetch of weights
(``prefetch.global.L2``) before the wait, which is the point of PDL for them;
the sm_80 PTX holds neither; ``_pdl.aware`` accepts every one of these kernels.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (module, kernel, what a GEMV issues before its wait: "ld" a weight load, "pf" an L2 prefetch of weights, "" none
# checked). qgemv's names carry its default switches: "_q" the quad group sums (TENSORFOLD_GEMV3_XQ), "_e2" x first
# with the first tile's weights prefetched into L2 (TENSORFOLD_GEMV3_PRE=2, swept plans; the MLX-layout kernel keeps
# its register loads before the wait); "_sw_xz" the swept 1-4-row bf16-x form that one-stream decode launches;
# "_cp" its completion loads past the last chunk predicated off (TENSORFOLD_GEMV3_CPRED=auto: 1-4-row plain kernels).
SAMPLE = (("activations", "silu_mul_fused_k", ""), ("norms", "add_rms_norm_v4", ""),
          ("affine", "qgemv_tc_b4_g64_n1_w4_m2_u4_bf16_p", "ld"),
          ("qgemv", "qgemv3_b4_g64_n1_w4_m1_c16_u4_d1_q_va", "ld"),
          ("qgemv", "qgemv3_b4_g64_n1_w4_m1_c16_u4_d1_sw_xz_e2_q_va_cp", "pf"),
          ("qgemv", "qgemv3_b4_g64_n1_w4_m1_c16_u4_d1_sw_xh_e2_q_va", "pf"),
          ("delta_rule", "gdn_fused_step", ""), ("attention", "attn_partials_bf16_g4", ""),
          ("sample", "amax_k", ""))


def _worker() -> int:
    sys.path.insert(0, ROOT)
    from tests.kernels import test_compile as tc

    err = tc._setup_compiler()
    if err:
        print(json.dumps({"skip": err}))
        return 0
    from numba import cuda

    from tensorfold.kernels import _device, _pdl

    out = []
    for modname, name, gemv in SAMPLE:
        hit = tc.find_spec(modname, name)
        if hit is None:
            return 0
        fn, sig = hit
        rec = {"kernel": name, "module": modname, "aware": _pdl.aware(fn)}
        for on, cc in ((True, (9, 0)), (False, (8, 0))):
            _device.pdl_target(on)
            tc._STATE["dev"].compute_capability = cc
            ptx, _ = cuda.compile_ptx(fn, sig, cc=cc)
            key = f"sm{cc[0]}{cc[1]}"
            iw, it = ptx.find("griddepcontrol.wait"), ptx.find("griddepcontrol.launch_dependents")
            rec[key] = {"wait": iw >= 0, "trigger": it >= 0}
            if gemv and on:
                il = ptx.find("ld.global.nc" if gemv == "ld" else "prefetch.global.L2")
                rec[key]["load_before_wait"] = 0 <= il < iw
            # the .nc loads by type: weights only (u32 words; a norm's f32 weight), never activations (_device's rule)
            rec[key]["nc"] = sorted(set(re.findall(r"ld\.global\.nc(?:\.v\d)?\.(\w+)", ptx)))
            rep = tc._run_ptxas(ptx, cc)
            rec[key]["ptxas"] = None if rep is None else (rep["error"] if "error" in rep else "ok")
        out.append(rec)
    print(json.dumps({"results": out}))
    return 0


def test_pdl_forms_sm90():
    from test_compile import run_worker

    data = run_worker(__file__)
    assert "missing" not in data, f"kernel {data.get('missing')} not in COMPILE_SPECS; it has {data.get('have')}"
    res = data["results"]
    assert len(res) == len(SAMPLE)
    for r in res:
        print(r)
        assert r["aware"], r
        assert r["sm90"]["wait"] and r["sm90"]["trigger"], r
        assert not r["sm80"]["wait"] and not r["sm80"]["trigger"], r
        for k in ("sm90", "sm80"):
            assert r[k]["ptxas"] in (None, "ok"), r
        if "load_before_wait" in r["sm90"]:
            assert r["sm90"]["load_before_wait"], r
        # session 33: a .nc load of x let ptxas read it before griddepcontrol.wait (stale x in the 2B verify graphs'
        # LM head). Only weights may be read through .nc: u32 words in the GEMVs, f32 norm weights in the norms.
        allowed = {"u32"} if r["module"] in ("affine", "qgemv") else {"f32"} if r["module"] == "norms" else set()
        assert set(r["sm90"]["nc"]) <= allowed, f"{r['kernel']}: .nc loads of {r['sm90']['nc']} (allowed {allowed})"


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(pytest.main([__file__, "-s", "-q"]))
