"""Simulator tier for the graphed prompt path (``Runner._prompt_graphed``, ``TENSORFOLD_PROMPT_GRAPH=1``): a prompt
chunk padded to its rows bucket, with grids sized from the bucket and the buffer capacity, gives the same logits
and caches as the eager forward of the unpadded chunk, bit for bit (first chunks and a continuation chunk). In the
simulator the padded launches run eagerly (there are no graphs); the GPU tier replays real graphs
(tests/runtime/test_gpu_prompt_graph.py)."""

from __future__ import annotations

import numpy as np
from numba import cuda

from tests.runtime.conftest import make_runner

from tensorfold.runtime import forward as F


def _ids(rng, n, V=512):
    return [int(t) for t in rng.integers(0, V, n)]


def test_bucket_rule(micro, micro_arena):
    run = make_runner(micro, micro_arena, kv="bf16", slots=1, rows=8, prompt_rows=8)
    assert [run.prompt_bucket(r) for r in (1, 5, 8)] == [8, 8, 8]  # capped at the buffer rows
    run.rows_cap = 4096
    assert [run.prompt_bucket(r) for r in (1, 64, 65, 300, 512, 513, 1100, 4096)] == \
        [64, 64, 128, 512, 512, 1024, 1536, 4096]


def test_graphed_prompt_equals_eager(micro, micro_arena, monkeypatch):
    """Three streams in one chunk (rows padded 6 -> 8, segments 3 -> 4), then a continuation chunk of one of them
    (T > 0): graphed == eager, logits and caches, bit for bit."""
    rng = np.random.default_rng(5)
    run = make_runner(micro, micro_arena, kv="bf16", slots=6, rows=8, prompt_rows=8)
    st = cuda.stream()
    P, Q, U, C = _ids(rng, 2), _ids(rng, 3), _ids(rng, 1), _ids(rng, 2)
    monkeypatch.setenv("TENSORFOLD_PROMPT_GRAPH", "0")
    le, _ = run.forward(F.prompt_batch([(0, P, 0), (1, Q, 0), (2, U, 0)]), stream=st)
    lec, _ = run.forward(F.prompt_batch([(1, C, len(Q))]), stream=st)
    monkeypatch.setenv("TENSORFOLD_PROMPT_GRAPH", "1")
    lg, _ = run.forward(F.prompt_batch([(3, P, 0), (4, Q, 0), (5, U, 0)]), stream=st)
    lgc, _ = run.forward(F.prompt_batch([(4, C, len(Q))]), stream=st)
    assert not np.isnan(lg).any()
    assert np.array_equal(lg, le)
    assert np.array_equal(lgc, lec)
    cc = run.caches
    rec, conv = cc.rec.copy_to_host(), cc.conv.copy_to_host()
    k, v = cc.k.copy_to_host(), cc.v.copy_to_host()
    for a, b, m in ((0, 3, len(P)), (1, 4, len(Q) + len(C)), (2, 5, len(U))):
        assert np.array_equal(rec[:, a], rec[:, b])
        assert np.array_equal(conv[:, a], conv[:, b])
        assert np.array_equal(k[:, a, :m], k[:, b, :m])
        assert np.array_equal(v[:, a, :m], v[:, b, :m])


def test_default_off_in_simulator(monkeypatch):
    monkeypatch.delenv("TENSORFOLD_PROMPT_GRAPH", raising=False)
    assert F.prompt_graphs_on() is False
    monkeypatch.setenv("TENSORFOLD_PROMPT_GRAPH", "1")
    assert F.prompt_graphs_on() is True
