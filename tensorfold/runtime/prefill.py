"""Several streams' prompt chunks as one prompt forward (``CudaBackend.prefill_many``; the engine's prefill of a round).

A round of the scheduler often prefills chunks of several streams (new requests arriving together). Run one by
one, each chunk pays the forward's fixed cost (a few hundred launches, host round trips) and feeds the GEMMs few
rows; packed into one ``prompt_batch`` of one segment per stream, they share it.

Packing never changes a stream's arithmetic: every prompt kernel computes a row from its own stream's rows only
(GEMM tiles are fixed by the weight shape, the chunked delta rule and the conv work per segment, attention per row
over its own keys, the head GEMV and the sampler per row), so a stream's cache, state and token are bit for bit
those of the same chunk run alone (``tests/runtime/test_sim_prefill.py``). Jobs are packed in order while their
rows fit the runner's prompt rows; a job longer than that runs alone through the backend's chunked ``_prefill``.
"""

from __future__ import annotations

from typing import Sequence

from tensorfold.engine.backend import PrefillJob, SampleRow
from tensorfold.runtime import forward as F

__all__ = ["prefill_many", "warm_prompt_graphs"]


def _check(be, jobs: Sequence[PrefillJob]) -> None:
    """Every job is valid before anything runs (an error leaves every slot as it was)."""
    seen = set()
    for j in jobs:
        if not len(j.ids):
            raise ValueError(f"prefill: empty chunk for slot {j.slot}")
        n = be._len(j.slot)
        if j.slot in seen:
            raise ValueError(f"prefill_many: slot {j.slot} appears twice in one call")
        seen.add(j.slot)
        if n != j.start_pos:
            raise ValueError(f"prefill: slot {j.slot} holds {n} tokens, chunk starts at {j.start_pos}")
        if j.start_pos + len(j.ids) > be.context:
            raise ValueError(f"prefill: {j.start_pos + len(j.ids)} tokens exceed the context of {be.context}")


def _groups(jobs, cap):
    """Consecutive runs of job indices whose rows sum to at most ``cap``; a job longer than cap is alone."""
    out, cur, rows = [], [], 0
    for i, j in enumerate(jobs):
        n = len(j.ids)
        if cur and (rows + n > cap or n > cap):
            out.append(cur)
            cur, rows = [], 0
        cur.append(i)
        rows += n
    if cur:
        out.append(cur)
    return out


def prefill_many(be, jobs: Sequence[PrefillJob]) -> list[int | None]:
    """Run ``jobs`` on CudaBackend ``be``; returns the drawn token for jobs with a row, else None."""
    jobs = list(jobs)
    _check(be, jobs)
    res: list[int | None] = [None] * len(jobs)
    vv = next((j.row.valid_vocab for j in jobs if j.row is not None), None) or be.vocab_size
    for g in _groups(jobs, be.prompt_rows):
        if len(g) == 1:  # alone (a job longer than prompt_rows always is): the backend's chunked path
            j = jobs[g[0]]
            res[g[0]] = be._prefill(j.slot, j.ids, j.start_pos, False, j.row)
            continue
        batch = F.prompt_batch([(jobs[i].slot, [int(t) for t in jobs[i].ids], jobs[i].start_pos) for i in g])
        rows = []
        for i in g:  # jobs that do not end a prompt get a greedy row whose token is dropped
            j = jobs[i]
            rows.append(j.row if j.row is not None else
                        SampleRow(0.0, 0, 1.0, 0.0, 0, j.start_pos + len(j.ids), vv))
        lg, tok = be.runner.forward(batch, logits=be.keep_logits, sample_rows=rows, stream=be.stream,
                                    valid_vocab=vv)
        if be.keep_logits:  # the drawn-from rows of the jobs that end a prompt, in job order
            be._keep([lg[k] for k, i in enumerate(g) if jobs[i].row is not None])
        for k, i in enumerate(g):
            j = jobs[i]
            be._lens[j.slot] = j.start_pos + len(j.ids)
            if j.row is not None:
                res[i] = int(tok[k])
    return res


def warm_bucket_list(be, max_rows: int) -> list[tuple[int, int]]:
    """(row bucket, rows that fill it) for the prompt-graph buckets (``Runner.prompt_bucket``) of 1 ..
    min(max_rows, prompt_rows) rows: the most rows up to that limit that land in each bucket."""
    top = min(int(max_rows), be.prompt_rows)
    fill: dict[int, int] = {}
    for r in range(1, top + 1):
        fill[be.runner.prompt_bucket(r)] = r
    return sorted(fill.items())


def warm_prompt_graphs(be, max_rows: int, valid_vocab: int, streams=(1, 2)) -> int:
    """Run (and so capture) the prompt graphs a server meets first: for k streams in ``streams`` and each row
    bucket up to ``max_rows`` (``warm_bucket_list``), one ``prefill_many`` of k sampled chunks filling the bucket,
    on scratch slots that are freed again (a slot is reset when it is next taken). Returns the forwards run."""
    n = 0
    free = be.max_slots - len(be._lens)
    for k in streams:
        if k > free:
            continue
        for _, rows in warm_bucket_list(be, max_rows):
            if rows < k:
                continue
            slots = [be.new_slot() for _ in range(k)]
            try:
                sizes = [rows // k + (1 if i < rows % k else 0) for i in range(k)]
                jobs = [PrefillJob(s, [0] * m, 0, SampleRow(0.0, 0, 1.0, 0.0, 0, m, valid_vocab))
                        for s, m in zip(slots, sizes)]
                prefill_many(be, jobs)
                n += 1
            finally:
                for s in slots:
                    be.free(s)
    return n
