"""Model weights on the device: one allocation, packed per module, with typed views per tensor (issue 4).

``Arena.upload(checkpoint)`` lays every tensor out in one ``uint8`` device allocation (offsets 256-byte aligned,
layer by layer in model order), copies each from the checkpoint's memory maps, and hands out views:

- a *linear* (``Arena.linear(name)``) is a dict ``{"kind": "affine", "W" uint32 [out, in*bits/32], "S", "B"
  [out, in/group] (uint16 bf16 bits or float32), "bits", "group", "out", "in"}`` or ``{"kind": "dense",
  "W32" uint32 [out, in/2] (the bf16 bits viewed as words), "W16" uint16 [out, in], "out", "in"}``.
  Linears that read the same input are **fused** (rows concatenated) when their formats agree: per GDN layer
  ``in_proj_qkv | in_proj_z | in_proj_b | in_proj_a`` (name ``layers.i.linear_attn.in_all``), per MLP
  ``gate_proj | up_proj`` (``layers.i.mlp.gate_up``). ``Arena.parts[fused]`` lists ``(name, col0, col1)``.
- a *vector* (``Arena.vec(name)``): float32 (norm multipliers, conv1d [C, K], A_log, dt_bias, q/k norms).

float16 scales are widened to float32 (exact); float16 / float32 dense matrices are rounded to bf16 (RNE) -- the
only lossy step, named in ``Arena.weight_format``. A progress bar goes to stderr for uploads over 256 MiB.
Mirrors: the checkpoint contract (docs/contracts.md "Checkpoint"); values equal ``Weight.to_f32()``.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from numba import cuda

from tensorfold.model import bf16
from tensorfold.model.weights import AffineWeight, DenseWeight

__all__ = ["Arena", "plan_arena", "ALIGN"]

ALIGN = 256


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
        out.append((p + "mlp.gate_up", [p + "mlp.gate_proj", p + "mlp.up_proj"]))
    return out


def plan_arena(tensors, config):
    """-> (entries, total_bytes, parts). entries: list of (name, kind, {part: (offset, dtype, shape)}, meta,
    [(source name, row0)]): fused groups become one entry whose rows are the sources' rows concatenated."""
    fused_of = {}
    groups = {}
    for fname, members in _fusions(config):
        ws = [tensors.get(m) for m in members]
        if any(w is None for w in ws):
            continue
        info = [_host_parts(w) for w in ws]
        kinds = {i[0] for i in info}
        metas = {(i[2][0], i[2][1], str(i[2][2])) for i in info}
        ins = {w.shape[1] for w in ws}
        if len(kinds) == 1 and len(metas) == 1 and len(ins) == 1 and "vec" not in kinds:
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

    @classmethod
    def upload(cls, tensors, config, *, progress=True, stream=0) -> "Arena":
        """Upload ``tensors`` (internal name -> Weight / array; a Checkpoint's ``.tensors``) for ``config``."""
        t0 = time.time()
        self = cls()
        entries, total, self.parts = plan_arena(tensors, config)
        self.nbytes = total
        self.buf = cuda.device_array(max(total, ALIGN), np.uint8)
        show = progress and total > (256 << 20)
        done = 0
        fmts = set()
        for key, kind, layout, meta, srcs in entries:
            views = {}
            for part, (off, dt, shape) in layout.items():
                n = int(np.prod(shape)) * np.dtype(dt).itemsize
                views[part] = self.buf[off:off + n].view(dt).reshape(shape)
            for src, row0 in srcs:
                _, host, _ = _host_parts(tensors[src])
                for part, arr in host.items():
                    arr = np.ascontiguousarray(arr)
                    dst = views[part] if kind == "vec" else views[part][row0:row0 + arr.shape[0]]
                    dst.copy_to_device(arr, stream=stream)
                    done += arr.nbytes
                if show:
                    frac = done / total
                    bar = "#" * int(30 * frac)
                    sys.stderr.write(f"\rtensorfold: weights [{bar:<30}] {frac * 100:5.1f}% "
                                     f"{done / 2**30:.2f}/{total / 2**30:.2f} GiB")
                    sys.stderr.flush()
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
        if show:
            sys.stderr.write("\n")
        cuda.synchronize()
        self.weight_format = " + ".join(sorted(fmts))
        self.load_seconds = time.time() - t0
        return self

    def linear(self, name: str) -> dict:
        return self._lin[name]

    def has_linear(self, name: str) -> bool:
        return name in self._lin

    def vec(self, name: str):
        return self._vec[name]
