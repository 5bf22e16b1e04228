"""GPU tier: decode graphs against the eager forward at the 9B and 27B geometries (synth 4-bit g64, cut to 4
layers so that a run stays short): ``pytest -m gpu tests/runtime/test_gpu_graphs_large.py -s``.

Why (session 33): at 2B the LM head was the only bandwidth GEMV (qgemv3, swept layout), and its ``.nc`` x loads
raced the RMSNorm before it in verify graphs under PDL. At 9B and 27B every decode linear is a qgemv3 launch, so
the graphs of these geometries are where such a race would show first. Oracle: the eager forward of the same
batch on another slot holding the same prompt, bit for bit: step graphs for 1 and 3 streams in both forms (greedy
rows: the argmax form; temperature 1 at top-k 1: the sampler form; two steps each, the second a replay), a
committed 5-row window graph, and a 6-row tree verify graph (unsampled, greedy, and top-k 1 sampled)."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0":
    pytest.skip("GPU tier: set NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU", allow_module_level=True)

from tests.runtime.test_gpu_graphs import _caches_equal  # noqa: E402
from tests.runtime.test_gpu_runtime import _ids, _runner, _synth  # noqa: E402


@pytest.mark.parametrize("geom", ["9b", "27b"])
def test_graphs_equal_eager_large(geom):
    from tensorfold.engine.backend import SampleRow
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.arena import Arena
    from tensorfold.runtime.graphs import DecodeGraphs

    ck = _synth(geom, layers=4)
    run = _runner(ck, Arena.upload(ck.tensors, ck.config, progress=False), "bf16", slots=8, ctx=256)
    V = run.c.vocab_size
    rng = np.random.default_rng(36)
    dg = DecodeGraphs(run, 4)
    Ps = [_ids(rng, n) for n in (30, 7, 61)]
    for s in range(3):  # slot pairs (graph s, eager s + 4) hold the same prompt
        run.forward(F.prompt_batch([(s, Ps[s], 0), (s + 4, Ps[s], 0)]), logits=False)
    lens = [len(p) for p in Ps]
    bad = []

    def cmp(name, a, b):
        if not np.array_equal(a, b):
            bad.append(f"{name}: max |diff| {float(np.abs(a - b).max()):.4g}")

    # steps: greedy rows (the argmax form of the step graph), then temperature 1 at top-k 1 (the sampler form, the
    # argmax id drawn through its eight launches); each form's first call captures, its second replays
    for rep, (temp, topk) in enumerate(((0.0, 0), (0.0, 0), (1.0, 1), (1.0, 1))):
        for n in (1, 3):
            ids = _ids(rng, n)
            rows = [SampleRow(temp, topk, 1.0, 0.0, 7, lens[s] + 1, V) for s in range(n)]
            tg = dg.step(list(range(n)), ids, lens[:n], rows)
            lg = dg.logits(n)
            le, te = run.forward(F.step_batch([s + 4 for s in range(n)], ids, lens[:n]), argmax=True,
                                 valid_vocab=V)
            cmp(f"step graph {n} stream(s) rep {rep}", lg, le)
            if [int(t) for t in tg] != [int(t) for t in te]:
                bad.append(f"step graph {n} stream(s) rep {rep}: ids {list(tg)} != eager {list(te)}")
            for s in range(n):
                lens[s] += 1
    w = _ids(rng, 5)
    lg, _ = dg.forward(F.window_batch([(0, w, lens[0])]))
    le, _ = run.forward(F.window_batch([(4, w, lens[0])]))
    cmp("window graph (5 rows, committed)", lg, le)
    lens[0] += 5
    ids, par = _ids(rng, 6), [-1, 0, 0, 2, 2, 4]
    lt, _ = dg.forward(F.tree_batch([(1, ids, par, lens[1])]))
    lte, _ = run.forward(F.tree_batch([(5, ids, par, lens[1])]))
    cmp("tree verify graph", lt, lte)
    for form, row in (("greedy (argmax form)", SampleRow(0.0, 0, 1.0, 0.0, 0, lens[1] + 1, V)),
                      ("top-k 1 (sampler form)", SampleRow(1.0, 1, 1.0, 0.0, 3, lens[1] + 1, V))):
        ls, ts = dg.forward(F.tree_batch([(1, ids, par, lens[1])]), [row] * 6)
        cmp(f"tree verify graph, {form}", ls, lte)
        if [int(t) for t in ts] != [int(np.argmax(r)) for r in ls]:
            bad.append(f"tree graph, {form}: ids != argmax of its logits")
    if not {("verify", 1, 8, True), ("verify", 1, 8, "argmax")} <= set(dg.wgraphs):
        bad.append(f"tree graphs captured: {sorted(map(str, dg.wgraphs))}")
    assert dg.capture_error is None, dg.capture_error
    assert set(dg.ggraphs) == set(dg.graphs) == {1, 4}, (sorted(dg.ggraphs), sorted(dg.graphs))
    for s in range(3):
        _caches_equal(run, s, s + 4, lens[s])
    print(f"\n{geom} (4 layers): step graphs (1, 3 streams, twice), window and tree graphs == eager: "
          f"{'yes' if not bad else '; '.join(bad)}")
    assert not bad, "; ".join(bad)
