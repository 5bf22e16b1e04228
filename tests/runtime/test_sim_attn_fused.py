"""Simulator tier for the runner with the attention merge fused into the partials launch
(``TENSORFOLD_ATTN_FUSED=1``, ``attention.launch``).

On the two-layer tiny model with the real GEMV and attention kernels (no host stand-ins): one stream's one-row
steps with the fused launch, the same steps on another slot with the two launches, and the same stream's rows in
two-row steps beside a stream of another length (fused) give the same logits and greedy ids bit for bit, and the
same caches. With the switch on, no separate merge is launched."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.conftest import make_runner
from tests.runtime.test_sim_forward import _caches_equal, _same_steps
from tensorfold.kernels import attention
from tensorfold.runtime import forward as F


def test_fused_attention_steps_equal_two_launches(micro, micro_arena, monkeypatch):
    rng = np.random.default_rng()
    run = make_runner(micro, micro_arena, kv="bf16", slots=4, ctx=48, rows=8, prompt_rows=48)
    P = [int(x) for x in rng.integers(0, 512, 37)]  # 38+ keys: two splits of 32
    Q = [int(x) for x in rng.integers(0, 512, 5)]
    T = len(P)
    for part in ([(0, P, 0)], [(1, P, 0)], [(2, P, 0), (3, Q, 0)]):
        run.forward(F.prompt_batch(part), logits=False)
    monkeypatch.setattr(run, "sim_stand_ins", False)
    ids = [int(x) for x in rng.integers(0, 512, 2)]
    merges = []
    real_merge = attention.launch_merge
    monkeypatch.setattr(attention, "launch_merge", lambda *a, **k: (merges.append(1), real_merge(*a, **k)))

    def steps(slots, lens, fused):
        monkeypatch.setenv("TENSORFOLD_ATTN_FUSED", "1" if fused else "0")
        out, n0 = [], len(merges)
        for k, t in enumerate(ids):
            lg, tk = run.forward(F.step_batch(slots, [t] * len(slots), [n + k for n in lens]), argmax=True)
            out.append((lg[0].copy(), int(tk[0])))
        return out, len(merges) - n0

    fused, n_fused = steps([0], [T], True)
    assert n_fused == 0
    plain, n_plain = steps([1], [T], False)
    assert n_plain > 0
    beside, _ = steps([2, 3], [T, len(Q)], True)
    _same_steps(fused, plain, beside)
    _caches_equal(run, 0, 1, T + len(ids))
    _caches_equal(run, 0, 2, T + len(ids))
    assert not np.asarray(run.buf.actr).any()


def test_switch_is_checked(monkeypatch):
    monkeypatch.setenv("TENSORFOLD_ATTN_FUSED", "yes")
    with pytest.raises(ValueError, match="TENSORFOLD_ATTN_FUSED"):
        attention.fused_on()
    monkeypatch.setenv("TENSORFOLD_ATTN_FUSED", "")
    assert attention.fused_on() is False
