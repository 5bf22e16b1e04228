"""Simulator tier for the window / tree graphs (``runtime.graphs.DecodeGraphs.forward`` / ``commit``).

The simulator cannot capture graphs, so ``DecodeGraphs`` runs the graphs' launch sequence eagerly over the
bucket's static metadata (padded to b streams x w rows, padding rows slot -1) -- the code path a replay feeds,
minus the capture. Oracle: the runner's eager, unpadded forward of the same batch on another slot holding the
same prompt, bit for bit (logits, sampled ids = argmax for greedy rows, and the caches after a committed window
and after a tree verify + commit). The GPU tier (test_gpu_graphs.py) checks real replays the same way.
"""

from __future__ import annotations

import numpy as np

from tests.runtime.conftest import make_runner
from tests.runtime.test_sim_forward import _caches_equal

from tensorfold.engine.backend import SampleRow
from tensorfold.runtime import forward as F
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
