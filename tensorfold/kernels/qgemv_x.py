"""The x pre-pass of ``qgemv``'s global-x form: x's bf16 hi / lo B-fragments and group sums for the whole of K, once
per GEMV launch, so the GEMV's blocks skip their x preparation (about a third of the shared form's instructions at
the 9B gate+up shape: ncu, session 15).

Owns ``get_pyfunc`` / ``get_kernel`` (``xfrag_b{bits}_g{group}_n{nt}(x, XB, XS, R)``), ``launch``, ``scratch`` (the
per-device fragment buffers) and the compile specs.

Layout (``qgemv``'s shared layout, chunk after chunk, so a chunk starting at group ``G0`` starts at
``XB[G0 * spg * nt * 32]`` and ``XS[G0 * 4 * nt]``; ``spg = group / 16`` k-steps a group):
- ``XB[((g * spg + st) * nt + r // 4) * 32 + tt + 8 * (r % 4)]``: row ``r``'s hi pair words of group ``g``, k-step
  ``st``, lane column ``tt`` (two bf16x2 words in one uint64); ``+ 4``: the lo pair words.
- ``XS[g * 4 * nt + r]``: the sum of the hi + lo values of group ``g`` of row ``r``, added item by item in the order
  (tt, st), each item ``((h0 + l0) + (h0' + l0')) + ((h1 + l1) + (h1' + l1'))``: the shared form's order exactly.
- Rows ``r >= R`` are zeros (their fragments and sums).

One thread a (group, row, lane column ``tt``): its ``spg`` items' x values are 16 contiguous floats; the quad's item
sums reach its ``tt = 0`` thread through shared memory, which adds them in the shared form's order.
Reference mirrored: the shared form's preparation (``qgemv._gen_xprep``); the tests compare the two forms bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import _kcache
from ._codegen import single_assignment
from ._device import IS_SIM, bf16_to_f32, pdl_begin
from ._mma import split_bf16x2
from .qgemv import FORMATS, _bf_hi, _lane_layout

__all__ = ["get_pyfunc", "get_kernel", "launch", "scratch", "xb_words", "COMPILE_SPECS", "HOT", "TPB", "KMAX"]

TPB = 64
KMAX = 32768  # the longest K the per-device buffers hold (Qwen3.5 27B's longest is 17,408)


def xb_words(inp: int, nt: int) -> int:
    """uint64 words of the fragments of ``inp`` values for ``nt`` n-tiles (``inp / 16 * nt * 32``)"""
    return inp // 16 * nt * 32


def _gen(name: str, bits: int, group: int, nt: int) -> str:
    lw, cl, steps = _lane_layout(bits, group)
    spg = group // 16
    L = []
    a = L.append
    a(f"def {name}(x, XB, XS, R):")
    a("    pdl_begin()")  # x is the previous kernel's output; XB / XS the previous GEMV's input
    a(f"    e = cuda.blockIdx.x * {TPB} + cuda.threadIdx.x")
    a(f"    n = x.shape[1] // {group} * {16 * nt}")
    a("    ok = e < n")
    a("    ee = min(e, n - 1)")
    a("    tt = ee & 3")
    a("    q = ee >> 2")
    a(f"    gl = q // {4 * nt}")
    a(f"    r = q % {4 * nt}")
    a("    rr = min(r, R - 1)")
    a("    live = np.float32(1.0) if r < R else np.float32(0.0)")
    a(f"    slot0 = gl * {spg * nt * 32} + (r // 4) * 32 + 8 * (r % 4) + tt")
    a(f"    base = gl * {group} + tt * {cl}")
    for st, (_, prs, _) in enumerate(steps):
        (l0, h0), (l1, h1) = prs
        for k, c in enumerate((l0, h0, l1, h1)):
            a(f"    v{k} = x[rr, base + {c}] * live")
        a("    h0, l0 = split_bf16x2(v0, v1)")
        a("    h1, l1 = split_bf16x2(v2, v3)")
        a("    if ok:")
        a(f"        XB[slot0 + {st * nt * 32}] = np.uint64(h0) | (np.uint64(h1) << np.uint64(32))")
        a(f"        XB[slot0 + {st * nt * 32 + 4}] = np.uint64(l0) | (np.uint64(l1) << np.uint64(32))")
        a(f"    p{st} = ((bf16_to_f32(h0) + bf16_to_f32(l0)) + (_bf_hi(h0) + _bf_hi(l0))) + "
          f"((bf16_to_f32(h1) + bf16_to_f32(l1)) + (_bf_hi(h1) + _bf_hi(l1)))")
    # the quad's item sums go through shared memory to its tt = 0 thread, which adds them in (tt, st) order: the
    # shared form's order (a barrier, not shuffles, so the simulator runs the same code)
    a(f"    ps = cuda.shared.array({TPB * spg}, np.float32)")
    a("    tid = cuda.threadIdx.x")
    for st in range(spg):
        a(f"    ps[tid * {spg} + {st}] = p{st}")
    a("    cuda.syncthreads()")
    a("    if ok and tt == 0:")
    a(f"        sm = ps[tid * {spg}]")
    a(f"        for k in range(1, {4 * spg}):")
    a(f"            sm += ps[tid * {spg} + k]")
    a("        XS[q] = sm if r < R else np.float32(0.0)")
    return "\n".join(L) + "\n"


_KCACHE: dict = {}


def get_pyfunc(bits: int, group: int, nt: int):
    key = ("py", bits, group, nt)
    if key not in _KCACHE:
        name = f"xfrag_b{bits}_g{group}_n{nt}"
        glb = {"cuda": cuda, "np": np, "split_bf16x2": split_bf16x2, "bf16_to_f32": bf16_to_f32, "_bf_hi": _bf_hi,
               "pdl_begin": pdl_begin}
        _KCACHE[key] = _kcache.build(name, single_assignment(_gen(name, bits, group, nt)), glb, __name__)
    return _KCACHE[key]


def get_kernel(bits: int, group: int, nt: int):
    key = ("k", bits, group, nt)
    if key not in _KCACHE:
        _KCACHE[key] = _kcache.jit(get_pyfunc(bits, group, nt))
    return _KCACHE[key]


_SCRATCH: dict = {}


def scratch():
    """(XB, XS): this device's fragment buffers, for K up to ``KMAX`` at two n-tiles (1 MB). Shared by every
    global-x launch on the device, like ``qgemv.counters()``: allocate them before capturing a graph."""
    key = 0 if IS_SIM else id(cuda.current_context())
    if key not in _SCRATCH:
        xb = np.zeros(xb_words(KMAX, 2), np.uint64)
        xs = np.zeros(KMAX // 16 * 8, np.float32)  # groups of 16 values at the least: 8 rows each
        _SCRATCH[key] = (xb, xs) if IS_SIM else (cuda.to_device(xb), cuda.to_device(xs))
    return _SCRATCH[key]


def launch(x, R: int, bits: int, group: int, nt: int, stream=0):
    """Fragments and group sums of x rows 0..R-1 (R <= 4 nt) into ``scratch()``; returns (XB, XS)."""
    inp = x.shape[1]
    if inp > KMAX:
        raise ValueError(f"qgemv global-x form: K = {inp} is longer than the fragment buffers hold ({KMAX})")
    XB, XS = scratch()
    n = inp // group * 16 * nt  # a thread a (group, row, lane column)
    get_kernel(bits, group, nt)[-(-n // TPB), TPB, stream](x, XB, XS, np.int32(R))
    return XB, XS


_SIG = "void(float32[:, ::1], uint64[::1], float32[::1], int32)"


def _specs():
    specs, hot = [], set()
    for bits, group in FORMATS:
        for nt in ((1, 2) if (bits, group) == (4, 64) else (1,)):
            f = get_pyfunc(bits, group, nt)
            specs.append((f, _SIG))
            if (bits, group) == (4, 64):
                hot.add(f.__name__)
    return specs, hot


COMPILE_SPECS, HOT = _specs()
