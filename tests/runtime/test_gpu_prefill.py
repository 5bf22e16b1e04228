"""GPU tier for ``runtime.prefill.prefill_many`` at 2B geometry (a 4-layer cut of the synth 4-bit g64 model): three
streams' prompt chunks of different lengths packed into one prompt forward give the same tokens as the chunks run
one by one, and leave the same caches and states (the next decode step's logits, bit for bit)."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0":
    pytest.skip("GPU tier: set NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU", allow_module_level=True)


def test_prefill_many_equals_one_by_one_2b():
    from tensorfold.engine.backend import PrefillJob, SampleRow
    from tensorfold.runtime.backend import CudaBackend
    from tensorfold.runtime.prefill import prefill_many
    from tests.runtime.test_gpu_runtime import _synth

    ck = _synth("2b", layers=4)
    be = CudaBackend(ck.tensors, ck.config, parallel=6, context=2048, kv_cache="bf16", prompt_rows=1024,
                     progress=False)
    V = ck.config.vocab_size
    rng = np.random.default_rng(3)
    P, Q, R = ([int(t) for t in rng.integers(0, 248000, n)] for n in (300, 600, 17))

    def row(pos, t=0.0):
        return SampleRow(t, 0, 1.0, 0.0, 7, pos, V)

    a, b, c = be.new_slot(), be.new_slot(), be.new_slot()
    got = prefill_many(be, [PrefillJob(a, P, 0, row(300, 0.8)), PrefillJob(b, Q, 0, None),
                            PrefillJob(c, R, 0, row(17))])
    a1, b1, c1 = be.new_slot(), be.new_slot(), be.new_slot()
    alone = [be.prefill_sample(a1, P, 0, row(300, 0.8)), be.prefill(b1, Q, 0, want_logits=False),
             be.prefill_sample(c1, R, 0, row(17))]
    assert got[0] == alone[0] and got[2] == alone[2] and got[1] is None
    ids = [int(t) for t in rng.integers(0, 248000, 3)]
    lp = be.decode([a, b, c], ids)
    la = be.decode([a1, b1, c1], ids)
    assert np.isfinite(lp).all()
    assert np.array_equal(lp, la), f"max |diff| {np.abs(lp - la).max()}"
    be.close()
