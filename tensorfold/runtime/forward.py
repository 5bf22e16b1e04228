"""The Qwen3.5 forward on the device over static buffers, for several streams at once (issue 4).

Mirrors ``tensorfold.reference.model.ReferenceModel._forward`` (qwen35.md §3.2-3.5) in four modes; a forward is
described on the host by a :class:`Batch` (rows of one or more streams, see the ``*_batch`` builders) whose
int32 metadata is copied into a :class:`Meta` (one device array, fixed offsets) before the launches.

- ``prompt``: a stream's chunk of rows; GEMMs (``gemm.launch_qgemm``: tensor cores for 2/4/8 bits, else
  ``affine``'s), the chunked delta rule, conv tails
  committed per layer, K/V stored at their positions; committed.
- ``step``: rows that are committed as they run -- one row per stream (decode) or windows of up to 16 rows
  (``parent[r] = r - 1``); GEMVs (``affine.launch_qgemv``), the token recurrence with the state written back,
  conv raw rows logged and the tails committed by one ``compact.conv_commit`` after the last layer.
- ``verify``: windows or trees that are **not** committed: the recurrence logs (α, k̂, δ), conv logs raw rows,
  K/V rows go to ``cache_idx`` (= committed length + row index); :meth:`Runner.commit` then keeps one path per
  stream (``compact.gdn_commit``, ``conv_commit``, ``kv_compact``), equal to stepping the path bit for bit.

:meth:`Runner.launch` issues launches only (no allocation, no host sync), so it can be captured into a CUDA graph
(``runtime.graphs``). Every kernel computes a row independently of the others with geometry chosen from weight
shapes (never from the row count), which is what makes window == steps and alone == batched bit for bit; the
prompt path uses different kernels (GEMM, chunked delta rule) and agrees within rounding.

Buffers (``Buffers``, float32, rows first; R = rows of the forward <= ``rows``):
h, x [R, H] residual / normed; u [R, C + Vd + 2Hv] fused GDN input projection (or per-part buffers);
y [R, C] conv output; o [R, Hv, Dv]; gn [R, Vd]; qg [R, nH*2hd]; kk, vv [R, nKV*hd]; q [R, nH, hd];
att [R, nH, hd]; d [R, H]; gu [R, 2I]; mi [R, I]; xs [R, H] head rows; logits [R, V]; tok int32 [R];
logs for verify/step rows: log_k [NLl, Rl, Hk, Dk], log_d [NLl, Rl, Hv, Dv], log_a [NLl, Rl, Hv],
xlog [NLl, Rl, C]; xlog1 [R, C] (prompt conv tails); attention partials m, l [Ra, nH, NC], acc [Ra, nH, NC, hd].
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace

import numpy as np
from numba import cuda

from tensorfold.kernels._device import IS_SIM
from tensorfold.kernels import activations, affine, attention, attention_prompt, compact, conv, delta_rule, embedding, \
    gemm, kv8, norms, qgemv
from tensorfold.kernels import sample as ksample
from tensorfold.reference import ops
from tensorfold.runtime import glue

try:  # decode launches small grids on purpose (one row, a few blocks): numba's low-occupancy warning is noise here
    from numba.cuda.core import config as _nb_config

    _nb_config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
except Exception:  # noqa: BLE001 -- another numba-cuda layout: the warnings stay
    pass

__all__ = ["Batch", "Meta", "SampleMeta", "Buffers", "Runner", "sweepable", "step_batch", "window_batch", "tree_batch",
           "prompt_batch", "MAX_WINDOW"]

_SIM_BLOCKS = {"blocks": 1, "threads": 4} if IS_SIM else {}  # simulator: one small grid-stride block
_SIM_B1 = {"blocks": 1} if IS_SIM else {}
_SIM_MB = {"max_blocks": 1} if IS_SIM else {}  # part-A kernels (norms, activations, embedding): one grid-stride block
MAX_WINDOW = 16  # rows per stream in a window / tree (delta_rule.MAXR)
GEMV_ROWS = 64  # rows per GEMV launch (split-K workspace is sized for this many)
ROW_FIELDS = ("ids", "row_slot", "parent", "pos", "cache_idx", "nk", "tmask", "tbase")
SEG_FIELDS = ("seg_row0", "seg_len", "seg_slot", "seg_commit", "seg_leaf", "seg_dst0")


# ------------------------------------------------------------------------------------------------ host batches


@dataclass
class Batch:
    """One forward's rows (host side). Row arrays int32 [R], segment arrays int32 [S], ``sel`` int32 [n_out]."""

    mode: str
    rows: dict
    segs: dict
    sel: np.ndarray
    max_seg_len: int
    max_keys: int  # the most keys any row sees (attention chunk-grid depth)
    streams: list = field(default_factory=list)  # (slot, committed length before) per segment

    @property
    def R(self) -> int:
        return int(self.rows["ids"].shape[0])

    @property
    def S(self) -> int:
        return int(self.segs["seg_slot"].shape[0])

    def pad(self, R: int, S: int) -> "Batch":
        """The same batch with padding rows / segments (slot -1: nothing written) up to R rows and S segments."""
        r0, s0 = self.R, self.S
        if R < r0 or S < s0:
            raise ValueError(f"pad: batch has {r0} rows / {s0} segments, more than {R} / {S}")
        rows = {k: np.concatenate([v, np.full(R - r0, -1 if k in ("row_slot", "parent", "cache_idx") else 0,
                                              np.int32)]) for k, v in self.rows.items()}
        segs = {k: np.concatenate([v, np.full(S - s0, -1 if k in ("seg_slot", "seg_leaf") else 0, np.int32)])
                for k, v in self.segs.items()}
        sel = np.concatenate([self.sel, np.arange(r0 + (len(self.sel) - r0), R, dtype=np.int32)])[:R] \
            if len(self.sel) == r0 else self.sel
        return Batch(self.mode, rows, segs, sel.astype(np.int32), self.max_seg_len, self.max_keys, self.streams)


def _i32(x):
    return np.ascontiguousarray(np.asarray(x, dtype=np.int64).astype(np.int32))


def _assemble(mode, per_stream, want_all_rows):
    """per_stream: list of dicts with slot, T, ids, parents (local, -1 root), depth, tmask (local bits)."""
    rows = {k: [] for k in ROW_FIELDS}
    segs = {k: [] for k in SEG_FIELDS}
    sel, streams = [], []
    r0 = 0
    max_len, max_keys = 0, 0
    for s in per_stream:
        n = len(s["ids"])
        T = s["T"]
        par = np.asarray(s["parents"], np.int64)
        rows["ids"].append(s["ids"])
        rows["row_slot"].append(np.full(n, s["slot"]))
        rows["parent"].append(np.where(par >= 0, par + r0, -1))
        rows["pos"].append(T + np.asarray(s["depth"]))
        rows["cache_idx"].append(T + np.arange(n))
        rows["nk"].append(s["nk"])
        rows["tmask"].append(s["tmask"])
        rows["tbase"].append(np.full(n, s.get("tbase", 0)))
        segs["seg_row0"].append([r0])
        segs["seg_len"].append([n])
        segs["seg_slot"].append([s["slot"]])
        segs["seg_commit"].append([1 if mode == "step" else 0])
        segs["seg_leaf"].append([r0 + n - 1])
        segs["seg_dst0"].append([T])
        sel.append(np.arange(r0, r0 + n) if want_all_rows else [r0 + n - 1])
        streams.append((s["slot"], T))
        max_len = max(max_len, n)
        max_keys = max(max_keys, T + n)
        r0 += n
    rows = {k: _i32(np.concatenate(v)) for k, v in rows.items()}
    segs = {k: _i32(np.concatenate(v)) for k, v in segs.items()}
    return Batch(mode, rows, segs, _i32(np.concatenate(sel)), max_len, max_keys, streams)


def _chain(slot, T, ids):
    n = len(ids)
    return dict(slot=slot, T=T, ids=np.asarray(ids), parents=np.arange(n) - 1, depth=np.arange(n),
                nk=T + np.arange(n) + 1, tmask=np.zeros(n, np.int64))


def step_batch(slots, ids, lens) -> Batch:
    """One row per stream: token ids[i] of stream slots[i] whose cache holds lens[i] tokens. Committed."""
    return _assemble("step", [_chain(s, int(T), [t]) for s, t, T in zip(slots, ids, lens)], True)


def window_batch(streams, commit=True) -> Batch:
    """streams: list of (slot, ids, T): rows continue the committed T tokens, one after another.
    commit=True: mode "step" (state advances by every row); False: mode "verify" (see :meth:`Runner.commit`)."""
    for _, ids, _ in streams:
        if not 1 <= len(ids) <= MAX_WINDOW:
            raise ValueError(f"window: {len(ids)} rows per stream (1..{MAX_WINDOW})")
    return _assemble("step" if commit else "verify", [_chain(s, int(T), ids) for s, ids, T in streams], True)


def tree_batch(streams) -> Batch:
    """streams: list of (slot, ids, parents, T); parents local (-1 = continues the committed state, else < i).
    Row i sits at position T + depth(i), sees the committed cache plus its ancestors and itself. Mode "verify"."""
    out = []
    for slot, ids, parents, T in streams:
        n = len(ids)
        if not 1 <= n <= MAX_WINDOW:
            raise ValueError(f"tree: {n} rows per stream (1..{MAX_WINDOW})")
        par = np.asarray(parents, np.int64)
        depth = np.zeros(n, np.int64)
        mask = np.zeros(n, np.int64)
        for i in range(n):
            p = int(par[i])
            if not -1 <= p < i:
                raise ValueError(f"tree: parents[{i}] = {p} must be -1 or < {i}")
            depth[i] = 0 if p < 0 else depth[p] + 1
            mask[i] = (0 if p < 0 else mask[p]) | (1 << i)
        tm = np.where(mask >= 2**31, mask - 2**32, mask)  # as int32 bits
        out.append(dict(slot=slot, T=int(T), ids=np.asarray(ids), parents=par, depth=depth,
                        nk=np.full(n, int(T)), tmask=tm, tbase=int(T)))
    return _assemble("verify", out, True)


def prompt_batch(streams, all_logits=False) -> Batch:
    """streams: list of (slot, ids, T): prompt chunks continuing T committed tokens. Logits of the last row
    of each stream (all rows with ``all_logits``)."""
    return _assemble("prompt", [_chain(s, int(T), ids) for s, ids, T in streams], all_logits)


# ------------------------------------------------------------------------------------------------ raw copies


_HANDLES: dict = {}  # (thread, id(stream)) -> (stream, driver handle)


def _stream_handle(stream):
    """The driver handle (int) of a numba stream (0: the default stream), cached per thread; the first use on a
    thread also makes numba's context current there (the raw driver calls below bypass numba's context check)."""
    key = (threading.get_ident(), id(stream))
    e = _HANDLES.get(key)
    if e is not None and e[0] is stream:
        return e[1]
    from numba.cuda.cudadrv.driver import _stream_handle as sh

    cuda.current_context()
    h = int(sh(stream)) if stream else 0
    _HANDLES[key] = (stream, h)
    return h


class _H2D:
    """An asynchronous host-to-device copy of a whole pinned host array into a same-size device array, issued
    straight to the driver with the pointers taken once (a numba ``copy_to_device`` re-validates both arrays on
    every call). The simulator uses ``copy_to_device``."""

    def __init__(self, dev, host):
        self.dev, self.host = dev, host
        self.nbytes = int(host.nbytes)
        if IS_SIM:
            return
        from numba.cuda.cudadrv import driver as drv

        assert dev.nbytes == host.nbytes and host.flags.c_contiguous
        self._fn = drv.driver.cuMemcpyHtoDAsync
        self._d = int(drv.device_pointer(dev))
        self._h = int(host.ctypes.data)

    def __call__(self, stream=0, nbytes=None, start=0):
        """Copy bytes ``start`` .. ``nbytes`` (default: all)."""
        end = self.nbytes if nbytes is None else nbytes
        if IS_SIM:
            if start:
                it = self.host.itemsize
                self.dev[start // it:end // it].copy_to_device(self.host[start // it:end // it], stream=stream)
            else:
                self.dev.copy_to_device(self.host, stream=stream)
            return
        self._fn(self._d + start, self._h + start, end - start, _stream_handle(stream))


class _D2H:
    """An asynchronous device-to-host copy of the first ``n`` elements of a device array into a preallocated
    pinned host array (driver call with cached pointers; ``copy_to_host`` in the simulator)."""

    def __init__(self, dev, host):
        self.dev, self.host = dev, host
        self.item = int(host.itemsize)
        if IS_SIM:
            return
        from numba.cuda.cudadrv import driver as drv

        assert dev.dtype == host.dtype and host.flags.c_contiguous
        self._fn = drv.driver.cuMemcpyDtoHAsync
        self._d = int(drv.device_pointer(dev))
        self._h = int(host.ctypes.data)

    def __call__(self, n: int, stream=0):
        if IS_SIM:
            self.dev[:n].copy_to_host(self.host[:n], stream=stream)
            return
        self._fn(self._h, self._d, n * self.item, _stream_handle(stream))


class _D2D:
    """An asynchronous device-to-device copy of the first ``n`` elements of one device array into another."""

    def __init__(self, dst, src):
        self.dst, self.src = dst, src
        self.item = int(np.dtype(src.dtype).itemsize)
        if IS_SIM:
            return
        from numba.cuda.cudadrv import driver as drv

        self._fn = drv.driver.cuMemcpyDtoDAsync
        self._d = int(drv.device_pointer(dst))
        self._s = int(drv.device_pointer(src))

    def __call__(self, n: int, stream=0):
        if IS_SIM:
            self.dst[:n].copy_to_device(self.src[:n], stream=stream)
            return
        self._fn(self._d, self._s, n * self.item, _stream_handle(stream))


# ------------------------------------------------------------------------------------------------ device meta


class Meta:
    """Static int32 device metadata for up to ``R`` rows and ``S`` segments, with named views.

    ``write(batch)`` fills the pinned host copy and copies it to the device on ``stream`` (asynchronously);
    kernels captured into a graph keep pointing at the same views. ``write_step(slots, ids, lens)`` is the decode
    fast path: the same host bytes as ``write(step_batch(slots, ids, lens).pad(R, S))`` without building the
    batch (the rows that depend only on the row count are rewritten when it changes)."""

    def __init__(self, R: int, S: int):
        self.R, self.S = R, S
        n = len(ROW_FIELDS) * R + len(SEG_FIELDS) * S + 2 * R
        self.host = cuda.pinned_array(n, np.int32)
        self.host[:] = 0
        self.dev = cuda.device_array(n, np.int32)
        self._off = {}
        o = 0
        for k in ROW_FIELDS + ("sel", "iota"):
            self._off[k] = (o, R)
            o += R
        for k in SEG_FIELDS:
            self._off[k] = (o, S)
            o += S
        o0 = self._off["iota"][0]
        self.host[o0:o0 + R] = np.arange(R, dtype=np.int32)
        self.dev.copy_to_device(self.host)
        self.hv = {k: self.host[o:o + cap] for k, (o, cap) in self._off.items()}  # host views per field
        self._step_n = None  # row count of the step layout now in ``host`` (None: written by ``write``)
        self._copy = _H2D(self.dev, self.host)

    def view(self, name: str, n: int | None = None):
        o, cap = self._off[name]
        return self.dev[o:o + (cap if n is None else n)]

    def write(self, b: Batch, stream=0) -> None:
        if b.R > self.R or b.S > self.S or len(b.sel) > self.R:
            raise ValueError(f"Meta: batch of {b.R} rows / {b.S} segments exceeds {self.R} / {self.S}")
        h = self.host
        self._step_n = None
        for k in ROW_FIELDS:
            o, _ = self._off[k]
            h[o:o + b.R] = b.rows[k]
        for k in SEG_FIELDS:
            o, _ = self._off[k]
            h[o:o + b.S] = b.segs[k]
        o, _ = self._off["sel"]
        h[o:o + len(b.sel)] = b.sel
        self.dev.copy_to_device(h, stream=stream)

    def _step_layout(self, n: int) -> None:
        """The parts of ``step_batch(n rows).pad(R, S)`` that depend on n only (padding rows / segments, parents,
        tree fields, ``sel``)."""
        v, R, S = self.hv, self.R, self.S
        for k, pad in (("ids", 0), ("row_slot", -1), ("pos", 0), ("cache_idx", -1), ("nk", 0)):
            v[k][n:] = pad
        v["parent"][:] = -1
        v["tmask"][:] = 0
        v["tbase"][:] = 0
        v["sel"][:] = np.arange(R, dtype=np.int32)
        ar = np.arange(n, dtype=np.int32)
        for k, real, pad in (("seg_row0", ar, 0), ("seg_len", 1, 0), ("seg_commit", 1, 0), ("seg_leaf", ar, -1),
                             ("seg_slot", None, -1), ("seg_dst0", None, 0)):
            if real is not None:
                v[k][:n] = real
            v[k][n:S] = pad
        self._step_n = n

    def write_step(self, slots, ids, lens, stream=0, keep_ids=False) -> None:
        """``write(step_batch(slots, ids, lens).pad(R, S))`` (one row per stream, committed), byte for byte.
        ``keep_ids``: the device's ids are left as they are (``ids`` is ignored): the previous step of the same
        rows wrote them there (``kernels.sample.launch_keep_ids``); ``ids`` is the first field, so the copy starts
        after it."""
        n = len(slots)
        if n > self.R or n > self.S:
            raise ValueError(f"Meta: batch of {n} rows / {n} segments exceeds {self.R} / {self.S}")
        if self._step_n != n:
            self._step_layout(n)
        v = self.hv
        sl = np.array(slots, np.int32)
        ln = np.array(lens, np.int32)
        if not keep_ids:
            v["ids"][:n] = ids
        v["row_slot"][:n] = sl
        v["seg_slot"][:n] = sl
        v["pos"][:n] = ln
        v["cache_idx"][:n] = ln
        v["seg_dst0"][:n] = ln
        np.add(ln, 1, out=v["nk"][:n])
        self._copy(stream, start=4 * self.R if keep_ids else 0)


class SampleMeta:
    """Static device buffers of the sampler's per-row knobs (``kernels.sample.launch_sample``), rewritten from
    ``SampleRow``s before each forward / replay (``write``; ``write_fast``: the same host bytes with a few
    vectorised assignments and driver-level copies, for the decode step)."""

    def __init__(self, R: int):
        self.R = R
        self.hf = cuda.pinned_array((3, R), np.float32)  # temperature, top_p, min_p
        self.hi = cuda.pinned_array(R, np.int32)  # top_k
        self.hl = cuda.pinned_array((2, R), np.int64)  # seed, position
        self.hf[:] = 0
        self.hi[:] = 0
        self.hl[:] = 0
        self.df = cuda.to_device(self.hf)
        self.di = cuda.to_device(self.hi)
        self.dl = cuda.to_device(self.hl)
        self.n = R
        self._copies = (_H2D(self.df, self.hf), _H2D(self.di, self.hi), _H2D(self.dl, self.hl))

    def write(self, rows, stream=0) -> None:
        n = len(rows)
        if n > self.R:
            raise ValueError(f"SampleMeta: {n} rows exceed {self.R}")
        for i, r in enumerate(rows):
            self.hf[0, i], self.hf[1, i], self.hf[2, i] = r.temperature, r.top_p, r.min_p
            self.hi[i] = r.top_k
            self.hl[0, i], self.hl[1, i] = r.seed, r.position
        self.hf[0, n:] = 0.0  # padding rows: greedy
        self.df.copy_to_device(self.hf, stream=stream)
        self.di.copy_to_device(self.hi, stream=stream)
        self.dl.copy_to_device(self.hl, stream=stream)

    def write_fast(self, rows, stream=0) -> None:
        """``write(rows)`` byte for byte (rows n.. keep their earlier knobs, temperature 0): one float and one
        int conversion for all rows, then one driver copy per host array."""
        n = len(rows)
        if n > self.R:
            raise ValueError(f"SampleMeta: {n} rows exceed {self.R}")
        if n:
            self.hf[:, :n] = np.array([(r.temperature, r.top_p, r.min_p) for r in rows], np.float64).T
            q = np.array([(r.top_k, r.seed, r.position) for r in rows], np.int64)
            self.hi[:n] = q[:, 0]
            self.hl[:, :n] = q[:, 1:].T
        self.hf[0, n:] = 0.0
        for c in self._copies:
            c(stream)

    def launch(self, logits, out, valid_vocab, stream=0) -> None:
        from tensorfold.kernels import sample as ks

        n = logits.shape[0]
        ks.launch_sample(logits, out, self.df[0, :n], self.di[:n], self.df[1, :n], self.df[2, :n], self.dl[0, :n],
                         self.dl[1, :n], valid_vocab, stream=stream, max_blocks=1 if IS_SIM else None)


# ------------------------------------------------------------------------------------------------ buffers


def _col_view(base, c0: int, tail: tuple):
    """A [rows, *tail] view of the columns c0 .. c0 + prod(tail) of the 2-D row-major ``base`` (strided rows, no
    copy): kernels index it like the contiguous array it replaces, ``[:R]`` and a same-shape ``reshape`` keep it a
    view."""
    w = int(np.prod(tail))
    v = base[:, c0:c0 + w]
    shape = (base.shape[0],) + tuple(tail)
    it = np.dtype(base.dtype).itemsize
    strides = (v.strides[0],) + tuple(int(np.prod(tail[i + 1:])) * it for i in range(len(tail)))
    if IS_SIM:
        return type(v)(np.lib.stride_tricks.as_strided(v._ary, shape=shape, strides=strides))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray(shape=shape, strides=strides, dtype=base.dtype, gpu_data=v.gpu_data)


class Buffers:
    """Activation scratch for up to ``rows`` rows (``log_rows`` rows keep verify/step logs, ``att_rows`` rows
    per attention launch)."""

    def __init__(self, config, arena, rows: int, log_rows: int, ctx: int, att_rows: int, prompt_rows: int):
        c = config
        f = np.float32
        H, I = c.hidden_size, c.intermediate_size
        Hk, Hv, Dk, Dv = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, \
            c.linear_value_head_dim
        C = 2 * Hk * Dk + Hv * Dv
        Vd = Hv * Dv
        nH, nKV, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        nll = max(1, len(c.linear_attention_layers))
        V = c.vocab_size
        R = rows
        self.rows, self.log_rows, self.att_rows = rows, log_rows, att_rows
        # simulator: zeroed, so padding rows (never read back) compute on zeros instead of np.empty's garbage, which
        # overflowed in their norms and printed warnings; on the GPU they stay uninitialized (no upload at start)
        d = (lambda shape, dt: cuda.to_device(np.zeros(shape, dt))) if IS_SIM else cuda.device_array
        self.out_rows = out_rows = max(1, min(R, log_rows))  # rows whose logits a forward may ask for
        self.h, self.x, self.d, self.xs = d((R, H), f), d((R, H), f), d((R, H), f), d((out_rows, H), f)
        self.h2 = d((1, H), f)  # a one-row residual's other buffer under a fused add + RMSNorm (Runner._take_norm)
        self.u = d((R, C + Vd + 2 * Hv), f)
        self.y, self.xlog1 = d((R, C), f), d((R, C), f)
        self.o, self.gn = d((R, Hv, Dv), f), d((R, Vd), f)
        self.qkv_fused = any(k.endswith("self_attn.qkv") for k in arena._lin)
        if self.qkv_fused:  # one GEMV output [R, q|gate, k, v]; qg, kk, vv are [R, heads, width] column views of it
            Q, K = nH * 2 * hd, nKV * hd
            self.qkv = d((R, Q + 2 * K), f)
            self.qg = _col_view(self.qkv, 0, (nH, 2 * hd))
            self.kk = _col_view(self.qkv, Q, (nKV, hd))
            self.vv = _col_view(self.qkv, Q + K, (nKV, hd))
        else:
            self.qg, self.kk, self.vv = d((R, nH * 2 * hd), f), d((R, nKV * hd), f), d((R, nKV * hd), f)
        self.q, self.att = d((R, nH, hd), f), d((R, nH, hd), f)
        self.gu, self.mi = d((R, 2 * I), f), d((R, I), f)
        self.logits = d((out_rows, V), f)
        self.tok = d(out_rows, np.int32)
        L = log_rows
        self.log_k, self.log_d = d((nll, L, Hk, Dk), f), d((nll, L, Hv, Dv), f)
        self.log_a, self.xlog = d((nll, L, Hv), f), d((nll, L, C), f)
        self.no_k, self.no_d, self.no_a = d((0, Hk, Dk), f), d((0, Hv, Dv), f), d((0, Hv), f)
        self.no_x = d((0, C), f)
        self.nc = attention.max_chunks(ctx)
        self.m, self.l = d((att_rows, nH, self.nc), f), d((att_rows, nH, self.nc), f)
        self.acc = d((att_rows, nH, self.nc, hd), f)
        # split-K workspace: the largest ks * GEMV_ROWS * out over the GEMV linears
        ws = 16
        for ent in arena._lin.values():
            p = ent["plan"]
            if p.ks > 1:
                ws = max(ws, p.ks * GEMV_ROWS * p.out)
        self.ws = d(ws, f)
        qgemv.counters()  # the stand-in workspace of one-chunk qgemv launches, allocated before any graph capture
        self.qcnt = qgemv.new_counters()  # this runner's own split-K arrival counters (runners may share a GPU)
        self.chunk = delta_rule.chunk_workspace(max(1, prompt_rows), Hk, Hv, Dk, Dv) if prompt_rows else None
        # v3 prompt-GEMM scratch (x split into bf16 mma fragments + group sums) for the widest GEMM input: static,
        # so that captured prompt graphs never allocate and always see the same pointers
        kin = max((e["in"] for e in arena._lin.values()
                   if e["kind"] == "affine" and gemm.supported3(e["in"], e["bits"], e["group"])), default=0)
        self.gemm_ws = gemm.workspace(R, kin) if prompt_rows and kin else None

    @staticmethod
    def nbytes(config, rows, log_rows, ctx, att_rows, prompt_rows) -> int:
        c = config
        H, I = c.hidden_size, c.intermediate_size
        Hk, Hv, Dk, Dv = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, \
            c.linear_value_head_dim
        C = 2 * Hk * Dk + Hv * Dv
        nH, nKV, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        nll = max(1, len(c.linear_attention_layers))
        per_row = 3 * H + (C + Hv * Dv + 2 * Hv) + 2 * C + 2 * Hv * Dv + nH * 2 * hd + 2 * nKV * hd \
            + 2 * nH * hd + 3 * I
        out_rows = max(1, min(rows, log_rows))
        log = nll * (Hk * Dk + Hv * Dv + Hv + C)
        nc = attention.max_chunks(ctx)
        att = nH * nc * (hd + 2)
        chunk = 2 * Hk * Dk + Hv * (4 + delta_rule.CH + Dv + Dk)
        kin = max(H, I, nH * hd, Hv * Dv)  # widest GEMM input (bound for Buffers.gemm_ws)
        gws = (-(-rows // gemm.RPAD) * gemm.RPAD) * (kin + kin // 64) if prompt_rows else 0
        return 4 * (rows * per_row + out_rows * (H + c.vocab_size + 1) + log_rows * log + att_rows * att
                    + prompt_rows * chunk + gws + H)


# ------------------------------------------------------------------------------------------------ runner


def _embed(wt, ids, out, stream):
    """out[r] = row ids[r] of the embedding (an arena linear entry: MLX affine, bf16 / f32 scales, or bf16 dense)."""
    if wt.get("sw"):
        embedding.launch_embed_swept(ids, wt["W"], out, wt["bits"], wt["group"], wt["sw"][0], wt["sw"][2],
                                     stream=stream, **_SIM_MB)
    elif wt["kind"] == "affine":
        embedding.launch_embed_affine(ids, wt["W"], wt["S"], wt["B"], out, wt["bits"], wt["group"], stream=stream,
                                      **_SIM_MB)
    else:
        embedding.launch_embed_dense(ids, wt["W16"], out, stream=stream, **_SIM_MB)


def prompt_graphs_on() -> bool:
    """Prompt chunks by CUDA-graph replay (``Runner._prompt_graphed``) unless ``TENSORFOLD_PROMPT_GRAPH`` is 0 (read
    at each forward, for A/B runs in one process). Default on on the GPU: an eager 2B prompt chunk is host-bound
    (benchmarks/results/prompt_2026-11-30_a4de245.md: 512 tokens 200 ms eager vs 38 ms replayed, GPU time 38 ms).
    Default off in the simulator (no graphs there; the padded rows would only slow the simulated tests down)."""
    import os

    return os.environ.get("TENSORFOLD_PROMPT_GRAPH", "0" if IS_SIM else "1") == "1"


def swept_mode() -> str:
    """``TENSORFOLD_SWEPT`` (read when a runner is built): which decode weights the runner rewrites in place into
    ``qgemv.sweep_pack``'s layout (``Runner._sweep_weights``): "all" (the default on the GPU: every linear whose
    GEMV plan, prompt GEMM and embedding gather can read it), "gate_up" (the fused MLP gate | up weights only) or
    "0" (none; the MLX layout everywhere). Never in the simulator, whose GEMVs are host stand-ins."""
    if IS_SIM:
        return "0"
    v = os.environ.get("TENSORFOLD_SWEPT", "all").strip().lower()
    if v not in ("all", "gate_up", "0"):
        raise ValueError(f"TENSORFOLD_SWEPT={v!r}: expected all, gate_up or 0")
    return v


def sweepable(p, inp: int, bits: int, group: int) -> bool:
    """Whether an affine weight with decode plan ``p`` is rewritten into ``qgemv.sweep_pack``'s layout
    (``Runner._sweep_weights``; benchmarks mirror the runtime with it): a qgemv plan that reads it (``u`` 2 / 4,
    not the prefetch form) and a prompt GEMM that can (``gemm.swept_ok``)."""
    return isinstance(p, qgemv.V3Plan) and p.u in (2, 4) and not p.pf and gemm.swept_ok(inp, bits, group)


DEFER_AUTO_ROWS = 2  # TENSORFOLD_GEMV_DEFER=auto: defer in launches of at least this many rows


def defer_on(rows: int) -> bool:
    """Whether the output projections and down on qgemv leave their K-chunk partial sums to the add + RMSNorm that
    reads them (``Runner._add_norm``), which adds them in chunk order, so the GEMV skips its completion (fence,
    arrival count, second pass). The same bits either way (``tests/kernels/test_sim_defer.py``), so the choice may
    depend on the row count. ``TENSORFOLD_GEMV_DEFER`` (read at each launch): "1" always, "0" never, "auto" (the
    default) from DEFER_AUTO_ROWS rows.

    Measured on the H200 (session 24, benchmarks/results/session24_2026-12-02.md), in-kernel -> deferred: 9B decode
    334.1 -> 331.2 tok/s at 1 stream, 1,800.7 -> 1,890.2 at 8; 27B 126.9 -> 121.0 at 1, 641.2 -> 702.7 at 8. One
    row loses (its add + RMSNorm reads ks partial rows on one block's critical path), eight rows gain."""
    v = os.environ.get("TENSORFOLD_GEMV_DEFER", "auto").strip()
    return v == "1" or (v == "auto" and rows >= DEFER_AUTO_ROWS)


class Runner:
    """The model on the device: weights (``Arena``), caches (``Caches``), buffers, and the launch sequence."""

    def __init__(self, config, arena, caches, *, rows: int, log_rows: int, prompt_rows: int, att_rows: int):
        self.c = c = config
        self.arena, self.caches = arena, caches
        self.eps = float(c.rms_norm_eps)
        # GDN output-norm gate, as norms.launch_gated_rms_norm names it (a string: any other value means sigmoid there)
        self.act = "silu" if (getattr(c, "output_gate_type", "silu") or "silu") in ("silu", "swish") else "sigmoid"
        self.rotary_dim = int(c.head_dim * c.partial_rotary_factor)
        self.scale = float(c.head_dim ** -0.5)
        self.Hv, self.Dv = c.linear_num_value_heads, c.linear_value_head_dim
        self.C = 2 * c.linear_num_key_heads * c.linear_key_head_dim + self.Hv * self.Dv
        self.Vd = self.Hv * self.Dv
        self.full_idx = {l: i for i, l in enumerate(c.full_attention_layers)}
        self.lin_idx = {l: i for i, l in enumerate(c.linear_attention_layers)}
        # the fused GDN step / verify kernel (delta_rule.launch_fused, TENSORFOLD_GDN_FUSED) and its counters
        self.gdn_fuse_ok = bool(self.lin_idx) and delta_rule.fused_ok(
            c.linear_key_head_dim, self.Dv, getattr(c, "linear_conv_kernel_dim", 4))
        self.gdn_ctr = delta_rule.fused_counters(max(1, caches.slots), self.Hv) if self.gdn_fuse_ok else None
        self.head = "lm_head" if arena.has_linear("lm_head") else "embed_tokens"
        for ent in arena._lin.values():
            if "plan" not in ent:
                bits, group = (ent["bits"], ent["group"]) if ent["kind"] == "affine" else (16, 0)
                scales = affine.scale_kind(ent["S"]) if ent["kind"] == "affine" else "bf16"
                ent["plan"] = affine.plan_qgemv(ent["out"], ent["in"], bits, group, scales)
        self.inv_freq = cuda.to_device(ops.rope_inv_freq(self.rotary_dim, c.rope_theta, np.float32))
        self.buf = Buffers(c, arena, max(rows, prompt_rows), log_rows, caches.ctx, att_rows, prompt_rows)
        self.rows_cap = max(rows, prompt_rows)
        self.prompt_rows = prompt_rows
        self.meta = Meta(self.rows_cap, max(1, caches.slots))
        self.sample_meta = SampleMeta(self.buf.out_rows)
        self._dparts = None  # a deferred GEMV's partial sums [ks, R, out], until _add_norm reads them
        self._pend = None  # the norm weight of a one-row add + RMSNorm left to the next GEMV of x (_take_norm)
        self._fuse = False  # norms.fuse_on() for the forward being issued
        self._hc = None  # the residual's buffer: buf.h, or buf.h2 after an odd number of fused norms
        self.n_fused = 0  # add + RMSNorms issued inside a GEMV (graph captures count once)
        self.n_deferred = 0  # GEMV launches issued with a deferred completion (graph captures count once)
        # the partial-summing add + RMSNorm is the vectorized kernel only: every norm weight it may get must be
        # 16-byte aligned (an arena vector at an odd offset is not)
        self._norms_vec = norms.vec_aligned(*[arena.vec(f"layers.{l}.{k}") for l in range(c.num_hidden_layers)
                                              for k in ("input_layernorm", "post_attention_layernorm")],
                                            arena.vec("norm"))
        self.sim_stand_ins = True  # simulator: glue's host stand-ins for the GEMV and attention kernels
        self.glu_on = os.environ.get("TENSORFOLD_GLU", "1").strip() != "0"
        self.swept_bytes = self._sweep_weights(swept_mode())
        self._pgraphs: dict = {}  # prompt graphs by (rows bucket, segments, outputs, ...), see _prompt_graphed
        self._pgraph_failed: set = set()
        self._core_stream = self._core_for = None
        self.prompt_graph_error = None

    def _sweep_weights(self, mode: str) -> int:
        """Rewrite decode weights in place into ``qgemv.sweep_pack``'s layout (``Arena.sweep``; ``mode`` from
        ``swept_mode``): affine bf16-scale linears whose qgemv plan reads it (``u`` 2 / 4, not the prefetch form)
        and whose prompt GEMM can (``gemm.swept_ok``). A fused gate | up weight pairs its gate and up rows, and all
        its GEMV launches then take the SwiGLU epilogue. The GEMVs read a swept weight in the order it lies (session
        20: 9B gate + up 28.0 -> 24.8 us); the same bits everywhere. The arena is shared: a second runner finds the
        entries swept. The first runner on an arena decides (``Arena.sweep_decided``): a later runner never rewrites
        weights that an earlier runner's captured graphs read in the MLX layout. -> bytes of the arena in that
        layout."""
        nbytes = 0
        decided = getattr(self.arena, "sweep_decided", False)
        self.arena.sweep_decided = True
        for name, ent in self.arena._lin.items():
            p = ent.get("plan")
            if ent.get("sw"):
                nbytes += ent["W"].nbytes
                continue
            if decided or mode == "0" or ent["kind"] != "affine" or not sweepable(p, ent["in"], ent["bits"],
                                                                                  ent["group"]):
                continue
            gate_up = name.endswith("mlp.gate_up")
            if mode == "gate_up" and not gate_up:
                continue
            # a fused gate | up weight is paired for the SwiGLU epilogue, which then serves every GEMV launch of it
            # (with the launch bounds its one-row form is break-even with plain + silu: affine.glu_faster)
            glu = gate_up and self.glu_on and affine.glu_ok(p, ent["out"])
            n = self.arena.sweep(name, p.u, glu=glu, per=p.per)
            if n:
                ent["plan"] = replace(p, sw=2 if glu else 1)
                nbytes += n
        return nbytes

    # ---------------------------------------------------------------------------------------------- pieces

    def _glu(self, name, R, prompt) -> bool:
        """Whether the fused gate | up linear ``name`` runs as GEMVs with the SwiGLU epilogue (``y [R, I]``
        straight into the down projection's input, no ``silu_mul_fused_k`` launch): GEMV rows (steps, windows,
        trees, prompts of <= 16 rows), where the plan's kernel has it and is faster with it
        (``affine.glu_faster``), not the simulator's host stand-ins. The same bits either way.
        ``TENSORFOLD_GLU=0`` (read when the runner is built) turns it off."""
        if not self.glu_on or (IS_SIM and self.sim_stand_ins) or (prompt and R > 16):
            return False
        ent = self.arena.linear(name)
        if ent.get("sw"):  # a swept weight has gate / up rows paired exactly when it serves the epilogue
            return ent["sw"][1]
        return ent["kind"] == "affine" and affine.glu_faster(ent["plan"], ent["out"], R)

    def _linear(self, name, x, y, R, prompt, stream, glu=False, defer=False):
        """y[:R] = x[:R] @ W.T (GEMM for prompt rows, else GEMVs of up to GEMV_ROWS rows); ``glu`` (see
        :meth:`_glu`): y[:R] = swiglu of W's gate and up halves. ``defer`` (output projections and down, whose only
        reader is :meth:`_add_norm`): where :func:`defer_on` and the launch allows (swept qgemv plan with several K
        chunks, at most 8 rows), y is not written; the partial sums wait in the workspace for :meth:`_add_norm`
        (the same bits)."""
        ent = self.arena.linear(name)
        norm = self._take_norm(ent, x, R, prompt, stream) if self._pend is not None else None
        if defer:
            self._dparts = None  # y is the reader's, unless this launch defers (nothing stale from a failed forward)
        if IS_SIM and self.sim_stand_ins:
            glue.sim_linear(ent, x[:R], y[:R])
            return
        sw = ent.get("sw")
        p = ent.get("plan")
        dfr = bool(defer and not prompt and sw and self._norms_vec and defer_on(R) and qgemv.defer_ok(p, R, glu)
                   and norms.parts_ok(p.out))
        if prompt and ent["kind"] == "affine" and R > 16:
            if sw:
                gemm.launch_qgemm_swept(ent["W"], x[:R], y[:R], ent["bits"], ent["group"], sw[0], ent["out"],
                                        glu=sw[1], per=sw[2], stream=stream, rows=R, ws=self.buf.gemm_ws)
            else:
                gemm.launch_qgemm(ent["W"], ent["S"], ent["B"], x[:R], y[:R], ent["bits"], ent["group"],
                                  stream=stream, rows=R, ws=self.buf.gemm_ws)
            return
        for r0 in range(0, R, GEMV_ROWS):
            n = min(GEMV_ROWS, R - r0)
            ws = self.buf.ws[:p.ks * n * p.out].reshape((p.ks, n, p.out)) if p.ks > 1 else None
            if sw:  # the plan has sw; a paired weight refuses a launch without the epilogue (qgemv.launch)
                qgemv.launch(ent["W"], ent["S"], ent["B"], x[r0:r0 + n], y[r0:r0 + n], p, n, ws=ws, stream=stream,
                             glu=glu, cnt=self.buf.qcnt, defer=dfr, norm=norm)
                if dfr:  # one launch (R <= 8): its partial sums are _add_norm's input
                    self._dparts = ws
                    self.n_deferred += 1
            elif ent["kind"] == "affine":
                affine.launch_qgemv(ent["W"], ent["S"], ent["B"], x[r0:r0 + n], y[r0:r0 + n], ent["bits"],
                                    ent["group"], plan=p, ws=ws, stream=stream, rows=n, glu=glu, cnt=self.buf.qcnt,
                                    norm=norm)
            else:
                affine.launch_dense_gemv(ent["W32"], x[r0:r0 + n], y[r0:r0 + n], plan=p, ws=ws, stream=stream,
                                         rows=n)

    def _add_norm(self, R, mult, stream):
        """h[:R] += the output projection's (or down's) rows; x[:R] = RMSNorm(h[:R]) * mult. The rows are in B.d, or
        still K-chunk partial sums in the workspace when that GEMV deferred its completion (``_linear(defer=)``).
        One row under ``TENSORFOLD_NORM_FUSE=1`` (``norms.fuse_on``): left to the next GEMV that reads x
        (:meth:`_take_norm`)."""
        B = self.buf
        parts, self._dparts = self._dparts, None
        h = self._hc
        if parts is not None:
            norms.launch_add_rms_norm_parts(parts, h[:R], mult, B.x[:R], self.eps, stream=stream, **_SIM_MB)
        elif R == 1 and self._fuse and self._norms_vec and not (IS_SIM and self.sim_stand_ins):
            self._pend = mult
        else:
            norms.launch_add_rms_norm(B.d[:R], h[:R], mult, B.x[:R], self.eps, stream=stream, **_SIM_MB)

    def _flush_norm(self, stream) -> None:
        """Issue a pending one-row add + RMSNorm as its own launch (its reader cannot take it)."""
        mult, self._pend = self._pend, None
        if mult is not None:
            B = self.buf
            norms.launch_add_rms_norm(B.d[:1], self._hc[:1], mult, B.x[:1], self.eps, stream=stream, **_SIM_MB)

    def _take_norm(self, ent, x, R, prompt, stream):
        """The ``norm=`` of a GEMV launch that takes the pending add + RMSNorm (x is buf.x, one row, a decode
        launch on a tensor-core plan: ``affine.norm_fusable``), which makes x and writes the updated residual into
        the other residual buffer; else the norm is issued on its own first and None returned. A fused GEMV writes
        all of x and of the residual, so later readers of either see what the standalone launch would have left."""
        B = self.buf
        if not (x is B.x and R == 1 and not prompt and ent["kind"] == "affine" and affine.norm_fusable(ent["plan"])):
            self._flush_norm(stream)
            return None
        mult, self._pend = self._pend, None
        h, ho = self._hc, (B.h2 if self._hc is B.h else B.h)
        self._hc = ho
        self.n_fused += 1
        return h[:1], B.d[:1], mult, ho[:1], self.eps

    def _unfused(self, pre, parts, buf, R, prompt, stream):
        """The linears ``pre + name`` of ``parts`` ((name, width), ...) that load-time fusion left apart (their
        formats differ): each into its own contiguous block of ``buf``'s memory, in order. -> their [R, width]
        outputs."""
        outs, off, rows = [], 0, self.buf.rows
        for nm, w in parts:
            blk = buf.reshape(-1)[off * rows:(off + w) * rows].reshape((rows, w))
            self._linear(pre + nm, self.buf.x, blk, R, prompt, stream)
            outs.append(blk[:R])
            off += w
        return outs

    def _gdn(self, l, R, S, mode, b: "Batch|None", stream):
        B, m, cc = self.buf, self._m, self.caches
        li = self.lin_idx[l]
        pre = f"layers.{l}.linear_attn."
        C, Vd, Hv = self.C, self.Vd, self.Hv
        prompt = mode == "prompt"
        if self.arena.has_linear(pre + "in_all"):
            self._linear(pre + "in_all", B.x, B.u, R, prompt, stream)
            u = B.u[:R]
            qkv, z, bb, aa = u[:, :C], u[:, C:C + Vd], u[:, C + Vd:C + Vd + Hv], u[:, C + Vd + Hv:C + Vd + 2 * Hv]
        else:  # formats differ: separate launches
            qkv, z, bb, aa = self._unfused(pre, (("in_proj_qkv", C), ("in_proj_z", Vd), ("in_proj_b", Hv),
                                                 ("in_proj_a", Hv)), B.u, R, prompt, stream)
        rs, par = m.view("row_slot", R), m.view("parent", R)
        seg = (m.view("seg_row0", S), m.view("seg_len", S), m.view("seg_slot", S))
        tail = cc.conv[li]
        xlog = B.xlog1[:R] if prompt else B.xlog[li]
        if not prompt and self.gdn_fuse_ok and delta_rule.fused_on(R):
            # conv + gates + delta rule + gated RMSNorm in one launch (same logs / xlog as the three launches)
            logs = (B.log_k[li], B.log_d[li], B.log_a[li]) if mode == "verify" else (B.no_k, B.no_d, B.no_a)
            delta_rule.launch_fused(qkv, self.arena.vec(pre + "conv1d"), tail, xlog, z, self.arena.vec(pre + "norm"),
                                    aa, bb, self.arena.vec(pre + "A_log"), self.arena.vec(pre + "dt_bias"), cc.rec[li],
                                    *seg, m.view("seg_commit", S), par, B.o[:R], B.gn[:R], self.gdn_ctr, *logs,
                                    self.eps, self.act, stream=stream)
            self._linear(pre + "out_proj", B.gn, B.d, R, prompt, stream, defer=True)
            return
        conv.launch_conv(qkv, self.arena.vec(pre + "conv1d"), tail, rs, par, B.y[:R], xlog, stream=stream,
                         **_SIM_BLOCKS)
        if prompt:
            compact.launch_conv_commit(cc.conv[li:li + 1], B.xlog1.reshape((1,) + tuple(B.xlog1.shape)), par,
                                       m.view("seg_slot", S), m.view("seg_leaf", S), stream=stream,
                                       **_SIM_B1)
            delta_rule.launch_chunked(B.y[:R], aa, bb, self.arena.vec(pre + "A_log"), self.arena.vec(pre + "dt_bias"),
                                      cc.rec[li], *seg, B.o[:R], B.chunk,
                                      max_rows_per_seg=R if b is None else b.max_seg_len,
                                      stream=stream, prep_blocks=1 if IS_SIM else None)
        else:
            logs = (B.log_k[li], B.log_d[li], B.log_a[li]) if mode == "verify" else (B.no_k, B.no_d, B.no_a)
            delta_rule.launch_recurrent(B.y[:R], aa, bb, self.arena.vec(pre + "A_log"),
                                        self.arena.vec(pre + "dt_bias"), cc.rec[li], *seg,
                                        m.view("seg_commit", S), par, B.o[:R], *logs, stream=stream)
        # o [R, Hv, Dv] viewed as [R, Vd]: per-head norm over head_dim = Dv columns, gate z [R, Vd] (a column
        # block of u when fused: strided rows, which the kernel indexes as such)
        norms.launch_gated_rms_norm(B.o[:R].reshape((R, Vd)), z, self.arena.vec(pre + "norm"), B.gn[:R], self.eps,
                                    self.Dv, act=self.act, stream=stream, **_SIM_MB)
        self._linear(pre + "out_proj", B.gn, B.d, R, prompt, stream, defer=True)

    def _attn(self, l, R, mode, b, stream):
        B, m, cc, c = self.buf, self._m, self.caches, self.c
        fl = self.full_idx[l]
        pre = f"layers.{l}.self_attn."
        prompt = mode == "prompt"
        nH, nKV, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        if B.qkv_fused:  # one GEMV; B.qg / B.kk / B.vv are [R, heads, width] views of its column blocks
            self._linear(pre + "qkv", B.x, B.qkv, R, prompt, stream)
        else:
            self._linear(pre + "q_proj", B.x, B.qg, R, prompt, stream)
            self._linear(pre + "k_proj", B.x, B.kk, R, prompt, stream)
            self._linear(pre + "v_proj", B.x, B.vv, R, prompt, stream)
        qg = B.qg[:R].reshape((R, nH, 2 * hd))
        ks, vs = cc.scale_layer(fl)
        kv8.launch_qk_norm_rope_store(qg, B.kk[:R].reshape((R, nKV, hd)), B.vv[:R].reshape((R, nKV, hd)),
                                      self.arena.vec(pre + "q_norm"), self.arena.vec(pre + "k_norm"),
                                      self.inv_freq, m.view("pos", R), m.view("row_slot", R),
                                      m.view("cache_idx", R), self.eps, B.q[:R], cc.k[fl], cc.v[fl], ks, vs,
                                      stream=stream, row_blocks=1 if IS_SIM else None)
        nz = B.nc if b is None else max(1, attention.max_chunks(b.max_keys))
        Ra = B.att_rows
        sim_host = IS_SIM and self.sim_stand_ins  # host stand-in (the kernels' own simulator tests cover them)
        if sim_host:
            glue.sim_attention(B.q[:R], cc.k[fl], cc.v[fl], ks, vs, m.view("row_slot", R), m.view("nk", R),
                               m.view("tmask", R), m.view("tbase", R), self.scale, qg, B.att[:R])
        tc_prompt = (prompt and not sim_host and attention_prompt.on()
                     and attention_prompt.ok(cc.k[fl], nH, nKV, hd))
        if tc_prompt:  # prompt rows (no tree bits): one tensor-core launch for all of them
            attention_prompt.launch(B.q[:R], cc.k[fl], cc.v[fl], m.view("row_slot", R), m.view("nk", R), qg,
                                    self.scale, 1, B.att[:R], stream=stream)
        for r0 in range(0, 0 if sim_host or tc_prompt else R, Ra):
            n = min(Ra, R - r0)
            sl = slice(r0, r0 + n)
            rs = m.view("row_slot", R)[sl]
            nk, tm, tb = m.view("nk", R)[sl], m.view("tmask", R)[sl], m.view("tbase", R)[sl]
            attention.launch_partials(B.q[sl], cc.k[fl], cc.v[fl], ks, vs, rs, nk, tm, tb, self.scale,
                                      B.m[:n], B.l[:n], B.acc[:n], nz=nz, stream=stream)
            attention.launch_merge(B.m[:n], B.l[:n], B.acc[:n], rs, nk, tm, qg[sl], 1, B.att[sl], stream=stream)
        self._linear(pre + "o_proj", B.att.reshape((B.rows, nH * hd)), B.d, R, prompt, stream, defer=True)

    # ---------------------------------------------------------------------------------------------- forward

    def launch(self, R: int, S: int, n_out: int, mode: str, *, batch: Batch | None = None, argmax: bool = False,
               valid_vocab: int | None = None, sample: "SampleMeta | None" = None, meta: "Meta | None" = None,
               all_rows: bool = False, keep_ids: bool = False, stream=0) -> None:
        """Issue the forward of the rows in ``meta`` (default ``self.meta``; R rows, S segments; logits of
        ``sel[:n_out]``), then optionally the argmax or the sampler (``sample``: its rows' knobs) into
        ``buf.tok``. Launches only. ``batch`` (eager only) lets prompt launches size their grids to the batch.
        ``all_rows``: the caller promises ``sel[:n_out]`` is 0 .. n_out - 1 (steps, windows, trees), so the head
        reads the normed rows in place and the gather launch is skipped. ``keep_ids`` (steps with ids out): the
        drawn ids of the stream rows are also written into the metadata's ``ids``, the next step's inputs
        (``DecodeGraphs`` in-graph chaining)."""
        self._m = m = meta or self.meta
        B, c, a = self.buf, self.c, self.arena
        prompt = mode == "prompt"
        self._hc, self._pend, self._fuse = B.h, None, norms.fuse_on() and not prompt
        _embed(a.linear("embed_tokens"), m.view("ids", R), B.h[:R], stream)
        norms.launch_rms_norm(B.h[:R], a.vec("layers.0.input_layernorm"), B.x[:R], self.eps, stream=stream, **_SIM_MB)
        L = c.num_hidden_layers
        for l, lt in enumerate(c.layer_types):
            if lt == "linear_attention":
                self._gdn(l, R, S, mode, batch, stream)
            else:
                self._attn(l, R, mode, batch, stream)
            self._add_norm(R, a.vec(f"layers.{l}.post_attention_layernorm"), stream)
            gate_up = f"layers.{l}.mlp.gate_up"
            if not a.has_linear(gate_up):  # gate and up in different formats: two launches
                I = B.mi.shape[1]
                g, u = self._unfused(f"layers.{l}.mlp.", (("gate_proj", I), ("up_proj", I)), B.gu, R, prompt,
                                     stream)
                activations.launch_silu_mul(g, u, B.mi[:R], stream=stream, **_SIM_MB)
            elif self._glu(gate_up, R, prompt):
                self._linear(gate_up, B.x, B.mi, R, prompt, stream, glu=True)
            else:
                self._linear(gate_up, B.x, B.gu, R, prompt, stream)
                activations.launch_silu_mul_fused(B.gu[:R], B.mi[:R], stream=stream, **_SIM_MB)
            self._linear(f"layers.{l}.mlp.down_proj", B.mi, B.d, R, prompt, stream, defer=True)
            nxt = a.vec(f"layers.{l + 1}.input_layernorm") if l + 1 < L else a.vec("norm")  # final norm last
            self._add_norm(R, nxt, stream)
        if mode == "step" and self.lin_idx:
            compact.launch_conv_commit(self.caches.conv, B.xlog, m.view("parent", R), m.view("seg_slot", S),
                                       m.view("seg_leaf", S), stream=stream, **_SIM_B1)
        if n_out:
            if all_rows and n_out <= R:
                self._linear(self.head, B.x, B.logits, n_out, False, stream)
            else:
                self._flush_norm(stream)
                glue.launch_gather(B.x, m.view("sel", n_out), B.xs[:n_out], stream=stream)
                self._linear(self.head, B.xs, B.logits, n_out, False, stream)
            if sample is not None:
                sample.launch(B.logits[:n_out], B.tok[:n_out], valid_vocab or c.vocab_size, stream=stream)
            elif argmax:
                glue.launch_argmax(B.logits[:n_out], valid_vocab or c.vocab_size, B.tok[:n_out], stream=stream)
            if keep_ids and (sample is not None or argmax):
                ksample.launch_keep_ids(B.tok[:n_out], m.view("row_slot", n_out), m.view("ids", n_out),
                                        stream=stream)
        self._flush_norm(stream)  # no head: the last norm's x still goes out

    def forward(self, batch: Batch, *, logits=True, argmax=False, valid_vocab=None, sample_rows=None, stream=0,
                graph=True):
        """Eager forward of ``batch``: write the metadata, launch, and (synchronously) return logits [n_out, V]
        and/or token ids [n_out] (argmax, or drawn by the device sampler for ``sample_rows``, a list of
        ``SampleRow``) as numpy (None where not asked). ``graph=False``: a prompt chunk runs eagerly even where
        prompt graphs are on (shapes too varied to capture, e.g. every row's logits)."""
        sample = None
        if sample_rows is not None:
            sample = self.sample_meta
            sample.write(sample_rows, stream=stream)
            argmax = True
        if batch.mode == "step" or batch.mode == "verify":
            if batch.R > self.buf.log_rows:
                raise ValueError(f"{batch.mode}: {batch.R} rows exceed the {self.buf.log_rows} logged rows")
        if batch.R > self.rows_cap:
            raise ValueError(f"forward: {batch.R} rows exceed the {self.rows_cap} buffer rows")
        self._last = batch
        n_out = len(batch.sel) if (logits or argmax) else 0
        if n_out > self.buf.out_rows:
            raise ValueError(f"forward: {n_out} logits rows exceed the {self.buf.out_rows} output rows")
        ident = n_out == batch.R and np.array_equal(batch.sel[:n_out], np.arange(n_out))
        if batch.mode == "prompt" and graph and prompt_graphs_on() and stream:
            self._prompt_graphed(batch, n_out, argmax, valid_vocab, sample, bool(ident), stream)
        else:
            self.meta.write(batch, stream=stream)
            self.launch(batch.R, batch.S, n_out, batch.mode, batch=batch, argmax=argmax, valid_vocab=valid_vocab,
                        sample=sample, all_rows=bool(ident), stream=stream)
        out_l = out_t = None
        if logits and n_out:
            out_l = self.buf.logits[:n_out].copy_to_host(stream=stream)
        if argmax and n_out:
            out_t = self.buf.tok[:n_out].copy_to_host(stream=stream)
        if stream:
            stream.synchronize()
        else:
            cuda.synchronize()
        return out_l, out_t

    # ---------------------------------------------------------------------------------------------- prompt graphs

    def prompt_bucket(self, R: int) -> int:
        """Rows a prompt chunk of R rows is padded to for its graph: 64, 128, 256, 512, then multiples of 512
        (at most the buffer rows)."""
        b = 64
        while b < R and b < 512:
            b *= 2
        if R > b:
            b = -(-R // 512) * 512
        return max(R, min(b, self.rows_cap))

    def _prompt_graphed(self, batch, n_out, argmax, valid_vocab, sample, all_rows, stream):
        """A prompt chunk by CUDA-graph replay: the batch is padded to ``prompt_bucket(R)`` rows and a power of two
        of segments (padding rows and segments have slot -1: nothing is written for them, every real row's values are those of the eager forward, since no
        kernel's result for a row depends on the others), the grids are sized from the bucket and the buffers'
        capacity instead of the batch (attention splits: ``buf.nc``; chunk grid: the bucket), so one graph per
        (rows bucket, segments, outputs) serves any start position. The first chunk of a key runs eagerly (that
        compiles everything) and is then captured; later ones replay. In the simulator: the padded launches run
        eagerly (what the graph would replay)."""
        Rb = self.prompt_bucket(batch.R)
        S = 1
        while S < batch.S:  # segments padded to a power of two (padding segments: slot -1, length 0)
            S *= 2
        S = max(batch.S, min(S, self.meta.S))
        self.meta.write(batch.pad(Rb, S), stream=stream)
        key = (Rb, S, n_out, bool(argmax), sample is not None, valid_vocab, all_rows)

        def go(st):
            self.launch(Rb, S, n_out, "prompt", batch=None, argmax=argmax, valid_vocab=valid_vocab, sample=sample,
                        all_rows=all_rows, stream=st)

        g = self._pgraphs.get(key)
        if g is not None:
            g.launch(self._core_stream)
            return
        go(stream)
        if IS_SIM or key in self._pgraph_failed:
            return
        try:
            if self._core_for is not stream:
                self._pgraphs.clear()  # graphs are launched on the stream they were built for
                self._core_stream, self._core_for = None, stream
            self._core_stream = glue.core_stream(stream, self._core_stream)
            self._pgraphs[key] = glue.capture_graph(self._core_stream, go)
        except Exception as e:  # noqa: BLE001 -- this key stays eager (padded launches, same values)
            self._pgraph_failed.add(key)
            self.prompt_graph_error = f"prompt graph {key}: {type(e).__name__}: {e}"

    def commit(self, batch: Batch, keep, stream=0) -> list[int]:
        """Directly after the ``verify`` forward of ``batch`` (its logs and metadata are still there): keep, per segment, the
        path ending at local row ``keep[s]`` (-1 = keep nothing) and make it the committed history. Returns the
        number of rows kept per segment (the caller advances its lengths)."""
        if batch.mode != "verify":
            raise ValueError("commit: only a verify forward is committed afterwards")
        if getattr(self, "_last", None) is not batch:
            raise ValueError("commit: must directly follow the verify forward it commits (the logs are reused)")
        S, R = batch.S, batch.R
        leaf = np.full(S, -1, np.int32)
        kept = []
        par = batch.rows["parent"]
        for s in range(S):
            k = int(keep[s])
            r0, n = int(batch.segs["seg_row0"][s]), int(batch.segs["seg_len"][s])
            if k >= n:
                raise ValueError(f"commit: keep[{s}] = {k} but the segment has {n} rows")
            if k < 0:
                kept.append(0)
                continue
            leaf[s] = r0 + k
            d, x = 0, r0 + k
            while x >= 0:
                d += 1
                x = int(par[x])
            kept.append(d)
        b2 = Batch(batch.mode, batch.rows, dict(batch.segs, seg_leaf=leaf), batch.sel, batch.max_seg_len,
                   batch.max_keys, batch.streams)
        self.meta.write(b2, stream=stream)
        m, cc, B = self.meta, self.caches, self.buf
        par_v, ss, lf = m.view("parent", R), m.view("seg_slot", S), m.view("seg_leaf", S)
        if self.lin_idx:
            compact.launch_gdn_commit(cc.rec, B.log_k, B.log_d, B.log_a, par_v, ss, lf, stream=stream)
            compact.launch_conv_commit(cc.conv, B.xlog, par_v, ss, lf, stream=stream, **_SIM_B1)
        if self.full_idx:
            compact.launch_kv_compact(cc.k, cc.v, cc.k_scale, cc.v_scale, par_v, m.view("cache_idx", R), ss, lf,
                                      m.view("seg_dst0", S), stream=stream)
        if stream:
            stream.synchronize()
        else:
            cuda.synchronize()
        return kept
