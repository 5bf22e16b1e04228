"""Per-stream caches on the device, preallocated for ``slots`` streams of ``ctx`` tokens (issue 4).

Layouts (what the kernels expect, see kernels/kv8.py, attention.py, delta_rule.py, conv.py, compact.py):
- ``k``, ``v``: [NLf, slots, ctx, nKV, hd], uint16 (bf16 bits) or uint8 (e4m3 codes); NLf = full-attention layers.
- ``k_scale``, ``v_scale``: [NLf, slots, ctx, nKV] float32 for e4m3 (one scale per row and kv head); for bf16 a
  zero-size [0, 0, 0, 0] array (``scale_layer(l)`` gives the per-layer view or a zero-size [0, 0, 0]).
- ``rec``: [NLl, slots, Hv, Dk, Dv] float32 recurrent state; ``conv``: [NLl, slots, K-1, conv_dim] float32 raw
  tails, oldest first. NLl = linear-attention layers.

``plan_caches(config, slots, ctx, kv)`` gives the byte counts without allocating (startup sizing: a context that
does not fit is refused with the largest one that does, see ``runtime.backend``). ``reset(slot)`` zeroes a
slot's recurrent state and conv tail (KV rows past a stream's length are never read).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda

from tensorfold.runtime import glue

__all__ = ["CachePlan", "plan_caches", "Caches", "KV_FORMATS"]

KV_FORMATS = {"bf16": np.uint16, "fp8": np.uint8}


@dataclass(frozen=True)
class CachePlan:
    slots: int
    ctx: int
    kv: str
    kv_bytes: int  # K + V (+ scales), all slots
    state_bytes: int  # recurrent state + conv tails, all slots

    @property
    def total(self) -> int:
        return self.kv_bytes + self.state_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return self.kv_bytes // max(1, self.slots * self.ctx)


def _dims(c):
    nlf = len(c.full_attention_layers)
    nll = len(c.linear_attention_layers)
    conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim
    return nlf, nll, conv_dim


def plan_caches(config, slots: int, ctx: int, kv: str = "bf16") -> CachePlan:
    if kv not in KV_FORMATS:
        raise ValueError(f"kv cache format {kv!r}: want one of {sorted(KV_FORMATS)}")
    c = config
    nlf, nll, conv_dim = _dims(c)
    el = np.dtype(KV_FORMATS[kv]).itemsize
    per_tok = nlf * c.num_key_value_heads * (2 * c.head_dim * el + (8 if kv == "fp8" else 0))
    kvb = per_tok * slots * ctx
    st = nll * slots * 4 * (c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim
                            + (c.linear_conv_kernel_dim - 1) * conv_dim)
    return CachePlan(slots, ctx, kv, kvb, st)


class Caches:
    def __init__(self, config, slots: int, ctx: int, kv: str = "bf16"):
        c = config
        self.plan = plan_caches(config, slots, ctx, kv)
        self.slots, self.ctx, self.kv = slots, ctx, kv
        nlf, nll, conv_dim = _dims(c)
        dt = KV_FORMATS[kv]
        kvs = (max(nlf, 1), slots, ctx, c.num_key_value_heads, c.head_dim)
        self.k = cuda.device_array(kvs, dt)
        self.v = cuda.device_array(kvs, dt)
        if kv == "fp8":
            self.k_scale = cuda.device_array(kvs[:4], np.float32)
            self.v_scale = cuda.device_array(kvs[:4], np.float32)
        else:
            self.k_scale = cuda.device_array((0, 0, 0, 0), np.float32)
            self.v_scale = cuda.device_array((0, 0, 0, 0), np.float32)
        self._empty3 = cuda.device_array((0, 0, 0), np.float32)
        self.rec = cuda.device_array((max(nll, 1), slots, c.linear_num_value_heads, c.linear_key_head_dim,
                                      c.linear_value_head_dim), np.float32)
        self.conv = cuda.device_array((max(nll, 1), slots, c.linear_conv_kernel_dim - 1, conv_dim), np.float32)

    def scale_layer(self, fl: int):
        """(k_scale, v_scale) for full-attention layer index ``fl`` (zero-size for bf16)."""
        if self.kv == "fp8":
            return self.k_scale[fl], self.v_scale[fl]
        return self._empty3, self._empty3

    def reset(self, slot: int, stream=0) -> None:
        glue.launch_zero_slot(self.rec, self.conv, slot, stream=stream)
