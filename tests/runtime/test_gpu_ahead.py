"""GPU tier for run-ahead decode (``TENSORFOLD_RUN_AHEAD=1``, ``runtime.ahead``) at Qwen3.5-2B geometry (synth
4-bit g64), with captured graphs, programmatic dependent launch and the pinned staging buffers of
``DecodeGraphs.launch_step``: ``NUMBA_ENABLE_CUDASIM=0 pytest -m gpu tests/runtime/test_gpu_ahead.py``.

The simulator tier's call sequence (``test_sim_ahead.run_ahead_calls``: steps run ahead and consumed, a stream
freed with its step in flight, a subset, a stream joining after a prefill, a stream left out, kept logits, misuse
refused) on two backends, run-ahead against synchronous: every call's ids equal, kept logits bit for bit."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0":
    pytest.skip("GPU tier: set NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU", allow_module_level=True)

from tests.runtime.test_gpu_runtime import _synth  # noqa: E402
from tests.runtime.test_sim_ahead import Pair, run_ahead_calls  # noqa: E402


def test_run_ahead_same_ids_2b(monkeypatch):
    from tensorfold.runtime.backend import CudaBackend

    ck = _synth("2b")

    def make():
        be = CudaBackend(ck.tensors, ck.config, parallel=3, context=40, kv_cache="bf16", prompt_rows=64,
                         progress=False)
        assert be.graphs.use_graphs, be.graphs.capture_error
        be.run_ahead = True  # as the engine sets it
        return be

    p = Pair(None, monkeypatch, np.random.default_rng(), make=make)
    run_ahead_calls(p, monkeypatch)
    assert p.on.n_ahead > 0
    print(f"\n2B, graphs: run-ahead ids == synchronous ids in every call ({p.on.n_ahead} ids served ahead)")
    for be in (p.on, p.off):
        be.close()
