"""Scheduler policy on its own: admission limit and order, chunk alignment, the per-round prompt budget."""

import numpy as np

from tensorfold.engine.scheduler import Scheduler
from tensorfold.engine.sequence import Sequence, SeqStatus
from tensorfold.sampling import SamplingParams


def seq(rid, n):
    return Sequence(rid, list(range(n)), SamplingParams(), 0, frozenset(), 10)


def run_plan(s: Scheduler, plan, finish_after: dict):
    """Apply a plan the way the engine does (without a model)."""
    for ch in plan.prefill:
        assert ch.start == ch.seq.num_prefilled
        ch.seq.num_prefilled = ch.end
        if ch.last:
            ch.seq.status = SeqStatus.DECODE
    for q in plan.decode:
        q.output_ids.append(0)
        if len(q.output_ids) >= finish_after[q.request_id]:
            q.status = SeqStatus.FINISHED
            s.remove(q)


def test_random_workload_invariants():
    rng = np.random.default_rng(7)
    for parallel, chunk in [(1, 5), (3, 7), (4, 64)]:
        s = Scheduler(parallel, chunk)
        lens, finish_after, admitted_order, chunks = {}, {}, [], {}
        for i in range(25):
            rid = f"r{i}"
            lens[rid] = int(rng.integers(1, 40))
            finish_after[rid] = int(rng.integers(1, 6))
            s.add(seq(rid, lens[rid]))
        rounds = 0
        while s.has_work():
            plan = s.schedule()
            admitted_order += [q.request_id for q in plan.admitted]
            assert len(s.running) <= parallel
            assert plan.prefill or plan.decode  # every round makes progress
            # prompt budget: total prompt tokens <= chunk, except a lone first chunk
            total = sum(c.end - c.start for c in plan.prefill)
            assert total < 2 * chunk
            if len(plan.prefill) > 1:
                assert sum(c.end - c.start for c in plan.prefill[:-1]) < chunk
            # a stream never decodes and prefills in one round
            assert not ({id(c.seq) for c in plan.prefill} & {id(q) for q in plan.decode})
            for c in plan.prefill:
                chunks.setdefault(c.seq.request_id, []).append((c.start, c.end))
            run_plan(s, plan, finish_after)
            rounds += 1
            assert rounds < 10_000
        assert admitted_order == [f"r{i}" for i in range(25)]  # FIFO
        for rid, cs in chunks.items():  # chunks tile the prompt at the stream's own multiples of `chunk`
            assert cs == [(a, min(a + chunk, lens[rid])) for a in range(0, lens[rid], chunk)]


def test_long_prompt_interleaves_with_decode():
    s = Scheduler(2, 4)
    long, short = seq("long", 20), seq("short", 2)
    s.add(short)
    s.add(long)
    p1 = s.schedule()
    assert [c.seq.request_id for c in p1.prefill] == ["short", "long"]
    # budget 4: short takes 2; long still gets a whole chunk of its own (0..4), never a neighbour-dependent one
    assert (p1.prefill[1].start, p1.prefill[1].end) == (0, 4)
    run_plan(s, p1, {"short": 100, "long": 100})
    p2 = s.schedule()
    assert [q.request_id for q in p2.decode] == ["short"]
    assert [(c.start, c.end) for c in p2.prefill] == [(4, 8)]
