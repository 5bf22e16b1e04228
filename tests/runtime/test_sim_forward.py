"""Simulator tier for the device forward (``tensorfold.runtime.forward``) on a two-layer cut of the tiny synth
model (one linear-attention and one full-attention layer, see tests/runtime/conftest.py ``Micro``).

Oracles: the numpy ``ReferenceModel`` on the same weights (tolerance below) and the runtime's own one-row steps
(exactness properties, bit for bit): window rows == steps, tree rows == steps along each branch, a committed path
== stepping it, a stream beside another stream of a different length == alone, prompt mode vs step mode (KL,
argmax), in bf16 and fp8 caches. Fresh random token ids per test (seeded). The simulator needs seconds per row,
so the rows are few. In the simulator the linears use ``glue.sim_linear`` (the affine GEMV kernels take minutes
to simulate); the GPU tier (tests/runtime/test_gpu_runtime.py) runs the real ones at 2B geometry.

Tolerance vs the reference: different fp32 summation orders; logits (O(10)) agree to ``atol = rtol = 2e-4``
(measured about 2e-5).
"""

from __future__ import annotations

import numpy as np

from tests.runtime.conftest import kl, make_runner

from tensorfold.reference.model import ReferenceModel
from tensorfold.runtime import forward as F

TOL = dict(rtol=2e-4, atol=2e-4)


def _ids(rng, n, V=512):
    return [int(t) for t in rng.integers(0, V, n)]


def _caches_equal(run, a, b, n_tokens):
    cc = run.caches
    rec, conv = cc.rec.copy_to_host(), cc.conv.copy_to_host()
    k, v = cc.k.copy_to_host(), cc.v.copy_to_host()
    assert np.array_equal(rec[:, a], rec[:, b])
    assert np.array_equal(conv[:, a], conv[:, b])
    assert np.array_equal(k[:, a, :n_tokens], k[:, b, :n_tokens])
    assert np.array_equal(v[:, a, :n_tokens], v[:, b, :n_tokens])
    if cc.kv == "fp8":
        ks, vs = cc.k_scale.copy_to_host(), cc.v_scale.copy_to_host()
        assert np.array_equal(ks[:, a, :n_tokens], ks[:, b, :n_tokens])
        assert np.array_equal(vs[:, a, :n_tokens], vs[:, b, :n_tokens])


def _same_steps(*runs):
    """Runs of (logits row, greedy id) per step: every run's logits equal the first's bit for bit, finite, and
    every id is that row's argmax."""
    for steps in zip(*runs):
        a, ta = steps[0]
        assert np.isfinite(a).all()
        for b, tb in steps[1:]:
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
            assert tb == ta == int(np.argmax(a))


def test_prompt_steps_window_batched_bf16(micro, micro_arena):
    rng = np.random.default_rng(1)
    run = make_runner(micro, micro_arena, kv="bf16")
    P, Q = _ids(rng, 2), _ids(rng, 3)
    t = _ids(rng, 2)
    # slots 0 and 1 get prompt P, slot 2 prompt Q (another length), in one prompt batch
    lg, _ = run.forward(F.prompt_batch([(0, P, 0), (1, P, 0), (2, Q, 0)]))
    ref = ReferenceModel(micro.tensors, micro.config, kv_cache="bf16")
    sP, sQ = ref.new_state(), ref.new_state()
    np.testing.assert_allclose(lg[0], ref.prompt(sP, P)[-1], **TOL)
    np.testing.assert_allclose(lg[2], ref.prompt(sQ, Q)[-1], **TOL)
    assert np.array_equal(lg[0], lg[1])  # same prompt in two slots of one batch
    # one-row steps on slot 0, alone, against the reference; on-device argmax
    steps = []
    for i, tok in enumerate(t):
        l1, a1 = run.forward(F.step_batch([0], [tok], [len(P) + i]), argmax=True)
        np.testing.assert_allclose(l1[0], ref.step(sP, tok), **TOL)
        assert int(a1[0]) == int(np.argmax(l1[0]))
        steps.append(l1[0])
    # the same tokens as a window on slot 1, beside a one-row window of slot 2 (other length): bit for bit;
    # and slot 3 runs prompt P in step mode (a window from position 0): vs prompt mode, KL and argmax
    lw, _ = run.forward(F.window_batch([(2, t[:1], len(Q)), (1, t, len(P)), (3, P, 0)]))
    for i in range(len(t)):
        assert np.array_equal(lw[1 + i], steps[i]), f"window row {i} != step {i}"
    _caches_equal(run, 0, 1, len(P) + len(t))
    assert kl(lw[-1], lg[0]) <= 1e-3
    assert int(np.argmax(lw[-1])) == int(np.argmax(lg[0]))


def test_tree_commit_bf16(micro, micro_arena):
    rng = np.random.default_rng(3)
    run = make_runner(micro, micro_arena, kv="bf16")
    P = _ids(rng, 2)
    T = len(P)
    run.forward(F.prompt_batch([(0, P, 0), (1, P, 0), (2, P, 0)]), logits=False)
    a, b, c, d = _ids(rng, 4)
    # tree on slot 0: a -> b, a -> c -> d
    tb = F.tree_batch([(0, [a, b, c, d], [-1, 0, 0, 2], T)])
    lt, _ = run.forward(tb)
    # keep a -> c -> d (the commit directly follows its verify forward)
    assert run.commit(tb, [3]) == [3]
    # the branches stepped on slots 1 (a, b) and 2 (a, c, d)
    s1, _ = run.forward(F.step_batch([1, 2], [a, a], [T, T]))
    s2, _ = run.forward(F.step_batch([1, 2], [b, c], [T + 1, T + 1]))
    s3, _ = run.forward(F.step_batch([2], [d], [T + 2]))
    assert np.array_equal(lt[0], s1[0]) and np.array_equal(lt[0], s1[1])
    assert np.array_equal(lt[1], s2[0])
    assert np.array_equal(lt[2], s2[1])
    assert np.array_equal(lt[3], s3[0])
    # slot 0 must have become slot 2 bit for bit (state, tails, K/V rows moved into place)
    _caches_equal(run, 0, 2, T + 3)


def test_verify_window_prefix_fp8(micro, micro_arena):
    """fp8 cache: a verify window whose first rows are kept == stepping those rows; vs the fp8 reference."""
    rng = np.random.default_rng(4)
    run = make_runner(micro, micro_arena, kv="fp8")
    P = _ids(rng, 2)
    T = len(P)
    lp, _ = run.forward(F.prompt_batch([(0, P, 0), (1, P, 0)]))
    ref = ReferenceModel(micro.tensors, micro.config, kv_cache="fp8")
    s = ref.new_state()
    np.testing.assert_allclose(lp[0], ref.prompt(s, P)[-1], **TOL)
    w = _ids(rng, 3)
    vb = F.window_batch([(0, w, T)], commit=False)
    lv, _ = run.forward(vb)
    np.testing.assert_allclose(lv, ref.window(s, w), **TOL)
    assert run.commit(vb, [1]) == [2]  # keep rows 0, 1
    st, _ = run.forward(F.step_batch([1], [w[0]], [T]))
    assert np.array_equal(lv[0], st[0])
    st, _ = run.forward(F.step_batch([1], [w[1]], [T + 1]))
    assert np.array_equal(lv[1], st[0])
    _caches_equal(run, 0, 1, T + 2)
