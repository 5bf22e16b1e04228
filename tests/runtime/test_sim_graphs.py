"""Simulator tier for the window / tree graphs (``runtime.graphs.DecodeGraphs.forward`` / ``commit``).

The simulator cannot capture graphs, so ``DecodeGraphs`` runs the graphs' launch sequence eagerly over the
bucket's static metadata (padded to b streams x w rows, padding rows slot -1) -- the code path a replay feeds,
minus the capture. Oracle: the runner's eager, unpadded forward of the same batch on another slot holding the
same prompt, bit for bit (logits, sampled ids = argmax for greedy rows, and the caches after a committed window
and after a tree verify + commit). The GPU tier (test_gpu_graphs.py) checks real replays the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.conftest import make_runner
from tests.runtime.test_sim_forward import _caches_equal

from tensorfold.engine.backend import SampleRow
from tensorfold.runtime import forward as F
from tensorfold.runtime import graphs as G
from tensorfold.runtime.graphs import DecodeGraphs


def test_window_and_tree_graph_path(micro, micro_arena):
    rng = np.random.default_rng(21)
    run = make_runner(micro, micro_arena, kv="bf16", slots=4, ctx=16, rows=8, prompt_rows=8)
    dg = DecodeGraphs(run, 2)
    P = [int(x) for x in rng.integers(0, 512, 2)]
    T = len(P)
    run.forward(F.prompt_batch([(s, P, 0) for s in range(4)]), logits=False)
    w = [int(x) for x in rng.integers(0, 512, 3)]
    # committed window (mode step): graph path on slot 0 (bucket b=1, w=4: one padding row) vs eager on slot 1
    bw = F.window_batch([(0, w, T)])
    assert dg.window_shape(bw) == (1, 4)
    lg, _ = dg.forward(bw)
    le, _ = run.forward(F.window_batch([(1, w, T)]))
    assert np.isfinite(lg).all()
    assert np.array_equal(lg, le)
    _caches_equal(run, 0, 1, T + len(w))
    # tree (verify) with greedy device sampling on slot 2 vs eager on slot 3; then commit the same path
    ids, par = [int(x) for x in rng.integers(0, 512, 3)], [-1, 0, 0]
    bt = F.tree_batch([(2, ids, par, T)])
    rows = [SampleRow(0.0, 0, 1.0, 0.0, 0, T + 1, 512)] * 3
    lt, tt = dg.forward(bt, rows)
    assert [int(t) for t in tt] == [int(np.argmax(r)) for r in lt]
    assert dg.commit(bt, [2]) == [2]
    be = F.tree_batch([(3, ids, par, T)])
    le, _ = run.forward(be)
    assert run.commit(be, [2]) == [2]
    assert np.array_equal(lt, le)
    _caches_equal(run, 2, 3, T + 2)
    # both shapes went through the bucketed static metadata (the graphs' inputs)
    assert set(dg.wmetas) == {(1, 4)}


class _Replay:
    """Stands in for a captured graph in the simulator: a replay runs the captured launch sequence eagerly."""

    def __init__(self, launch):
        self.launch_fn = launch

    def launch(self, stream):
        self.launch_fn(0)


def test_tree_graph_path_real_kernels(micro, micro_arena, monkeypatch):
    """The sampled tree-verify path of ``DecodeGraphs`` with the runner's real GEMV and attention kernels (no host
    stand-ins), including the capture's eager padding launch (a replay is emulated: the simulator cannot capture),
    against the eager unpadded tree on another slot, bit for bit: logits, greedy ids, and the caches after both
    commit the same path. A 34-token context puts the tree keys in a row's second attention split. Also the eager
    tree's root row against an eager one-row verify (tree keys against window keys: the same bits by the
    attention kernels' contract). Session 32 found the sampled tree graph differing from eager on the H200; this
    is the simulator's half of that check (the prompt runs on the stand-ins, the same for both slots)."""
    rng = np.random.default_rng(34)
    run = make_runner(micro, micro_arena, kv="bf16", slots=4, ctx=48, rows=8, prompt_rows=80)
    P = [int(x) for x in rng.integers(0, 512, 34)]
    T = len(P)
    run.forward(F.prompt_batch([(2, P, 0), (3, P, 0)]), logits=False)
    monkeypatch.setattr(run, "sim_stand_ins", False)
    dg = DecodeGraphs(run, 2)
    dg.use_graphs = True
    monkeypatch.setattr(dg, "_build", lambda launch: _Replay(launch))
    ids, par = [int(x) for x in rng.integers(0, 512, 6)], [-1, 0, 0, 2, 2, 4]
    bt = F.tree_batch([(2, ids, par, T)])
    # the sampler form first (temperature 1, top-k 1: drawn through the sampler's launches, the argmax id), then
    # greedy rows, which take the argmax form (glue.launch_argmax); verify graphs leave the caches as they were
    ls, ts = dg.forward(bt, [SampleRow(1.0, 1, 1.0, 0.0, 9, T + 1, 512)] * 6)
    assert ("verify", 1, 8, True) in dg.wgraphs and dg.capture_error is None
    rows = [SampleRow(0.0, 0, 1.0, 0.0, 0, T + 1, 512)] * 6
    lt, tt = dg.forward(bt, rows)
    assert ("verify", 1, 8, "argmax") in dg.wgraphs and dg.capture_error is None
    assert np.isfinite(lt).all()
    assert np.array_equal(ls, lt)
    assert [int(t) for t in tt] == [int(np.argmax(r)) for r in lt] == [int(t) for t in ts]
    assert dg.commit(bt, [5]) == [4]  # keeps 0 -> 2 -> 4 -> 5
    l1, _ = run.forward(F.window_batch([(3, ids[:1], T)], commit=False))
    be = F.tree_batch([(3, ids, par, T)])
    le, _ = run.forward(be)
    assert run.commit(be, [5]) == [4]
    assert np.array_equal(le[:1], l1)
    assert np.array_equal(lt, le)
    _caches_equal(run, 2, 3, T + 4)


# ------------------------------------------------------------------------------------------------ decode fast path


def _rand_rows(rng, n, vocab=512):
    rows = []
    for _ in range(n):
        greedy = rng.random() < 0.5
        rows.append(SampleRow(temperature=0.0 if greedy else float(rng.uniform(0.05, 2.0)),
                              top_k=int(rng.choice([0, 1, 5, 40])), top_p=float(rng.uniform(0.1, 1.0)),
                              min_p=float(rng.choice([0.0, rng.uniform(0, 0.3)])),
                              seed=int(rng.integers(0, 2**63 - 1, dtype=np.int64)), position=int(rng.integers(0, 10**6)),
                              valid_vocab=vocab))
    return rows


def test_fast_meta_bytes_equal_generic():
    """``Meta.write_step`` / ``SampleMeta.write_fast`` leave the same host (and device) bytes as the generic
    ``Meta.write(step_batch(...).pad(b, b))`` / ``SampleMeta.write``, over random slots, lengths, ids and knobs,
    with the row count changing inside a bucket and generic writes (a capture's padding batch) in between."""
    from tensorfold.runtime.graphs import _padding_batch

    rng = np.random.default_rng(5)
    for b in (1, 2, 4, 8):
        mg, mf = F.Meta(b, b), F.Meta(b, b)
        sg, sf = F.SampleMeta(2 * b), F.SampleMeta(2 * b)
        for it in range(12):
            if it % 5 == 4:  # a generic write between fast ones (capture writes padding rows)
                for m in (mg, mf):
                    m.write(_padding_batch(b))
                for s in (sg, sf):
                    s.write([])
            n = int(rng.integers(1, b + 1))
            slots = [int(x) for x in rng.permutation(64)[:n]]
            ids = [int(x) for x in rng.integers(0, 248320, n)]
            lens = [int(x) for x in rng.integers(0, 40000, n)]
            rows = _rand_rows(rng, n)
            mg.write(F.step_batch(slots, ids, lens).pad(b, b))
            mf.write_step(slots, ids, lens)
            assert mg.host.tobytes() == mf.host.tobytes(), (b, it, n)
            assert np.array_equal(mg.dev.copy_to_host(), mf.dev.copy_to_host())
            sg.write(rows)
            sf.write_fast(rows)
            for a, c in ((sg.hf, sf.hf), (sg.hi, sf.hi), (sg.hl, sf.hl)):
                assert a.tobytes() == c.tobytes(), (b, it, n)
            for a, c in ((sg.df, sf.df), (sg.di, sf.di), (sg.dl, sf.dl)):
                assert a.copy_to_host().tobytes() == c.copy_to_host().tobytes()
    # the fast path refuses what the generic one refuses
    m = F.Meta(2, 2)
    with pytest.raises(ValueError):
        m.write_step([0, 1, 2], [1, 2, 3], [0, 0, 0])
    with pytest.raises(ValueError):
        F.SampleMeta(2).write_fast(_rand_rows(rng, 3))


@pytest.mark.parametrize("in_graph", ["0", "1"])
def test_fast_generic_pipelined_steps_equal(micro, micro_arena, monkeypatch, in_graph):
    """Three steps of two streams from the same prompts on three slot groups: ``DecodeGraphs.step_list`` (fast
    path) on slots 0, 1; ``step`` on the generic builders (``fast_step = False``, the oracle) on slots 2, 3; and
    pipelined ``launch_step`` (step k + 1 enqueued with its ids chained on the device before ``wait_step`` of
    step k) on slots 4, 5. Bit for bit: the ids of every step, the bucket metadata and sampler knobs left on the
    host (fast == generic but the slot columns), the caches afterwards. Seeded temperature rows and a greedy one;
    misuse of the pipeline is refused. With the chain in the graphs (``TENSORFOLD_CHAIN_GRAPH=1``) the chained
    launches make no device-to-device copy."""
    rng = np.random.default_rng(8)
    monkeypatch.setenv("TENSORFOLD_CHAIN_GRAPH", in_graph)
    run = make_runner(micro, micro_arena, kv="bf16", slots=6, ctx=16, rows=8, prompt_rows=12)
    dg = DecodeGraphs(run, 2)
    assert dg.chain_in_graph == (in_graph == "1")
    P = [[int(x) for x in rng.integers(0, 512, k)] for k in (3, 2)]
    for k in (0, 1):
        run.forward(F.prompt_batch([(s, P[k], 0) for s in (k, k + 2, k + 4)]), logits=False)
    lens0 = [3, 2]
    # the tiny model tends to repeat its input id: ids drawn below 100 (every row's valid vocabulary) while the
    # first inputs are 100 or more make each step's output differ from its input, so that a chain which fed a
    # step its own inputs again (not the ids drawn before it) would change the caches and the ids
    t0 = [int(x) for x in rng.integers(100, 512, 2)]
    K = 3
    plan = []
    for k in range(K):
        rows = [SampleRow(0.0 if i == 0 and k == 1 else float(rng.uniform(0.5, 1.5)), int(rng.choice([0, 7])),
                          float(rng.uniform(0.5, 1.0)), 0.0, int(rng.integers(0, 2**62)), lens0[i] + k + 1, 100)
                for i in range(2)]
        plan.append(([x + k for x in lens0], rows))
    gen, fast = [], []
    tf = tg = t0
    meta, sm = dg.metas[2], run.sample_meta
    ro, so = meta._off["row_slot"][0], meta._off["seg_slot"][0]
    for lens, rows in plan:
        dg.fast_step = True
        tf = dg.step_list([0, 1], tf, lens, rows)
        host_f = [meta.host.copy(), sm.hf.copy(), sm.hi.copy(), sm.hl.copy()]
        dg.fast_step = False
        out_g = dg.step([2, 3], tg, lens, rows)
        assert isinstance(out_g, np.ndarray) and out_g.dtype == np.int32
        tg = [int(t) for t in out_g]
        host_f[0][ro:ro + 2] += 2  # the same bytes but the slot columns (fast: 0, 1; generic: 2, 3)
        host_f[0][so:so + 2] += 2
        for a, c in zip(host_f, (meta.host, sm.hf, sm.hi, sm.hl)):
            assert a.tobytes() == c.tobytes()
        fast.append(tf)
        gen.append(tg)
    assert fast == gen
    # a chain that lost its ids would feed the zeros the host writes in their place: not the same ids
    assert 0 not in t0 and all(0 not in x for x in gen)
    dg.fast_step = True
    with pytest.raises(ValueError, match="previous launch's slots"):
        dg.launch_step([4, 5], None, *plan[0], chain=True)
    piped = []
    tk = dg.launch_step([4, 5], t0, *plan[0])
    copies = []
    real = G._D2D.__call__
    monkeypatch.setattr(G._D2D, "__call__", lambda self, *a, **k: (copies.append(1), real(self, *a, **k)))
    for lens, rows in plan[1:]:
        nxt = dg.launch_step([4, 5], None, lens, rows, chain=True)
        piped.append(dg.wait_step(tk))
        tk = nxt
    piped.append(dg.wait_step(tk))
    assert len(copies) == (0 if in_graph == "1" else 2 * (K - 1))
    with pytest.raises(ValueError, match="older than"):
        dg.wait_step((0, 2, 1))
    assert piped == gen
    for i in range(2):
        _caches_equal(run, i + 2, i, lens0[i] + K)
        _caches_equal(run, i + 2, i + 4, lens0[i] + K)


def test_decode_sample_checks():
    """``CudaBackend.decode_sample`` keeps its errors on the fast path (id / slot count mismatch, a slot not in
    use, a full slot: the messages of ``_check_decode``), returns [] for no slots, hands ``DecodeGraphs.step_list``
    the slots, ids, lengths and rows, and advances the lengths only on success. The graphs are a stub here (the
    forward is covered above and in test_sim_backend)."""
    from tensorfold.runtime.backend import CudaBackend

    calls = []

    class Stub:
        def step_list(self, slots, ids, lens, rows):
            calls.append((list(slots), list(ids), list(lens), list(rows)))
            return [int(t) + 1 for t in ids]

    be = CudaBackend.__new__(CudaBackend)
    be.context, be._lens, be.graphs = 4, {0: 3, 2: 1}, Stub()
    r = SampleRow(0.0, 0, 1.0, 0.0, 0, 4, 512)
    assert be.decode_sample([], [], []) == []
    with pytest.raises(ValueError, match="1 slots but 2 ids"):
        be.decode_sample([0], [5, 6], [r])
    with pytest.raises(KeyError, match="slot 1 is not in use"):
        be.decode_sample([0, 1], [5, 6], [r, r])
    out = be.decode_sample((2, 0), np.array([5, 9]), (r, r))
    assert out == [6, 10] and calls[-1] == ([2, 0], [5, 9], [1, 3], [r, r])
    assert be._lens == {0: 4, 2: 2}
    with pytest.raises(ValueError, match="slot 0 is full"):
        be.decode_sample([2, 0], [5, 9], [r, r])
    assert be._lens == {0: 4, 2: 2} and len(calls) == 1


def test_use_vocab_drops_every_graph_table(micro):
    """A new sampler bound (captured into every graph) drops the step graphs (sampler and argmax forms) AND the
    window / tree graphs."""
    from tensorfold.runtime.backend import CudaBackend

    be = CudaBackend(micro.tensors, micro.config, parallel=2, context=16, kv_cache="bf16", prompt_rows=8,
                     progress=False)
    g = be.graphs
    vv = g.valid_vocab
    g.graphs[1], g.ggraphs[1], g.wgraphs[("step", 1, 2, True)] = object(), object(), object()
    assert not g.use_vocab(vv) and not g.use_vocab(None) and g.graphs and g.ggraphs and g.wgraphs
    assert g.use_vocab(vv - 7) and g.valid_vocab == vv - 7
    assert not g.graphs and not g.ggraphs and not g.wgraphs


def test_all_greedy_is_the_samplers_test(monkeypatch):
    """``all_greedy`` calls a row greedy exactly where the device sampler does (its float32 temperature is not
    above zero, NaN included); a tiny positive temperature that float32 rounds to zero is greedy there too.
    ``TENSORFOLD_GREEDY_GRAPHS=0`` keeps greedy rows on the sampler form."""
    from tensorfold.runtime.graphs import _argmax_form, all_greedy

    def r(t):
        return SampleRow(t, 0, 1.0, 0.0, 0, 1, 512)

    assert all_greedy([r(0.0), r(-1.0), r(float("nan")), r(1e-46)])
    assert not all_greedy([r(0.0), r(1e-3)]) and not all_greedy([r(2.0)]) and not all_greedy([])
    monkeypatch.delenv("TENSORFOLD_GREEDY_GRAPHS", raising=False)
    assert _argmax_form([r(0.0)]) and not _argmax_form([r(0.0), r(0.5)])
    monkeypatch.setenv("TENSORFOLD_GREEDY_GRAPHS", "0")
    assert not _argmax_form([r(0.0)])


def test_greedy_steps_take_the_argmax_graph(micro, micro_arena, monkeypatch):
    """All-greedy steps replay the argmax form of the step graph (``ggraphs``: ``glue.launch_argmax`` in place of
    the sampler's eight launches). Two streams stepped four times through ``DecodeGraphs.step`` (fast path, then the
    generic one; a replay is emulated) against the same steps on other slots through the runner's eager forward
    with the device sampler (``forward(sample_rows=...)``), bit for bit: ids, logits, and the caches afterwards.
    Step 1 mixes a greedy row with a sampled one (temperature 1, top-k 1: the argmax id drawn through the
    sampler), so it takes the sampler form."""
    rng = np.random.default_rng(35)
    run = make_runner(micro, micro_arena, kv="bf16", slots=4, ctx=16, rows=8, prompt_rows=8)
    dg = DecodeGraphs(run, 2)
    dg.use_graphs = True
    monkeypatch.setattr(dg, "_build", lambda launch: _Replay(launch))
    warm = []  # the capture's eager padding run (the host stand-ins take no all-padding attention): noted only
    monkeypatch.setattr(dg, "_padding_launch", lambda b, greedy=False: warm.append((b, greedy)))
    P = [[int(x) for x in rng.integers(0, 512, k)] for k in (3, 2)]
    for k in (0, 1):
        run.forward(F.prompt_batch([(k, P[k], 0), (k + 2, P[k], 0)]), logits=False)
    lens = [3, 2]
    ids = [int(x) for x in rng.integers(0, 512, 2)]
    for k in range(4):
        mixed = k == 1
        rows = [SampleRow(1.0 if mixed and i == 1 else 0.0, 1 if mixed and i == 1 else 0, 1.0, 0.0, 5 + k,
                          lens[i] + 1, 512) for i in range(2)]
        dg.fast_step = k < 3
        got = [int(t) for t in dg.step([0, 1], ids, lens, rows)]
        lg = dg.logits(2)
        le, te = run.forward(F.step_batch([2, 3], ids, lens), sample_rows=rows)
        assert got == [int(t) for t in te], f"step {k}"
        assert np.array_equal(lg, le), f"step {k}"
        assert got == [int(np.argmax(x)) for x in le]
        assert set(dg.ggraphs) == {2} and set(dg.graphs) == ({2} if k >= 1 else set())
        ids = got
        lens = [x + 1 for x in lens]
    assert warm == [(2, True), (2, False)]  # one capture of each form
    for i in range(2):
        _caches_equal(run, i, i + 2, lens[i])
