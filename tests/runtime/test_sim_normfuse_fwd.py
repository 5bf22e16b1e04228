"""The runner's fused residual add + RMSNorm (``Runner._linear(..., sole=True)``: the norm before in_all, qkv and
gate | up taken into those GEMVs' x loads, the residual ping-ponging between ``buf.h`` and ``buf.h2``), on the
micro model in the simulator with the real GEMV kernels (no host stand-ins) and first-kernel plans everywhere:
a window's logits with the fusion equal those with ``TENSORFOLD_NORM_FUSE=0`` (the standalone norm kernel) bit for
bit, and the fused launches did run (counted)."""

import numpy as np

from tensorfold.kernels import affine as A
from tensorfold.runtime import forward as F
from tensorfold.runtime.arena import Arena

from conftest import make_runner


def test_norm_fused_forward_equals_unfused(micro, monkeypatch):
    rng = np.random.default_rng()
    arena = Arena.upload(micro.tensors, micro.config, progress=False)  # private: its plans are changed
    for ent in arena._lin.values():
        if ent["kind"] == "affine":
            ent["plan"] = A.GemvPlan(ent["out"], ent["in"], ent["bits"], ent["group"], 64, 1, True, 1, 2, True, 1,
                                     "pipe2")
    seen = []
    real = A.launch_qgemv

    def spy(*args, **kw):
        seen.append(kw.get("norm") is not None)
        return real(*args, **kw)

    monkeypatch.setattr(A, "launch_qgemv", spy)
    ids = [int(x) for x in rng.integers(0, 512, 2)]
    logits = []
    for fuse in ("0", "1"):  # a fresh runner each (a window forward leaves its rows in the caches)
        monkeypatch.setenv("TENSORFOLD_NORM_FUSE", fuse)
        r = make_runner(micro, arena, slots=1, ctx=8, rows=2, prompt_rows=0)
        r.sim_stand_ins = False
        seen.clear()
        logits.append(r.forward(F.window_batch([(0, ids, 0)]))[0])
        if fuse == "0":
            assert not any(seen)
    l0, l1 = logits
    assert sum(seen) >= 3, f"fused launches {sum(seen)} of {len(seen)}"  # in_all, qkv, two gate | up
    assert np.isfinite(l1).all()
    assert np.array_equal(l0.view(np.uint32), l1.view(np.uint32))
