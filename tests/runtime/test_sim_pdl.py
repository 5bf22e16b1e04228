"""Simulator tier for programmatic dependent launch (``kernels._pdl``; the GPU tier is ``test_gpu_pdl.py``).

- ``_pdl.aware`` is true exactly for functions that name ``pdl_wait`` or ``pdl_begin``.
- Coverage: every kernel the decode graphs launch -- steps with the device sampler, a committed window, a tree
  verify and its commit -- is PDL-aware, recorded from the simulator's launches on the tiny model. An unaware kernel
  would still be correct (it is launched without the attribute), but it would serialize the graph there.
- The simulator never uses the attribute: ``enabled()`` is false and ``scope()`` leaves launches plain.
"""

from __future__ import annotations

import numpy as np

from tests.runtime.conftest import make_runner

from tensorfold.engine.backend import SampleRow
from tensorfold.kernels import _pdl
from tensorfold.kernels._device import pdl_begin, pdl_wait
from tensorfold.runtime import forward as F
from tensorfold.runtime.graphs import DecodeGraphs


def test_aware_by_name():
    def k_aware(x):
        pdl_wait()
        x[0] = 1.0

    def k_plain(x):
        x[0] = 1.0

    def k_begin(x):
        pdl_begin()
        x[0] = 1.0

    assert _pdl.aware(k_aware)
    assert _pdl.aware(k_begin)
    assert not _pdl.aware(k_plain)
    assert not _pdl.aware(object())


def test_simulator_never_enables():
    assert not _pdl.enabled()
    with _pdl.scope():
        assert not _pdl.active()
    assert not _pdl.active()


def test_decode_graph_kernels_are_aware(micro, micro_arena, monkeypatch):
    from numba.cuda.simulator import kernel as K

    seen = {}
    orig = K.FakeCUDAKernel.__call__

    def rec(self, *args):
        if not self._device and not K._kernel_context:
            seen[self.fn.__name__] = self.fn
        return orig(self, *args)

    monkeypatch.setattr(K.FakeCUDAKernel, "__call__", rec)
    rng = np.random.default_rng(41)
    run = make_runner(micro, micro_arena, kv="bf16", slots=4, ctx=16, rows=8, prompt_rows=8)
    dg = DecodeGraphs(run, 2)
    P = [int(x) for x in rng.integers(0, 512, 3)]
    T = len(P)
    for s in range(4):
        run.forward(F.prompt_batch([(s, P, 0)]), logits=False)
    seen.clear()  # the prompt path runs eagerly, outside any graph: not counted
    rows = [SampleRow(0.7, 5, 0.9, 0.0, 3 + k, T, 512) for k in range(2)]
    dg.step([0, 1], [5, 6], [T, T], rows)
    dg.step([0], [7], [T + 1], [SampleRow(0.0, 0, 1.0, 0.0, 0, T + 1, 512)])
    dg.forward(F.window_batch([(2, [1, 2, 3], T)]))
    bt = F.tree_batch([(3, [4, 5, 6], [-1, 0, 0], T)])
    dg.forward(bt, [SampleRow(0.0, 0, 1.0, 0.0, 0, T + 1, 512)] * 3)
    dg.commit(bt, [2])
    assert len(seen) >= 8, sorted(seen)
    plain = sorted(n for n, fn in seen.items() if not _pdl.aware(fn))
    assert not plain, f"decode kernels without pdl_wait: {plain}"
    print(f"\n{len(seen)} decode kernels, all PDL-aware: {sorted(seen)}")
