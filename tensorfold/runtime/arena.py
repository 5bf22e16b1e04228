"""Model weights on the device: one allocation, packed per module, with typed views per tensor (issue 4).

``Arena.upload(checkpoint)`` lays every tensor out in one ``uint8`` device allocation (offsets 256-byte aligned,
layer by layer in model order), copies each from the checkpoint's memory maps, and hands out views:

- a *linear* (``Arena.linear(name)``) is a dict ``{"kind": "affine", "W" uint32 [out, in*bits/32], "S", "B"
  [out, in/group] (uint16 bf16 bits or float32), "bits", "group", "out", "in"}`` or ``{"kind": "dense",
  "W32" uint32 [out, in/2] (the bf16 bits viewed as words), "W16" uint16 [out, in], "out", "in"}``.
  Linears that read the same input are **fused** (rows concatenated) when their formats agree: per GDN layer
  ``in_proj_qkv | in_proj_z | in_proj_b | in_proj_a`` (name ``layers.i.linear_attn.in_all``), per MLP
  ``gate_proj | up_proj`` (``layers.i.mlp.gate_up``), per attention layer ``q_proj | k_proj | v_proj``
  (``layers.i.self_attn.qkv``; every attention layer or none, so the runtime has one activation layout).
  ``Arena.parts[fused]`` lists ``(name, col0, col1)``.
- a *vector* (``Arena.vec(name)``): float32 (norm multipliers, conv1d [C, K], A_log, dt_bias, q/k norms).

float16 scales are widened to float32 (exact); float16 / float32 dense matrices are rounded to bf16 (RNE) -- the
only lossy step, named in ``Arena.weight_format``. A progress bar goes to stderr for uploads over 256 MiB. The
bytes travel in 64 MiB chunks assembled in pinned host memory (file reads in tensor order) and copied
asynchronously, the next chunk assembled meanwhile; ``Arena.timings`` says where the seconds went.
Mirrors: the checkpoint contract (docs/contracts.md "Checkpoint"); values equal ``Weight.to_f32()``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from numba import cuda

from tensorfold.kernels._device import IS_SIM
from tensorfold.model import bf16
from tensorfold.model.weights import AffineWeight, DenseWeight

__all__ = ["Arena", "plan_arena", "ALIGN"]

ALIGN = 256
CHUNK = 64 << 20  # bytes per pinned staging buffer of the upload (two of them)


def _host_parts(w):
    """A checkpoint tensor -> (kind, dict of host arrays, meta)."""
    if isinstance(w, AffineWeight):
        S, B = np.asarray(w.scales), np.asarray(w.biases)
        if S.dtype == np.float16:
            S, B = S.astype(np.float32), B.astype(np.float32)
        return "affine", {"W": np.asarray(w.packed), "S": S, "B": B}, (w.bits, w.group_size, S.dtype)
    if isinstance(w, DenseWeight):
        d = np.asarray(w.data)
        if d.dtype != np.uint16:
            d = bf16.from_f32(d.astype(np.float32))
        return "dense", {"W16": d}, (16, 0, None)
    a = np.asarray(w)
    if a.dtype == np.uint16:
        a = bf16.to_f32(a)
    return "vec", {"V": np.ascontiguousarray(a, dtype=np.float32)}, None


def _fusions(config):
    out = []
    for i, lt in enumerate(config.layer_types):
        p = f"layers.{i}."
        if lt == "linear_attention":
            out.append((p + "linear_attn.in_all", [p + "linear_attn." + n for n in
                                                   ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")]))
        else:
            out.append((p + "self_attn.qkv", [p + "self_attn." + n for n in ("q_proj", "k_proj", "v_proj")]))
        out.append((p + "mlp.gate_up", [p + "mlp.gate_proj", p + "mlp.up_proj"]))
    return out


def _fusable(tensors, members) -> bool:
    ws = [tensors.get(m) for m in members]
    if any(w is None for w in ws):
        return False
    info = [_host_parts(w) for w in ws]
    kinds = {i[0] for i in info}
    metas = {(i[2][0], i[2][1], str(i[2][2])) for i in info if i[2] is not None}
    ins = {w.shape[1] for w in ws}
    return len(kinds) == 1 and len(metas) == 1 and len(ins) == 1 and "vec" not in kinds


def plan_arena(tensors, config):
    """-> (entries, total_bytes, parts). entries: list of (name, kind, {part: (offset, dtype, shape)}, meta,
    [(source name, row0)]): fused groups become one entry whose rows are the sources' rows concatenated."""
    fused_of = {}
    groups = {}
    fus = _fusions(config)
    # attention q|k|v: all layers or none (the runtime keeps one activation layout for every attention layer)
    qkv = [(f, m) for f, m in fus if f.endswith("self_attn.qkv")]
    qkv_ok = bool(qkv) and all(_fusable(tensors, m) for _, m in qkv)
    for fname, members in fus:
        if fname.endswith("self_attn.qkv") and not qkv_ok:
            continue
        if _fusable(tensors, members):
            groups[fname] = members
            for m in members:
                fused_of[m] = fname
    order = []
    seen = set()
    for name in tensors:
        key = fused_of.get(name, name)
        if key not in seen:
            seen.add(key)
            order.append(key)
    entries, parts_map = [], {}
    off = 0
    for key in order:
        members = groups.get(key, [key])
        infos = [_host_parts(tensors[m]) for m in members]
        kind, _, meta = infos[0]
        layout = {}
        srcs, row = [], 0
        for m, inf in zip(members, infos):
            first = next(iter(inf[1].values()))
            srcs.append((m, row))
            row += first.shape[0] if kind != "vec" else 0
        for part, arr in infos[0][1].items():
            shape = tuple(arr.shape) if kind == "vec" else (row,) + tuple(arr.shape[1:])
            nbytes = int(np.prod(shape)) * arr.dtype.itemsize
            layout[part] = (off, arr.dtype, shape)
            off += -(-nbytes // ALIGN) * ALIGN
        entries.append((key, kind, layout, meta, srcs))
        if key in groups:
            parts_map[key] = [(m, r0, r0 + tensors[m].shape[0]) for m, r0 in srcs]
    return entries, off, parts_map


def _maps_of(tensors) -> list:
    """The distinct memory maps (``mmap.mmap``) the checkpoint's arrays are views of, in first-use order."""
    import mmap

    out, seen = [], set()
    for w in tensors.values():
        for a in ((w.packed, w.scales, w.biases) if isinstance(w, AffineWeight) else
                  (w.data,) if isinstance(w, DenseWeight) else (w,)):
            b = a
            for _ in range(8):
                if b is None or isinstance(b, mmap.mmap):
                    break
                b = b.obj if isinstance(b, memoryview) else getattr(b, "base", None)
            if isinstance(b, mmap.mmap) and id(b) not in seen:
                seen.add(id(b))
                out.append(b)
    return out


def _prefetch(tensors) -> None:
    """Ask the kernel to read the checkpoint files ahead (MADV_WILLNEED on their maps, from a daemon thread:
    the call may block while it queues the reads), so a cold load reads the disk sequentially at full speed
    while the upload copies what is already in memory. Best effort: errors are ignored."""
    import mmap
    import threading

    maps = _maps_of(tensors)
    if not maps or not hasattr(mmap, "MADV_WILLNEED"):
        return
    try:  # read ahead only what the free memory holds with room to spare (else it would evict itself)
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if sum(len(m) for m in maps) > free // 2:
            return
    except (ValueError, OSError, AttributeError):
        return

    def run():
        for m in maps:
            try:
                step = 256 << 20
                for o in range(0, len(m), step):
                    m.madvise(mmap.MADV_WILLNEED, o, min(step, len(m) - o))
            except Exception:  # noqa: BLE001 -- a hint only
                pass

    threading.Thread(target=run, name="tensorfold-prefetch", daemon=True).start()


class Arena:
    """Device weights. Build with :meth:`upload`."""

    def __init__(self):
        self.buf = None
        self.nbytes = 0
        self._lin: dict = {}
        self._vec: dict = {}
        self.parts: dict = {}
        self.weight_format = ""
        self.load_seconds = 0.0
        self.timings: dict = {}
        self.sweep_decided = False  # set by the first Runner (forward.Runner._sweep_weights)

    @classmethod
    def upload(cls, tensors, config, *, progress=True, stream=0, chunk_bytes: int = CHUNK) -> "Arena":
        """Upload ``tensors`` (internal name -> Weight / array; a Checkpoint's ``.tensors``) for ``config``.

        The arena's bytes go up in chunks of ``chunk_bytes``: each chunk is assembled in one of two pinned host
        buffers (a memcpy from the checkpoint's memory maps: this is where the file is read, sequentially, in
        tensor order), then copied to the device asynchronously while the next chunk is assembled. Padding
        between tensors is left undefined. ``timings`` records plan / read (host assembly) / wait (for the copies)
        seconds."""
        t0 = time.time()
        self = cls()
        entries, total, self.parts = plan_arena(tensors, config)
        t_plan = time.time() - t0
        self.nbytes = total
        self.buf = cuda.device_array(max(total, ALIGN), np.uint8)
        show = progress and total > (256 << 20)
        fmts = set()
        jobs = []  # (arena byte offset, source tensor name, part)
        for key, kind, layout, meta, srcs in entries:
            views = {}
            for part, (off, dt, shape) in layout.items():
                n = int(np.prod(shape)) * np.dtype(dt).itemsize
                views[part] = self.buf[off:off + n].view(dt).reshape(shape)
                row_bytes = 0 if kind == "vec" else int(np.prod(shape[1:])) * np.dtype(dt).itemsize
                for src, row0 in srcs:
                    jobs.append((off + row0 * row_bytes, src, part))
            if kind == "vec":
                self._vec[key] = views["V"]
                continue
            rows = views["W"].shape[0] if kind == "affine" else views["W16"].shape[0]
            if kind == "affine":
                bits, group, sdt = meta
                cols = views["S"].shape[1] * group
                ent = {"kind": "affine", "W": views["W"], "S": views["S"], "B": views["B"], "bits": bits,
                       "group": group, "out": rows, "in": cols}
                fmts.add(f"mlx {bits}-bit g{group}")
            else:
                cols = views["W16"].shape[1]
                ent = {"kind": "dense", "W16": views["W16"], "W32": views["W16"].view(np.uint32).reshape(
                    (rows, cols // 2)), "out": rows, "in": cols}
                fmts.add("bf16")
            self._lin[key] = ent
        jobs.sort(key=lambda j: j[0])
        _prefetch(tensors)
        t_read, t_wait = self._stream_up(tensors, jobs, total, chunk_bytes, stream, show)
        if show:
            sys.stderr.write("\n")
        self.weight_format = " + ".join(sorted(fmts))
        self.load_seconds = time.time() - t0
        self.timings = {"plan": t_plan, "read": t_read, "wait": t_wait, "total": self.load_seconds}
        return self

    def _stream_up(self, tensors, jobs, total, chunk, stream, show):
        """Copy every job's bytes to its arena offset through two pinned chunk buffers (see :meth:`upload`)."""
        chunk = max(ALIGN, min(int(chunk), -(-max(total, 1) // ALIGN) * ALIGN))
        stage = [cuda.pinned_array(chunk, np.uint8) for _ in range(2)]
        events = [None, None]
        st = stream if stream else cuda.stream()
        t_read = t_wait = 0.0
        cur, k, c0 = 0, 0, 0  # staging buffer index, chunks sent, arena offset of the chunk being assembled
        used = 0
        cache = (None, None)

        def flush(n):
            nonlocal cur, k, t_wait
            if n > 0:
                self.buf[c0:c0 + n].copy_to_device(stage[cur][:n], stream=st)
                if IS_SIM:
                    events[cur] = None
                else:
                    ev = cuda.event(timing=False)
                    ev.record(st)
                    events[cur] = ev
            cur ^= 1
            k += 1
            if events[cur] is not None:
                t = time.time()
                events[cur].synchronize()
                t_wait += time.time() - t
                events[cur] = None
            if show:
                frac = min(1.0, (c0 + n) / max(total, 1))
                bar = "#" * int(30 * frac)
                sys.stderr.write(f"\rtensorfold: weights [{bar:<30}] {frac * 100:5.1f}% "
                                 f"{(c0 + n) / 2**30:.2f}/{total / 2**30:.2f} GiB")
                sys.stderr.flush()

        for dst, src, part in jobs:
            if cache[0] != src:
                cache = (src, _host_parts(tensors[src])[1])
            arr = np.ascontiguousarray(cache[1][part])
            b = arr.reshape(-1).view(np.uint8)
            pos, i = dst, 0
            while i < b.size:
                if pos >= c0 + chunk:  # the job starts in a later chunk: send this one
                    flush(used)
                    c0 = (pos // chunk) * chunk
                    used = 0
                n = min(b.size - i, c0 + chunk - pos)
                t = time.time()
                stage[cur][pos - c0:pos - c0 + n] = b[i:i + n]
                t_read += time.time() - t
                pos += n
                i += n
                used = max(used, pos - c0)
        flush(used)
        t = time.time()
        st.synchronize()
        cuda.synchronize()
        t_wait += time.time() - t
        return t_read, t_wait

    def linear(self, name: str) -> dict:
        return self._lin[name]

    def has_linear(self, name: str) -> bool:
        return name in self._lin

    def vec(self, name: str):
        return self._vec[name]

    def sweep(self, name: str, u: int, glu: bool = False, per: int = 1) -> int:
        """Rewrite affine linear ``name`` in place into ``qgemv.sweep_pack``'s layout (``u`` groups an iteration,
        runs of ``per`` iterations; ``glu``: gate | up rows paired): the swept words take the bytes of its W, S and
        B, which ``plan_arena`` lays out one after the other. Its entry then has ``sw = (u, glu, per)`` and ``W`` the
        swept ``[pieces, words]`` array; ``S`` / ``B`` keep their shapes only (their bytes now hold swept words:
        every reader must branch on ``sw``). The repack goes through one temporary copy of the linear. -> bytes
        rewritten, 0 where the entry cannot take it (already swept, not bf16-scale affine, or its parts not
        adjacent / too small)."""
        from ..kernels import qgemv

        ent = self._lin[name]
        if ent.get("sw") or ent["kind"] != "affine" or np.dtype(ent["S"].dtype) != np.uint16:
            return 0
        base = self.buf.__cuda_array_interface__["data"][0]

        def at(a):
            return a.__cuda_array_interface__["data"][0] - base

        oW, oS, oB = at(ent["W"]), at(ent["S"]), at(ent["B"])
        shape = qgemv.sweep_shape(ent["out"], ent["in"], ent["bits"], ent["group"], u)
        n = shape[0] * shape[1] * 4
        if not (oW < oS < oB) or oB + ent["B"].nbytes - oW < n:
            return 0
        tmp = qgemv.sweep_pack_device(ent["W"], ent["S"], ent["B"], ent["bits"], ent["group"], u, glu=glu,
                                      per=per)
        dst = self.buf[oW:oW + n]
        dst.copy_to_device(tmp.reshape(tmp.size).view(np.uint8))
        cuda.synchronize()
        del tmp
        ent["W"] = dst.view(np.uint32).reshape(shape)
        ent["sw"] = (u, bool(glu), per)
        return n
