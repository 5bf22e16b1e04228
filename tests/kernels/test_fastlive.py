"""Compile tier for ``tensorfold.kernels._fastlive`` (numba's liveness and SSA passes, made faster).

- The live map against numba's own ``analysis.compute_live_map`` on random control-flow graphs (loops, branches,
  unreachable blocks) with random use / def sets: equal block for block.
- A sample of kernels compiled to sm_90 PTX with numba's passes and then with ours, in one worker process: the
  same text once numba's per-process name counters (``B<n>v<n>B`` in mangled names, ``_cudapy_smem_<n>``) are
  normalised and the order of the environment globals' declarations is ignored. The sample includes the biggest
  generated kernel of the 9B decode (the SwiGLU gate+up GEMV with the per-warp completion forms) and kernels with
  loops, branches and shuffles; the worker also reports each compile's seconds.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = (("qgemv", "qgemv3_b4_g64_n1_w4_m1_c16_u4_d1_glu_sw_xz_e2_q_va"),
          ("delta_rule", "gdn_fused_step"), ("attention", "attn_partials_bf16_g4"), ("sample", "amax_k"))


def _numba_live_map():
    from numba.cuda.core import analysis

    from tensorfold.kernels import _fastlive

    orig = _fastlive._STATE["original"]
    return orig[0] if orig else analysis.compute_live_map


def test_live_map_matches_numba_on_random_graphs():
    pytest.importorskip("numba.cuda.core.controlflow")
    from numba.cuda.core.controlflow import CFGraph

    from tensorfold.kernels._fastlive import compute_live_map

    numba_map = _numba_live_map()
    assert numba_map is not compute_live_map
    rng = random.Random(int(time.time()))
    nonempty = 0
    for _ in range(400):
        n = rng.randint(1, 60)
        g = CFGraph()
        for i in range(n):
            g.add_node(i)
        for i in range(n):
            for _ in range(rng.randint(0, 3)):  # mostly forward edges, some back edges (loops) and long jumps
                j = rng.randrange(n) if rng.random() < 0.3 else min(n - 1, i + rng.randint(1, 3))
                g.add_edge(i, j)
        g.set_entry_point(0)
        g.process()
        names = [f"v{k}" for k in range(rng.randint(1, 120))]
        use = {i: set(rng.sample(names, rng.randint(0, min(9, len(names))))) for i in range(n)}
        dfn = {i: set(rng.sample(names, rng.randint(0, min(9, len(names))))) for i in range(n)}
        blocks = {i: None for i in range(n)}
        want = numba_map(g, blocks, use, dfn)
        got = compute_live_map(g, blocks, use, dfn)
        assert got == want
        nonempty += sum(bool(v) for v in want.values())
    assert nonempty > 1000  # the graphs do have live variables to propagate


def _normalise(ptx: str):
    ptx = re.sub(r"B\d+v\d+B", "BvB", ptx)
    ptx = re.sub(r"_cudapy_smem_\d+", "_cudapy_smem_N", ptx)
    lines = ptx.splitlines()
    env = sorted(x for x in lines if x.startswith(".common .global"))
    return env, [x for x in lines if not x.startswith(".common .global")]


def _worker() -> int:
    sys.path.insert(0, ROOT)
    from tests.kernels import test_compile as tc

    err = tc._setup_compiler()
    if err:
        print(json.dumps({"skip": err}))
        return 0
    from numba import cuda

    from tensorfold.kernels import _device, _fastlive  # noqa: F401 -- _device installs the passes

    if not _fastlive.installed():
        print(json.dumps({"not_installed": "tensorfold.kernels._fastlive did not install into this numba-cuda"}))
        return 0
    out = []
    for modname, name in SAMPLE:
        hit = tc.find_spec(modname, name)
        if hit is None:
            return 0
        fn, sig = hit
        rec = {"kernel": name}
        for mode in ("numba", "fast"):
            (_fastlive.uninstall if mode == "numba" else _fastlive.install)()
            t0 = time.time()
            ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
            rec[f"{mode}_s"] = round(time.time() - t0, 2)
            rec[mode] = _normalise(ptx)
        rec["same"] = rec.pop("numba") == rec.pop("fast")
        out.append(rec)
    print(json.dumps({"results": out}))
    return 0


def test_same_ptx_with_and_without():
    from test_compile import run_worker

    data = run_worker(__file__)
    assert "not_installed" not in data, data
    assert "missing" not in data, f"kernel {data.get('missing')} not in COMPILE_SPECS; it has {data.get('have')}"
    res = data["results"]
    assert len(res) == len(SAMPLE)
    for r in res:
        print(r)
        assert r["same"], f"{r['kernel']}: PTX differs with tensorfold's liveness / SSA passes"


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(pytest.main([__file__, "-s", "-q"]))
