"""Simulator tier for ``runtime.prefill.prefill_many``: several streams' prompt chunks packed into one forward give
each stream the same token, and leave the same cache and state (checked through the next decode step's logits, bit
for bit), as the chunks run one by one; a bad job is refused before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfold.engine.backend import PrefillJob
from tensorfold.runtime.backend import CudaBackend
from tensorfold.runtime.prefill import prefill_many
from tests.runtime.test_sim_backend import _row


def test_prefill_many_equals_one_by_one(micro):
    rng = np.random.default_rng(11)
    be = CudaBackend(micro.tensors, micro.config, parallel=6, context=16, kv_cache="bf16", prompt_rows=8,
                     progress=False)
    P, Q, R = ([int(t) for t in rng.integers(0, 512, n)] for n in (3, 2, 3))
    # packed: P ends its prompt (sampled at temperature), Q is a first chunk (no token), R ends (greedy)
    a, b, c = be.new_slot(), be.new_slot(), be.new_slot()
    calls = []
    orig = be.runner.forward
    be.runner.forward = lambda batch, **kw: (calls.append(batch.S), orig(batch, **kw))[1]
    got = prefill_many(be, [PrefillJob(a, P, 0, _row(3, 0.9, 5)), PrefillJob(b, Q, 0, None),
                            PrefillJob(c, R, 0, _row(3))])
    be.runner.forward = orig
    assert calls == [3], f"expected one packed forward of 3 segments, got {calls}"
    assert got[1] is None
    # one by one on fresh slots of the same backend
    a1, b1, c1 = be.new_slot(), be.new_slot(), be.new_slot()
    alone = [be.prefill_sample(a1, P, 0, _row(3, 0.9, 5)), be.prefill(b1, Q, 0, want_logits=False),
             be.prefill_sample(c1, R, 0, _row(3))]
    assert got[0] == alone[0] and got[2] == alone[2]
    assert be._lens[b] == 2 and be._lens[a] == 3
    # the next step's logits: same caches and states, bit for bit
    ids = [int(t) for t in rng.integers(0, 512, 3)]
    lp = be.decode([a, b, c], ids)
    la = be.decode([a1, b1, c1], ids)
    assert np.isfinite(lp).all()
    assert np.array_equal(lp, la)
    # a bad job (wrong start) is refused and nothing ran: the slot lengths are unchanged
    with pytest.raises(ValueError, match="chunk starts at"):
        prefill_many(be, [PrefillJob(a, P, 4, None), PrefillJob(b, Q, 0, None)])
    assert be._lens[a] == 4 and be._lens[b] == 3


def test_prefill_many_packs_by_rows():
    from tensorfold.runtime.prefill import _groups

    J = lambda n: PrefillJob(0, [1] * n, 0)  # noqa: E731
    assert _groups([J(3), J(4), J(2), J(9), J(1)], 8) == [[0, 1], [2], [3], [4]]
    assert _groups([J(8)], 8) == [[0]]


def test_backend_prefill_many_is_packed(micro, monkeypatch):
    """CudaBackend.prefill_many (what the engine calls) goes through the packed path."""
    import tensorfold.runtime.prefill as P

    be = CudaBackend(micro.tensors, micro.config, parallel=2, context=16, kv_cache="bf16", prompt_rows=8,
                     progress=False)
    seen = []
    monkeypatch.setattr(P, "prefill_many", lambda b, jobs: seen.append(len(jobs)) or [None] * len(jobs))
    assert be.prefill_many([PrefillJob(be.new_slot(), [1, 2], 0), PrefillJob(be.new_slot(), [3], 0)]) == [None] * 2
    assert seen == [2]


def test_warm_prompt_graphs_leaves_no_trace(micro):
    """The startup warm-up runs its forwards on scratch slots and frees them: a prompt afterwards gives the same
    logits, bit for bit, as on a backend that was never warmed."""
    from tensorfold.runtime.prefill import warm_bucket_list, warm_prompt_graphs

    kw = dict(parallel=2, context=16, kv_cache="bf16", prompt_rows=8, progress=False)
    be = CudaBackend(micro.tensors, micro.config, **kw)
    assert warm_bucket_list(be, 1024) == [(be.runner.prompt_bucket(1), 8)]  # prompt_rows 8: one bucket
    assert warm_prompt_graphs(be, 1024, 512) == 2  # one and two streams
    assert not be._lens
    P = [int(t) for t in np.random.default_rng(5).integers(0, 512, 5)]
    warmed = be.prefill(be.new_slot(), P, 0)
    cold = CudaBackend(micro.tensors, micro.config, **kw)
    fresh = cold.prefill(cold.new_slot(), P, 0)
    assert np.isfinite(fresh).all()
    assert np.array_equal(warmed, fresh)
    for b in (be, cold):  # close drops every graph table (what the server does on SIGTERM)
        b.close()
        assert not (b.graphs.graphs or b.graphs.ggraphs or b.graphs.wgraphs or b.runner._pgraphs)
