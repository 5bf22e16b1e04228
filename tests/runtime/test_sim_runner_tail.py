"""Simulator tier for the runner's norm tails (``TENSORFOLD_NORM_TAIL=1``: a one-row add + RMSNorm after an output
projection or down runs in that GEMV's last block, ``Runner._linear(then=)``, ``affine.launch_qgemv(tail=)``).

On the two-layer tiny model with the real GEMV and attention kernels (no host stand-ins): one stream's one-row
steps with the tails, the same steps on another slot without them, and the same stream's rows in two-row steps
beside another stream (standalone norms: tails are one row only) give the same logits and greedy ids bit for bit,
and the same caches. The tail run must actually take tails (a count of the norms issued as tails: every output
projection and down the whole-share form serves), and a one-row verify window takes them too and equals its step."""

from __future__ import annotations

import numpy as np

from tests.runtime.conftest import make_runner
from tests.runtime.test_sim_forward import _caches_equal, _same_steps
from tensorfold.kernels import affine
from tensorfold.runtime import forward as F


def _expected_tails(run, L):
    """How many of a one-row forward's add + RMSNorms its GEMVs can take as tails (affine.tail_ok per linear)."""
    n = 0
    for l, lt in enumerate(run.c.layer_types):
        mix = "linear_attn.out_proj" if lt == "linear_attention" else "self_attn.o_proj"
        for name in (f"layers.{l}.{mix}", f"layers.{l}.mlp.down_proj"):
            ent = run.arena.linear(name)
            n += ent["kind"] == "affine" and affine.tail_ok(ent["plan"], 1, False, ent["S"], ent["B"])
    return n


def test_norm_tail_steps_equal_standalone(micro, micro_arena, monkeypatch):
    rng = np.random.default_rng()
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
    run = make_runner(micro, micro_arena, kv="bf16", slots=4, ctx=32, rows=8, prompt_rows=32)
    P = [int(x) for x in rng.integers(0, 512, 9)]
    Q = [int(x) for x in rng.integers(0, 512, 5)]
    T = len(P)
    run.forward(F.prompt_batch([(0, P, 0), (1, P, 0), (2, P, 0), (3, Q, 0)]), logits=False)
    monkeypatch.setattr(run, "sim_stand_ins", False)
    ids = [int(x) for x in rng.integers(0, 512, 1)]
    L = micro.config.num_hidden_layers
    want = _expected_tails(run, L)
    assert want > 0, "the tiny model has no GEMV the tail serves"

    def steps(slot, tail):
        monkeypatch.setenv("TENSORFOLD_NORM_TAIL", "1" if tail else "0")
        out, n0 = [], run.n_tailed
        for k, t in enumerate(ids):
            lg, tk = run.forward(F.step_batch([slot], [t], [T + k]), argmax=True)
            out.append((lg[0].copy(), int(tk[0])))
        return out, run.n_tailed - n0

    tailed, nt = steps(0, True)
    assert nt == want * len(ids), (nt, want)
    plain, n_plain = steps(1, False)
    assert n_plain == 0
    monkeypatch.setenv("TENSORFOLD_NORM_TAIL", "1")
    beside, n0 = [], run.n_tailed
    for k, t in enumerate(ids):  # two rows: standalone norms
        lg, tk = run.forward(F.step_batch([2, 3], [t, t], [T + k, len(Q) + k]), argmax=True)
        beside.append((lg[0].copy(), int(tk[0])))
    assert run.n_tailed == n0
    _same_steps(tailed, plain, beside)
    _caches_equal(run, 0, 1, T + len(ids))
    _caches_equal(run, 0, 2, T + len(ids))
    # a one-row verify window (mode "verify") takes the tails as well and gives the step's logits
    t = int(rng.integers(0, 512))
    n0 = run.n_tailed
    lw, _ = run.forward(F.window_batch([(0, [t], T + len(ids))], commit=False))
    assert run.n_tailed - n0 == want
    monkeypatch.setenv("TENSORFOLD_NORM_TAIL", "0")
    ls, _ = run.forward(F.step_batch([1], [t], [T + len(ids)]))
    assert np.array_equal(lw.view(np.uint32), ls.view(np.uint32))
