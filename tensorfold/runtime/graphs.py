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

Greedy graphs (session 35): where every row of a step, window or tree is greedy (temperature <= 0 as float32,
the sampler's own test), the replayed graph ends in the one-launch argmax (``glue.launch_argmax``: the sampler's
first kernel, ``amax_k``, told that every row is greedy) instead of the sampler's eight launches. ``amax_k`` writes
a greedy row's id the same way in both, so the ids are the same bit for bit; the seven skipped launches only serve
sampled rows. Such graphs are captured on first use, like windows (``ggraphs``; window keys end in "argmax").
``TENSORFOLD_GREEDY_GRAPHS=0`` (read at each step) keeps every row on the sampler form.

Host side of a decode step (``step`` / ``step_list``, ``fast_step`` on): the bucket's pinned ``Meta`` rows are
written in place (``Meta.write_step``: only the per-stream fields; the layout that depends on the row count is
rewritten when it changes), the sampler knobs with one conversion (``SampleMeta.write_fast``), each host array
copied by one driver-level async copy, the ids copied back into a preallocated pinned buffer, one stream sync:
the same static inputs, byte for byte, as the generic builders (``fast_step = False``; tests compare both).
Measured at 2B on the H200 (benchmarks/results/decode_host_2026-11-30_8fc4cd4.md): host time over the replay
alone 1.0 ms -> 0.13 ms per step at 1 stream.

Pipelined steps (optional, ``launch_step`` / ``wait_step``): step k + 1 is enqueued, its ids chained from step
k's on the device, before the host reads step k's ids; two pinned id buffers and events keep the host from
rewriting a staging buffer a copy still reads. The chain runs inside the graphs (the default since session 40;
``TENSORFOLD_CHAIN_GRAPH``, read when the graphs are made or dropped): every step graph ends with
``sample.keep_ids_k``, which writes the drawn ids into the bucket metadata's ids, and a chained step's metadata copy
starts after the ids (``Meta.write_step(keep_ids=True)``). No copy is left between the graphs but the
metadata's and the ids' way back to the host; the graph gains one small kernel. Timed in session 39 (H100,
``bench_decode --timeline``): the two copies cost about 7 µs a step (2.5 µs of copies, 4.9 µs of idle GPU before
them); 2B one stream 755.2 / 758.5 -> 761.3 / 760.1 tok/s (0 -> 1, same process), 9B and eight streams a tie.
Its GPU test (``tests/runtime/test_gpu_ahead.py``: run-ahead ids equal the synchronous ones) passed with it in
session 40. ``TENSORFOLD_CHAIN_GRAPH=0`` gives the older form: two device-to-device copies on the stream between the
graphs (step k's ids kept aside after it, then copied into step k + 1's metadata).

Capture (``cuda.core``'s graph builder on the runner's stream): every kernel signature is compiled by one eager
run of the same launch sequence first (padding rows only), because nothing may compile, allocate or sync inside
a capture. ``DecodeGraphs.step(...)`` and ``forward(...)`` fall back to eager launches over the same static
buffers and metadata where capture is unavailable (the simulator), so the simulator runs the graphs' code path
except the capture itself.
"""

from __future__ import annotations

import os
import time

import numpy as np
from numba import cuda

from tensorfold.kernels._device import IS_SIM
from tensorfold.runtime import glue
from tensorfold.runtime.forward import _D2D, _D2H, MAX_WINDOW, Batch, Meta, step_batch

__all__ = ["DecodeGraphs", "buckets_for", "WINDOW_BUCKETS", "all_greedy"]

WINDOW_BUCKETS = (2, 4, 8, MAX_WINDOW)  # rows per stream of the window / tree graphs


def _event():
    """A CUDA event without timing (the cheaper one to synchronise on); the simulator's takes no arguments."""
    return cuda.event() if IS_SIM else cuda.event(timing=False)


def all_greedy(rows) -> bool:
    """Whether every ``SampleRow`` of ``rows`` is greedy as the device sampler decides it: its temperature, stored
    as float32, is not above zero (NaN included). Then the argmax launch gives the sampler's ids."""
    # the Python comparison decides every row but a positive temperature below float32's range (rounds to zero)
    return bool(rows) and all(not (r.temperature > 0) or not (np.float32(r.temperature) > 0) for r in rows)


def _argmax_form(rows) -> bool:
    """Whether a step / window / tree of these rows replays the argmax form (policy: ``all_greedy`` and the
    ``TENSORFOLD_GREEDY_GRAPHS`` switch, on unless "0"). The ids are the same either way."""
    return os.environ.get("TENSORFOLD_GREEDY_GRAPHS", "1").strip() != "0" and all_greedy(rows)


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
        self.graphs: dict = {}  # bucket -> step graph ending in the sampler
        self.ggraphs: dict = {}  # bucket -> step graph ending in the argmax (every row greedy)
        self.wmetas: dict = {}  # (b, w) -> Meta of b * w rows, b segments (shared by the step and verify graphs)
        self.wgraphs: dict = {}  # (mode, b, w, sampled) -> graph; sampled: False, True (sampler) or "argmax"
        self._wfailed: set = set()  # window shapes whose capture failed (they run eagerly)
        self._core_stream = None
        self.capture_error = None
        self.ahead_info = None  # what kernels._precompile did at the first capture_all (text), if it ran
        self.capture_seconds: dict = {}  # bucket -> (eager first run: compiles / loads, capture + upload) seconds
        # decode fast path (``fast_step``): metadata written in place (``Meta.write_step``,
        # ``SampleMeta.write_fast``), the ids copied back into a preallocated pinned buffer; False: the generic
        # batch builders (the same bytes, slower; kept for comparison and as the reference of the tests)
        self.fast_step = True
        self.tok_host = cuda.pinned_array(max(self.buckets[-1], 1), np.int32)
        self._tok_copy = _D2H(runner.buf.tok, self.tok_host)
        self._pipe = None  # launch_step's buffers (made on first use)
        self._pipe_last = None
        self.chain_in_graph = chain_in_graph()

    def use_vocab(self, valid_vocab) -> bool:
        """Make ``valid_vocab`` (ids at or above it are never drawn) the sampler bound of the graphs. The bound is
        captured into every graph, so a new one drops them all (steps, windows, trees); they are recaptured on
        use. True when it changed."""
        if not valid_vocab or int(valid_vocab) == self.valid_vocab:
            return False
        self.valid_vocab = int(valid_vocab)
        self.clear()
        return True

    def clear(self) -> None:
        """Drop every captured graph (steps, greedy steps, windows, trees); they are recaptured on use. The chain
        form (``TENSORFOLD_CHAIN_GRAPH``) is read again: the step graphs are made for it."""
        self.graphs.clear()
        self.ggraphs.clear()
        self.wgraphs.clear()
        ing = chain_in_graph()
        if ing != self.chain_in_graph:
            self._pipe_last = None  # a chain across the switch would look for its ids in the other form's place
        self.chain_in_graph = ing

    def bucket(self, n: int) -> int:
        for b in self.buckets:
            if n <= b:
                return b
        raise ValueError(f"decode: {n} streams exceed {self.buckets[-1]}")

    def _launch(self, b, stream, greedy=False):
        self.run.launch(b, b, b, "step", sample=None if greedy else self.run.sample_meta, argmax=greedy,
                        meta=self.metas[b], valid_vocab=self.valid_vocab, all_rows=True,
                        keep_ids=self.chain_in_graph, stream=stream)

    def _build(self, launch):
        """Capture ``launch(stream)`` (already run eagerly once: everything compiled) into an uploaded graph."""
        self._core_stream = glue.core_stream(self.stream, self._core_stream)
        return glue.capture_graph(self._core_stream, launch)

    def _padding_launch(self, b: int, greedy: bool = False) -> None:
        """The bucket-b step on padding rows only (eager; under ``_precompile.recording`` the launches are noted)."""
        self.metas[b].write(_padding_batch(b), stream=self.stream)
        self.run.sample_meta.write([], stream=self.stream)
        self._launch(b, self.stream, greedy)

    def capture(self, b: int, greedy: bool = False) -> None:
        """Compile (eager run on padding rows) and capture the bucket-b step graph (``greedy``: the argmax form)."""
        t0 = time.perf_counter()
        self._padding_launch(b, greedy)  # compiles every signature of this shape
        self.stream.synchronize()
        t1 = time.perf_counter()
        self._table(greedy)[b] = self._build(lambda st: self._launch(b, st, greedy))
        if not greedy:
            self.capture_seconds[b] = (t1 - t0, time.perf_counter() - t1)

    def _table(self, greedy: bool) -> dict:
        """The step graphs of one form: bucket -> graph (``ggraphs``: argmax form, ``graphs``: sampler form)."""
        return self.ggraphs if greedy else self.graphs

    def _step_graph(self, b: int, greedy: bool):
        """The bucket-b step graph of that form, captured now if missing (the caller rewrites the static inputs
        afterwards: the capture's padding run overwrote them); None without graphs."""
        if not self.use_graphs:
            return None
        if b not in self._table(greedy):
            self.capture(b, greedy)
        return self._table(greedy)[b]

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
        argmax = sampled == "argmax"
        self.run.launch(R, b, R, mode, sample=self.run.sample_meta if sampled and not argmax else None,
                        argmax=argmax, meta=self.wmetas[b, w], valid_vocab=self.valid_vocab, all_rows=True,
                        stream=stream)

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
        self._pipe_last = None
        if shape is None:  # too many rows for the static buffers: the runner's eager forward
            return self.run.forward(batch, logits=logits, sample_rows=sample_rows, stream=self.stream)
        b, w = shape
        R = b * w
        sampled = sample_rows is not None
        if sampled:
            self.use_vocab(sample_rows[0].valid_vocab if sample_rows else None)
            if _argmax_form(sample_rows):
                sampled = "argmax"
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
        if sampled is True:
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
        ahead = self._compile_ahead()
        for b in self.buckets:
            try:
                self.capture(b)
            except Exception as e:  # noqa: BLE001 -- reported, decode continues eagerly
                self.capture_error = f"{type(e).__name__}: {e}"
                self.use_graphs = False
                return
        if ahead is not None:
            self.ahead_info = ahead.summary()

    def _compile_ahead(self):
        """Before the first captures: note every step bucket's kernels (launches noted, not made) and compile the
        missing ones in worker processes into the kernel cache (``kernels._precompile``); None when that is off."""
        from tensorfold.kernels import _precompile

        if _precompile.workers() < 2:
            return None
        try:
            with _precompile.recording() as rec:
                for b in self.buckets:
                    self._padding_launch(b)
            self.stream.synchronize()
            return _precompile.compile_ahead(rec)
        except Exception as e:  # noqa: BLE001 -- the captures below compile in this process as before
            self.ahead_info = f"compile ahead failed: {type(e).__name__}: {e}"
            return None

    def step(self, slots, ids, lens, rows) -> np.ndarray:
        """One token per stream (``rows``: SampleRow per stream) -> sampled ids [n] (numpy int32)."""
        if not (self.fast_step and len(slots) and len(ids) == len(lens) == len(rows) == len(slots)):
            return self._step_generic(slots, ids, lens, rows)
        n = self._step_fast(slots, ids, lens, rows)
        return self.tok_host[:n].copy()

    def step_list(self, slots, ids, lens, rows) -> list:
        """``step`` returning a list of Python ints (what ``CudaBackend.decode_sample`` hands the engine)."""
        if not (self.fast_step and len(slots) and len(ids) == len(lens) == len(rows) == len(slots)):
            return self._step_generic(slots, ids, lens, rows).tolist()
        n = self._step_fast(slots, ids, lens, rows)
        return self.tok_host[:n].tolist()

    def _step_fast(self, slots, ids, lens, rows) -> int:
        """Write the step's metadata in place, replay (or launch eagerly), copy the n ids into ``tok_host``, sync.
        The same static inputs, byte for byte, as ``_step_generic``."""
        n = len(slots)
        b = self.bucket(n)
        self._pipe_last = None  # a later chained launch_step must not take its ids from before this step
        self.use_vocab(rows[0].valid_vocab if rows else None)
        st = self.stream
        greedy = _argmax_form(rows)
        meta, sm = self.metas[b], self.run.sample_meta
        g = self._step_graph(b, greedy)
        meta.write_step(slots, ids, lens, stream=st)
        if not greedy:
            sm.write_fast(rows, stream=st)
        if g is not None:
            g.launch(self._core_stream)
        else:
            self._launch(b, st, greedy)
        self._tok_copy(n, st)
        st.synchronize()
        return n

    def _step_generic(self, slots, ids, lens, rows) -> np.ndarray:
        n = len(slots)
        b = self.bucket(n)
        self._pipe_last = None
        self.use_vocab(rows[0].valid_vocab if rows else None)
        batch = step_batch(slots, ids, lens).pad(b, b)
        greedy = _argmax_form(rows)
        meta = self.metas[b]
        g = self._step_graph(b, greedy)
        meta.write(batch, stream=self.stream)
        if not greedy:
            self.run.sample_meta.write(rows, stream=self.stream)
        if g is not None:
            g.launch(self._core_stream)
        else:
            self._launch(b, self.stream, greedy)
        out = self.run.buf.tok[:n].copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return out

    # ---------------------------------------------------------------------------------------- pipelined steps

    def launch_step(self, slots, ids, lens, rows, *, chain: bool = False) -> tuple:
        """Pipelined decode (optional; the synchronous ``step`` is the default): enqueue one step and return at
        once with a ticket for :meth:`wait_step`. ``chain=True``: the input ids are the ids the previous
        ``launch_step`` drew (the same ``slots`` in the same order), copied on the device (``ids`` is ignored),
        so step k + 1 can be enqueued before the host has read step k's ids. Rules: the previous launch's slots
        equal these when chaining; nothing but launch_step / wait_step may use the runner between a launch and
        its wait (the sampler knobs and the bucket metadata are shared); every ticket is waited for, oldest
        first. The device work is the same as ``step``'s (the same static inputs, byte for byte, then the same
        graph), so the ids are the same bit for bit."""
        n = len(slots)
        if not (n and len(lens) == n and len(rows) == n and (chain or len(ids) == n)):
            raise ValueError(f"launch_step: {n} slots, {len(lens)} lengths, {len(rows)} rows")
        if chain and self._pipe_last != tuple(slots):
            raise ValueError("launch_step: chain=True needs the previous launch's slots, in the same order")
        b = self.bucket(n)
        self.use_vocab(rows[0].valid_vocab if rows else None)
        p = self._pipe
        if p is None:  # lazily: two token staging buffers, the chained ids, events
            p = self._pipe = {
                "tok": [cuda.pinned_array(max(self.buckets[-1], 1), np.int32) for _ in range(2)],
                "prev": cuda.device_array(max(self.buckets[-1], 1), np.int32),
                "done": [_event() for _ in range(2)],
                "staged": _event(), "k": 0, "staged_ok": True}
            p["d2h"] = [_D2H(self.run.buf.tok, h) for h in p["tok"]]
            p["keep"] = _D2D(p["prev"], self.run.buf.tok)
        st = self.stream
        greedy = _argmax_form(rows)
        meta, sm = self.metas[b], self.run.sample_meta
        ing = self.chain_in_graph  # the ids chain inside the graphs: the previous step left them in meta's ids
        if self.use_graphs and b not in self._table(greedy):
            st.synchronize()  # launches in flight may still read the pinned staging buffers capture rewrites
            p["staged_ok"] = True
            if chain and ing:  # the capture's padding run rewrites meta: take the chained ids to the host first
                ids, chain = [int(x) for x in meta.view("ids", n).copy_to_host()], False
            self.capture(b, greedy)
        if not p["staged_ok"]:
            p["staged"].synchronize()  # the previous launch's host -> device copies have left the pinned buffers
        meta.write_step(slots, [0] * n if chain else ids, lens, stream=st, keep_ids=chain and ing)
        if not greedy:
            sm.write_fast(rows, stream=st)
        p["staged"].record(st)
        p["staged_ok"] = False
        if chain and not ing:
            cp = p.get(("chain", b))
            if cp is None:
                cp = p[("chain", b)] = _D2D(meta.view("ids"), p["prev"])
            cp(n, st)
        if self.use_graphs:
            self._table(greedy)[b].launch(self._core_stream)
        else:
            self._launch(b, st, greedy)
        if not ing:
            p["keep"](n, st)
        k = p["k"] % 2
        p["d2h"][k](n, st)
        p["done"][k].record(st)
        p["k"] += 1
        self._pipe_last = tuple(slots)
        return (k, n, p["k"])

    def wait_step(self, ticket) -> list:
        """The ids [n] (Python ints) of the ``launch_step`` that returned ``ticket``."""
        k, n, seq = ticket
        p = self._pipe
        if seq <= p["k"] - 2:
            raise ValueError("wait_step: a ticket older than the last two launches (its buffer was reused)")
        p["done"][k].synchronize()
        return p["tok"][k][:n].tolist()

    def replay(self, b: int, k: int = 1) -> None:
        """Launch the captured bucket-b step graph ``k`` times over whatever static inputs are in place (no
        metadata writes, no copies, no sync): the device side of a step, for timing."""
        g = self.graphs[b]
        for _ in range(k):
            g.launch(self._core_stream)

    def logits(self, n: int) -> np.ndarray:
        """Logits [n, V] of the last step (a device-to-host copy)."""
        out = self.run.buf.logits[:n].copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return out


def chain_in_graph() -> bool:
    """``TENSORFOLD_CHAIN_GRAPH=1`` (the default since session 40, when its GPU test passed): chained steps take
    their ids from the previous step graph's ``keep_ids_k`` (module docstring; +0.5 % at 2B, one stream, session
    39); 0: two device-to-device copies between the graphs."""
    v = os.environ.get("TENSORFOLD_CHAIN_GRAPH", "1").strip() or "1"
    if v not in ("0", "1"):
        raise ValueError(f"TENSORFOLD_CHAIN_GRAPH={v!r}: expected 0 or 1")
    return v == "1"


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
