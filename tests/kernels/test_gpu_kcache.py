"""GPU tier: numba's on-disk kernel cache under ``_kcache`` (on by default on a GPU). Two fresh processes run a
hand-written kernel (``norms.rms_norm_k``, through ``_kcache.kjit``) and a generated one (qgemv) on the same fresh
random inputs with one cache directory: the first compiles and writes index / data files there, the second loads
them (no new data file appears) and gives the same bits; both meet the numpy oracles. And ``_precompile``: kernels
compiled ahead by forked workers give the bits of kernels compiled in-process."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from numba import cuda
    from tensorfold.kernels import norms, qgemv as Q
    d = np.load(sys.argv[1])
    x, w = d["x"], d["w"]
    y = cuda.device_array(x.shape, np.float32)
    norms.launch_rms_norm(cuda.to_device(x), cuda.to_device(w), y, 1e-6, vec=False)
    P, S, B, xv = d["P"], d["S"], d["B"], d["xv"]
    p = Q.V3Plan(P.shape[0], xv.shape[1], 4, 64, nw=4, mt=1, cg=4, u=4, depth=1, blocks=8)
    yq = cuda.device_array((xv.shape[0], P.shape[0]), np.float32)
    ws = cuda.device_array((p.ks, xv.shape[0], P.shape[0]), np.float32)
    Q.launch(cuda.to_device(P), cuda.to_device(S), cuda.to_device(B), cuda.to_device(xv), yq, p, xv.shape[0], ws=ws)
    np.savez(sys.argv[2], y=y.copy_to_host(), yq=yq.copy_to_host())
""")


def _files(root):
    out = set()
    for d, _, fs in os.walk(root):
        out |= {os.path.join(d, f) for f in fs if f.endswith((".nbi", ".nbc"))}
    return out


def test_cache_written_then_loaded(tmp_path):
    x, w, P, S, B, xv = _inputs(tmp_path, (5, 2048), 2)
    (tmp_path / "run.py").write_text(_SCRIPT)
    env = dict(os.environ, TENSORFOLD_KERNEL_CACHE="1", TENSORFOLD_CACHE_DIR=str(tmp_path / "cache"),
               NUMBA_ENABLE_CUDASIM="0")
    outs, seen = [], []
    for k in range(2):
        r = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "in.npz"),
                            str(tmp_path / f"out{k}.npz")], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        outs.append(np.load(tmp_path / f"out{k}.npz"))
        seen.append(_files(tmp_path / "cache"))
    nbc0 = {f for f in seen[0] if f.endswith(".nbc")}
    assert any("norms" in f for f in nbc0) and any("qgemv3" in f for f in nbc0), sorted(seen[0])
    assert {f for f in seen[1] if f.endswith(".nbc")} == nbc0, "the second process compiled again"
    _same_bits_and_oracles(outs, x, w, P, S, B, xv)


def _inputs(tmp_path, xshape, xrows):
    """Fresh random inputs, saved to in.npz: x / w for the RMSNorm, a 4-bit g64 256 x 1024 weight and xrows x rows
    for qgemv."""
    from tensorfold.model import quant

    rng = np.random.default_rng()
    x = (rng.standard_normal(xshape) * 2).astype(np.float32)
    w = (1 + 0.3 * rng.standard_normal(xshape[1])).astype(np.float32)
    P, S, B = quant.quantize(rng.standard_normal((256, 1024)).astype(np.float32), 4, 64)
    xv = rng.standard_normal((xrows, 1024)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, w=w, P=P, S=S, B=B, xv=xv)
    return x, w, P, S, B, xv


def _same_bits_and_oracles(outs, x, w, P, S, B, xv):
    """Both processes' outputs bit-equal, and the first within tolerance of the numpy oracles (RMSNorm 1e-5,
    dequantized GEMV 2e-2, relative to the largest value)."""
    from tensorfold.model import quant
    from tensorfold.reference import ops

    for key in ("y", "yq"):
        assert np.array_equal(outs[0][key].view(np.uint32), outs[1][key].view(np.uint32)), key
    ref = ops.rms_norm(x.astype(np.float64), w.astype(np.float64), 1e-6)
    assert np.abs(outs[0]["y"] - ref).max() <= 1e-5 * np.abs(ref).max()
    refq = xv.astype(np.float64) @ quant.dequantize(P, S, B, 4, 64).astype(np.float64).T
    assert np.abs(outs[0]["yq"] - refq).max() <= 2e-2 * np.abs(refq).max()


_AHEAD = textwrap.dedent("""
    import json
    import sys
    import numpy as np
    from numba import cuda
    from tensorfold.kernels import _precompile, norms, qgemv as Q
    d = np.load(sys.argv[1])
    x, w, P, S, B, xv = (d[k] for k in ("x", "w", "P", "S", "B", "xv"))
    p = Q.V3Plan(P.shape[0], xv.shape[1], 4, 64, nw=4, mt=1, cg=4, u=4, depth=1, blocks=8)
    args = [cuda.to_device(a) for a in (x, w, P, S, B, xv)]
    y = cuda.device_array(x.shape, np.float32)
    yq = cuda.device_array((xv.shape[0], P.shape[0]), np.float32)
    ws = cuda.device_array((p.ks, xv.shape[0], P.shape[0]), np.float32)

    def run():
        norms.launch_rms_norm(args[0], args[1], y, 1e-6, vec=False)
        Q.launch(args[2], args[3], args[4], args[5], yq, p, xv.shape[0], ws=ws)

    info = {}
    if sys.argv[3] == "ahead":
        with _precompile.recording() as rec:
            run()
        a = _precompile.compile_ahead(rec, n=2)
        info = {"compiled": len(a.compiled), "missing": a.missing, "noted": len(rec),
                "cubins": sum(lib._ensure_cc(None) in lib._cubin_cache  # linked for the target a launch asks for
                              for lib in (dd.overloads[at]._codelibrary for dd, at in a.compiled))}
    run()
    np.savez(sys.argv[2], y=y.copy_to_host(), yq=yq.copy_to_host())
    print(json.dumps(info))
""")


def test_compile_ahead_then_run(tmp_path):
    """``_precompile``: the launches are noted (not made), two forked workers compile them into a fresh cache, the
    parent loads them and links their cubins, then runs them: the same bits as a process that compiled them itself
    (workers off, its own fresh cache), and the numpy oracles."""
    x, w, P, S, B, xv = _inputs(tmp_path, (3, 1024), 3)
    (tmp_path / "run.py").write_text(_AHEAD)
    outs, infos = [], []
    for k, mode in enumerate(("ahead", "plain")):
        env = dict(os.environ, TENSORFOLD_KERNEL_CACHE="1", TENSORFOLD_CACHE_DIR=str(tmp_path / f"cache{k}"),
                   NUMBA_ENABLE_CUDASIM="0")
        r = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "in.npz"),
                            str(tmp_path / f"out{k}.npz"), mode], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        outs.append(np.load(tmp_path / f"out{k}.npz"))
        infos.append(__import__("json").loads(r.stdout.strip().splitlines()[-1]))
    a = infos[0]
    assert a["noted"] >= 2 and a["compiled"] >= 2 and a["missing"] == 0 and a["cubins"] == a["compiled"], a
    _same_bits_and_oracles(outs, x, w, P, S, B, xv)
