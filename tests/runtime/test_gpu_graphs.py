"""GPU tier for the window / tree CUDA graphs (``runtime.graphs.DecodeGraphs.forward``) at Qwen3.5-2B geometry
(synth 4-bit g64 weights, small context): ``pytest -m gpu tests/runtime/test_gpu_graphs.py -s``.

Oracle: the runner's eager, unpadded forward of the same batch on another slot holding the same prompt. Checked
bit for bit: a committed window (mode step) replayed from its graph for 1 stream (bucket 1 x 8, three padding
rows) and for 3 streams of different window lengths and context lengths (bucket 4 x 16), logits and the caches
afterwards; a tree verify replayed with device sampling (the sampler form at top-k 1, then the argmax form for
greedy rows: ids = argmax), then committed, against the eager tree + commit; and a second replay of each captured graph (new tokens) against eager again. The graphs must
really be captured (``use_graphs`` stays on, no capture error).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0":
    pytest.skip("GPU tier: set NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU", allow_module_level=True)

from tests.runtime.test_gpu_runtime import _ids, _synth  # noqa: E402


def _caches_equal(run, a, b, n):
    cc = run.caches
    rec, conv = cc.rec.copy_to_host(), cc.conv.copy_to_host()
    k, v = cc.k.copy_to_host(), cc.v.copy_to_host()
    assert np.array_equal(rec[:, a], rec[:, b]), "recurrent state differs"
    assert np.array_equal(conv[:, a], conv[:, b]), "conv tails differ"
    assert np.array_equal(k[:, a, :n], k[:, b, :n]) and np.array_equal(v[:, a, :n], v[:, b, :n]), "K/V differ"


def _same_prompt_tree(run, seed, slots, n):
    """Reset ``slots``, give each the same random prompt of ``n`` tokens in one prompt batch, and draw a 6-row tree
    (root, two children of it, two of the second, one of the fourth) -> (prompt length, ids, parents)."""
    from tensorfold.runtime import forward as F

    rng = np.random.default_rng(seed)
    for s in slots:
        run.caches.reset(s)
    P = _ids(rng, n)
    run.forward(F.prompt_batch([(s, P, 0) for s in slots]), logits=False)
    return len(P), _ids(rng, 6), [-1, 0, 0, 2, 2, 4]


@pytest.fixture(scope="module")
def run2b():
    from tensorfold.runtime.arena import Arena
    from tensorfold.runtime.caches import Caches
    from tensorfold.runtime.forward import Runner

    ck = _synth("2b")
    arena = Arena.upload(ck.tensors, ck.config, progress=False)
    cc = Caches(ck.config, 8, 512, "bf16")
    for s in range(8):
        cc.reset(s)
    return Runner(ck.config, arena, cc, rows=64, log_rows=64, prompt_rows=256, att_rows=64)


def test_window_graph_replay_equals_eager(run2b):
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.graphs import DecodeGraphs

    run = run2b
    rng = np.random.default_rng(31)
    dg = DecodeGraphs(run, 4)
    assert dg.use_graphs
    Ps = [_ids(rng, n) for n in (40, 9, 123)]
    # slot pairs (graph, eager) hold the same prompts: (0, 4) P0, (1, 5) P1, (2, 6) P2
    for s in range(3):
        run.forward(F.prompt_batch([(s, Ps[s], 0), (s + 4, Ps[s], 0)]), logits=False)
    lens = [len(p) for p in Ps]
    for rep in range(2):  # first call captures, second replays the captured graph with new inputs
        # one stream, 5 rows (bucket 1 x 8)
        w = _ids(rng, 5)
        lg, _ = dg.forward(F.window_batch([(0, w, lens[0])]))
        le, _ = run.forward(F.window_batch([(4, w, lens[0])]))
        assert dg.use_graphs and ("step", 1, 8, False) in dg.wgraphs, dg.capture_error
        assert np.array_equal(lg, le), f"rep {rep}: 1-stream window graph != eager"
        lens[0] += len(w)
        _caches_equal(run, 0, 4, lens[0])
        # three streams, windows of 16, 3 and 11 rows (bucket 4 x 16), different context lengths
        ws = [_ids(rng, n) for n in (16, 3, 11)]
        lg, _ = dg.forward(F.window_batch([(s, ws[s], lens[s]) for s in range(3)]))
        le, _ = run.forward(F.window_batch([(s + 4, ws[s], lens[s]) for s in range(3)]))
        assert ("step", 4, 16, False) in dg.wgraphs
        assert np.array_equal(lg, le), f"rep {rep}: 3-stream window graph != eager"
        for s in range(3):
            lens[s] += len(ws[s])
            _caches_equal(run, s, s + 4, lens[s])
    print(f"\nwindow graphs (1 x 8, 4 x 16) replayed twice == eager windows, logits and caches bit for bit")
    assert dg.capture_error is None


def test_tree_graph_replay_equals_eager(run2b):
    from tensorfold.engine.backend import SampleRow
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.graphs import DecodeGraphs

    run = run2b
    rng = np.random.default_rng(32)
    dg = DecodeGraphs(run, 4)
    for s in range(8):
        run.caches.reset(s)
    P = _ids(rng, 57)
    T = len(P)
    run.forward(F.prompt_batch([(3, P, 0), (7, P, 0)]), logits=False)
    V = run.c.vocab_size
    for rep in range(2):
        ids = _ids(rng, 6)
        par = [-1, 0, 0, 2, 2, 4]
        gb = F.tree_batch([(3, ids, par, T)])
        # the sampler form (temperature 1, top-k 1: the argmax id drawn through all eight sampler launches), then
        # greedy rows, which replay the argmax form (one launch); a verify replay leaves the caches as they were
        ls, ts = dg.forward(gb, [SampleRow(1.0, 1, 1.0, 0.0, 3, T + 1, V)] * 6)
        assert ("verify", 1, 8, True) in dg.wgraphs, dg.capture_error
        rows = [SampleRow(0.0, 0, 1.0, 0.0, 0, T + 1, V)] * 6
        lg, tg = dg.forward(gb, rows)
        assert ("verify", 1, 8, "argmax") in dg.wgraphs, dg.capture_error
        assert np.array_equal(ls, lg), f"rep {rep}: sampler-form tree graph != argmax-form logits"
        assert [int(t) for t in tg] == [int(np.argmax(r)) for r in lg] == [int(t) for t in ts]
        assert dg.commit(gb, [5]) == [4]  # keeps 0 -> 2 -> 4 -> 5
        eb = F.tree_batch([(7, ids, par, T)])
        le, _ = run.forward(eb)
        assert run.commit(eb, [5]) == [4]
        assert np.array_equal(lg, le), f"rep {rep}: tree graph != eager tree"
        T += 4
        _caches_equal(run, 3, 7, T)
    print("\ntree verify graph (1 x 8, sampled) replayed twice + commit == eager tree + commit, bit for bit")


def test_verify_graph_factors(run2b):
    """Which factor of the tree test makes a replay differ from eager (session 32: the sampled tree graph's logits
    differed from the eager tree's at rep 0 by ~4 %, while the step-window graphs were bit-equal): an unsampled
    tree graph, the sampled tree graph, a verify window (chain, unsampled) graph, each against the eager forward of
    the same batch on another slot; and the eager tree's root row against an eager one-row verify (the same keys,
    the same state: bit-equal by the kernels' contracts), which says which side is wrong; and the two slots' caches
    after their shared prompt batch. Every comparison runs before the assertion, and the message lists all that
    differ."""
    from tensorfold.engine.backend import SampleRow
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.graphs import DecodeGraphs

    run = run2b
    rng = np.random.default_rng(33)
    dg = DecodeGraphs(run, 4)
    for s in (3, 7):
        run.caches.reset(s)
    P = _ids(rng, 57)
    T = len(P)
    run.forward(F.prompt_batch([(3, P, 0), (7, P, 0)]), logits=False)
    V = run.c.vocab_size
    ids, par = _ids(rng, 6), [-1, 0, 0, 2, 2, 4]
    bad = []
    try:  # the two slots after one prompt batch (the tree test checks the caches only after its commits)
        _caches_equal(run, 3, 7, T)
    except AssertionError as e:
        bad.append(f"caches after the prompt: {e}")

    def cmp(name, a, b):
        if not np.array_equal(a, b):
            bad.append(f"{name}: max |diff| {float(np.abs(a - b).max()):.4g}")

    le, _ = run.forward(F.tree_batch([(7, ids, par, T)]))
    l1, _ = run.forward(F.window_batch([(7, ids[:1], T)], commit=False))
    cmp("eager tree root vs eager 1-row verify", le[:1], l1)
    lg, _ = dg.forward(F.tree_batch([(3, ids, par, T)]))
    cmp("tree graph (unsampled) vs eager", lg, le)
    rows = [SampleRow(0.0, 0, 1.0, 0.0, 0, T + 1, V)] * 6
    ls, ts = dg.forward(F.tree_batch([(3, ids, par, T)]), rows)
    cmp("tree graph (sampled) vs eager", ls, le)
    if [int(t) for t in ts] != [int(np.argmax(r)) for r in ls]:
        bad.append("sampled tree graph: greedy ids != argmax of its logits")
    lw, _ = dg.forward(F.window_batch([(3, ids, T)], commit=False))
    lwe, _ = run.forward(F.window_batch([(7, ids, T)], commit=False))
    cmp("verify window graph vs eager", lw, lwe)
    cmp("eager verify window row 0 vs eager 1-row verify", lwe[:1], l1)
    assert dg.capture_error is None, dg.capture_error
    assert not bad, "; ".join(bad)


def test_verify_graph_bisect(run2b):
    """Session 33: the verify graphs (tree and chain window) differ from the eager verify by several logits while
    the eager forms agree with each other and step-window graphs equal eager. This runs the same tree batch on the
    same slot through each difference between the two paths, one at a time, and prints which agree:
    (a) ``Runner.forward`` (R = 6 rows, attention chunk count from the batch), (b) the same launches with no batch
    (chunk count from the buffers, as a graph has), (c) the batch padded to 8 rows, (d) ``DecodeGraphs`` with
    graphs off (padded, its own metadata buffers and stream), (e) the captured graph, (f) the captured graph on a
    second slot holding the same prompt. A verify forward changes no cache, so they may follow each other."""
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.graphs import DecodeGraphs

    run = run2b
    T, ids, par = _same_prompt_tree(run, 34, (2, 6), 45)
    tb = F.tree_batch([(6, ids, par, T)])
    out = {}
    out["a eager R6"] = run.forward(tb)[0]
    run.meta.write(tb)
    run.launch(tb.R, tb.S, tb.R, "verify", all_rows=True)
    out["b eager R6 no batch"] = run.buf.logits[:6].copy_to_host()
    out["c eager R8 padded"] = run.forward(tb.pad(8, 1))[0][:6]
    dge = DecodeGraphs(run, 4, use_graphs=False)
    out["d DecodeGraphs eager"] = dge.forward(tb)[0]
    dg = DecodeGraphs(run, 4)
    out["e graph slot 6"] = dg.forward(tb)[0]
    out["f graph slot 2"] = dg.forward(F.tree_batch([(2, ids, par, T)]))[0]
    out["g eager again"] = run.forward(tb)[0]
    assert dg.capture_error is None, dg.capture_error
    names = list(out)
    lines = []
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            d = float(np.abs(out[x] - out[y]).max())
            lines.append(f"{x:22s} vs {y:22s}: {'EQUAL' if d == 0 else f'max |diff| {d:.4g}'}")
    print("\n" + "\n".join(lines))
    assert all(np.array_equal(out[names[0]], out[n]) for n in names[1:]), "\n".join(lines)


def test_verify_graph_pdl_kernels(run2b, monkeypatch):
    """Session 33 call 2: the verify graphs equal eager with TENSORFOLD_PDL=0 or TENSORFOLD_SWEPT=0 and differ (not
    reproducibly: two replays of one batch differ too) otherwise: a race under programmatic dependent launch. For
    each PDL-aware kernel of the verify forward, by name: the tree graph with that kernel alone launched plainly,
    and with that kernel alone given the PDL attribute, each captured afresh and replayed three times against the
    eager tree. Prints the table; fails while the default graph differs."""
    from tensorfold.kernels import _pdl
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.graphs import DecodeGraphs

    run = run2b
    T, ids, par = _same_prompt_tree(run, 35, (1, 5), 50)
    tb = F.tree_batch([(5, ids, par, T)])
    le = run.forward(tb)[0]
    orig = _pdl.aware
    aware_names = set()

    def trial(plain_if, reps=3):
        def aw(f):
            n = getattr(f, "__name__", "?")
            ok = orig(f)
            if ok:
                aware_names.add(n)
            return ok and not plain_if(n)

        monkeypatch.setattr(_pdl, "aware", aw)
        dg = DecodeGraphs(run, 4)
        d = []
        for _ in range(reps):
            lg = dg.forward(tb)[0]
            d.append(float(np.abs(lg - le).max()))
        assert dg.capture_error is None, dg.capture_error
        monkeypatch.setattr(_pdl, "aware", orig)
        return "EQUAL" if max(d) == 0 else "diff " + "/".join(f"{x:.3g}" for x in d)

    n0 = _pdl.launches()
    base = trial(lambda n: False)
    lines = [f"default (every aware kernel PDL, {_pdl.launches() - n0} PDL launches): {base}",
             f"every kernel plain: {trial(lambda n: True)}"]
    for name in sorted(aware_names):
        lines.append(f"{name[:60]:60s} plain alone: {trial(lambda n, k=name: n == k):28s} "
                     f"PDL alone: {trial(lambda n, k=name: n != k)}")
    print("\n" + "\n".join(lines))
    assert base == "EQUAL", "\n".join(lines)
