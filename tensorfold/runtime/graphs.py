"""CUDA graphs for the decode shapes: capture once per bucket, then replay (issue 4; docs gpu.md §2).

A decode step of n streams is padded up to a bucket size b (1, 2, 4, 8, ... up to the slot count; padding rows
have slot -1 and write nothing) and replays the graph captured for b: the whole forward (embedding ... head) plus
the device sampler, over static buffers -- the bucket's own ``Meta`` (row / segment metadata), the runner's
activation buffers and the shared ``SampleMeta``. Before a replay the host rewrites those static inputs with
asynchronous copies on the same stream; after it copies back the b token ids (the only host sync).

Capture (``cuda.core``'s graph builder on the runner's stream): every kernel signature is compiled by one eager
run of the same launch sequence first (padding rows only), because nothing may compile, allocate or sync inside
a capture. ``DecodeGraphs.step(...)`` falls back to eager launches where capture is unavailable (the simulator).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from tensorfold.kernels._device import IS_SIM
from tensorfold.runtime.forward import Meta, step_batch

__all__ = ["DecodeGraphs", "buckets_for"]


def buckets_for(n_max: int) -> list[int]:
    out, b = [], 1
    while b < n_max:
        out.append(b)
        b *= 2
    out.append(n_max)
    return out


class DecodeGraphs:
    """Step graphs for 1..``max_streams`` streams (bucketed). ``use_graphs=False`` (or the simulator): the same
    launches run eagerly, through the same static buffers."""

    def __init__(self, runner, max_streams: int, *, stream=None, use_graphs: bool = True, valid_vocab=None):
        self.run = runner
        self.buckets = buckets_for(max_streams)
        self.stream = stream if stream is not None else cuda.stream()
        self.use_graphs = use_graphs and not IS_SIM
        self.valid_vocab = valid_vocab or runner.c.vocab_size
        self.metas = {b: Meta(b, b) for b in self.buckets}
        self.graphs: dict = {}
        self._core_stream = None
        self.capture_error = None

    def bucket(self, n: int) -> int:
        for b in self.buckets:
            if n <= b:
                return b
        raise ValueError(f"decode: {n} streams exceed {self.buckets[-1]}")

    def _launch(self, b, stream):
        self.run.launch(b, b, b, "step", sample=self.run.sample_meta, meta=self.metas[b],
                        valid_vocab=self.valid_vocab, stream=stream)

    def capture(self, b: int) -> None:
        """Compile (eager run on padding rows) and capture the bucket-b step graph."""
        from cuda.core import Device

        meta = self.metas[b]
        empty = _padding_batch(b)
        meta.write(empty, stream=self.stream)
        self.run.sample_meta.write([], stream=self.stream)
        self._launch(b, self.stream)  # compiles every signature of this shape
        self.stream.synchronize()
        dev = Device()
        dev.set_current()
        if self._core_stream is None:
            self._core_stream = dev.create_stream(self.stream)
        gb = self._core_stream.create_graph_builder()
        gb.begin_building()
        try:
            self._launch(b, gb)
        except BaseException:
            try:
                gb.end_building()
            except Exception:  # noqa: BLE001
                pass
            raise
        graph = gb.end_building().complete()
        graph.upload(self._core_stream)
        self.graphs[b] = graph

    def capture_all(self) -> None:
        if not self.use_graphs:
            return
        for b in self.buckets:
            try:
                self.capture(b)
            except Exception as e:  # noqa: BLE001 -- reported, decode continues eagerly
                self.capture_error = f"{type(e).__name__}: {e}"
                self.use_graphs = False
                return

    def step(self, slots, ids, lens, rows) -> np.ndarray:
        """One token per stream (``rows``: SampleRow per stream) -> sampled ids [n] (numpy int32)."""
        n = len(slots)
        b = self.bucket(n)
        vv = rows[0].valid_vocab if rows else None
        if vv and vv != self.valid_vocab:  # the sampler's vocabulary bound is captured: recapture for a new one
            self.valid_vocab = int(vv)
            self.graphs.clear()
        batch = step_batch(slots, ids, lens).pad(b, b)
        meta = self.metas[b]
        meta.write(batch, stream=self.stream)
        self.run.sample_meta.write(rows, stream=self.stream)
        if self.use_graphs and b not in self.graphs:
            self.capture(b)
            meta.write(batch, stream=self.stream)
            self.run.sample_meta.write(rows, stream=self.stream)
        if self.use_graphs:
            self.graphs[b].launch(self._core_stream)
        else:
            self._launch(b, self.stream)
        out = self.run.buf.tok[:n].copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return out

    def logits(self, n: int) -> np.ndarray:
        """Logits [n, V] of the last step (a device-to-host copy)."""
        out = self.run.buf.logits[:n].copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return out


def _padding_batch(b: int):
    """A step batch of b padding rows (slot -1: every kernel skips them or computes values nobody reads)."""
    bt = step_batch([0] * b, [0] * b, [0] * b)
    bt.rows["row_slot"][:] = -1
    bt.rows["cache_idx"][:] = -1
    bt.segs["seg_slot"][:] = -1
    bt.segs["seg_leaf"][:] = -1
    return bt
