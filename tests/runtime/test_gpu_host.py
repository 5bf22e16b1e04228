"""GPU tier for the decode host paths (``runtime.graphs.DecodeGraphs``): ``pytest -m gpu tests/runtime/test_gpu_host.py -s``.

At Qwen3.5-2B geometry (synth 4-bit g64), three streams decoded five steps from the same three prompts on three
slot groups, with captured graphs (bucket 4, one padding row) and a mix of greedy and seeded temperature rows:
group A through ``CudaBackend.decode_sample`` (the fast host path), group B through ``DecodeGraphs.step`` on
the generic batch builders (``fast_step = False``, the path before the fast one), group C pipelined
(``launch_step`` of step k + 1 with its ids chained on the device before ``wait_step`` of step k). Oracle: the
generic path. Checked bit for bit: the ids of every step, and the recurrent state, conv tails and K/V of every
stream afterwards.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0":
    pytest.skip("GPU tier: set NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU", allow_module_level=True)

from tests.runtime.test_gpu_runtime import _ids, _synth  # noqa: E402


def test_fast_generic_pipelined_steps_equal():
    from tensorfold.engine.backend import SampleRow
    from tensorfold.runtime.backend import CudaBackend

    ck = _synth("2b")
    V = ck.config.vocab_size
    be = CudaBackend(ck.tensors, ck.config, parallel=9, context=256, kv_cache="bf16", prompt_rows=256,
                     progress=False)
    g = be.graphs
    assert g.use_graphs, g.capture_error
    rng = np.random.default_rng(41)
    Ps = [_ids(rng, n) for n in (17, 40, 5)]
    A, B, C = ([be.new_slot() for _ in range(3)] for _ in range(3))
    first = []
    for grp in (A, B, C):
        first.append([be.prefill_sample(s, P, 0, SampleRow(0.0, 0, 1.0, 0.0, 0, len(P), V))
                      for s, P in zip(grp, Ps)])
    assert first[0] == first[1] == first[2]
    K = 5

    def rows(k):
        return [SampleRow(0.0 if i == 0 else 0.8, 0 if i < 2 else 50, 1.0 if i < 2 else 0.9, 0.0, 77 + i,
                          len(P) + k + 1, V) for i, P in enumerate(Ps)]

    lens0 = [len(P) for P in Ps]
    ta, out_a = first[0], []
    for k in range(K):
        ta = be.decode_sample(A, ta, rows(k))
        out_a.append(ta)
    g.fast_step = False
    tb, out_b = first[1], []
    for k in range(K):
        tb = [int(t) for t in g.step(B, tb, [n + k for n in lens0], rows(k))]
        out_b.append(tb)
    g.fast_step = True
    out_c = []
    tk = g.launch_step(C, first[2], lens0, rows(0))
    for k in range(1, K):
        nxt = g.launch_step(C, None, [n + k for n in lens0], rows(k), chain=True)
        out_c.append(g.wait_step(tk))
        tk = nxt
    out_c.append(g.wait_step(tk))
    assert g.capture_error is None and 4 in g.graphs
    assert out_a == out_b, "fast decode_sample != generic step"
    assert out_c == out_b, "pipelined steps != generic step"
    cc = be.caches
    rec, conv = cc.rec.copy_to_host(), cc.conv.copy_to_host()
    k_, v_ = cc.k.copy_to_host(), cc.v.copy_to_host()
    for i in range(3):
        n = lens0[i] + K
        for other in (A[i], C[i]):
            assert np.array_equal(rec[:, B[i]], rec[:, other]), "recurrent state differs"
            assert np.array_equal(conv[:, B[i]], conv[:, other]), "conv tails differ"
            assert np.array_equal(k_[:, B[i], :n], k_[:, other, :n]) and np.array_equal(v_[:, B[i], :n],
                                                                                         v_[:, other, :n])
    print(f"\nfast / generic / pipelined decode, 3 streams x {K} steps (graphs, bucket 4): ids {out_b[-1]}, "
          "ids and caches bit for bit")
    be.close()
