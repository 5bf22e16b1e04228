"""GPU tier for programmatic dependent launch in the decode graphs (``kernels._pdl``) at Qwen3.5-2B geometry (synth
4-bit g64): ``pytest -m gpu tests/runtime/test_gpu_pdl.py -s``.

Oracle: the same backend's eager launches (``use_graphs = False``: no capture, so no PDL attribute; every kernel
waits for the whole previous one). A kernel that touched an activation before its ``pdl_wait`` would read a stale
or half-written buffer in the graph and change logits or tokens. Checked bit for bit over 24 sampled steps (the
device sampler's kernels run too), for one stream (bucket 1) and four streams of different lengths (bucket 4), and
the graphs must really have been captured with PDL launches (``_pdl.launches()`` grows during capture).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0":
    pytest.skip("GPU tier: set NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU", allow_module_level=True)

from tests.runtime.test_gpu_runtime import _ids, _synth  # noqa: E402


# the prompt path's own kernels (its chunk graphs launch them plain: correct, only not overlapped)
PROMPT_KERNELS = ("gdn_prep", "gdn_chunk_", "tc3gemm", "xprep", "qgemm", "gemm")


def test_pdl_graph_steps_equal_eager():
    from tensorfold.engine.backend import SampleRow
    from tensorfold.kernels import _pdl
    from tensorfold.runtime.backend import CudaBackend

    from numba import cuda

    if tuple(cuda.get_current_device().compute_capability) < (9, 0):
        pytest.skip("PDL needs cc >= 9.0 (griddepcontrol)")
    assert _pdl.enabled(), "PDL should be available on a cc >= 9.0 device with this cuda.core"
    ck = _synth("2b")
    V = ck.config.vocab_size
    start = _pdl.launches()
    rng = np.random.default_rng(77)
    be = CudaBackend(ck.tensors, ck.config, parallel=8, context=1024, kv_cache="bf16", prompt_rows=512,
                     progress=False)
    assert be.graphs.use_graphs, be.graphs.capture_error

    def rows(slots, seed0):
        return [SampleRow(0.8, 40, 0.95, 0.0, seed0 + k, be._lens[s], V) for k, s in enumerate(slots)]

    for nst in (1, 4):
        prompts = [_ids(rng, n) for n in (37, 5, 210, 64)[:nst]]
        g_slots = [be.new_slot() for _ in range(nst)]
        e_slots = [be.new_slot() for _ in range(nst)]
        g_tok, e_tok = [], []
        for gs, es, P in zip(g_slots, e_slots, prompts):
            r = SampleRow(0.0, 0, 1.0, 0.0, 0, len(P), V)
            g_tok.append(be.prefill_sample(gs, P, 0, r))
            e_tok.append(be.prefill_sample(es, P, 0, r))
        assert g_tok == e_tok
        for i in range(24):
            be.graphs.use_graphs = True
            g_tok = be.decode_sample(g_slots, g_tok, rows(g_slots, 1000 * i))
            lg = be.graphs.logits(nst).copy()
            be.graphs.use_graphs = False
            e_tok = be.decode_sample(e_slots, e_tok, rows(e_slots, 1000 * i))
            le = be.graphs.logits(nst).copy()
            assert g_tok == e_tok, f"{nst} streams, step {i}: graph tokens {g_tok} != eager {e_tok}"
            assert np.array_equal(lg, le), f"{nst} streams, step {i}: graph logits != eager"
        assert _pdl.launches() > start, "no PDL launch was captured"
        plain = {n for n in _pdl.plain() if not n.startswith(PROMPT_KERNELS)}
        assert not plain, f"decode kernels captured without PDL (not aware): {sorted(plain)}"
        for s in g_slots + e_slots:
            be.free(s)
        print(f"\n{nst} stream(s): 24 sampled steps, PDL graph == eager, tokens and logits bit for bit "
              f"({_pdl.launches() - start} PDL launches captured so far)")
    be.graphs.use_graphs = True
    be.close()
