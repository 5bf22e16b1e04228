"""Simulator tier for run-ahead decode (``runtime.ahead``: with ``Backend.run_ahead`` set, as the engine sets it,
``CudaBackend.decode_sample`` enqueues the next step of the same streams before waiting for this one;
``TENSORFOLD_RUN_AHEAD=0`` turns it off).

The oracle is the synchronous path (run-ahead off) on a second backend fed the same calls: its ids come from a step
launched and waited for in turn, with no step in flight between calls. On the two-layer tiny model, seeded
temperature rows mixed with greedy ones, the calls an engine makes: steps of the same streams (the step asked for
is the one run ahead), a stream finishing (freed with its step run ahead), a call for a subset, a stream joining
after a prefill (the others served from the step run ahead, the new one by a real step), a stream left out of a call
(its id kept for a later one), a call with kept logits (rows equal the synchronous ones bit for bit). Misuse is
refused: prefill or logits of a stream decoded ahead, a call whose inputs differ from what ran ahead."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfold.engine.backend import SampleRow
from tensorfold.runtime.backend import CudaBackend


def _backend(micro):
    be = CudaBackend(micro.tensors, micro.config, parallel=3, context=40, kv_cache="bf16", prompt_rows=8,
                     progress=False)
    be.run_ahead = True  # as the engine sets it; the environment switch decides per call
    return be


class Pair:
    """The same calls on a run-ahead backend and a synchronous one; every call's ids compared. ``make`` builds a
    backend (the GPU tier passes its own)."""

    def __init__(self, micro, monkeypatch, rng, make=None):
        make = make or (lambda: _backend(micro))
        self.on, self.off, self.mp, self.rng = make(), make(), monkeypatch, rng
        self.pos, self.last, self.seed, self.temp = {}, {}, {}, {}

    def call(self, name, *args):
        self.mp.setenv("TENSORFOLD_RUN_AHEAD", "0")
        want = getattr(self.off, name)(*args)
        self.mp.setenv("TENSORFOLD_RUN_AHEAD", "1")
        got = getattr(self.on, name)(*args)
        return got, want

    def start(self, n):
        s, s2 = self.on.new_slot(), self.off.new_slot()
        assert s == s2
        P = [int(t) for t in self.rng.integers(0, 512, n)]
        # a high temperature over the top 7: the tiny model repeats its input id when it can, so only a flat draw
        # makes each step's id differ from its input (a chain that fed a step stale ids would then show)
        self.seed[s], self.temp[s] = int(self.rng.integers(0, 2**62)), (0.0 if s == 0 else 30.0)
        row = self.row(s, n)
        got, want = self.call("prefill_sample", s, P, 0, row)
        assert got == want
        self.pos[s], self.last[s] = n, got
        return s

    def row(self, s, pos):
        return SampleRow(self.temp[s], 7, 0.9, 0.0, self.seed[s], pos, 512)

    def step(self, slots):
        rows = [self.row(s, self.pos[s] + 1) for s in slots]
        ids = [self.last[s] for s in slots]
        got, want = self.call("decode_sample", list(slots), ids, rows)
        assert got == want, (slots, got, want)
        for s, t in zip(slots, got):
            self.pos[s] += 1
            self.last[s] = t
        return got


def run_ahead_calls(p: Pair, monkeypatch):
    """The call sequence of ``test_run_ahead_same_ids`` on a Pair (shared with the GPU tier)."""
    a, b = p.start(5), p.start(3)
    for _ in range(3):  # the step asked for is the one run ahead
        p.step([a, b])
    assert p.on._ahead is not None and p.on._ahead.slots == (a, b)
    p.call("free", a)  # a stream finishes with its next step run ahead: that id is dropped
    assert p.on._ahead is not None and p.on._ahead.slots == (b,)
    p.step([b])  # a subset, from the step run ahead
    c = p.start(4)  # prefill waits for the step in flight; b's id stays pending
    p.step([b, c])  # b from the step run ahead, c by a real step
    p.step([b, c])
    p.step([c])  # b left out: its id run ahead waits for a later call
    assert p.on._ahead is not None and p.on._ahead.slots == (b,)
    p.step([c, b])  # order changed: b from its pending id, c by a real step
    p.step([c, b])
    for s in (p.on, p.off):
        s.keep_logits = True
    p.step([c, b])  # kept logits: the step run ahead was the last forward, its rows are copied
    k_on, k_off = p.on.take_logits(), p.off.take_logits()
    assert len(k_on) == len(k_off) == 2
    for x, y in zip(k_on, k_off):
        assert np.array_equal(np.asarray(x).view(np.uint32), np.asarray(y).view(np.uint32))
    assert p.on._ahead is None  # nothing runs ahead of a call that keeps logits
    for s in (p.on, p.off):
        s.keep_logits = False
    for _ in range(2):
        p.step([c, b])
    # misuse: a stream decoded ahead is not prefilled, its logits are not asked for, its inputs must match
    monkeypatch.setenv("TENSORFOLD_RUN_AHEAD", "1")
    with pytest.raises(RuntimeError, match="run ahead"):
        p.on.prefill(b, [1, 2], p.pos[b] + 1)
    with pytest.raises(RuntimeError, match="run ahead"):
        p.on.decode([b], [p.last[b]])
    with pytest.raises(RuntimeError, match="moved on"):
        p.on.decode_sample([c, b], [p.last[c], (p.last[b] + 1) % 512], [p.row(c, p.pos[c] + 1),
                                                                        p.row(b, p.pos[b] + 1)])


@pytest.mark.parametrize("in_graph", ["0", "1"])
def test_run_ahead_same_ids(micro, monkeypatch, in_graph):
    """``in_graph``: ``TENSORFOLD_CHAIN_GRAPH`` (the chained ids written by the previous step graph, no copies)."""
    monkeypatch.setenv("TENSORFOLD_CHAIN_GRAPH", in_graph)
    p = Pair(micro, monkeypatch, np.random.default_rng())
    assert p.on.graphs.chain_in_graph == (in_graph == "1")
    run_ahead_calls(p, monkeypatch)


def test_run_ahead_needs_the_callers_promise(micro, monkeypatch):
    """Without ``run_ahead`` (a direct user of the backend, not the engine) nothing runs ahead, whatever the
    environment says: ``decode`` may follow ``decode_sample`` on the same stream."""
    monkeypatch.delenv("TENSORFOLD_RUN_AHEAD", raising=False)
    be = CudaBackend(micro.tensors, micro.config, parallel=1, context=40, kv_cache="bf16", prompt_rows=8,
                     progress=False)
    assert not be.run_ahead
    s = be.new_slot()
    t = be.prefill_sample(s, [3, 1, 4], 0, SampleRow(0.0, 0, 1.0, 0.0, 0, 3, 512))
    t = be.decode_sample([s], [t], [SampleRow(0.0, 0, 1.0, 0.0, 0, 4, 512)])[0]
    assert be._ahead is None and be.n_ahead == 0
    assert be.decode([s], [t]).shape == (1, micro.config.vocab_size)


def test_run_ahead_stops_at_the_context(micro, monkeypatch):
    """No step runs ahead past the context: the last call of a full stream runs alone, and the ids stay equal."""
    rng = np.random.default_rng()
    p = Pair(micro, monkeypatch, rng)
    a = p.start(34)
    for _ in range(6):  # positions 34 .. 39: the fifth call runs the sixth ahead, the sixth runs none
        p.step([a])
    assert p.pos[a] == 40 and p.on._ahead is None


def _engine_run(micro, monkeypatch, on: bool, plan):
    """Run ``plan`` ((round to add at, prompt, SamplingParams), ...) through an Engine over a CudaBackend; -> ids
    and logprobs entries per request, in plan order."""
    from tensorfold.config import EngineConfig
    from tensorfold.engine import Engine

    monkeypatch.setenv("TENSORFOLD_RUN_AHEAD", "1" if on else "0")
    be = CudaBackend(micro.tensors, micro.config, parallel=3, context=40, kv_cache="bf16", prompt_rows=8,
                     progress=False)
    cfg = EngineConfig(backend="cuda", parallel=3, context=40, prompt_chunk=8)
    eng = Engine(be, None, config=cfg, model_config=micro.config, eos_token_ids=[], valid_vocab=512)
    rids, toks, lps, rnd = [None] * len(plan), {}, {}, 0
    while rnd < 200:
        for i, (at, P, sp) in enumerate(plan):
            if at == rnd:
                rids[i] = eng.add_request(P, sp)
        for o in eng.step():
            toks.setdefault(o.request_id, []).extend(o.new_token_ids)
            if o.logprobs:
                lps.setdefault(o.request_id, []).extend(o.logprobs)
        rnd += 1
        if all(r is not None for r in rids) and not eng.scheduler.running and not eng.scheduler.waiting:
            break
    return [toks.get(r) for r in rids], [lps.get(r) for r in rids], be


def test_engine_same_outputs_with_run_ahead(micro, monkeypatch):
    """The engine over a CudaBackend with run-ahead on and off: every request's ids and logprobs equal. Streams of
    different lengths finish at different rounds (their steps run ahead dropped), one joins while others decode
    (prefill beside steps run ahead), and one asks for logprobs (nothing runs ahead while it decodes)."""
    from tensorfold.sampling import SamplingParams

    rng = np.random.default_rng()
    P = [[int(t) for t in rng.integers(0, 512, n)] for n in (5, 3, 4, 6)]
    seeds = [int(s) for s in rng.integers(0, 2**31, 4)]
    plan = [(0, P[0], SamplingParams(temperature=0.0, max_tokens=9, seed=seeds[0])),
            (0, P[1], SamplingParams(temperature=0.9, top_k=7, max_tokens=4, seed=seeds[1])),
            (3, P[2], SamplingParams(temperature=0.7, top_p=0.9, max_tokens=6, seed=seeds[2])),
            (5, P[3], SamplingParams(temperature=0.0, max_tokens=5, seed=seeds[3], logprobs=2))]
    t_off, l_off, _ = _engine_run(micro, monkeypatch, False, plan)
    t_on, l_on, be = _engine_run(micro, monkeypatch, True, plan)
    assert be.run_ahead  # the engine set it
    assert [len(t) for t in t_off] == [9, 4, 6, 5]
    assert t_on == t_off
    assert l_on == l_off and l_on[3] is not None and len(l_on[3]) == 5
    assert be.n_ahead >= 5, be.n_ahead  # steps served from steps run ahead (9 of the 24 decode ids here)
