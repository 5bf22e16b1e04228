"""Load-time fusion of the attention projections (``runtime.arena`` / ``runtime.forward``, issue 4 launches).

q_proj | k_proj | v_proj become one linear ``layers.i.self_attn.qkv`` when every attention layer's three agree
in format; the runner then issues one GEMV into ``Buffers.qkv`` whose column blocks ``qg``, ``kk``, ``vv`` view.
Oracles: the checkpoint's own tensors (the fused rows are the sources' rows, in order) and the unfused path (the
same model with v_proj's scales stored as float32 -- equal values, another format -- keeps three launches): a
step's logits are equal bit for bit (the simulator's GEMV computes every output column on its own).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.conftest import make_runner

from tensorfold.model.weights import AffineWeight
from tensorfold.runtime import forward as F
from tensorfold.runtime.arena import Arena, plan_arena


def _unfused_tensors(micro):
    t = dict(micro.tensors)
    for name, w in micro.tensors.items():
        if name.endswith("self_attn.v_proj"):
            from tensorfold.model import bf16

            t[name] = AffineWeight(w.packed, bf16.to_f32(np.asarray(w.scales)), bf16.to_f32(np.asarray(w.biases)),
                                   w.bits, w.group_size)
    return t


def test_qkv_fused_rows(micro, micro_arena):
    a = micro_arena
    assert a.has_linear("layers.1.self_attn.qkv")
    assert not a.has_linear("layers.1.self_attn.q_proj")
    t = micro.tensors
    parts = a.parts["layers.1.self_attn.qkv"]
    assert [p[0] for p in parts] == [f"layers.1.self_attn.{n}_proj" for n in "qkv"]
    ent = a.linear("layers.1.self_attn.qkv")
    W = ent["W"].copy_to_host()
    S = ent["S"].copy_to_host()
    for name, r0, r1 in parts:
        assert np.array_equal(W[r0:r1], np.asarray(t[name].packed))
        assert np.array_equal(S[r0:r1], np.asarray(t[name].scales))
    assert ent["out"] == sum(t[p[0]].shape[0] for p in parts)


def test_qkv_not_fused_when_formats_differ(micro):
    t = _unfused_tensors(micro)
    entries, _, parts = plan_arena(t, micro.config)
    names = {e[0] for e in entries}
    assert "layers.1.self_attn.qkv" not in names and "layers.1.self_attn.q_proj" in names
    assert "layers.0.linear_attn.in_all" in names  # the other fusions are unaffected


def test_fused_step_equals_unfused(micro, micro_arena):
    rng = np.random.default_rng(11)
    t = _unfused_tensors(micro)
    a2 = Arena.upload(t, micro.config, progress=False)
    r1 = make_runner(micro, micro_arena, slots=1, ctx=8, rows=2, prompt_rows=0)
    r2 = make_runner(micro, a2, slots=1, ctx=8, rows=2, prompt_rows=0)
    assert r1.buf.qkv_fused and not r2.buf.qkv_fused
    ids = [int(x) for x in rng.integers(0, 512, 2)]
    l1, _ = r1.forward(F.window_batch([(0, ids, 0)]))
    l2, _ = r2.forward(F.window_batch([(0, ids, 0)]))
    assert np.isfinite(l1).all()
    assert np.array_equal(l1, l2)


@pytest.mark.parametrize("member,fused", [("layers.1.mlp.up_proj", "layers.1.mlp.gate_up"),
                                          ("layers.0.linear_attn.in_proj_z", "layers.0.linear_attn.in_all")])
def test_unfused_member_when_formats_differ(micro, micro_arena, member, fused):
    """One member of a fusion with float32 scales (equal values, another format): that layer keeps the members apart
    (``Runner._unfused``: one GEMV each into consecutive blocks of the shared buffer; for gate | up then
    ``silu_mul_k``), and a step's logits equal the fused model's bit for bit."""
    rng = np.random.default_rng(12)
    from tensorfold.model import bf16

    t = dict(micro.tensors)
    w = t[member]
    t[member] = AffineWeight(w.packed, bf16.to_f32(np.asarray(w.scales)), bf16.to_f32(np.asarray(w.biases)), w.bits,
                             w.group_size)
    a2 = Arena.upload(t, micro.config, progress=False)
    assert not a2.has_linear(fused) and a2.has_linear(member) and micro_arena.has_linear(fused)
    r1 = make_runner(micro, micro_arena, slots=1, ctx=8, rows=2, prompt_rows=0)
    r2 = make_runner(micro, a2, slots=1, ctx=8, rows=2, prompt_rows=0)
    ids = [int(x) for x in rng.integers(0, 512, 2)]
    l1, _ = r1.forward(F.window_batch([(0, ids, 0)]))
    l2, _ = r2.forward(F.window_batch([(0, ids, 0)]))
    assert np.isfinite(l1).all()
    assert np.array_equal(l1, l2)
