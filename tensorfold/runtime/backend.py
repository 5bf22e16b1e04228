"""CudaBackend: the engine's ``Backend`` on one NVIDIA GPU (issue 4), and ``create_backend`` the engine looks up.

Startup: plan the weights (``arena.plan_arena``), caches (``caches.plan_caches``) and buffers for ``parallel``
streams x ``context`` tokens; refuse a context that does not fit in free GPU memory with the largest one that
does; upload the weights once (one allocation, progress bar), preallocate everything, compile and capture the
decode graphs (``graphs.DecodeGraphs``); print one startup line (model, weight format, cache format, capacity,
load time) to stderr.

Serving: ``prefill`` runs prompt chunks of up to ``prompt_rows`` rows eagerly (GEMMs, chunked delta rule);
``decode_sample`` replays the step graph of the smallest bucket >= the number of streams and samples on the
device (``kernels.sample``: the counter-based draw of ``reference.sampling``), copying back only the ids;
``decode`` / ``prefill`` return logits where the engine asks for them. Host policy stays in ``engine/``.

Run-ahead (``run_ahead``, set by the engine; ``TENSORFOLD_RUN_AHEAD=0`` turns it off; ``runtime.ahead``):
``decode_sample`` enqueues the next step of the same streams before waiting for this one, so the engine's host
work between steps overlaps the GPU; the same ids.
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

import numpy as np
from numba import cuda

from tensorfold.engine.backend import Backend, SampleRow
from tensorfold.kernels._device import IS_SIM
from tensorfold.runtime import ahead as AH
from tensorfold.runtime import forward as F
from tensorfold.runtime.arena import Arena, plan_arena
from tensorfold.runtime.caches import Caches, plan_caches
from tensorfold.runtime.graphs import DecodeGraphs

__all__ = ["CudaBackend", "create_backend", "plan_memory"]

_MARGIN = 1 << 30  # left free for the CUDA context, modules and the graphs


def _sizes(config, slots, prompt_rows):
    rows = max(slots, min(slots * F.MAX_WINDOW, 256))
    return dict(rows=rows, log_rows=rows, prompt_rows=prompt_rows, att_rows=min(64, max(rows, 16)))


def plan_memory(tensors, config, slots: int, ctx: int, kv: str, prompt_rows: int) -> dict:
    """Bytes needed by weights, caches and buffers (no allocation)."""
    _, wbytes, _ = plan_arena(tensors, config)
    cp = plan_caches(config, slots, ctx, kv)
    sz = _sizes(config, slots, prompt_rows)
    bb = F.Buffers.nbytes(config, max(sz["rows"], prompt_rows), sz["log_rows"], ctx, sz["att_rows"], prompt_rows)
    return {"weights": wbytes, "caches": cp.total, "buffers": bb, "total": wbytes + cp.total + bb + _MARGIN}


def _free_bytes():
    try:
        free, _total = cuda.current_context().get_memory_info()
        return int(free)
    except Exception:  # noqa: BLE001 -- the simulator has no memory info
        return None


class CudaBackend(Backend):
    name = "cuda"
    _ahead = None  # runtime.ahead.Ahead: a decode step enqueued ahead of the next call
    n_ahead = 0  # ids served from steps run ahead (benchmarks and tests read it)

    def __init__(self, tensors, config, *, parallel: int, context: int, kv_cache: str = "bf16",
                 prompt_rows: int = 4096, use_graphs: bool = True, progress: bool = True, model_name: str = "model",
                 valid_vocab: int | None = None):
        t0 = time.time()
        self.config = c = config
        self.max_slots = int(parallel)
        self.context = int(context)
        self.kv_cache = kv_cache
        self.vocab_size = int(c.vocab_size)
        self.prompt_rows = int(prompt_rows)
        need = plan_memory(tensors, c, self.max_slots, self.context, kv_cache, self.prompt_rows)
        free = _free_bytes()
        if free is not None and need["total"] > free:
            fits = self._largest_context(tensors, free)
            raise ValueError(
                f"cuda backend: {self.max_slots} streams x {self.context} tokens need "
                f"{need['total'] / 2**30:.1f} GiB (weights {need['weights'] / 2**30:.1f}, caches "
                f"{need['caches'] / 2**30:.1f}, buffers {need['buffers'] / 2**30:.1f}, margin 1.0) but "
                f"{free / 2**30:.1f} GiB are free; the largest context that fits is {fits} tokens")
        t1 = time.time()
        self.arena = Arena.upload(tensors, c, progress=progress)
        t2 = time.time()
        self.caches = Caches(c, self.max_slots, self.context, kv_cache)
        sz = _sizes(c, self.max_slots, self.prompt_rows)
        self.runner = F.Runner(c, self.arena, self.caches, **sz)
        self.stream = cuda.stream()
        self.graphs = DecodeGraphs(self.runner, self.max_slots, stream=self.stream, use_graphs=use_graphs,
                                   valid_vocab=valid_vocab)
        self._lens: dict[int, int] = {}
        self._ahead: AH.Ahead | None = None
        self.n_ahead = 0
        t3 = time.time()
        self.graphs.capture_all()
        self.load_seconds = time.time() - t0
        # where the startup went: planning, weights (its own plan / read / wait split), caches + buffers, and
        # compiling + capturing the step graphs
        self.timings = {"plan": t1 - t0, "weights": t2 - t1, "alloc": t3 - t2, "graphs": time.time() - t3,
                        "total": self.load_seconds, **{f"weights_{k}": v for k, v in self.arena.timings.items()}}
        self.startup_line = (
            f"tensorfold cuda: {model_name}, weights {self.arena.weight_format} "
            f"({self.arena.nbytes / 2**30:.2f} GiB), kv cache {kv_cache}, capacity {self.max_slots} streams x "
            f"{self.context} tokens, decode graphs {'on' if self.graphs.use_graphs else 'off'}"
            f"{' (' + self.graphs.capture_error + ')' if self.graphs.capture_error else ''}, "
            f"loaded in {self.load_seconds:.1f} s"
            + (f", swept layout {self.runner.swept_bytes / 2**30:.2f} GiB" if self.runner.swept_bytes else ""))
        if progress:
            print(self.startup_line, file=sys.stderr)

    def _largest_context(self, tensors, free) -> int:
        lo, hi = 0, self.context
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if plan_memory(tensors, self.config, self.max_slots, mid, self.kv_cache, self.prompt_rows)["total"] <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # -- slots --------------------------------------------------------------------------------------------------
    def new_slot(self) -> int:
        self._settle()
        for s in range(self.max_slots):
            if s not in self._lens:
                self._lens[s] = 0
                self.caches.reset(s, stream=self.stream)
                return s
        raise RuntimeError(f"cuda backend: all {self.max_slots} slots are in use")

    def free(self, slot: int) -> None:
        if self._lens.pop(slot, None) is None:
            raise KeyError(f"cuda backend: slot {slot} is not in use")
        if self._ahead is not None and slot in self._ahead.slots:  # its id run ahead is dropped
            self._settle()
            self._ahead = self._ahead.without(set(self._ahead.slots) - {slot})

    def _settle(self, slots=()) -> None:
        """Before any use of the runner but ``decode_sample``: wait for a step run ahead (its ids are kept for the
        next ``decode_sample``). ``slots`` that step moved on may not be prefilled or decoded otherwise."""
        a = self._ahead
        if a is None:
            return
        if a.tok is None:
            a.tok = self.graphs.wait_step(a.ticket)
        bad = sorted(set(slots) & set(a.slots))
        if bad:
            raise RuntimeError(f"cuda backend: slot(s) {bad} have a decode step run ahead (TENSORFOLD_RUN_AHEAD); "
                               "only decode_sample may continue them")

    def _len(self, slot):
        try:
            return self._lens[slot]
        except KeyError:
            raise KeyError(f"cuda backend: slot {slot} is not in use") from None

    # -- forwards -----------------------------------------------------------------------------------------------
    def _prefill(self, slot, ids, start_pos, want_logits, sample_row):
        self._settle([slot])
        ids = self._check_chunk(slot, ids, start_pos)
        out = None
        pos = start_pos
        for k in range(0, len(ids), self.prompt_rows):
            chunk = ids[k:k + self.prompt_rows]
            last = k + self.prompt_rows >= len(ids)
            b = F.prompt_batch([(slot, chunk, pos)])
            if last and sample_row is not None:
                lg, tok = self.runner.forward(b, logits=self.keep_logits, sample_rows=[sample_row],
                                              stream=self.stream, valid_vocab=sample_row.valid_vocab)
                if self.keep_logits:
                    self._keep(lg[:1])
                out = int(tok[0])
            else:
                lg, _ = self.runner.forward(b, logits=last and want_logits, stream=self.stream)
                if last and want_logits:
                    out = lg[0]
            pos += len(chunk)
            self._lens[slot] = pos
        return out

    def _check_chunk(self, slot, ids, start_pos) -> list[int]:
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("prefill: empty chunk")
        if self._len(slot) != start_pos:
            raise ValueError(f"prefill: slot {slot} holds {self._lens[slot]} tokens, chunk starts at {start_pos}")
        if start_pos + len(ids) > self.context:
            raise ValueError(f"prefill: {start_pos + len(ids)} tokens exceed the context of {self.context}")
        return ids

    def prefill_rows(self, slot: int, ids: Sequence[int], start_pos: int) -> np.ndarray:
        """Feed prompt tokens and return every row's logits [n, V] (prompt logprobs): eager prompt forwards of at
        most the runner's output rows each, every row's logits asked for."""
        self._settle([slot])
        ids = self._check_chunk(slot, ids, start_pos)
        step = max(1, min(self.runner.buf.out_rows, self.prompt_rows))
        out, pos = [], start_pos
        for k in range(0, len(ids), step):
            chunk = ids[k:k + step]
            lg, _ = self.runner.forward(F.prompt_batch([(slot, chunk, pos)], all_logits=True), logits=True,
                                        stream=self.stream, graph=False)
            out.append(lg)
            pos += len(chunk)
            self._lens[slot] = pos
        return np.concatenate(out)

    def prefill(self, slot: int, ids: Sequence[int], start_pos: int, want_logits: bool = True):
        return self._prefill(slot, ids, start_pos, want_logits, None)

    def prefill_sample(self, slot: int, ids: Sequence[int], start_pos: int, row: SampleRow) -> int:
        return self._prefill(slot, ids, start_pos, False, row)

    def warm(self, *, valid_vocab: int, prompt_chunk: int) -> None:
        """Before serving: recapture the step graphs for the engine's sampling bound when it differs from the one
        captured at load (the bound is part of the graph), and capture the first prompt graphs (one and two
        streams, row buckets up to min(prompt_rows, prompt_chunk, 1024)), so that first requests do not pay an
        eager forward plus a capture. Nothing to do without graphs (the simulator)."""
        self._settle()
        if not self.graphs.use_graphs:
            return
        from tensorfold.runtime.prefill import warm_prompt_graphs

        t = time.time()
        vv = int(valid_vocab)
        if self.graphs.use_vocab(vv):
            self.graphs.capture_all()
        n = warm_prompt_graphs(self, min(self.prompt_rows, max(64, int(prompt_chunk)), 1024), vv)
        self.timings["warm"] = time.time() - t
        self.timings["warm_prompt_graphs"] = n

    def prefill_many(self, jobs) -> list:
        """Several streams' chunks packed into prompt forwards of up to ``prompt_rows`` rows (runtime.prefill)."""
        from tensorfold.runtime.prefill import prefill_many

        self._settle([j.slot for j in jobs])
        return prefill_many(self, jobs)

    def _check_decode(self, slots, ids):
        if len(slots) != len(ids):
            raise ValueError(f"decode: {len(slots)} slots but {len(ids)} ids")
        lens = [self._len(s) for s in slots]
        for s, n in zip(slots, lens):
            if n >= self.context:
                raise ValueError(f"decode: slot {s} is full ({n} of {self.context} tokens)")
        return lens

    def decode(self, slots: Sequence[int], ids: Sequence[int]) -> np.ndarray:
        self._settle(slots)
        lens = self._check_decode(slots, ids)
        rows = [SampleRow(0.0, 0, 1.0, 0.0, 0, n, self.vocab_size) for n in lens]
        self.graphs.step(list(slots), [int(t) for t in ids], lens, rows)
        for s in slots:
            self._lens[s] += 1
        return self.graphs.logits(len(slots))

    def decode_sample(self, slots: Sequence[int], ids: Sequence[int], rows: Sequence[SampleRow]) -> list[int]:
        if not slots:
            return []
        # the checks of _check_decode, in its order, with the common case in one pass (errors: _check_decode)
        if len(slots) != len(ids):
            self._check_decode(slots, ids)
        ln = self._lens
        try:
            lens = [ln[s] for s in slots]
        except KeyError:
            lens = self._check_decode(slots, ids)
        if max(lens) >= self.context:
            self._check_decode(slots, ids)
        if not isinstance(rows, (list, tuple)):
            rows = list(rows)
        a, run = self._ahead, self.run_ahead and AH.on() and self.graphs.fast_step
        if a is not None and a.tok is None and not self.keep_logits and a.matches(slots, ids, lens, rows):
            # the step this call asks for is in flight: enqueue the one after it, then wait
            self._ahead = None
            nxt = self._run_ahead(slots, lens, rows, None) if run else None
            out = self.graphs.wait_step(a.ticket)
            if nxt is not None:
                nxt.ids = out
            self._ahead = nxt
            self.n_ahead += len(out)
        else:
            if a is None:
                out, lg = self._step(slots, ids, lens, rows)
                if lg is not None:  # the rows the device sampler drew from (a copy only when a request asked)
                    self._keep(lg)
            else:
                out = self._served(slots, ids, lens, rows)
            if run and self._ahead is None and not self.keep_logits:
                self._ahead = self._run_ahead(slots, lens, rows, out)
        for s in slots:
            ln[s] += 1
        return out

    def _step(self, slots, ids, lens, rows):
        """A synchronous step: (its ids, its logits rows [n, V] when ``keep_logits``, else None)."""
        out = self.graphs.step_list(slots, ids, lens, rows)
        return out, (self.graphs.logits(len(slots)) if self.keep_logits else None)

    def _run_ahead(self, slots, lens, rows, ids):
        """Enqueue the step after this call's (``ids`` its inputs, or None: this call's ids chained on the device,
        the previous launch being this call's step); None where a stream would pass the context."""
        nl = [n + 1 for n in lens]
        if max(nl) >= self.context:
            return None
        nr = AH.next_rows(rows)
        t = self.graphs.launch_step(list(slots), None if ids is None else list(ids), nl, nr, chain=ids is None)
        return AH.Ahead(t, slots, None if ids is None else [int(x) for x in ids], nl, nr)

    def _served(self, slots, ids, lens, rows) -> list:
        """This call's ids where a step run ahead (``self._ahead``) served some of its streams: theirs from that
        step (their inputs checked against what was run ahead), a synchronous step for the others; entries for
        streams this call leaves out stay pending (``self._ahead``). Kept logits rows in call order: the step run
        ahead's own rows when it was the runner's last forward, else NaN placeholders (runtime.ahead: no stream it
        served asked for logits)."""
        a, self._ahead = self._ahead, None
        last = a.tok is None  # nothing has run since it: its logits rows are still in the buffer
        if last:
            a.tok = self.graphs.wait_step(a.ticket)
        at = a.index()
        out, rest = [None] * len(slots), []
        for j, s in enumerate(slots):
            k = at.get(s)
            if k is None:
                rest.append(j)
                continue
            if int(ids[j]) != a.ids[k] or lens[j] != a.lens[k] or rows[j] != a.rows[k]:
                raise RuntimeError(f"cuda backend: slot {s} was decoded ahead from id {a.ids[k]} at position "
                                   f"{a.lens[k]} ({a.rows[k]}), but the call gives id {int(ids[j])} at {lens[j]} "
                                   f"({rows[j]}); its caches have moved on (TENSORFOLD_RUN_AHEAD)")
            out[j] = a.tok[k]
            self.n_ahead += 1
        kept = [None] * len(slots)
        if self.keep_logits:
            lg = self.graphs.logits(len(a.slots)) if last else None
            for j, s in enumerate(slots):
                if s in at:
                    kept[j] = lg[at[s]] if lg is not None else np.full(self.vocab_size, np.nan, np.float32)
        if rest:
            got, lg = self._step(*([xs[j] for j in rest] for xs in (slots, ids, lens, rows)))
            for i, j in enumerate(rest):
                out[j] = got[i]
                if lg is not None:
                    kept[j] = lg[i]
        if self.keep_logits:
            self._keep(kept)
        self._ahead = a.without(set(a.slots) - set(slots))
        return out

    def describe(self) -> dict:
        return {"backend": self.name, "kv_cache": self.kv_cache, "weights_device": self.arena.weight_format,
                "decode_graphs": self.graphs.use_graphs, "load_seconds": self.load_seconds,
                "load_timings": dict(self.timings)}

    def close(self) -> None:
        """Drop every captured graph (decode steps, windows / trees, prompt chunks) and the cuda.core streams
        they were launched on, after the stream's work is done, so that nothing GPU-side is left for the
        interpreter's exit to destroy after the context."""
        try:
            self._settle()
            self.stream.synchronize()
        finally:
            self.graphs.clear()
            self.graphs._core_stream = None
            self.runner._pgraphs.clear()
            self.runner._core_stream = self.runner._core_for = None


def create_backend(checkpoint, engine_config, **kw) -> CudaBackend:
    """The engine's hook: a CudaBackend for ``checkpoint`` (a Checkpoint) with ``engine_config`` (EngineConfig)."""
    name = str(getattr(checkpoint, "path", "model")).rstrip("/").split("/")[-1]
    kw.setdefault("prompt_rows", max(512, min(4096, int(engine_config.prompt_chunk))))
    return CudaBackend(checkpoint.tensors, checkpoint.config, parallel=engine_config.parallel,
                       context=engine_config.context, kv_cache=engine_config.kv_cache, model_name=name, **kw)


_ = IS_SIM
