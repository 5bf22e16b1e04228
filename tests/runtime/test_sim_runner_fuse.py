"""Simulator tier for the runner's fused add + RMSNorm (``TENSORFOLD_NORM_FUSE=1``: a one-row add + RMSNorm runs
inside the next GEMV of x, ``Runner._take_norm``; the residual alternates between two buffers).

On the two-layer tiny model with the real GEMV and attention kernels (no host stand-ins): one stream's one-row
steps with the fusion, the same steps on another slot without it, and the same stream's rows in two-row steps
beside another stream (standalone norms: fusion is one row only) give the same logits and greedy ids bit for bit,
and the same caches. The fused run must actually fuse (a count of the norms issued inside GEMVs), and a one-row
verify window fuses too and equals its step."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.conftest import make_runner
from tests.runtime.test_sim_forward import _caches_equal, _same_steps
from tensorfold.runtime import forward as F


@pytest.mark.variant  # an opt-in form (off by default, a tie on the H200): run with -m variant
def test_fused_norm_steps_equal_standalone(micro, micro_arena, monkeypatch):
    rng = np.random.default_rng()
    run = make_runner(micro, micro_arena, kv="bf16", slots=4, ctx=32, rows=8, prompt_rows=32)
    P = [int(x) for x in rng.integers(0, 512, 9)]
    Q = [int(x) for x in rng.integers(0, 512, 5)]
    T = len(P)
    run.forward(F.prompt_batch([(0, P, 0), (1, P, 0), (2, P, 0), (3, Q, 0)]), logits=False)
    monkeypatch.setattr(run, "sim_stand_ins", False)
    ids = [int(x) for x in rng.integers(0, 512, 1)]
    L = micro.config.num_hidden_layers

    def steps(slot, fuse):
        monkeypatch.setenv("TENSORFOLD_NORM_FUSE", "1" if fuse else "0")
        out, n0 = [], run.n_fused
        for k, t in enumerate(ids):
            lg, tk = run.forward(F.step_batch([slot], [t], [T + k]), argmax=True)
            out.append((lg[0].copy(), int(tk[0])))
        return out, run.n_fused - n0

    fused, nf = steps(0, True)
    assert nf == 2 * L * len(ids)  # every add + RMSNorm of every step, the last one into the head
    plain, n_plain = steps(1, False)
    assert n_plain == 0
    monkeypatch.setenv("TENSORFOLD_NORM_FUSE", "1")
    beside, n0 = [], run.n_fused
    for k, t in enumerate(ids):  # two rows: standalone norms
        lg, tk = run.forward(F.step_batch([2, 3], [t, t], [T + k, len(Q) + k]), argmax=True)
        beside.append((lg[0].copy(), int(tk[0])))
    assert run.n_fused == n0
    _same_steps(fused, plain, beside)
    _caches_equal(run, 0, 1, T + len(ids))
    _caches_equal(run, 0, 2, T + len(ids))
    # a one-row verify window (mode "verify") fuses as well and gives the step's logits
    t = int(rng.integers(0, 512))
    n0 = run.n_fused
    lw, _ = run.forward(F.window_batch([(0, [t], T + len(ids))], commit=False))
    assert run.n_fused - n0 == 2 * L
    monkeypatch.setenv("TENSORFOLD_NORM_FUSE", "0")
    ls, _ = run.forward(F.step_batch([1], [t], [T + len(ids)]))
    assert np.array_equal(lw.view(np.uint32), ls.view(np.uint32))
