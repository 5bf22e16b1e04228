"""Self-consistency of the reference modes (the engine's exactness properties, at the oracle level).

The oracle for each mode is another mode whose correctness the HF parity tests establish: the token recurrence.
float64 unless stated; tolerances are stated per test. Random weights come from a tiny perturbed HF model
(ref_hf_helpers), converted to float64 here.
"""

import numpy as np
import pytest
from ref_hf_helpers import SPECS, make_hf_model, model_config, rel_err, to_internal

from tensorfold.reference import ReferenceModel, State, ops


@pytest.fixture(scope="module")
def models():
    spec = SPECS[0]  # tied, Hv/Hk = 3, GQA 6:1, 3 linear + 1 full layer
    tensors = to_internal(make_hf_model(spec, 2024), spec)
    cfg = model_config(spec)
    m64 = ReferenceModel({k: v.astype(np.float64) for k, v in tensors.items()}, cfg, dtype=np.float64)
    m32 = ReferenceModel(tensors, cfg)
    return spec, m64, m32


def _ids(rng, spec, n):
    return rng.integers(0, spec.vocab, n)


# --------------------------------------------------------------------------------------------- delta rule forms


@pytest.mark.parametrize("L,chunk", [(37, 8), (150, 64), (70, 13), (5, 64)])
def test_chunked_delta_rule_equals_recurrence(L, chunk):
    rng = np.random.default_rng(L * 100 + chunk)
    Hk, Hv, Dk, Dv = 2, 6, 12, 10
    q, k = ops.gdn_prepare_qk(rng.standard_normal((L, Hk, Dk)), rng.standard_normal((L, Hk, Dk)))
    v = rng.standard_normal((L, Hv, Dv))
    g, beta = ops.gdn_gates(rng.standard_normal((L, Hv)), rng.standard_normal((L, Hv)),
                            rng.standard_normal(Hv) - 1, rng.standard_normal(Hv))
    S0 = rng.standard_normal((Hv, Dk, Dv))
    O1, S1 = ops.delta_rule_recurrent(S0, q, k, v, g, beta)
    O2, S2 = ops.delta_rule_chunked(S0, q, k, v, g, beta, chunk=chunk)
    assert O2.dtype == np.float64
    assert np.max(np.abs(O1 - O2)) < 1e-10 and np.max(np.abs(S1 - S2)) < 1e-10
    assert np.max(np.abs(O1)) > 0.1  # the comparison is not between zeros


def test_delta_rule_tree_equals_recurrence_per_branch():
    rng = np.random.default_rng(5)
    Hk, Hv, Dk, Dv, n = 1, 3, 8, 6, 7
    parents = [-1, 0, 1, 0, 3, -1, 2]
    q, k = ops.gdn_prepare_qk(rng.standard_normal((n, Hk, Dk)), rng.standard_normal((n, Hk, Dk)))
    v = rng.standard_normal((n, Hv, Dv))
    g, beta = -rng.uniform(0, 1, (n, Hv)), rng.uniform(0, 1, (n, Hv))
    S0 = rng.standard_normal((Hv, Dk, Dv))
    O, states = ops.delta_rule_tree(S0, q, k, v, g, beta, parents)
    for i in range(n):
        chain = _chain(parents, i)
        Oc, Sc = ops.delta_rule_recurrent(S0, q[chain], k[chain], v[chain], g[chain], beta[chain])
        assert np.max(np.abs(O[i] - Oc[-1])) < 1e-12 and np.max(np.abs(states[i] - Sc)) < 1e-12


def _chain(parents, i):
    chain = []
    while i >= 0:
        chain.append(i)
        i = parents[i]
    return chain[::-1]


# --------------------------------------------------------------------------------------------- model modes


def _max_state_diff(a: State, b: State) -> float:
    assert a.pos == b.pos
    d = 0.0
    for xs, ys in ((a.conv, b.conv), (a.rec, b.rec), (a.k, b.k), (a.v, b.v)):
        for x, y in zip(xs, ys):
            assert (x is None) == (y is None)
            if x is not None:
                assert x.shape == y.shape
                d = max(d, float(np.max(np.abs(x - y), initial=0.0)))
    return d


def test_prompt_window_and_steps_agree(models):
    spec, m64, m32 = models
    rng = np.random.default_rng(1)
    ids = _ids(rng, spec, 75)
    for m, tol in ((m64, 1e-10), (m32, 2e-5)):
        sp, sw, ss = m.new_state(), m.new_state(), m.new_state()
        lp = m.prompt(sp, ids)  # chunked: 64 + 11
        lw = m.window(sw, ids)  # one window of 75 recurrent rows
        ls = np.stack([m.step(ss, t) for t in ids])
        assert rel_err(lp, ls) < tol and rel_err(lw, ls) < tol
        assert _max_state_diff(sp, ss) < tol * 10 and _max_state_diff(sw, ss) < tol * 10


def test_window_continuing_state_equals_steps(models):
    spec, m64, m32 = models
    rng = np.random.default_rng(2)
    prompt, win = _ids(rng, spec, 20), _ids(rng, spec, 5)
    for m in (m64, m32):
        a = m.new_state()
        m.prompt(a, prompt)
        b = a.snapshot()
        lw = m.window(a, win)
        ls = np.stack([m.step(b, t) for t in win])
        assert lw.shape == (5, spec.vocab) and lw.dtype == m.dtype
        assert np.array_equal(lw, ls) and a == b  # bit for bit
        assert a.pos == b.pos == 25


@pytest.mark.parametrize("split", [23, 64, 1])
def test_prompt_in_two_chunks_equals_one(models, split):
    spec, m64, _ = models
    ids = _ids(np.random.default_rng(3), spec, 90)
    one, two = m64.new_state(), m64.new_state()
    l1 = m64.prompt(one, ids)
    l2 = np.concatenate([m64.prompt(two, ids[:split]), m64.prompt(two, ids[split:])])
    assert rel_err(l2, l1) < 1e-10 and _max_state_diff(one, two) < 1e-10
    odd = m64.new_state()  # another chunk size: same function
    assert rel_err(m64.prompt(odd, ids, chunk=split + 6), l1) < 1e-10


# A tree with two roots and branches of depths 1..4:   0 -> 1 -> 2 -> 6,   0 -> 3 -> 4,   5 (root) -> 7
PARENTS = [-1, 0, 1, 0, 3, -1, 2, 5]


@pytest.mark.parametrize("batched,dtype,tol",
                         [(False, np.float32, 0.0), (True, np.float64, 1e-10), (True, np.float32, 2e-5)],
                         ids=["rows-f32", "batched-f64", "batched-f32"])
def test_tree_rows_equal_steps_along_their_branch(models, batched, dtype, tol):
    """Default (row by row): bit-identical to steps; batched (ancestor masks): equal within tol."""
    spec, m64, m32 = models
    m = m64 if dtype == np.float64 else m32
    rng = np.random.default_rng(4)
    base = m.new_state()
    m.prompt(base, _ids(rng, spec, 12))
    before = base.snapshot()
    ids = _ids(rng, spec, len(PARENTS))
    res = m.tree(base, ids, PARENTS, batched=batched)
    assert base == before  # the tree does not advance the state
    assert res.logits.shape == (len(PARENTS), spec.vocab)
    assert list(res.positions) == [12, 13, 14, 13, 14, 12, 15, 13]
    for i in range(len(PARENTS)):
        s = before.snapshot()
        for r in _chain(PARENTS, i):
            last = m.step(s, ids[r])
        if tol == 0.0:
            assert np.array_equal(res.logits[i], last), i
        else:
            assert rel_err(res.logits[i], last) < tol, i


def test_commit_then_step_equals_stepping_the_path(models):
    spec, m64, _ = models
    rng = np.random.default_rng(6)
    base = m64.new_state()
    m64.prompt(base, _ids(rng, spec, 9))
    ids = _ids(rng, spec, len(PARENTS))
    nxt = int(_ids(rng, spec, 1)[0])
    for batched in (False, True):
        for path in ([0, 1, 2, 6], [0, 3], [5, 7], [5], []):
            res = m64.tree(base, ids, PARENTS, batched=batched)
            committed = base.snapshot()
            m64.commit(committed, res, path)
            stepped = base.snapshot()
            for r in path:
                m64.step(stepped, ids[r])
            assert committed.pos == base.pos + len(path)
            if batched:
                assert _max_state_diff(committed, stepped) < 1e-10
                assert rel_err(m64.step(committed, nxt), m64.step(stepped, nxt)) < 1e-10
            else:  # row-by-row trees commit exactly the stepped state
                assert committed == stepped


def test_commit_rejects_bad_paths(models):
    spec, m64, _ = models
    base = m64.new_state()
    m64.prompt(base, [1, 2, 3])
    res = m64.tree(base, [4, 5, 6, 7, 8, 9, 10, 11], PARENTS)
    for bad in ([1, 2], [0, 2], [0, 1, 2, 7], [0, 99]):
        with pytest.raises(ValueError):
            m64.commit(base.snapshot(), res, bad)
    moved = base.snapshot()
    m64.step(moved, 3)
    with pytest.raises(ValueError):
        m64.commit(moved, res, [0])
    with pytest.raises(ValueError):
        m64.tree(base, [1, 2], [-1, 1])  # a parent must precede its child


def test_snapshot_restore_round_trip(models):
    spec, _, m32 = models
    rng = np.random.default_rng(8)
    s = m32.new_state()
    m32.prompt(s, _ids(rng, spec, 10))
    snap = s.snapshot()
    tail = _ids(rng, spec, 4)
    first = m32.window(s, tail)
    assert s.pos == 14 and not (s == snap)
    s.restore(snap)  # in place
    assert s == snap and s.pos == 10
    assert np.array_equal(m32.window(s, tail), first)  # bit-exact replay
    fresh = State.restore(snap)  # on the class: a new state
    assert fresh == snap and fresh is not snap
    m32.step(fresh, 1)
    assert snap.pos == 10 and s.pos == 14  # snapshots are independent of later forwards


def test_empty_inputs_are_no_ops(models):
    spec, _, m32 = models
    s = m32.new_state()
    assert m32.prompt(s, []).shape == (0, spec.vocab) and m32.window(s, []).shape == (0, spec.vocab)
    res = m32.tree(s, [], [])
    assert res.logits.shape == (0, spec.vocab)
    m32.commit(s, res, [])
    assert s == m32.new_state()
    # a first token through a tree root equals a first step (empty KV cache, zero conv tail and state)
    for batched in (False, True):
        assert m32.tree(s, [], [], batched=batched).logits.shape == (0, spec.vocab)
        res = m32.tree(s, [7], [-1], batched=batched)
        assert rel_err(res.logits[0], m32.step(m32.new_state(), 7)) < 1e-6


@pytest.mark.parametrize("kv_cache", ["bf16", "fp8"])
def test_rounded_kv_cache_stores_rounded_rows(models, kv_cache):
    """kv_cache="bf16"/"fp8": the first full-attention layer's cached rows are exactly the exact model's rows
    rounded (bf16 RNE / e4m3 with a per-(row, head) scale); logits stay close but not equal."""
    spec, _, m32 = models
    if kv_cache == "fp8":
        kv8 = pytest.importorskip("tensorfold.reference.kv8")
    from tensorfold.model import bf16

    rounded = ReferenceModel(m32._tensors, m32.config, kv_cache=kv_cache)
    ids = _ids(np.random.default_rng(9), spec, 12)
    a, b = m32.new_state(), rounded.new_state()
    la, lb = m32.prompt(a, ids), rounded.prompt(b, ids)
    first_full = spec.layer_types.index("full_attention")
    for exact, got in ((a.k[first_full], b.k[first_full]), (a.v[first_full], b.v[first_full])):
        if kv_cache == "bf16":
            want = bf16.to_f32(bf16.from_f32(exact))
        else:
            want = kv8.dequantize_rows(*kv8.quantize_rows(exact))
        assert np.array_equal(got, want)
    err = rel_err(lb, la)
    assert 0 < err < (0.02 if kv_cache == "bf16" else 0.1)
    with pytest.raises(ValueError):
        ReferenceModel(m32._tensors, m32.config, kv_cache="int4")


def test_long_run_fp32_drift_of_delta_rule_forms():
    """2000 tokens: float32 chunked and recurrent forms stay within 1e-5 (relative; observed ~4e-7) of the
    float64 recurrence, outputs and final state (slow decays, so the state keeps a long memory)."""
    rng = np.random.default_rng(12)
    L, Hk, Hv, Dk, Dv = 2000, 1, 2, 16, 16
    q, k = ops.gdn_prepare_qk(rng.standard_normal((L, Hk, Dk)), rng.standard_normal((L, Hk, Dk)))
    v = rng.standard_normal((L, Hv, Dv))
    g, beta = -rng.uniform(0.0, 0.02, (L, Hv)), rng.uniform(0, 1, (L, Hv))
    S0 = np.zeros((Hv, Dk, Dv))
    O64, S64 = ops.delta_rule_recurrent(S0, q, k, v, g, beta)
    f32 = [a.astype(np.float32) for a in (S0, q, k, v, g, beta)]
    Oc, Sc = ops.delta_rule_chunked(*f32)
    Or, Sr = ops.delta_rule_recurrent(*f32)
    for O, S in ((Oc, Sc), (Or, Sr)):
        assert O.dtype == np.float32
        assert rel_err(O, O64) < 1e-5 and rel_err(S, S64) < 1e-5
