"""The fused GDN layer kernel in the runtime (``TENSORFOLD_GDN_FUSED=1``: ``delta_rule.launch_fused`` replaces
conv + delta rule + gated RMSNorm in step / verify forwards) against the three-launch path on the two-layer tiny
cut (tests/runtime/conftest.py ``Micro``), fresh random token ids.

Oracles: the unfused runner (``0``) and the row-count choice (``auto``: fused for 1-row steps, three launches for
the 3-row window and tree) on the same prompt -- logits, recurrent state and conv tails after steps, a window and a
committed tree path equal bit for bit (the fused kernel runs the same conv fma order, recurrence body and norm
arithmetic) -- and the numpy ``ReferenceModel`` (test_sim_forward's tolerance, 2e-4). The switch is read at each
launch, so one runner per setting is enough.
"""

from __future__ import annotations

import numpy as np

from tests.runtime.conftest import make_runner

from tensorfold.reference.model import ReferenceModel
from tensorfold.runtime import forward as F

TOL = dict(rtol=2e-4, atol=2e-4)


def _ids(rng, n, V=512):
    return [int(t) for t in rng.integers(0, V, n)]


def _run(micro, arena, monkeypatch, mode, P, t, tree):
    monkeypatch.setenv("TENSORFOLD_GDN_FUSED", mode)
    run = make_runner(micro, arena, kv="bf16")
    assert run.gdn_fuse_ok
    T = len(P)
    run.forward(F.prompt_batch([(0, P, 0), (1, P, 0)]), logits=False)
    out = []
    for i, tok in enumerate(t):  # steps on slot 0
        l1, _ = run.forward(F.step_batch([0], [tok], [T + i]))
        out.append(l1[0])
    lw, _ = run.forward(F.window_batch([(1, t, T)]))  # the same tokens as a window on slot 1
    tb = F.tree_batch([(1, tree, [-1, 0, 0], T + len(t))])
    lt, _ = run.forward(tb)
    run.commit(tb, [2])
    cc = run.caches
    return dict(steps=np.stack(out), window=lw, tree=lt, rec=cc.rec.copy_to_host(), conv=cc.conv.copy_to_host())


def test_fused_runtime_equals_unfused(micro, micro_arena, monkeypatch):
    rng = np.random.default_rng(11)
    P, t, tree = _ids(rng, 2), _ids(rng, 3), _ids(rng, 3)
    fu = _run(micro, micro_arena, monkeypatch, "1", P, t, tree)
    un = _run(micro, micro_arena, monkeypatch, "0", P, t, tree)
    # "auto": the 1-row steps fused, the 3-row window and tree on the three launches
    au = _run(micro, micro_arena, monkeypatch, "auto", P, t, tree)
    for other in (un, au):
        for k in ("rec", "conv", "steps", "window", "tree"):
            np.testing.assert_array_equal(fu[k], other[k], err_msg=k)
    assert not np.isnan(fu["steps"]).any()
    np.testing.assert_array_equal(fu["window"], fu["steps"])  # window rows == steps
    ref = ReferenceModel(micro.tensors, micro.config, kv_cache="bf16")
    s = ref.new_state()
    ref.prompt(s, P)
    for i, tok in enumerate(t):
        np.testing.assert_allclose(fu["steps"][i], ref.step(s, tok), **TOL)
