"""CUDA graphs for the decode shapes: capture once per bucket, then replay (issue 4; docs gpu.md §2).

A decode step of n streams is padded up to a bucket size b (1, 2, 4, 8, ... up to the slot count; padding rows
have slot -1 and write nothing) and replays the graph captured for b: the whole forward (embedding ... head) plus
the device sampler, over static buffers -- the bucket's own ``Meta`` (row / segment metadata), the runner's
activation buffers and the shared ``SampleMeta``. Before a replay the host rewrites those static inputs with
asynchronous copies on the same stream; after it copies back the b token ids (the only host sync).

Windows and trees (``DecodeGraphs.forward(batch)`` for a ``window_batch`` / ``tree_batch``): b streams (a
stream bucket) of up to w rows each (w in 2, 4, 8, 16) replay the graph captured for (mode, b, w): its own
``Meta`` of R = b * w rows and b segments, the real rows first and padding rows (slot -1) after them, logits of
all R rows (and the device sampler over them when asked). Mode ``step`` (committed windows) and mode ``verify``
(uncommitted windows and trees: the tree lives in the metadata -- parents, positions, masks -- so one verify
graph per shape serves both) are separate graphs. A verify replay leaves its logs in the runner's buffers at the
real rows' indices, so ``DecodeGraphs.commit`` (the runner's eager ``commit``) follows it like an eager verify.
A shape beyond the buffers (R above the runner's logged rows) runs eagerly.

Capture (``cuda.core``'s graph builder on the runner's stream): every kernel signature is compiled by one eager
run of the same launch sequence first (padding rows only), because nothing may compile, allocate or sync inside
a capture. ``DecodeGraphs.step(...)`` and ``forward(...)`` fall back to eager launches over the same static
buffers and metadata where capture is unavailable (the simulator), so the simulator runs the graphs' code path
except the capture itself.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from tensorfold.kernels._device import IS_SIM
from tensorfold.runtime.forward import MAX_WINDOW, Batch, Meta, step_batch

__all__ = ["DecodeGraphs", "buckets_for", "WINDOW_BUCKETS"]

WINDOW_BUCKETS = (2, 4, 8, MAX_WINDOW)  # rows per stream of the window / tree graphs


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
        self.wmetas: dict = {}  # (b, w) -> Meta of b * w rows, b segments (shared by the step and verify graphs)
        self.wgraphs: dict = {}  # (mode, b, w, sampled) -> graph
        self._wfailed: set = set()  # window shapes whose capture failed (they run eagerly)
        self._core_stream = None
        self.capture_error = None

    def bucket(self, n: int) -> int:
        for b in self.buckets:
            if n <= b:
                return b
        raise ValueError(f"decode: {n} streams exceed {self.buckets[-1]}")

    def _launch(self, b, stream):
        self.run.launch(b, b, b, "step", sample=self.run.sample_meta, meta=self.metas[b],
                        valid_vocab=self.valid_vocab, all_rows=True, stream=stream)

    def _build(self, launch):
        """Capture ``launch(stream)`` (already run eagerly once: everything compiled) into an uploaded graph."""
        from cuda.core import Device

        dev = Device()
        dev.set_current()
        if self._core_stream is None:
            self._core_stream = dev.create_stream(self.stream)
        gb = self._core_stream.create_graph_builder()
        gb.begin_building()
        try:
            launch(gb)
        except BaseException:
            try:
                gb.end_building()
            except Exception:  # noqa: BLE001
                pass
            raise
        graph = gb.end_building().complete()
        graph.upload(self._core_stream)
        return graph

    def capture(self, b: int) -> None:
        """Compile (eager run on padding rows) and capture the bucket-b step graph."""
        meta = self.metas[b]
        empty = _padding_batch(b)
        meta.write(empty, stream=self.stream)
        self.run.sample_meta.write([], stream=self.stream)
        self._launch(b, self.stream)  # compiles every signature of this shape
        self.stream.synchronize()
        self.graphs[b] = self._build(lambda st: self._launch(b, st))

    # ---------------------------------------------------------------------------------------------- windows / trees

    def window_shape(self, batch: Batch):
        """(b, w): the stream bucket and rows-per-stream bucket of a window / tree batch; None when R = b * w is
        beyond the runner's buffers (the batch then runs eagerly)."""
        b = self.bucket(batch.S)
        w = next(x for x in WINDOW_BUCKETS if batch.max_seg_len <= x)
        R = b * w
        B = self.run.buf
        if R > min(self.run.rows_cap, B.log_rows, B.out_rows):
            return None
        return b, w

    def _wlaunch(self, mode, b, w, sampled, stream):
        R = b * w
        self.run.launch(R, b, R, mode, sample=self.run.sample_meta if sampled else None, meta=self.wmetas[b, w],
                        valid_vocab=self.valid_vocab, all_rows=True, stream=stream)

    def _wcapture(self, key) -> None:
        mode, b, w, sampled = key
        meta = self.wmetas[b, w]
        meta.write(_padding_batch(b * w, b), stream=self.stream)
        self.run.sample_meta.write([], stream=self.stream)
        self._wlaunch(mode, b, w, sampled, self.stream)
        self.stream.synchronize()
        self.wgraphs[key] = self._build(lambda st: self._wlaunch(mode, b, w, sampled, st))

    def forward(self, batch: Batch, sample_rows=None, *, logits: bool = True):
        """A window or tree batch (``forward.window_batch`` / ``tree_batch``: mode ``step`` or ``verify``) by graph
        replay: -> (logits [R, V] numpy or None, ids [R] numpy int32 or None (drawn for ``sample_rows``, one
        ``SampleRow`` per row)). A verify batch may be followed by :meth:`commit`."""
        if batch.mode not in ("step", "verify"):
            raise ValueError(f"DecodeGraphs.forward: mode {batch.mode!r} (windows and trees are step / verify)")
        if len(batch.sel) != batch.R:
            raise ValueError("DecodeGraphs.forward: a window / tree graph returns every row")
        shape = self.window_shape(batch)
        if shape is None:  # too many rows for the static buffers: the runner's eager forward
            return self.run.forward(batch, logits=logits, sample_rows=sample_rows, stream=self.stream)
        b, w = shape
        R = b * w
        sampled = sample_rows is not None
        if sampled:
            vv = sample_rows[0].valid_vocab if sample_rows else None
            if vv and vv != self.valid_vocab:
                self.valid_vocab = int(vv)
                self.graphs.clear()
                self.wgraphs.clear()
        if (b, w) not in self.wmetas:
            self.wmetas[b, w] = Meta(R, b)
        meta = self.wmetas[b, w]
        key = (batch.mode, b, w, sampled)
        if self.use_graphs and key not in self.wgraphs and key not in self._wfailed:
            try:
                self._wcapture(key)
            except Exception as e:  # noqa: BLE001 -- reported; this shape runs eagerly from now on
                self.capture_error = f"window {key}: {type(e).__name__}: {e}"
                self._wfailed.add(key)
        meta.write(batch.pad(R, b), stream=self.stream)
        if sampled:
            self.run.sample_meta.write(list(sample_rows), stream=self.stream)
        if self.use_graphs and key in self.wgraphs:
            self.wgraphs[key].launch(self._core_stream)
        else:
            self._wlaunch(batch.mode, b, w, sampled, self.stream)
        self.run._last = batch  # a verify batch's logs are in place for commit (the real rows come first)
        n = batch.R
        out_l = self.run.buf.logits[:n].copy_to_host(stream=self.stream) if logits else None
        out_t = self.run.buf.tok[:n].copy_to_host(stream=self.stream) if sampled else None
        self.stream.synchronize()
        return out_l, out_t

    def commit(self, batch: Batch, keep) -> list[int]:
        """Keep one path per stream of the verify ``batch`` just replayed (``Runner.commit``, eager)."""
        return self.run.commit(batch, keep, stream=self.stream)

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


def _padding_batch(b: int, S: int | None = None):
    """A step batch of b padding rows (slot -1: every kernel skips them or computes values nobody reads), padded
    to S segments when S (< b) is given."""
    bt = step_batch([0] * b, [0] * b, [0] * b)
    if S is not None and S < b:
        bt = Batch(bt.mode, bt.rows, {k: v[:S] for k, v in bt.segs.items()}, bt.sel, bt.max_seg_len, bt.max_keys)
    bt.rows["row_slot"][:] = -1
    bt.rows["cache_idx"][:] = -1
    bt.segs["seg_slot"][:] = -1
    bt.segs["seg_leaf"][:] = -1
    return bt
