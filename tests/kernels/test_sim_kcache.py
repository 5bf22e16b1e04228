"""Generated kernels through module files (``TENSORFOLD_KERNEL_CACHE=1``, ``tensorfold.kernels._kcache``), in the
simulator: the file-backed function is the generated source, gives the same bits as the ``exec``'d one on fresh
random weights, is written once (a second build of the same kernel leaves the file and its time stamp alone), and
a directory that cannot be written falls back to ``exec``. (numba's on-disk kernel cache itself needs a GPU.)"""

import os

import numpy as np

from tensorfold.kernels import _kcache
from tensorfold.kernels import affine as A
from tensorfold.kernels import qgemv as Q
from tensorfold.model import quant

rng = np.random.default_rng()


def _qgemv_run(P, S, B, x, p):
    y = np.full((x.shape[0], P.shape[0]), np.nan, np.float32)
    ws = np.full((p.ks, x.shape[0], P.shape[0]), np.nan, np.float32)
    Q.launch(P, S, B, x, y, p, x.shape[0], ws=ws)
    return y


def test_files_same_bits_written_once(monkeypatch, tmp_path):
    out, K, bits, group = 40, 256, 4, 64
    P, S, B = quant.quantize(rng.standard_normal((out, K)).astype(np.float32), bits, group)
    x = (rng.standard_normal((3, K)) * 3).astype(np.float32)
    p = Q.V3Plan(out, K, bits, group, nw=2, mt=1, cg=2, u=2, depth=1, blocks=2)
    monkeypatch.setattr(Q, "_KCACHE", {})
    monkeypatch.delenv("TENSORFOLD_KERNEL_CACHE", raising=False)
    y0 = _qgemv_run(P, S, B, x, p)
    f0 = Q.get_pyfunc(bits, group, 1, p.nw, p.mt, p.cg, p.u, p.depth)
    assert not getattr(f0, "_tf_file", False)

    monkeypatch.setenv("TENSORFOLD_KERNEL_CACHE", "1")
    monkeypatch.setenv("TENSORFOLD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(Q, "_KCACHE", {})
    y1 = _qgemv_run(P, S, B, x, p)
    assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32))
    f1 = Q.get_pyfunc(bits, group, 1, p.nw, p.mt, p.cg, p.u, p.depth)
    path = f1.__code__.co_filename
    assert f1._tf_file and path.startswith(str(tmp_path)) and os.path.dirname(path) == _kcache.cache_dir()
    with open(path) as f:
        assert f1._tf_source in f.read()
    t0 = os.stat(path).st_mtime_ns
    monkeypatch.setattr(Q, "_KCACHE", {})
    f2 = Q.get_pyfunc(bits, group, 1, p.nw, p.mt, p.cg, p.u, p.depth)
    assert f2.__code__.co_filename == path and os.stat(path).st_mtime_ns == t0

    # the first tensor-core kernel through the same path
    monkeypatch.setattr(A, "_KCACHE", {})
    plan = A.plan_tc(out, K, bits, group)
    y = np.full((3, out), np.nan, np.float32)
    ws = np.full((plan.ks, 3, out), np.nan, np.float32) if plan.ks > 1 else None
    A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=ws)
    # both kernels against a float64 product of the dequantized weights: each error within 2e-5 of the row's sum of
    # |x||w| (observed at most 2.5e-6 over 30 seeds; a comparison of the two kernels to each other at 1e-5 of the
    # largest output was flaky, since each reorders its sums differently)
    W = quant.dequantize(P, S, B, bits, group).astype(np.float64)
    ref, mag = x.astype(np.float64) @ W.T, np.abs(x).astype(np.float64) @ np.abs(W).T
    for got in (y0, y):
        assert np.all(np.abs(got - ref) <= 2e-5 * mag)
    assert any(getattr(f, "_tf_file", False) for f in A._KCACHE.values() if callable(f) and hasattr(f, "__code__"))


def test_unwritable_directory_falls_back(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TENSORFOLD_KERNEL_CACHE", "1")
    monkeypatch.setenv("TENSORFOLD_CACHE_DIR", str(blocker))
    monkeypatch.setattr(Q, "_KCACHE", {})
    f = Q.get_pyfunc(4, 64, 1, 2, 1, 2, 2, 1)
    assert not getattr(f, "_tf_file", False) and f.__code__.co_filename.startswith("<tensorfold.kernels.qgemv")


def test_default_and_switch(monkeypatch):
    """Unset: module files on a GPU, off in the simulator; "1" / "0" force either way."""
    from tensorfold.kernels._device import IS_SIM

    monkeypatch.delenv("TENSORFOLD_KERNEL_CACHE", raising=False)
    assert _kcache.files_on() is (not IS_SIM)
    monkeypatch.setenv("TENSORFOLD_KERNEL_CACHE", "0")
    assert not _kcache.files_on() and not _kcache.cache_on()
    monkeypatch.setenv("TENSORFOLD_KERNEL_CACHE", "1")
    assert _kcache.files_on()
    assert _kcache.cache_on() is (not IS_SIM)


def _captures_function():
    def helper(v):
        return v

    def kern(x):
        x[0] = helper(x[0])
    return kern


def _captures_flags(flag, width):
    def kern(x):
        if flag:
            x[0] = width
    return kern


def test_cacheable():
    """Plain module functions and closures over constants can be keyed by numba's cache; closures over other objects
    and exec'd sources (no file) cannot."""
    from tensorfold.kernels import delta_rule, norms

    assert _kcache.cacheable(norms.rms_norm_k.py_func)
    assert _kcache.cacheable(delta_rule.gdn_step)  # closure over two bools
    assert _kcache.cacheable(_captures_flags(True, np.int32(3)))
    assert _kcache.cacheable(_captures_flags(False, (1, 2.5, "x")))
    assert not _kcache.cacheable(_captures_function())
    glb: dict = {}
    exec(compile("def f(x):\n    x[0] = 1\n", "<generated>", "exec"), glb)
    assert not _kcache.cacheable(glb["f"])
    # variants of a module-level template (globals overridden, no closure): cacheable, each under its own name
    from tensorfold.kernels import attention, embedding, kv8

    for fn in (embedding.embed_affine_bf16_py, embedding.embed_affine_f32_py, kv8.qk_norm_rope_store_bf16,
               kv8.qk_norm_rope_store_e4m3, attention._partials_py("bf16", 4)):
        assert _kcache.cacheable(fn), fn
    names = {fn.__qualname__ for fn in (kv8.qk_norm_rope_store_f32, kv8.qk_norm_rope_store_bf16,
                                        kv8.qk_norm_rope_store_e4m3)}
    assert len(names) == 3
    assert kv8.qk_norm_rope_store_e4m3.__globals__["QUANT"] and not kv8.qk_norm_rope_store_bf16.__globals__["QUANT"]


def test_variant_overrides_globals_only():
    """``_kcache.variant``: the template's code with some globals replaced; the template and its module untouched."""
    from tensorfold.kernels import kv8

    v = _kcache.variant(kv8._qk_norm_rope_store, "probe_variant", QUANT=True)
    assert v.__code__ is kv8._qk_norm_rope_store.__code__ and v.__qualname__ == v.__name__ == "probe_variant"
    assert v.__globals__["QUANT"] is True and kv8.QUANT is False and v.__globals__["NT"] == kv8.NT


def test_stats_counts_the_dispatchers_jit_made():
    """``_kcache.stats`` (start-up reports): one more dispatcher for each ``jit``; its counters are sums that never
    go negative (nothing is compiled in the simulator, so the cache counters may stay 0)."""
    from tensorfold.kernels import _kcache

    def _k(a):
        a[0] = 1.0

    s0 = _kcache.stats()
    _kcache.jit(_k)
    _kcache.jit(_k)
    s1 = _kcache.stats()
    assert s1["dispatchers"] == s0["dispatchers"] + 2
    assert min(s1.values()) >= 0 and s1["kernels"] >= s0["kernels"]
