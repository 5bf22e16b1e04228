"""MLX affine quantized (and bf16 dense) matrix-vector products for 1..16 rows, and the prompt GEMM.

Owns
- ``qgemv``: ``y[r, o] = sum_i x[r, i] * (s[o, g] * q[o, i] + b[o, g])`` for bits 2, 3, 4, 5, 6, 8 and groups 32,
  64, 128, straight from MLX packing (packed uint32 ``[out, in*bits/32]``, scales / biases ``[out, in/group]`` as
  bf16 bits (uint16), float16 or float32). x float32 ``[R, in]``, y float32 ``[R, out]``. Per segment of a group
  that one thread handles (16 bytes of weights for 2/4/8 bits = 64/32/16 codes; a whole group for 3/5/6 bits) it
  computes ``s * dot(q, x) + b * sum(x)`` with fp32 accumulation, MLX's ``qdot`` form.
- ``dense_gemv``: the same for bias-free bf16 weights (``uint16 [out, in]`` bits, passed as their ``uint32`` view
  ``[out, in/2]``).
- Tensor-core ``qgemv`` (the default for bits 2 (groups 64, 128), 4 and 8; see "Tensor-core GEMV" below).
- ``qgemm``: the prompt GEMM for many rows (shared-memory tiles, a weight tile dequantized once to shared memory,
  fp32 FMA, no tensor cores).
- ``plan_qgemv`` / ``launch_qgemv`` / ``launch_dense_gemv`` / ``launch_qgemm``: geometry choice and launch.

Reference mirrored: ``tensorfold.reference.ops.linear`` with ``affine_dequant`` (fp32 ``scale*q + bias``).

Codes are decoded without int->float conversion instructions: a code ``q < 2^23`` or'ed into the mantissa of
``2^23`` (bits ``0x4B000000``) reads as ``2^23 + q`` exactly; subtracting ``2^23`` gives ``q``. A code at bit
``sh`` of its word (``sh + bits <= 23``) is not shifted down first: masked in place and or'ed into ``2^(23-sh)``
(whose mantissa step at bit ``sh`` is 1) it reads ``2^(23-sh) + q``, so one and/or (a LOP3) and one exact fadd
decode it; codes in the top bits read the word shifted down by 16 once. Same values bit for bit as shifting each
code down (shifts per 4-bit word 8 -> 1 in the PTX; not yet measured on the GPU).

Exactness rule: a row's result does not depend on how many rows share the launch. Each thread walks its chunks in
the same order for every row, the warp butterfly and the cross-warp sum are fixed, and the geometry (threads per
block, split-K factor) is chosen from (out, in, bits, group) only, never from the row count. Rows are processed RB
at a time per block (RB = 1, 2, 4, 8 compiled variants; more rows use grid.y); the arithmetic per row is the same
in each variant.

Measured on the H200 (benchmarks/results/gemv_2026-11-30_0896dd7.md; copy ceiling 4.21 TB/s), tensor-core kernel,
4-bit g64: 8 rows cost 1.05-1.12x one row (9B gate 12288x4096: 24.5 us at 1 row, 27.0 us at 8, 34.2 us at 16;
the CUDA-core kernel: 18.6 us (NO=8) / 124.9 us); at 1 row 22-39 % of copy (9B/27B MLP 22-27 %, heads 38-39 %),
i.e. slower than the CUDA-core kernel at one row on the MLP shapes (8-37 %) and far from the 70 % target: the
measured form is latency-bound (see ``pipe`` below, not yet measured). Dense bf16 at 1 row 81 % of copy (CUDA
cores, unchanged); prompt GEMM (qgemm) 13.5 TFLOP/s fp32.

Tensor-core GEMV (``_gen_tc_source``): one ``mma.sync`` m16n8k16 (bf16 in, fp32 accumulate) takes 16 weight rows
x 16 k as A and 16 k x 8 batch rows of x as B. Each lane loads its own weight words straight from MLX's packing:
with ``g = lane >> 2`` and ``t = lane & 3``, lane (g, t) owns rows g and g + 8 of a 16-row tile and, in every group,
the contiguous words ``t*LW .. t*LW+LW-1`` (``LW = group*bits/128``: codes ``t*group/4 ..``), so a quad of lanes
reads one group of one row. Since a dot product does not depend on the order of k, the k order inside each mma
step is the lanes' own: for 4 and 2 bits ``(w >> sh) & 0x000F000F | 0x43004300`` (``0x00030003`` for 2 bits) reads
as the bf16 pair (128 + q_i, 128 + q_{i+half}) and one ``fma.rn.bf16x2`` by (1, -128) leaves the exact codes; 8-bit
codes decode to fp32 and pack with ``cvt.rn.bf16x2`` (exact below 256). Lane (g, t) builds B for batch row g from
the same code positions of x: x (fp32, read with 16-byte loads; L1/L2 serve the re-reads) is split into bf16
hi + lo pairs (``split_bf16x2``) and each step issues two mma's (hi, lo), so x keeps about 2^-18 relative per
element while ``q * bf16`` products are exact in fp32. Every mma step lies inside one quantization group; the
group's steps chain through the accumulator from 0 into d = dot(q, x), then ``acc += s * d`` and
``acc += b * sum_x`` per (row, batch row) (MLX's ``qdot`` form). The group sums of x are the lane's fp32 values
summed in order, a quad xor-butterfly (1, 2), and two shuffles that bring batch rows 2t, 2t+1 to the lanes holding
those C columns. A warp owns ``mt`` 16-row tiles (default 2) and walks ``u`` groups per iteration (default 4),
issuing all their weight loads first (``4 * mt * u * LW`` bytes in flight per lane); the block's ``tpb/32`` warps
split the block's groups into contiguous ranges and are summed in warp order through shared memory; split-K across
blocks (grid.z) as below. Rows: one n-tile (8 batch rows) for R <= 8, two for R <= 16, grid.y beyond; a batch row's
arithmetic is the same in every variant (an mma column depends only on its own B column), so results are bit-for-bit
independent of the row count. 3/5/6 bits and 2-bit g32 keep the CUDA-core kernel below; ``TENSORFOLD_GEMV_TC=0``
selects it for every format. ``pipe`` (``plan_tc(pipe=True)`` or ``TENSORFOLD_GEMV_PIPE=1``; off by default
until measured) is the latency-oriented form: the next iteration's weight words are loaded before the current
ones are used, a group past a warp's range is scaled by 0 rather than skipped (the iteration is one basic block),
and the hi and lo mma's of each step feed two chains added once per group.

Latency variants (``TC_VARIANTS``, ``plan_tc(variant=...)``; ``TENSORFOLD_GEMV_VARIANT=<name>`` selects one for every
tensor-core plan of a run; none measured on a GPU yet, the default stays ``default`` until the benchmark picks):
``w16`` / ``w16d2`` / ``w16d3`` put up to 16 warps in a block on one 16-row tile, each warp owning a short
contiguous run of groups (9B gate: 768 blocks x 16 warps x 4 groups), pipelined with the words 1 / 2 / 3 iterations
ahead (``depth``; 2 / 2 / 1 groups an iteration); ``sk`` / ``skd2`` split K across blocks (grid.z, workspace and the
fixed-order ``_splitk_reduce``) until about 8 blocks per SM. With several warps the block's C entries are summed in
warp order by warp ``entry % nw`` (same bits as one warp summing them all). 16-warp kernels assemble to 80-106
registers for 4-bit g64 (<= 128, the limit at 512 threads; the GPU build adds ``launch_bounds`` for blocks over
256 threads so another format spills rather than fails to launch). Every variant's geometry depends only on (out,
in, bits, group).

Launch geometry (CUDA-core qgemv): grid ``(ceil(out / NO), ceil(R / RB), KS)``, block ``TPB`` threads (a multiple of 32,
chosen so every thread gets whole 16-byte chunks of the row), ``NO = 4`` weight rows per block (``no=`` overrides); every thread
strides over the row's 16-byte chunks (coalesced 512 bytes per warp-load), keeps ``NO * RB`` accumulators in
registers, then a warp butterfly and a fixed-order sum over the block's warps. Split-K (``KS > 1``, for
tall-skinny shapes with too few blocks) writes partial sums to a workspace ``[KS, R, out]`` that
``_splitk_reduce`` adds in fixed order. qgemm: grid ``(ceil(out / 64), ceil(R / 64))``, 256 threads, each a 4x4
register tile; K in tiles of 32.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
from numba import cuda

from . import _device
from . import _kcache, norms
from ._codegen import single_assignment
from ._device import (IS_SIM, bf16_to_f32, devfn, env_choice, ldg_f32x4_2d, ldg_u32x4_2d, pdl_begin, pdl_trigger,
                      pdl_wait, warp_sum)
from ._mma import fma_bf16x2, mma_bf16, pack_bf16x2, split_bf16x2
from . import qgemv as _qgemv3
from .activations import swiglu

__all__ = [
    "GemvPlan",
    "plan_qgemv",
    "launch_qgemv",
    "glu_ok",
    "glu_faster",
    "launch_dense_gemv",
    "launch_qgemm",
    "get_qgemv_kernel",
    "get_qgemm_kernel",
    "COMPILE_SPECS",
    "HOT",
]

NO = 4  # weight rows per block (measured on the H200: NO=8/16 no faster at 1 row; at 8 rows NO=4 beats NO=2 1.75x)


def _no(rb: int) -> int:
    return NO
_MAGIC = 0x4B000000
_POW2 = (2, 4, 8)
_RB_VARIANTS = (1, 2, 4, 8)
_SM_TARGET_BLOCKS = 528  # 4 blocks per SM on a 132-SM H200


# ----------------------------------------------------------------------------------------------------------------
# code generation: the inner loops are unrolled at generation time so every accumulator is a scalar (a register)
# ----------------------------------------------------------------------------------------------------------------


def _words_per_chunk(bits: int, group: int) -> int:
    if bits == 16 or bits in _POW2:
        return 4
    return group * bits // 32


def _code_expr(lo: str, hi: str | None, sh: int, bits: int) -> str:
    """uint32 expression extracting a code at bit ``sh`` of word ``lo`` (crossing into ``hi``)."""
    m = (1 << bits) - 1
    if hi is not None:
        return f"((({lo} >> np.uint32({sh})) | ({hi} << np.uint32({32 - sh}))) & np.uint32({m}))"
    if sh == 0:
        return f"({lo} & np.uint32({m}))"
    if sh + bits == 32:
        return f"({lo} >> np.uint32({sh}))"
    return f"(({lo} >> np.uint32({sh})) & np.uint32({m}))"


def _q_expr(code: str) -> str:
    return f"(np.uint32({code} | np.uint32({_MAGIC})).view(np.float32) - _TWO23)"


def _q_inplace_expr(word: str, sh: int, bits: int) -> str:
    """fp32 value of the code at bit ``sh`` of ``word`` (needs ``sh + bits <= 23``) without shifting it down: the
    code is masked in place and or'ed into the float ``2^(23-sh)``, whose mantissa step at bit ``sh`` is 1, so the
    float reads ``2^(23-sh) + q`` exactly and one exact fadd leaves ``q`` (bit-identical to ``_q_expr``)."""
    assert sh + bits <= 23
    m = ((1 << bits) - 1) << sh
    magic = (127 + 23 - sh) << 23
    return (f"(np.uint32({word} & np.uint32({m:#x}) | np.uint32({magic:#x})).view(np.float32)"
            f" - np.float32({float(2 ** (23 - sh))!r}))")


def _q_decode_lines(words: list[str], codes, bits: int, ind: str = "    ") -> list[str]:
    """Lines ``q{i} = <fp32 code>`` for ``codes`` = [(i, lo, hi_or_None, sh)] of the words named ``words``.
    Codes wholly inside bits 0..22 of a word decode in place (one and/or + one fadd); codes in bits 16..31 read the
    word shifted down by 16 once (shared by all such codes of the word); codes crossing two words use a funnel
    shift as before."""
    L = []
    shifted = set()
    for (i, lo, hi, sh) in codes:
        w = words[lo]
        if hi is not None:
            L.append(f"{ind}q{i} = {_q_expr(_code_expr(w, words[hi], sh, bits))}")
        elif sh + bits <= 23:
            L.append(f"{ind}q{i} = {_q_inplace_expr(w, sh, bits)}")
        else:
            h = f"{w}_hi16"
            if lo not in shifted:
                L.append(f"{ind}{h} = {w} >> np.uint32(16)")
                shifted.add(lo)
            L.append(f"{ind}q{i} = {_q_inplace_expr(h, sh - 16, bits)}")
    return L


def _scale_expr(arr: str, row: str, col: str, sk: str) -> str:
    if sk == "bf16":
        return f"bf16_to_f32({arr}[{row}, {col}])"
    return f"np.float32({arr}[{row}, {col}])"


def _gen_gemv_source(name: str, bits: int, group: int, rb: int, tpb: int, sk: str, no: int | None = None) -> str:
    """Source of a qgemv kernel; bits == 16 means dense bf16 (no scales); ``no`` weight rows per block."""
    dense = bits == 16
    NO = _no(rb) if no is None else no
    nw = tpb // 32
    wpc = _words_per_chunk(bits, group)
    L = []
    a = L.append
    if dense:
        a(f"def {name}(W, x, y, R, c0, c1):")
    else:
        a(f"def {name}(W, S, B, x, y, R, c0, c1):")
    # c0, c1 unused placeholders keep one signature shape; (chunk split handled via gridDim.z)
    if _device.gemv_trigger_here("start"):
        a("    pdl_trigger()")  # kernels._pdl: the next launch may start
    a("    pdl_wait()")  # the previous kernel's writes are visible from here
    a("    tid = cuda.threadIdx.x")
    a("    lane = tid & 31")
    a("    warp = tid >> 5")
    a(f"    red = cuda.shared.array(({nw}, {NO * rb}), np.float32)")
    a("    out = W.shape[0]")
    a(f"    nch = W.shape[1] // {wpc}")
    a(f"    o0 = cuda.blockIdx.x * {NO}")
    a(f"    r0 = cuda.blockIdx.y * {rb}")
    a("    kz = cuda.blockIdx.z")
    a("    ks = cuda.gridDim.z")
    a("    per = (nch + ks - 1) // ks")
    a("    cbeg = kz * per")
    a("    cend = min(nch, cbeg + per)")
    for o in range(NO):
        a(f"    w_row{o} = min(o0 + {o}, out - 1)")
    for r in range(rb):
        a(f"    x_row{r} = min(r0 + {r}, R - 1)")
    for o in range(NO):
        for r in range(rb):
            a(f"    acc{o}_{r} = np.float32(0.0)")
    a(f"    for c in range(cbeg + tid, cend, {tpb}):")
    I = "        "
    # ---- weight loads
    for o in range(NO):
        if wpc == 4:
            a(f"{I}t{o} = ldg_u32x4_2d(W, w_row{o}, c * 4)")
            for j in range(4):
                a(f"{I}w{o}_{j} = t{o}[{j}]")
        else:
            for j in range(wpc):
                a(f"{I}w{o}_{j} = W[w_row{o}, c * {wpc} + {j}]")
    if dense:
        cpc = 8
        a(f"{I}col0 = c * {cpc}")
        for f4 in range(2):
            for r in range(rb):
                a(f"{I}xv{r}_{f4} = ldg_f32x4_2d(x, x_row{r}, col0 + {4 * f4})")
            for jj in range(2):
                j = f4 * 2 + jj
                for o in range(NO):
                    a(f"{I}lo = np.uint32(w{o}_{j} << np.uint32(16)).view(np.float32)")
                    a(f"{I}hi = np.uint32(w{o}_{j} & np.uint32(0xFFFF0000)).view(np.float32)")
                    for r in range(rb):
                        a(f"{I}acc{o}_{r} += lo * xv{r}_{f4}[{2 * jj}]")
                        a(f"{I}acc{o}_{r} += hi * xv{r}_{f4}[{2 * jj + 1}]")
    else:
        # list of codes in chunk order: (col_in_chunk, lo_word, hi_word_or_None, shift)
        if bits in _POW2:
            cpw = 32 // bits
            cpc = 4 * cpw
            codes = [(j * cpw + k, j, None, k * bits) for j in range(4) for k in range(cpw)]
        else:
            cpc = group
            codes = []
            for i in range(group):
                off = i * bits
                lo, sh = off >> 5, off & 31
                codes.append((i, lo, lo + 1 if sh + bits > 32 else None, sh))
        wpg = group * bits // 32
        if bits in _POW2 and wpg < 4:
            nseg = 4 // wpg
        else:
            nseg = 1
        seg_len = cpc // nseg
        a(f"{I}col0 = c * {cpc}")
        for s in range(nseg):
            if bits in _POW2 and wpg >= 4:
                # (c * 4) // wpg with c >= 0 and wpg a power of two: a shift (no signed-division fixup)
                sh_g = (wpg // 4).bit_length() - 1
                a(f"{I}gi = c >> {sh_g}" if sh_g else f"{I}gi = c")
            elif bits in _POW2:
                a(f"{I}gi = c * {nseg} + {s}")
            else:
                a(f"{I}gi = c")
            for o in range(NO):
                a(f"{I}s{o} = {_scale_expr('S', f'w_row{o}', 'gi', sk)}")
                a(f"{I}b{o} = {_scale_expr('B', f'w_row{o}', 'gi', sk)}")
            for r in range(rb):
                a(f"{I}sx{r} = np.float32(0.0)")
                for o in range(NO):
                    a(f"{I}d{o}_{r} = np.float32(0.0)")
            loaded = set()
            seg_codes = codes[s * seg_len:(s + 1) * seg_len]
            if bits in _POW2:
                # per word: decode once per weight row (device helper), then one dot helper per batch row
                cpw = 32 // bits
                nf4 = max(1, cpw // 4)
                words = sorted({lo for (_, lo, _, _) in seg_codes})
                for j in words:
                    f4s = [(j * cpw) // 4 + t for t in range(nf4)]
                    for r in range(rb):
                        for f4 in f4s:
                            if f4 in loaded:
                                continue
                            a(f"{I}xv{r}_{f4} = ldg_f32x4_2d(x, x_row{r}, col0 + {4 * f4})")
                            a(f"{I}sx{r} = _xsum4(sx{r}, xv{r}_{f4})")
                    loaded.update(f4s)
                    for o in range(NO):
                        a(f"{I}q = _dec{bits}(w{o}_{j})")
                        for r in range(rb):
                            if bits == 8:
                                xargs = f"xv{r}_{f4s[0]}"
                            else:
                                xargs = ", ".join(f"xv{r}_{f4}" for f4 in f4s)
                            a(f"{I}d{o}_{r} = _dot{bits}(d{o}_{r}, q, {xargs})")
            else:
                # 3/5/6 bits: 32 codes = `bits` whole words; decode a 32-code block per weight row, 8 float4 of x
                for blk in range(group // 32):
                    f4s = [blk * 8 + t for t in range(8)]
                    for r in range(rb):
                        for f4 in f4s:
                            a(f"{I}xv{r}_{f4} = ldg_f32x4_2d(x, x_row{r}, col0 + {4 * f4})")
                            a(f"{I}sx{r} = _xsum4(sx{r}, xv{r}_{f4})")
                    for o in range(NO):
                        wargs = ", ".join(f"w{o}_{blk * bits + t}" for t in range(bits))
                        a(f"{I}q = _dec{bits}x32({wargs})")
                        for r in range(rb):
                            xargs = ", ".join(f"xv{r}_{f4}" for f4 in f4s)
                            a(f"{I}d{o}_{r} = _dot32(d{o}_{r}, q, {xargs})")
            for o in range(NO):
                for r in range(rb):
                    a(f"{I}acc{o}_{r} += s{o} * d{o}_{r} + b{o} * sx{r}")
    # ---- reduction: warp butterfly, then fixed-order sum over warps
    for o in range(NO):
        for r in range(rb):
            a(f"    v = warp_sum(acc{o}_{r})")
            a("    if lane == 0:")
            a(f"        red[warp, {o * rb + r}] = v")
    if _device.gemv_trigger_here("end"):
        a("    pdl_trigger()")
    a("    cuda.syncthreads()")
    a(f"    for t in range(tid, {NO * rb}, {tpb}):")
    a(f"        oo = t // {rb}")
    a(f"        rr = t - oo * {rb}")
    a("        tot = red[0, t]")
    for w in range(1, nw):
        a(f"        tot += red[{w}, t]")
    a("        if o0 + oo < out and r0 + rr < R:")
    a("            y[kz, r0 + rr, o0 + oo] = tot")
    return "\n".join(L) + "\n"


def _gen_helpers_source() -> str:
    """Small device helpers for the pow2 decoders and dot products (sequential fp32 FMA chains)."""
    L = []
    a = L.append
    for bits in _POW2:
        cpw = 32 // bits
        a(f"def _dec{bits}(w):")
        L.extend(_q_decode_lines(["w"], [(k, 0, None, k * bits) for k in range(cpw)], bits))
        a("    return (" + ", ".join(f"q{k}" for k in range(cpw)) + ",)")
        nf4 = max(1, cpw // 4)
        xs = ", ".join(f"x{t}" for t in range(nf4))
        a(f"def _dot{bits}(d, q, {xs}):")
        for k in range(cpw):
            a(f"    d += q[{k}] * x{k // 4}[{k % 4}]")
        a("    return d")
    for bits in (3, 5, 6):
        a(f"def _dec{bits}x32(" + ", ".join(f"w{t}" for t in range(bits)) + "):")
        codes = []
        for i in range(32):
            off = i * bits
            lo, sh = off >> 5, off & 31
            codes.append((i, lo, lo + 1 if sh + bits > 32 else None, sh))
        L.extend(_q_decode_lines([f"w{t}" for t in range(bits)], codes, bits))
        a("    return (" + ", ".join(f"q{i}" for i in range(32)) + ",)")
    a("def _dot32(d, q, " + ", ".join(f"x{t}" for t in range(8)) + "):")
    for k in range(32):
        a(f"    d += q[{k}] * x{k // 4}[{k % 4}]")
    a("    return d")
    a("def _xsum4(s, v):")
    a("    s += v[0]")
    a("    s += v[1]")
    a("    s += v[2]")
    a("    s += v[3]")
    a("    return s")
    return "\n".join(L) + "\n"


def _make_helpers():
    glb = {"cuda": cuda, "np": np, "_TWO23": np.float32(8388608.0)}
    exec(compile(_gen_helpers_source(), "<tensorfold.kernels.affine:helpers>", "exec"), glb)
    out = {}
    for k, v in list(glb.items()):
        if k.startswith("_dec") or k.startswith("_dot") or k == "_xsum4":
            v.__module__ = __name__
            out[k] = _device.devfn(v)
    return out


_HELPERS = _make_helpers()


_KCACHE: dict = {}


def _build(name: str, src: str, extra: dict | None = None):
    glb = {
        "cuda": cuda,
        "np": np,
        "bf16_to_f32": bf16_to_f32,
        "ldg_u32x4_2d": ldg_u32x4_2d,
        "ldg_f32x4_2d": ldg_f32x4_2d,
        "warp_sum": warp_sum,
        "_TWO23": np.float32(8388608.0),
        "mma_bf16": mma_bf16,
        "split_bf16x2": split_bf16x2,
        "fma_bf16x2": fma_bf16x2,
        "pack_bf16x2": pack_bf16x2,
        "pdl_trigger": pdl_trigger,
        "pdl_wait": pdl_wait,
    }
    glb.update(_HELPERS)
    glb.update({k: globals()[k] for k in ("_ldf", "_ldf_u32x2", "_ldf_u32x4", "_ldf_f32x4", "_quad_sum", "_shfl2")
                if k in globals()})
    glb.update(extra or {})
    return _kcache.build(name, single_assignment(src), glb, __name__)


def get_qgemv_pyfunc(bits: int, group: int, rb: int, tpb: int, sk: str = "bf16", no: int | None = None):
    """The generated Python function (for the compile tier); bits 16 = dense bf16."""
    no = _no(rb) if no is None else no
    key = ("py", bits, group, rb, tpb, sk, no)
    if key not in _KCACHE:
        suffix = "" if no == _no(rb) else f"_no{no}"
        name = f"qgemv_b{bits}_g{group}_rb{rb}_t{tpb}_{sk}{suffix}"
        _KCACHE[key] = _build(name, _gen_gemv_source(name, bits, group, rb, tpb, sk, no))
    return _KCACHE[key]


def get_qgemv_kernel(bits: int, group: int, rb: int, tpb: int, sk: str = "bf16", no: int | None = None):
    no = _no(rb) if no is None else no
    key = ("k", bits, group, rb, tpb, sk, no)
    if key not in _KCACHE:
        _KCACHE[key] = _kcache.jit(get_qgemv_pyfunc(bits, group, rb, tpb, sk, no))
    return _KCACHE[key]


def _splitk_reduce_py(ws, y, R):
    """y[r, o] = sum_z ws[z, r, o] in z order (grid-stride over R*out)."""
    pdl_begin()  # kernels._pdl: the next launch may start; the previous one's writes are visible after
    ks = ws.shape[0]
    out = ws.shape[2]
    n = R * out
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n:
        r = i // out
        o = i - r * out
        t = ws[0, r, o]
        for z in range(1, ks):
            t += ws[z, r, o]
        y[r, o] = t
        i += step


_splitk_reduce = _kcache.kjit(_splitk_reduce_py)


# ----------------------------------------------------------------------------------------------------------------
# tensor-core qgemv (bits 2, 4, 8): weights are the mma's A (16 output rows x 16 k), x is B (16 k x 8 batch rows)
# ----------------------------------------------------------------------------------------------------------------

TC_BITS = (2, 4, 8)
TC_MT = 2   # 16-row tiles per warp (default plan)
TC_U = 4    # groups per loop iteration (default plan)
_TC_MAX_NW = 8  # warps per block of the "resident" rule (TC_VARIANTS["default"]["max_nw"])
_TC_RESIDENT_WARPS = 132 * 18  # about one resident wave of warps on the H200 at 112 registers per thread


def _tc_supported(bits: int, group: int, inp: int) -> bool:
    """2-bit g32 (a lane would own half a word per group) and 3/5/6 bits stay on the CUDA-core kernel."""
    if bits not in TC_BITS or group not in (32, 64, 128):
        return False
    lw4 = group * bits  # 128 * words per lane per group
    if lw4 < 128:
        return False
    lw = lw4 // 128
    return inp % group == 0 and (inp * bits // 32) % lw == 0


if not IS_SIM:
    from numba import types as _types
    from numba.cuda.extending import intrinsic as _intrinsic

    from ._device import asm_vec_load

    def _flat_ptr(context, builder, arrty, a, off, offty):
        ary = context.make_array(arrty)(context, builder, value=a)
        off = context.cast(builder, off, offty, _types.intp)
        return builder.gep(ary.data, [off])

    def _vec_load(builder, ptr, n, kind):
        # f32 words are activations (x): coherent; u32 words are weights: .nc (``_device.asm_vec_load``)
        return asm_vec_load(builder, ptr, n, kind, nc=kind != "f32")

    def _make_flat_vec(n, kind, dtype):
        @_intrinsic
        def ld(typingctx, arr, off):
            if not (isinstance(arr, _types.Array) and arr.dtype == dtype and isinstance(off, _types.Integer)):
                return None
            sig = _types.UniTuple(dtype, n)(arr, off)

            def codegen(context, builder, sig, args):
                ptr = _flat_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
                return context.make_tuple(builder, sig.return_type, _vec_load(builder, ptr, n, kind))

            return sig, codegen

        return ld

    _ldf_f32x4 = _make_flat_vec(4, "f32", _types.float32)

    @_intrinsic
    def _ldf_h8(typingctx, arr, off):
        """Eight 16-bit elements ``arr.flat[off : off + 8]`` (16-byte aligned) as four words, element ``2 k`` in
        word ``k``'s low half: one ``ld.global.nc.v4.u32`` (scales and biases are weights)."""
        if not (isinstance(arr, _types.Array) and getattr(arr.dtype, "bitwidth", 0) == 16
                and isinstance(off, _types.Integer)):
            return None
        sig = _types.UniTuple(_types.uint32, 4)(arr, off)

        def codegen(context, builder, sig, args):
            ptr = _flat_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            return context.make_tuple(builder, sig.return_type, _vec_load(builder, ptr, 4, "u32"))

        return sig, codegen

    @_intrinsic
    def _ldf(typingctx, arr, off):
        """``arr.flat[off]`` of a C-contiguous array by element offset (no index arithmetic per dimension)."""
        if not (isinstance(arr, _types.Array) and isinstance(off, _types.Integer)):
            return None
        sig = arr.dtype(arr, off)

        def codegen(context, builder, sig, args):
            return builder.load(_flat_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1]))

        return sig, codegen

    @devfn
    def _quad_sum(p):
        """Sum over the 4 lanes of a quad (xor 1 then xor 2: every lane gets the same bits)."""
        p = p + cuda.shfl_xor_sync(0xFFFFFFFF, p, 1)
        p = p + cuda.shfl_xor_sync(0xFFFFFFFF, p, 2)
        return p

    @devfn
    def _shfl2(v, a, b):
        return cuda.shfl_sync(0xFFFFFFFF, v, a), cuda.shfl_sync(0xFFFFFFFF, v, b)

else:

    def _flat_at(arr, off):
        c = arr.shape[1]
        return off // c, off % c

    @cuda.jit(device=True)
    def _ldf(arr, off):
        r, c = _flat_at(arr, off)
        return arr[r, c]

    @cuda.jit(device=True)
    def _ldf_f32x4(arr, off):
        r, c = _flat_at(arr, off)
        return (arr[r, c], arr[r, c + 1], arr[r, c + 2], arr[r, c + 3])

    @cuda.jit(device=True)
    def _ldf_h8(arr, off):
        r, c = _flat_at(arr, off)
        assert off % 8 == 0 and c + 8 <= arr.shape[1], "_ldf_h8: not eight aligned elements of one row"
        return tuple(np.uint32(np.uint32(arr[r, c + 2 * k]) | (np.uint32(arr[r, c + 2 * k + 1]) << np.uint32(16)))
                     for k in range(4))

    def _sim_tid2():
        return cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)

    @cuda.jit(device=True)
    def _quad_sum(p):
        # block barrier in the simulator (like _device.warp_sum): same pairing and order as the shuffles
        buf = cuda.shared.array(1024, np.object_)
        tid = _sim_tid2()
        buf[tid] = p
        cuda.syncthreads()
        base = tid - (tid % 4)
        v = [buf[base + j] for j in range(4)]
        cuda.syncthreads()
        v = [np.float32(v[j] + v[j ^ 1]) for j in range(4)]
        v = [np.float32(v[j] + v[j ^ 2]) for j in range(4)]
        return v[tid % 4]

    @cuda.jit(device=True)
    def _shfl2(v, a, b):
        buf = cuda.shared.array(1024, np.object_)
        tid = _sim_tid2()
        buf[tid] = v
        cuda.syncthreads()
        base = tid - (tid % 32)
        ra, rb = buf[base + a], buf[base + b]
        cuda.syncthreads()
        return ra, rb


# Per lane and group: LW words (lane t owns words t*LW .. t*LW+LW-1 of the group, codes t*CL .. t*CL+CL-1 with
# CL = group/4) and, per mma step, the two A/B register slots as pairs of lane-local code indices; the same pairs
# pick x for B, so A and B agree on the (permuted) k order inside each step. One map for both tensor-core GEMVs.
_ldf_u32x2 = _qgemv3.ld_w2  # 8 / 16 bytes of words at a flat offset (ld.global.nc), shared with qgemv
_ldf_u32x4 = _qgemv3.ld_w4
_tc_lane_layout = _qgemv3._lane_layout


def _gen_tc_helpers_source(bits: int, group: int, lop3: bool = False) -> str:
    """Device helpers of one format (kept out of the kernel body so each kernel types and lowers quickly; they are
    inlined on the GPU): ``_tcdec(w)`` -> the word's A pairs, ``_tcx(x, off)`` -> (partial sum, B hi/lo pairs of
    every step of the lane's group slice). ``lop3`` (2 and 4 bits): a pair's ``(w & mask) | c`` as one LOP3
    (``qgemv.andor_m4`` / ``andor_m2``; ptxas otherwise spends two, one a constant); the same values."""
    lw, cl, steps = _tc_lane_layout(bits, group)
    cpw = 32 // bits
    L = []
    a = L.append
    a("def _tcdec(w):")
    if bits == 8:
        qs = []
        for k in range(4):
            qs.append(_q_inplace_expr("w", 8 * k, 8) if 8 * k + 8 <= 23 else _q_expr(_code_expr("w", None, 8 * k, 8)))
        a(f"    return pack_bf16x2({qs[0]}, {qs[1]}), pack_bf16x2({qs[2]}, {qs[3]})")
    else:
        mask = ((1 << bits) - 1) * 0x00010001
        a(f"    m = np.uint32({mask:#x})")
        a("    c = np.uint32(0x43004300)")
        a("    one = np.uint32(0x3F803F80)")
        a("    neg = np.uint32(0xC300C300)")
        outs = []
        for i in range(cpw // 2):
            src = "w" if i == 0 else f"(w >> np.uint32({bits * i}))"
            if lop3 and bits in (2, 4):
                a(f"    p{i} = fma_bf16x2(andor_m{bits}({src}, c), one, neg)")
            else:
                a(f"    p{i} = fma_bf16x2(({src} & m) | c, one, neg)")
            outs.append(f"p{i}")
        a("    return " + ", ".join(outs))
    for fname in ("_tcx", "_tcxs"):  # x from global memory / from a shared array (the fused norm's ``nf_xs``)
        a(f"def {fname}(x, off):")
        for f4 in range(cl // 4):
            if fname == "_tcx":
                a(f"    x{4 * f4}, x{4 * f4 + 1}, x{4 * f4 + 2}, x{4 * f4 + 3} = _ldf_f32x4(x, off + {4 * f4})")
            else:
                a(f"    x{4 * f4}, x{4 * f4 + 1}, x{4 * f4 + 2}, x{4 * f4 + 3} = lds4(x, off + {4 * f4})")
        a("    p = x0")
        for e in range(1, cl):
            a(f"    p += x{e}")
        outs = ["p"]
        for s_, (_, prs, _) in enumerate(steps):
            for slot, (lo, hi) in enumerate(prs):
                a(f"    h{s_}_{slot}, l{s_}_{slot} = split_bf16x2(x{lo}, x{hi})")
                outs += [f"h{s_}_{slot}", f"l{s_}_{slot}"]
        a("    return " + ", ".join(outs))
    return "\n".join(L) + "\n"


def _tc_helpers(bits: int, group: int, lop3: bool = False):
    key = ("tch", bits, group, bool(lop3))
    if key not in _KCACHE:
        glb = {"np": np, "_TWO23": np.float32(8388608.0), "fma_bf16x2": fma_bf16x2, "pack_bf16x2": pack_bf16x2,
               "split_bf16x2": split_bf16x2, "_ldf_f32x4": _ldf_f32x4, "lds4": _device.lds4,
               "andor_m4": _qgemv3.andor_m4, "andor_m2": _qgemv3.andor_m2}
        tag = f"tc_b{bits}_g{group}" + ("_l3" if lop3 else "")
        exec(compile(_gen_tc_helpers_source(bits, group, lop3), f"<tensorfold.kernels.affine:{tag}>", "exec"), glb)
        out = {}
        for k in ("_tcdec", "_tcx", "_tcxs"):
            f = glb[k]
            f.__module__ = __name__
            out[k] = devfn(f)
        _KCACHE[key] = out
    return _KCACHE[key]


@devfn
def _tc_mma2(a0, a1, a2, a3, h0, h1, l0, l1, d0, d1, d2, d3):
    """One k-step against x's hi and lo parts (two chained mma's)."""
    d0, d1, d2, d3 = mma_bf16(a0, a1, a2, a3, h0, h1, d0, d1, d2, d3)
    return mma_bf16(a0, a1, a2, a3, l0, l1, d0, d1, d2, d3)


@devfn
def _tc_epi(c0, c1, c2, c3, d0, d1, d2, d3, sa, ba, sb, bb, sxa, sxb):
    """acc += s * d then acc += b * sum_x for the lane's C elements (rows g, g+8; batch columns 2t, 2t+1)."""
    c0 += sa * d0
    c0 += ba * sxa
    c1 += sa * d1
    c1 += ba * sxb
    c2 += sb * d2
    c2 += bb * sxa
    c3 += sb * d3
    c3 += bb * sxb
    return c0, c1, c2, c3


@devfn
def _tc_sb_bf16(S, B, off):
    return bf16_to_f32(_ldf(S, off)), bf16_to_f32(_ldf(B, off))


@devfn
def _tc_sb_f(S, B, off):
    return np.float32(_ldf(S, off)), np.float32(_ldf(B, off))


def _gen_tc_source(name: str, bits: int, group: int, nt: int, nw: int, mt: int, u: int, sk: str,
                   pipe: bool = False, depth: int = 1, glu: bool = False, nrm=None, l2: bool = False,
                   whole: int = 0, vs: int = 1, rg: int = 1, wpre: int = 0, xf: bool = False) -> str:
    """Source of a tensor-core qgemv kernel: ``nw`` warps per block split the block's groups into contiguous
    ranges; each warp owns ``mt`` tiles of 16 output rows; ``nt`` n-tiles of 8 batch rows; ``u`` groups per loop
    iteration (all their weight loads issued first).

    ``pipe``: the latency-oriented form. The next iteration's weight words are loaded before the current ones are
    used (register double buffer), a group past the warp's range is multiplied by 0 instead of skipped (no branch:
    the whole iteration is one basic block the assembler can schedule), and each k-step's hi and lo mma's feed two
    separate accumulator chains added once per group (chains of group/16 instead of group/8 dependent mma's).
    ``depth`` (pipe only): how many iterations ahead the weight words are loaded (register ring ``w``, ``p1`` ..
    ``p{depth}``; ``u * mt * 2 * LW * (depth + 1)`` words a lane), for small ``u`` with deeper prefetch.

    With ``nw > 1`` the warps' partial tiles go through shared memory and each of the ``4 * mt * nt`` C entries is
    summed (warps 0, 1, .., nw-1 in that order) and stored by warp ``entry % nw``: the same bits as one warp doing
    every sum, with the epilogue spread over the block's warps.

    ``glu`` (one K split only): the SwiGLU epilogue of a fused gate | up weight (``out = 2 I`` rows, gate rows
    first, ``I % 8 == 0``). m-tile ``T`` takes gate rows ``8 T ..`` as its rows 0-7 and the matching up rows
    ``I + 8 T ..`` as rows 8-15, so a lane's C entries ``i`` and ``i + 2`` are a gate sum and its up sum, and
    ``y [R, I]`` gets ``activations.swiglu`` of the pair: the bits of this kernel into ``[R, 2 I]`` followed by
    ``silu_mul_fused_k``. (With ``nw > 1`` the pair's two sums are made by one warp, each in warp order.)

    ``nrm`` (one row): the add + RMSNorm that makes x runs in the kernel (``norms.fused_norm_lines`` at the
    standalone kernel's geometry ``nrm``; arguments ``norms.FUSED_ARGS`` after ``c1``): each block makes x over its
    K range in shared memory (``nf_xs``), and its warps read it there (``_tcxs``) instead of from global x.

    ``l2``: before the wait, each warp asks L2 for its whole share of W, S and B (``prefetch.global.L2``, a 128-byte
    line at a time, the 4 lanes of a row taking every fourth line; no registers, no response to the SM). Under PDL
    the previous kernel's run is the window: a GEMV behind a kernel that moves little memory (the GDN step, the
    attention merge) then streams its weights from L2 after the wait. Load order only: the same bits.

    ``whole`` (one row, the pipelined form, every warp exactly ``u`` groups: :func:`tc_whole` checks): the warp's
    whole share in registers before the wait (weights as the pipelined form's first iteration, scales and biases
    too: ``whole`` = 8, eight bf16 a 16-byte load; 1, one load a value); after the wait the block copies its K range
    of x into shared memory (one L2 round trip for all of it, instead of one an iteration) and the warps run their
    ``u`` groups as one straight block, no loop, no multiply by the in-range flag. The same operations in the same
    order as the pipelined kernel with ``u`` groups an iteration: the same bits as the plan's kernel.

    ``wpre`` (whole form only; 0 = all): the weight words of the warp's first ``wpre`` groups are loaded before the
    wait, the rest right after x's loads are issued (before x is stored to shared memory), so x's loads queue
    behind less; load order only, the same bits.

    ``xf`` (whole form only): the block makes x's mma fragments once instead of every warp making its own from x.
    One thread an item (a group of the block's K range and a lane column ``t``, ``4 u nw`` items): it loads the
    item's ``group / 4`` values, sums them in ``_tcxs``'s order, splits every step's pairs into hi / lo bf16 words
    (``split_bf16x2``) and stores them in shared memory; the item's quad of threads then adds the four sums with
    ``_quad_sum``'s butterfly (the group's sum of x). A lane then reads its 16 words and the sum per group (one row:
    both batch columns' sums are that sum) instead of splitting 16 values and shuffling: for one row the 8 lanes of a
    column group (``g``) made identical fragments. The same values, sums and order: the same bits.

    ``rg`` (reduction groups, ``nw > 1``): the cross-warp sum adds the warps' partial tiles ``rg`` at a time first
    (``(p0 + p1) + p2 ..`` within a group), then the group sums in warp order.

    ``vs`` (ranges a warp): the block's groups are split into ``nw * vs`` contiguous ranges of ``pw`` groups as if
    it had ``nw * vs`` warps (``pw`` a multiple of ``u``: the launch checks). Warp ``w`` walks ranges ``w * vs ..
    w * vs + vs - 1`` as one run of groups, like a warp of the plain kernel, but at each range's first iteration it
    sets its accumulators aside (added to the earlier ranges' sum in range order) and starts from zero; at the end
    it hands that sum over as its one partial tile. The same bits as the kernel of ``nw * vs`` warps with ``rg =
    vs``, with a ``vs``-th of its warps. A plan whose one-row launches run the whole form at 16 warps runs its other
    launches this way at 8 (``GemvPlan.mw``)."""
    assert depth >= 1 and (pipe or depth == 1)
    assert vs >= 1 and (vs == 1 or not (whole or l2 or rg > 1)) and nw % rg == 0
    assert wpre == 0 or (whole and 0 < wpre < u)
    assert not xf or whole
    assert not whole or (pipe and depth == 1 and nt == 1 and not nrm and not l2 and (whole == 1 or sk == "bf16")
                         and u % whole == 0)
    lw, cl, steps = _tc_lane_layout(bits, group)
    wpg = group * bits // 32
    nstep = len(steps)
    bnames = ", ".join(f"bh{{n}}_{s_}_0, bl{{n}}_{s_}_0, bh{{n}}_{s_}_1, bl{{n}}_{s_}_1" for s_ in range(nstep))
    L = []
    a = L.append
    extra = ", " + norms.FUSED_ARGS if nrm else ""
    a(f"def {name}(W, S, B, x, y, R, c0, c1{extra}):")
    if _device.gemv_trigger_here("start"):
        a("    pdl_trigger()")  # kernels._pdl: the next launch may start now
    a("    tid = cuda.threadIdx.x")
    a("    lane = tid & 31")
    a("    warp = tid >> 5")
    a("    g = lane >> 2")
    a("    t = lane & 3")
    if nw > 1:
        a(f"    red = cuda.shared.array(({nw}, {mt * nt * 4}, 32), np.float32)")
    a("    out = W.shape[0]")
    if glu:
        a("    hout = out >> 1")
    a(f"    ng = x.shape[1] // {group}")
    a(f"    o0 = cuda.blockIdx.x * {16 * mt}")
    a(f"    r0 = cuda.blockIdx.y * {8 * nt}")
    a("    kz = cuda.blockIdx.z")
    a("    ks = cuda.gridDim.z")
    a("    per = (ng + ks - 1) // ks")
    a("    gb = kz * per")
    a("    ge = min(ng, gb + per)")
    if vs == 1:
        a(f"    pw = (per + {nw - 1}) // {nw}")
        a("    wb = gb + warp * pw")
        a("    we = min(ge, wb + pw)")
        a(f"    nit = (pw + {u - 1}) // {u}")
    else:  # the warp's vs ranges of pw groups (pw % u == 0), walked as one run; nir iterations a range
        a(f"    pr = (per + {nw * vs - 1}) // {nw * vs}")
        a(f"    pw = {vs} * pr")
        a("    wb = gb + warp * pw")
        a("    we = min(ge, wb + pw)")
        a(f"    nir = pr // {u}")
        a(f"    nit = {vs} * nir")
    a("    wpitch = W.shape[1]")
    a("    spitch = S.shape[1]")
    a("    xpitch = x.shape[1]")
    for m in range(mt):
        if glu:  # the gate row and its up row
            a(f"    ra{m} = min((o0 >> 1) + {8 * m} + g, hout - 1)")
            a(f"    rb{m} = ra{m} + hout")
        else:
            a(f"    ra{m} = min(o0 + {16 * m} + g, out - 1)")
            a(f"    rb{m} = min(o0 + {16 * m + 8} + g, out - 1)")
        # flat element offsets of the lane's rows (weights: plus the lane's words inside a group)
        a(f"    woa{m} = ra{m} * wpitch + t * {lw}")
        a(f"    wob{m} = rb{m} * wpitch + t * {lw}")
        a(f"    soa{m} = ra{m} * spitch")
        a(f"    sob{m} = rb{m} * spitch")
    for n in range(nt):
        a(f"    xr{n} = min(r0 + {8 * n} + g, R - 1)")
        a(f"    xo{n} = xr{n} * xpitch + t * {cl}")
    a("    sa_lane = 8 * t")
    a("    sb_lane = 8 * t + 4")
    accs = [f"acc{m}_{n}_{i}" for m in range(mt) for n in range(nt) for i in range(4)]
    for c in accs:
        a(f"    {c} = np.float32(0.0)")
        if vs > 1:
            a(f"    {c}s = np.float32(0.0)")  # the earlier ranges' sum
    def loads(ind, pre, gexpr, lo=0, hi=u):
        # every weight load of groups lo .. hi - 1 of u (groups past the warp's range re-read its last group)
        for uu in range(lo, hi):
            a(f"{ind}wi = min({gexpr} + {uu}, Gl) * {wpg}")
            for m in range(mt):
                for hname in ("a", "b"):
                    v = f"{pre}{hname}{uu}_{m}"
                    off = f"wo{hname}{m} + wi"
                    if lw == 1:
                        a(f"{ind}{v}_0 = _ldf(W, {off})")
                    elif lw == 2:
                        a(f"{ind}{v}_0, {v}_1 = _ldf_u32x2(W, {off})")
                    else:
                        for q in range(lw // 4):
                            a(f"{ind}{v}_{4 * q}, {v}_{4 * q + 1}, {v}_{4 * q + 2}, {v}_{4 * q + 3} = "
                              f"_ldf_u32x4(W, {off} + {4 * q})")

    a("    Gl = max(we - 1, 0)")
    if pipe:
        loads("    ", "w", "wb", 0, wpre or u)
        for k in range(1, depth):
            loads("    ", f"p{k}_", f"wb + {k * u}")
    if l2:  # the warp's share of W / S / B into L2 (rows ra / rb of the lane's quad; lines t, t + 4, ..)
        sel = 64 if sk == "bf16" else 32  # scale / bias elements a 128-byte line
        a("    if we > wb:")
        a(f"        nlw = ((we - wb) * {wpg} + 31) >> 5")
        a(f"        nls = ((we - wb) + {sel - 1}) >> {sel.bit_length() - 1}")
        for m in range(mt):
            for h in ("a", "b"):
                a(f"        pw0 = wo{h}{m} - t * {lw} + wb * {wpg}")
                a(f"        pwl = pw0 + (we - wb) * {wpg} - 1")
                a("        for ln in range(t, nlw + 1, 4):")
                a("            pf_l2(W, min(pw0 + ln * 32, pwl))")
                a(f"        ps0 = so{h}{m} + wb")
                a("        psl = ps0 + (we - wb) - 1")
                a("        for ln in range(t, nls + 1, 4):")
                a(f"            pf_l2(S, min(ps0 + ln * {sel}, psl))")
                a(f"            pf_l2(B, min(ps0 + ln * {sel}, psl))")
    if whole:  # the warp's scales and biases too (rows ra / rb, groups wb .. wb + u - 1)
        for m in range(mt):
            for h in ("a", "b"):
                for arr, pre in (("S", "sv"), ("B", "bv")):
                    if whole == 8:
                        for q in range(u // 8):
                            a(f"    " + ", ".join(f"{pre}{h}{m}_{q}_{e}" for e in range(4))
                              + f" = _ldf_h8({arr}, so{h}{m} + wb + {8 * q})")
                    else:
                        for uu in range(u):
                            a(f"    {pre}{h}{m}_{uu} = _ldf({arr}, so{h}{m} + wb + {uu})")
    # weights are never written by a kernel: the first iteration's loads above run before the wait, overlapping the
    # previous kernel's tail under PDL; x, y and the workspace are touched only after it
    a("    pdl_wait()")
    if nrm:
        L.extend(norms.fused_norm_lines("    ", nrm, nw * 32, f"gb * {group}", f"ge * {group}"))
    if whole and xf:  # x's fragments and group sums, one thread an item (group, lane column), into shared memory
        ni, nsw = u * nw * 4, nstep * 4  # (a 20-word stride, off t = 0 / 2's shared banks, cost 4 registers)
        assert ni <= nw * 32
        a(f"    xfr = cuda.shared.array(({ni}, {nsw}), np.uint32)")
        a(f"    xgs = cuda.shared.array({u * nw}, np.float32)")
        a(f"    xk0 = gb * {group}")
        a(f"    xin = tid < {ni}")
        if wpre:  # the rest of the share (issued first: the staging below may branch around warps without items)
            loads("    ", "w", "wb", wpre, u)
        # on the GPU the warps past the items skip the staging (warp-uniform: items are whole warps or fewer); the
        # simulator runs it in every thread (its quad sum is a block barrier), the extra threads storing nothing
        J = "    "
        if not IS_SIM:
            a(f"    if warp < {-(-ni // 32)}:")
            J = "        "
        a(f"{J}xi = tid if xin else 0")
        a(f"{J}xof = xr0 * xpitch + xk0 + (xi >> 2) * {group} + (xi & 3) * {cl}")
        a(f"{J}p, {bnames.format(n='x')} = _tcx(x, xof)")  # the per-warp path's sum order and splits
        for s_ in range(nstep):  # a step's hi words, then its lo words: the mma's B register pairs as loaded
            for slot in range(2):
                a(f"{J}if xin:")  # (a guard a pair: one guard over every store raised the register count by 4)
                a(f"{J}    xfr[xi, {4 * s_ + slot}] = bhx_{s_}_{slot}")
                a(f"{J}    xfr[xi, {4 * s_ + 2 + slot}] = blx_{s_}_{slot}")
        a(f"{J}p = _quad_sum(p)")  # _tcxs's butterfly over the item's quad (items are whole quads)
        a(f"{J}if xin and (tid & 3) == 0:")
        a(f"{J}    xgs[tid >> 2] = p")
        a("    cuda.syncthreads()")
        a("    G0 = wb")
        I = "    "
        for uu in range(u):
            a(f"{I}Gc{uu} = G0 + {uu}")
    elif whole:  # the block's K range of x (row xr0) into shared memory: every load issued, then every store
        kb = u * nw * group
        nst = -(-kb // (4 * nw * 32))
        al = "" if IS_SIM else ", alignment=16"
        a(f"    xs = cuda.shared.array({kb}, np.float32{al})")
        a(f"    xk0 = gb * {group}")
        a(f"    xb0 = xr0 * xpitch + xk0")
        for j in range(nst):
            a(f"    xe{j} = (tid + {j * nw * 32}) * 4")
            a(f"    xe{j}c = xe{j} if xe{j} < {kb} else 0")
            a(f"    xv{j}_0, xv{j}_1, xv{j}_2, xv{j}_3 = _ldf_f32x4(x, xb0 + xe{j}c)")
        if wpre:  # the rest of the share, behind x's loads
            loads("    ", "w", "wb", wpre, u)
        for j in range(nst):
            a(f"    if xe{j} < {kb}:")
            for e in range(4):
                a(f"        xs[xe{j} + {e}] = xv{j}_{e}")
        a("    cuda.syncthreads()")
        I = "    "
        a(f"{I}G0 = wb")
        for uu in range(u):
            a(f"{I}Gc{uu} = G0 + {uu}")
    else:
        a("    for it in range(nit):")
        I = "        "
        if vs > 1:  # a new range: the sum so far aside, in range order (warp-uniform; once per range)
            a(f"{I}if it == nir:")
            for c in accs:
                a(f"{I}    {c}s = {c}")
                a(f"{I}    {c} = np.float32(0.0)")
            if vs > 2:
                a(f"{I}elif it > nir and it % nir == 0:")
                for c in accs:
                    a(f"{I}    {c}s = {c}s + {c}")
                    a(f"{I}    {c} = np.float32(0.0)")
        a(f"{I}G0 = wb + it * {u}")
        for uu in range(u):
            a(f"{I}Gc{uu} = min(G0 + {uu}, Gl)")
    if not whole:  # (the whole form loaded every word before the wait)
        if pipe:
            loads(I, f"p{depth}_", f"G0 + {depth * u}")  # words `depth` iterations ahead, in flight meanwhile
        else:
            loads(I, "w", "G0")
    for uu in range(u):
        a(f"{I}col = Gc{uu} * {group}")
        for n in range(nt):
            # x: the lane's slice of batch row xr{n}: fixed-order partial sum, quad sum, the C columns' sums
            if whole and xf:  # one row: the block's fragments of the warp's group uu, and its sum
                a(f"{I}xit = (warp * {u} + {uu}) * 4 + t")
                for s_ in range(nstep):
                    for slot in range(2):
                        a(f"{I}bh{n}_{s_}_{slot} = xfr[xit, {4 * s_ + slot}]")
                        a(f"{I}bl{n}_{s_}_{slot} = xfr[xit, {4 * s_ + 2 + slot}]")
                a(f"{I}sxa{n} = xgs[warp * {u} + {uu}]")
                a(f"{I}sxb{n} = sxa{n}")
                continue
            if nrm:  # one row, x made by the prologue in shared memory (by column)
                a(f"{I}p, {bnames.format(n=n)} = _tcxs(nf_xs, col + t * {cl})")
            elif whole:  # one row, the block's K range staged above
                a(f"{I}p, {bnames.format(n=n)} = _tcxs(xs, col - xk0 + t * {cl})")
            else:
                a(f"{I}p, {bnames.format(n=n)} = _tcx(x, xo{n} + col)")
            a(f"{I}p = _quad_sum(p)")
            a(f"{I}sxa{n}, sxb{n} = _shfl2(p, sa_lane, sb_lane)")
        for m in range(mt):
            sbf = "_tc_sb_bf16" if sk == "bf16" else "_tc_sb_f"
            if whole == 8:  # bf16 pairs of the preloaded words: group uu is half uu % 2 of word (uu % 8) // 2
                cv = "bf16_to_f32" if uu % 2 == 0 else "_bf_hi"
                for h in ("a", "b"):
                    w_ = f"{m}_{uu // 8}_{(uu % 8) // 2}"
                    a(f"{I}s{h}, b{h} = {cv}(sv{h}{w_}), {cv}(bv{h}{w_})")
            elif whole:
                cv = "bf16_to_f32" if sk == "bf16" else "np.float32"
                for h in ("a", "b"):
                    a(f"{I}s{h}, b{h} = {cv}(sv{h}{m}_{uu}), {cv}(bv{h}{m}_{uu})")
            else:
                a(f"{I}sa, ba = {sbf}(S, B, soa{m} + Gc{uu})")
                a(f"{I}sb, bb = {sbf}(S, B, sob{m} + Gc{uu})")
            zeros = "np.float32(0.0), np.float32(0.0), np.float32(0.0), np.float32(0.0)"
            for n in range(nt):
                a(f"{I}" + ", ".join(f"d{n}_{i}" for i in range(4)) + f" = {zeros}")
                if pipe:
                    a(f"{I}" + ", ".join(f"e{n}_{i}" for i in range(4)) + f" = {zeros}")
            per_word = {}
            for s_, (j, prs, dec) in enumerate(steps):
                if j not in per_word:
                    npairs = 2 if bits == 8 else 32 // bits // 2
                    pa = ", ".join(f"pa{j}_{i}" for i in range(npairs))
                    pb = ", ".join(f"pb{j}_{i}" for i in range(npairs))
                    a(f"{I}{pa} = _tcdec(wa{uu}_{m}_{j})")
                    a(f"{I}{pb} = _tcdec(wb{uu}_{m}_{j})")
                    per_word[j] = True
                i0, i1 = (0, 1) if bits == 8 else dec
                for n in range(nt):
                    dd = ", ".join(f"d{n}_{i}" for i in range(4))
                    ee = ", ".join(f"e{n}_{i}" for i in range(4))
                    A4 = f"pa{j}_{i0}, pb{j}_{i0}, pa{j}_{i1}, pb{j}_{i1}"
                    if pipe:
                        a(f"{I}{dd} = mma_bf16({A4}, bh{n}_{s_}_0, bh{n}_{s_}_1, {dd})")
                        a(f"{I}{ee} = mma_bf16({A4}, bl{n}_{s_}_0, bl{n}_{s_}_1, {ee})")
                    else:
                        a(f"{I}{dd} = _tc_mma2({A4}, bh{n}_{s_}_0, bh{n}_{s_}_1, bl{n}_{s_}_0, bl{n}_{s_}_1, {dd})")
            if pipe:
                # a group past the warp's range (re-read data) counts 0 times: a select and 4 multiplies, no branch
                # (the whole-share form has none: x 1.0 is exact, so dropping it keeps the bits)
                if not whole:
                    a(f"{I}vf = np.float32(1.0) if G0 + {uu} < we else np.float32(0.0)")
                    a(f"{I}sa, ba, sb, bb = sa * vf, ba * vf, sb * vf, bb * vf")
                for n in range(nt):
                    cc = ", ".join(f"acc{m}_{n}_{i}" for i in range(4))
                    dd = ", ".join(f"d{n}_{i} + e{n}_{i}" for i in range(4))
                    a(f"{I}{cc} = _tc_epi({cc}, {dd}, sa, ba, sb, bb, sxa{n}, sxb{n})")
            else:
                a(f"{I}if G0 + {uu} < we:")
                for n in range(nt):
                    cc = ", ".join(f"acc{m}_{n}_{i}" for i in range(4))
                    dd = ", ".join(f"d{n}_{i}" for i in range(4))
                    a(f"{I}    {cc} = _tc_epi({cc}, {dd}, sa, ba, sb, bb, sxa{n}, sxb{n})")
    if pipe and not whole:
        ring = ["w"] + [f"p{k}_" for k in range(1, depth + 1)]
        for dst, src in zip(ring[:-1], ring[1:]):
            for uu in range(u):
                for m in range(mt):
                    for hname in ("a", "b"):
                        for j in range(lw):
                            a(f"{I}{dst}{hname}{uu}_{m}_{j} = {src}{hname}{uu}_{m}_{j}")
    if _device.gemv_trigger_here("end"):
        a("    pdl_trigger()")
    # cross-warp sum in warp order (entry k summed and stored by warp k % nw), then store
    def store(J, m, n, i, v):
        o = f"o0 + {16 * m + (8 if i >= 2 else 0)} + g"
        r = f"r0 + {8 * n + (i & 1)} + 2 * t"
        a(f"{J}if {o} < out and {r} < R:")
        a(f"{J}    y[kz, {r}, {o}] = {v}")

    def store_glu(J, m, n, i, vg, vu):  # i in (0, 1): entry i (gate) and i + 2 (up)
        o = f"(o0 >> 1) + {8 * m} + g"
        r = f"r0 + {8 * n + i} + 2 * t"
        a(f"{J}if {o} < hout and {r} < R:")
        a(f"{J}    y[kz, {r}, {o}] = swiglu({vg}, {vu})")

    if vs > 1:  # the last range added to the earlier ranges' sum: the warp's partial tile
        a("    if nit > nir:")
        for c in accs:
            a(f"        {c} = {c}s + {c}")
    if nw > 1:  # the warps' partial tiles through shared memory
        for m in range(mt):
            for n in range(nt):
                for i in range(4):
                    a(f"    red[warp, {(m * nt + n) * 4 + i}, lane] = acc{m}_{n}_{i}")
        a("    cuda.syncthreads()")

    def summed(J, pairs):  # each (name, entry) summed over the warps in warp order (rg > 1: groups of rg first)
        def grp(w0, k):
            return " + ".join(f"red[{w}, {k}, lane]" for w in range(w0, w0 + rg))
        for v, k in pairs:
            a(f"{J}{v} = {grp(0, k)}")
        for w0 in range(rg, nw, rg):
            for v, k in pairs:
                a(f"{J}{v} += " + (f"({grp(w0, k)})" if rg > 1 else grp(w0, k)))

    for m in range(mt):
        for n in range(nt):
            for i in range(2 if glu else 4):
                if glu:  # entry i (gate) and i + 2 (up), summed by warp k % nw
                    k, kg, ku = (m * nt + n) * 2 + i, (m * nt + n) * 4 + i, (m * nt + n) * 4 + i + 2
                    if nw > 1:
                        a(f"    if warp == {k % nw}:")
                        summed("        ", [("tg", kg), ("tu", ku)])
                        store_glu("        ", m, n, i, "tg", "tu")
                    else:
                        store_glu("    ", m, n, i, f"acc{m}_{n}_{i}", f"acc{m}_{n}_{i + 2}")
                elif nw > 1:
                    k = (m * nt + n) * 4 + i
                    a(f"    if warp == {k % nw}:")
                    summed("        ", [("tot", k)])
                    store("        ", m, n, i, "tot")
                else:
                    store("    ", m, n, i, f"acc{m}_{n}_{i}")
    return "\n".join(L) + "\n"


def get_tc_pyfunc(bits: int, group: int, nt: int, nw: int, mt: int = TC_MT, u: int = TC_U, sk: str = "bf16",
                  pipe: bool = False, depth: int = 1, glu: bool = False, nrm=None, l2: bool = False, whole: int = 0,
                  vs: int = 1, rg: int = 1, wpre: int = 0, xf: bool = False, l3: bool = False):
    """``xf``: the whole form's x fragments made once a block (``_gen_tc_source``), with the LOP3 decode; ``l3``: the
    LOP3 decode alone (``_gen_tc_helpers_source``'s ``lop3``). Both the same bits as without."""
    glu, l2, whole, vs, rg, wpre, xf = bool(glu), bool(l2), int(whole), int(vs), int(rg), int(wpre), bool(xf)
    l3 = bool(l3) and not xf
    nrm = tuple(nrm) if nrm else None
    key = ("tcpy", bits, group, nt, nw, mt, u, sk, pipe, depth, glu, nrm, l2, whole, vs, rg, wpre, xf, l3)
    if key not in _KCACHE:
        name = f"qgemv_tc_b{bits}_g{group}_n{nt}_w{nw}_m{mt}_u{u}_{sk}" + ("_p" if pipe else "")
        if depth > 1:
            name += f"d{depth}"
        if glu:
            name += "_glu"
        if nrm:
            name += f"_nf{nrm[0]}x{nrm[1]}"
        if l2:
            name += "_l2"
        if whole:
            name += f"_wh{whole}"
        if vs > 1:
            name += f"_vs{vs}"
        if rg > 1:
            name += f"_rg{rg}"
        if wpre:
            name += f"_pre{wpre}"
        if xf:
            name += "_xf"
        if l3:
            name += "_l3"
        extra = dict(_tc_helpers(bits, group, lop3=xf or l3), _tc_mma2=_tc_mma2, _tc_epi=_tc_epi,
                     _tc_sb_bf16=_tc_sb_bf16, _tc_sb_f=_tc_sb_f)
        extra["mma_bf16"] = mma_bf16
        extra["swiglu"] = swiglu
        if l2:
            extra["pf_l2"] = _qgemv3.pf_l2
        if nrm:
            extra.update(norms.fused_glb())
        if whole:
            extra.update(_ldf_h8=_ldf_h8, _bf_hi=_qgemv3._bf_hi, bf16_to_f32=bf16_to_f32)
        _KCACHE[key] = _build(name, _gen_tc_source(name, bits, group, nt, nw, mt, u, sk, pipe, depth, glu, nrm, l2,
                                                   whole, vs, rg, wpre, xf), extra)
    return _KCACHE[key]


def get_tc_kernel(bits: int, group: int, nt: int, nw: int, mt: int = TC_MT, u: int = TC_U, sk: str = "bf16",
                  pipe: bool = False, depth: int = 1, glu: bool = False, nrm=None, l2: bool = False, whole: int = 0,
                  vs: int = 1, rg: int = 1, wpre: int = 0, xf: bool = False, l3: bool = False):
    key = ("tck", bits, group, nt, nw, mt, u, sk, pipe, depth, bool(glu), tuple(nrm) if nrm else None, bool(l2),
           int(whole), int(vs), int(rg), int(wpre), bool(xf), bool(l3) and not xf)
    if key not in _KCACHE:
        # blocks of more than 256 threads (16 warps) are bounded so the assembler keeps <= 65536 / threads
        # registers (the 16-warp variants are sized to fit without spills; other formats may spill, never fail)
        kw = {} if nw * 32 <= 256 or IS_SIM else {"launch_bounds": nw * 32}
        _KCACHE[key] = _kcache.jit(get_tc_pyfunc(bits, group, nt, nw, mt, u, sk, pipe, depth, glu, nrm, l2, whole,
                                                 vs, rg, wpre, xf, l3), **kw)
    return _KCACHE[key]


# ----------------------------------------------------------------------------------------------------------------
# planning and launch
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemvPlan:
    """Launch geometry of one GEMV weight shape (chosen from the shape only, never from the row count).

    ``tpb`` threads per block (for the tensor-core kernel: ``tpb // 32`` warps splitting the block's groups),
    ``ks`` split-K factor across blocks (workspace ``[ks, R, out]``), ``tc`` whether the tensor-core kernel runs,
    ``mt`` 16-row tiles per warp and ``u`` groups per loop iteration (tensor-core kernel only), ``pipe`` the
    pipelined form, ``depth`` its prefetch distance in iterations, ``variant`` the ``TC_VARIANTS`` name it came from
    (a label for benchmarks; the launch reads only the geometry fields). ``mw`` (tensor-core kernel): warps a block
    of the launches that do not take the whole-share form, each running ``tpb // 32 // mw`` of the plan's K ranges
    (``_gen_tc_source(vs=...)``: the same bits); 0 = ``tpb // 32``. See :func:`tc_geometry`."""

    out: int
    inp: int
    bits: int
    group: int
    tpb: int
    ks: int
    tc: bool = False
    mt: int = TC_MT
    u: int = TC_U
    pipe: bool = False
    depth: int = 1
    variant: str = ""
    mw: int = 0

    @property
    def workspace_shape(self):
        """Shape of the float32 split-K workspace for ``rows`` = 16 (None when ks == 1)."""
        return None if self.ks == 1 else (self.ks, 16, self.out)


def _tc_enabled() -> bool:
    """The tensor-core GEMV is the default; ``TENSORFOLD_GEMV_TC=0`` in the environment selects the CUDA-core
    kernel for every format (a fallback switch)."""
    return os.environ.get("TENSORFOLD_GEMV_TC", "1") != "0"


def _tc_pipe_default() -> bool:
    """``TENSORFOLD_GEMV_PIPE=1``: the older switch for the ``pipe`` variant (kept; same as
    ``TENSORFOLD_GEMV_VARIANT=pipe``)."""
    return os.environ.get("TENSORFOLD_GEMV_PIPE", "0") == "1"


# Tensor-core plan variants (latency-cutting alternatives, all measured on the H200 at d91d0c5; the default is
# chosen per shape by ``_tc_variant_default``). ``TENSORFOLD_GEMV_VARIANT=<name>`` selects one for every
# tensor-core plan of a run (``plan_qgemv``). Keys: mt, u, pipe, depth; ``max_nw`` warps per block at most;
# ``nw_rule`` "resident" (double warps while the grid stays within about one resident wave, the measured rule) or
# "groups" (double warps while every warp keeps at least ``u`` groups and the grid has fewer than ``max_warps``
# warps: short K chains per warp, many warps; the heads already have thousands of blocks and stay narrow);
# ``ks_blocks``: split K across blocks (grid.z, workspace + fixed-order reduce) while fewer blocks than this.
TC_VARIANTS = {
    # measured default (0896dd7): 2 row tiles x 4 groups an iteration, up to 8 warps, split-K only when < 2 blocks/SM
    "default": dict(mt=2, u=4, pipe=False, depth=1, max_nw=8, nw_rule="resident", ks_blocks=264),
    # 814170e: the same tiles, next iteration's words prefetched, branch-free tail, split hi/lo chains
    "pipe": dict(mt=2, u=4, pipe=True, depth=1, max_nw=8, nw_rule="resident", ks_blocks=264),
    # up to 16 warps a block splitting K (one 16-row tile a warp: 2 tiles x 16 warps would need > 128 registers, the
    # limit for 512 threads), 2 groups an iteration, prefetch 1 ahead (9B gate: 768 blocks x 16 warps x 4 groups)
    "w16": dict(mt=1, u=2, pipe=True, depth=1, max_nw=16, nw_rule="groups", max_warps=16896, ks_blocks=0),
    # the same with the words 2 iterations ahead
    "w16d2": dict(mt=1, u=2, pipe=True, depth=2, max_nw=16, nw_rule="groups", max_warps=16896, ks_blocks=0),
    # one group an iteration, words 3 groups ahead (the shortest chain per step, small register ring)
    "w16d3": dict(mt=1, u=1, pipe=True, depth=3, max_nw=16, nw_rule="groups", max_warps=16896, ks_blocks=0),
    # 4 warps a block, K split across blocks until >= 8 blocks per SM (every SM many independent short chains;
    # costs the workspace reduce launch)
    "sk": dict(mt=2, u=2, pipe=True, depth=1, max_nw=4, nw_rule="groups", max_warps=8448, ks_blocks=1056),
    # 8 warps x split-K across blocks, one tile, one group an iteration, 2 groups ahead
    "skd2": dict(mt=1, u=1, pipe=True, depth=2, max_nw=8, nw_rule="groups", max_warps=16896, ks_blocks=1056),
    # "pipe" with 2 groups an iteration (session 16: the 2B gate+up and in_all, K = 2,048)
    "pipe2": dict(mt=2, u=2, pipe=True, depth=1, max_nw=8, nw_rule="resident", ks_blocks=264),
}


# Shape rule for the default variant, from the H200 variant table at d91d0c5 (benchmarks/results/
# gemv_variants_2026-11-30_d91d0c5.md, 1-row / 8-row us): weights of at least 2^26 codes (27B MLP, every head)
# -> "sk" (27B gate 38.1 / 44.6 vs default 52.6 / 56.5; 2B head 169 / 196 vs 175 / 190); smaller ones -> "pipe"
# (9B gate 21.7 / 24.8 vs 24.1 / 27.4; 9B down 25.6 / 28.4 vs 24.4 / 26.4). A function of the shape only.
SK_MIN_CODES = 1 << 26
# Second shape rule (session 16, benchmarks/results/session16_2026-12-01.md; bench_gemv3 --variants, graph replay, us
# at 1 / 8 rows, pipe -> w16): weights with at most 2,048 output rows or at least 6,144 inputs -> "w16" (one 16-row
# tile a block, up to 16 warps splitting K, no second launch). 2B down 2048x6144 11.9 / 12.3 (plus its 1.8 us reduce
# launch) -> 8.4 / 9.4; 2B out_proj / o_proj 2048x2048 6.8 / 7.0 -> 4.9 / 5.4; 27B out_proj / o_proj 5120x6144 25.5 /
# 27.4 -> 21.0 / 25.0 (that shape now goes to qgemv instead: ``_v3_enabled``). "pipe" stays ahead at 2B gate+up
# 12288x2048 (12.7 vs 21.9), 2B in_all 8224x2048 (10.5 vs 15.1) and 9B out_proj / o_proj 4096x4096 (11.3 vs 12.2).
W16_MAX_OUT = 2048
W16_MIN_IN = 6144
# Third (session 16, bench_gemv3 --tcplans): the rest with at most 2,048 inputs -> "pipe2" (2 groups an iteration):
# 2B gate+up 12288x2048 12.8 / 14.0 -> 11.6 / 13.1 us at 1 / 8 rows, 2B in_all 8224x2048 10.5 / 11.3 -> 9.9 / 10.3.
# Session 17 (call 1, --tcplans "pipe:u=2"): up to 4,096 inputs, 9B out_proj / o_proj 4096x4096 11.3 / 11.9 ->
# 10.5 / 10.9 (the same warps and K splits as "pipe", so the same bits; 32 launches a 9B step).
PIPE2_MAX_IN = 4096


def _tc_variant_default(out: int, inp: int) -> str:
    v = os.environ.get("TENSORFOLD_GEMV_VARIANT", "")
    if v:
        if v not in TC_VARIANTS:
            raise ValueError(f"TENSORFOLD_GEMV_VARIANT={v!r}: want one of {sorted(TC_VARIANTS)}")
        return v
    if _tc_pipe_default():
        return "pipe"
    if out * inp >= SK_MIN_CODES:
        return "sk"
    if out <= W16_MAX_OUT or inp >= W16_MIN_IN:
        return "w16"
    if inp <= PIPE2_MAX_IN:
        return "pipe2"
    return "pipe"


def _plan_cuda_core(out: int, inp: int, bits: int, group: int, max_tpb: int = 256) -> GemvPlan:
    wpc = _words_per_chunk(bits, group)
    words = inp * bits // 32
    if words * 32 != inp * bits or words % wpc:
        raise ValueError(f"qgemv: in={inp} bits={bits} group={group}: row is not whole chunks")
    nch = words // wpc
    blocks = -(-out // NO)
    ks = 1
    while blocks * ks < _SM_TARGET_BLOCKS and nch // (ks * 2) >= 64:
        ks *= 2
    per = -(-nch // ks)
    wchunks = -(-per // 32)
    iters = -(-wchunks // (max_tpb // 32))
    nw = -(-wchunks // iters)
    return GemvPlan(out, inp, bits, group, 32 * nw, ks)


def plan_tc(out: int, inp: int, bits: int, group: int, mt: int | None = None, u: int | None = None,
            pipe: bool | None = None, variant: str | None = None, depth: int | None = None) -> GemvPlan:
    """Tensor-core geometry of ``variant`` (``TC_VARIANTS``; default from the environment, see
    ``_tc_variant_default``), with ``mt`` / ``u`` / ``pipe`` / ``depth`` overriding its entries. ``ceil(out / (16
    mt))`` blocks along x; warps per block doubled up to ``max_nw`` by the variant's rule (every warp keeps at least
    ``u`` groups); then split-K across blocks (grid.z) while the grid has fewer than ``ks_blocks`` blocks (the
    "resident" rule also stops at about one resident wave of warps). Depends on (out, in, bits, group) only."""
    if not _tc_supported(bits, group, inp):
        raise ValueError(f"qgemv tensor-core path: bits={bits} group={group} in={inp} not supported")
    if variant is None:
        variant = _tc_variant_default(out, inp)
        if pipe is not None and variant in ("default", "pipe"):
            variant = "pipe" if pipe else "default"
    v = dict(TC_VARIANTS[variant])
    for k, val in (("mt", mt), ("u", u), ("pipe", pipe), ("depth", depth)):
        if val is not None:
            v[k] = val
    mt, u, pipe, depth = v["mt"], v["u"], v["pipe"], v["depth"] if v["pipe"] else 1
    ng = inp // group
    nbx = -(-out // (16 * mt))
    nw = 1
    max_nw = v["max_nw"]
    if max_nw > 8 and group * bits // 128 > 2:
        # 16 warps (512 threads) leave 128 registers a thread: with 4+ words a lane and group (8-bit g64 / g128,
        # 4-bit g128) the 16-warp kernels spill at 2 n-tiles (ptxas, launch_bounds 512), so those formats take 8
        max_nw = 8
    if v["nw_rule"] == "resident":
        res = 132 * 12 if pipe else _TC_RESIDENT_WARPS  # the pipelined form holds 140 registers a thread
        while nw < max_nw and nbx * nw * 2 <= res and ng // (nw * 2) >= u:
            nw *= 2
    else:
        res = 1 << 60
        while nw < max_nw and nbx * nw < v["max_warps"] and ng // (nw * 2) >= u:
            nw *= 2
    ks = 1
    while nbx * ks < v["ks_blocks"] and nbx * nw * ks * 2 <= res and ng // (nw * ks * 2) >= u:
        ks *= 2
    mw = 0
    if (variant == "pipe2" and nw == 8 and ks == 1 and out == inp and group * bits // 128 <= 2 and ng % 16 == 0
            and ng // 16 >= 2 and _tc_vwarps()):
        nw, mw = 16, 8  # 16 K ranges: the whole form at 16 warps, other launches at 8 (two ranges a warp)
    geo = _tc_geo_override(out, inp)
    if geo:  # measurements: another tile count / warps a block at this shape (split-K off)
        mt, nw = geo
        ks, mw = 1, 0
    return GemvPlan(out, inp, bits, group, 32 * nw, ks, True, mt, u, pipe, depth, variant, mw)


def _tc_vwarps() -> bool:
    """``TENSORFOLD_TC_VWARPS`` (read when a plan is made): ``sq`` (default) gives the square pipelined plans of 8
    warps (9B out_proj / o_proj, 4096 x 4096, 4-bit g64) 16 K ranges a block instead of 8 (``GemvPlan.mw``): one-row
    launches then run the whole-share form at 16 warps a block, the others 8 warps of two ranges each, all with the
    same bits a row; ``0`` keeps 8 ranges.

    Measured in session 41 (H100, 9B decode, one process a plan, alternated twice, tok/s at 1 / 8 streams): the
    16-warp plan for every row count (``TENSORFOLD_TC_GEO=4096x4096=2,16``) 360.0 / 1,927.5 and 360.0 / 1,928.8
    against the 8-warp plan's 354.6 / 1,958.9 and 354.5 / 1,959.6: one row +1.5 % (``tc_timeline``: the whole
    form under PDL 9.77 -> 9.17 us a launch), eight rows -1.6 % (the plain kernel at 16 warps is held to 128
    registers). This plan keeps the one-row gain and gives eight rows an 8-warp kernel: 0 -> sq, one process each,
    354.2 / 1,955.4 -> 359.8 / 1,946.8 tok/s (+1.6 % / -0.4 %). The first tensor-core kernel's L2 prefetch
    (``tc_l2``) does not apply to launches of two ranges a warp."""
    return env_choice("TENSORFOLD_TC_VWARPS", "sq", ("0", "sq"), "first tensor-core kernel's 16 K ranges") == "sq"


def tc_geometry(plan, whole: int):
    """(warps a block, K ranges a warp, groups of a range an iteration, reduction groups) of a first-kernel launch
    of ``plan`` (``_gen_tc_source``'s ``nw``, ``vs``, ``u``, ``rg``): ``whole`` (:func:`tc_whole`'s value for the
    launch) runs every range as one warp's whole share; otherwise a plan with ``mw`` runs ``mw`` warps of ``tpb //
    32 // mw`` ranges each, ``u`` groups an iteration where that divides a range's groups, else 1. A plan with
    ``mw`` sums its ranges' partial tiles ``tpb // 32 // mw`` at a time first, in both forms (the same bits)."""
    nw = plan.tpb // 32
    ng = plan.inp // plan.group
    vs = nw // plan.mw if plan.mw and plan.mw < nw else 1
    if whole:
        return nw, 1, ng // (plan.ks * nw), vs
    if vs > 1:  # a range's groups in whole iterations: u when it divides them, else 1
        per = -(-ng // plan.ks)  # groups a block (the kernel's `per`)
        pr = -(-per // nw)  # groups a range
        return plan.mw, vs, plan.u if pr % plan.u == 0 else 1, 1
    return nw, 1, plan.u, 1


def _tc_geo_override(out: int, inp: int):
    """``TENSORFOLD_TC_GEO="OUTxIN=MT,NW;..."`` (measurements only): the first kernel's plan at that shape takes
    ``MT`` 16-row tiles a warp and ``NW`` warps a block, no split-K, for every row count (a shape rule, so a row's
    bits still do not depend on the row count). None when the shape is not listed."""
    v = os.environ.get("TENSORFOLD_TC_GEO", "").strip()
    for item in [t for t in v.split(";") if t.strip()]:
        try:
            shape, geo = item.split("=")
            o, i = (int(t) for t in shape.lower().split("x"))
            mt, nw = (int(t) for t in geo.split(","))
        except ValueError:
            raise ValueError(f"TENSORFOLD_TC_GEO={v!r}: want OUTxIN=MT,NW items separated by ';'") from None
        if mt not in (1, 2) or nw not in (1, 2, 4, 8, 16):
            raise ValueError(f"TENSORFOLD_TC_GEO: {item!r}: MT 1 or 2, NW a power of two up to 16")
        if (o, i) == (out, inp):
            return mt, nw
    return None


def tc_l2(out: int, inp: int) -> bool:
    """``TENSORFOLD_TC_L2`` (read at each launch, like the other kernel switches): whether the first tensor-core
    kernel of an ``out x inp`` weight prefetches its whole share into L2 before the PDL wait
    (``_gen_tc_source(l2=True)``). ``0`` (default) never, ``1`` every shape, ``sq`` square weights only (the GDN
    out_proj and attention o_proj at 2B / 9B, which run behind the GDN step and the attention merge). A function of
    the shape only; the same bits either way.

    Measured in session 39 (H100, one process, two rounds, tok/s at 1 / 8 streams, against 0): 9B sq 353.1 / 352.9
    and 1,954.8 / 1,958.5 vs 352.0 / 352.3 and 1,933.4 / 1,931.9 (+0.2 % / +1.2 %); 2B sq 757.5 / 757.9 vs 759.4 /
    765.9 (-0.3 to -1 %), 2B all 747.2 / 755.6 (-1.3 to -1.6 %). The timeline says why: the 9B out_proj's exposed
    time fell 10.5 -> 8.6-9.0 us, but the GDN step it runs beside grew about 1 us (its loads share the memory system
    with the prefetch), and about 9 us after the wait is x preparation, the 8-warp reduction and the store, not the
    weights' latency. Off by default."""
    v = env_choice("TENSORFOLD_TC_L2", "0", ("0", "1", "sq"), "first tensor-core kernel's L2 prefetch")
    return v == "1" or (v == "sq" and out == inp)


WHOLE_MAX_U = 8  # groups a warp at most in the whole-share form (64 weight words a lane at 4-bit g64, mt 2)
WHOLE_MAX_WORDS = 64  # weight words a lane at most held before the wait (9B 4096 x 4096, 4-bit g64: 174 registers)


def tc_whole(plan, R: int, nt: int, glu: bool, nrm, S, B) -> int:
    """``TENSORFOLD_TC_WHOLE`` (read at each launch): the first tensor-core kernel's whole-share form
    (``_gen_tc_source(whole=...)``) for this launch, as its ``whole`` argument (0: the plan's kernel). ``0`` never,
    ``1`` (the default since session 42) every launch it fits, ``sq`` square weights only (the 2B / 9B GDN out_proj
    and attention o_proj, behind the GDN step and the attention merge; the default in sessions 40-41); where it
    applies, ``TENSORFOLD_TC_L2`` does not. It fits a
    one-row launch of a pipelined plan (``depth`` 1) without the SwiGLU epilogue or the fused norm whose warps all
    own the same number of groups, at most ``WHOLE_MAX_U``, and hold at most
    ``WHOLE_MAX_WORDS`` weight words a lane (8-bit g64 at the 4-bit plan's 8 groups would need 128: it keeps the
    plan's kernel). The value: 8 (scales and biases eight a 16-byte load) for bf16 scales whose rows and arrays
    allow it, else 1. The same bits as the plan's kernel, so the choice may follow the row count.

    Session 42 also timed the form on the 2B gate | up launch with its SwiGLU epilogue (35e53e0, bounded to 3 blocks
    an SM): 808.8 / 810.0 tok/s against 808.3 / 813.2 without, a tie; that switch was removed.

    Session 42 (H100, ``bench_decode --ab-env``, one process, two rounds, tok/s at one stream): ``1`` against ``sq``
    at 2B (in_all, q/k/v and down take the form too) 808.3 / 813.2 against 767.1 / 770.7 (+5 %; both with the GDN
    cluster tail, itself a tie with the default); eight streams 4,781.5 / 4,771.5 against 4,768.9 / 4,769.9. The 9B
    and 27B have no first-kernel launch but the square one, so ``1`` changes nothing there.

    Measured in session 40 (H100, ``benchmarks/tc_timeline.py`` and ``bench_decode --ab-env``): the 9B 4096 x 4096
    launch under PDL 10.2 -> 9.8 us, the 2B 2048 x 2048 4.5 -> 4.4 us; decode, one stream, two rounds, 0 -> sq: 9B
    353.6 / 353.3 -> 354.6 / 354.2 tok/s (+0.3 %), 2B 762.2 / 760.4 -> 763.0 / 766.8 (+0.1 / +0.8 %). Its timeline:
    the x copy waits about 3 us behind the weights issued before the wait, and the arithmetic of 8 groups a warp
    (8 warps an SM) then takes 3.3 us on its own; the form gains little because the kernel is bound by those, not
    by the loads' latency."""
    v = env_choice("TENSORFOLD_TC_WHOLE", "1", ("0", "1", "sq"), "first tensor-core kernel's whole-share form")
    if v == "0" or (v == "sq" and plan.out != plan.inp):
        return 0
    if not (plan.tc and plan.pipe and plan.depth == 1 and R == 1 and nt == 1 and not glu and nrm is None):
        return 0
    ng = plan.inp // plan.group
    nw = plan.tpb // 32
    if ng % (plan.ks * nw):
        return 0
    pw = ng // (plan.ks * nw)
    if not 1 <= pw <= WHOLE_MAX_U or pw * plan.mt * 2 * max(1, plan.group * plan.bits // 128) > WHOLE_MAX_WORDS:
        return 0
    if _scale_kind(S) == "bf16" and pw % 8 == 0 and S.shape[1] % 8 == 0 and B.shape == S.shape and (
            IS_SIM or all(_dev_ptr(a) % 16 == 0 for a in (S, B))):
        return 8
    return 1


def tc_whole_pre(u: int) -> int:
    """``TENSORFOLD_TC_WHOLE_HALF`` (read at each launch; ``0`` default, ``1``): a whole-form launch of ``u`` groups
    a warp (``u >= 2``) loads the first ``u // 2`` groups' weight words before the PDL wait and the rest right after
    x's loads (``_gen_tc_source(wpre=...)``), as its ``wpre`` argument (0: all before the wait). Load order only:
    the same bits. Built in session 41 from session 40's timeline of the 9B whole form (x reaches shared memory
    2.3-3.1 us after the wait, queued behind the weights issued before it; the arithmetic then takes 3.3-3.6 us).
    Measured in session 42 (H100, 9B decode, one process, two rounds): 362.3 / 362.8 tok/s at one stream against
    362.5 / 362.7 without it, a tie, so it stays off."""
    v = env_choice("TENSORFOLD_TC_WHOLE_HALF", "0", ("0", "1"), "whole form's half share after the wait")
    return u // 2 if v == "1" and u >= 2 else 0


def tc_xfrag(out: int, inp: int):
    """``TENSORFOLD_TC_XFRAG`` (read at each launch): ``(xf, l3)`` for a first-kernel launch of an ``out x inp``
    weight. ``xf``: a whole-form launch makes x's mma fragments and group sums once a block, one thread an item,
    instead of in every warp (``_gen_tc_source(xf=...)``); ``l3``: a launch of the plan's kernel decodes a pair of
    codes with one LOP3 where ptxas spent two (``get_tc_pyfunc(l3=...)``). The same bits either way, so the choice
    may follow the shape. ``1`` (the default since session 44): both everywhere; ``0``: neither; ``ns``: ``xf`` on
    the non-square whole launches only (the 2B in_proj, q/k/v and down), ``l3`` everywhere (the H100's best).

    Built in session 43 from the 9B whole form's sm_90 SASS (nvdisasm): after x is staged, 910 instructions a warp,
    a sixth of them x's fragments made 8 times over (for one row the 8 lanes of a column group made the same ones);
    with both, 585 (2B launches 282 -> 152, 1,920 -> 1,160, 907 -> 574, 913 -> 498; loop bodies of the plan's
    kernel 64-72 fewer). Predicted 9B +0.7 to +1.4 %, 2B +1.5 to +3.4 % at one stream.

    Measured in session 44 (``bench_decode --ab-env``, one process a geometry, two rounds, tok/s at one stream):
    H200, 0 / ns / 1: 2B 840.3, 841.4 / 846.5, 845.6 / 853.2, 854.2 (+1.5 %); 9B 0 / 1: 392.1, 392.7 / 399.3, 399.5
    (+1.8 %; 400.4 / 400.3 over 200 steps); eight streams: 9B a tie, 2B -0.5 %. H100, 0 / 1: 2B 810.3, 817.0 /
    820.1, 819.3; 9B 362.8, 363.0 / 361.7, 362.1 (-0.3 %); its phase timeline (``tc_timeline.py --whole --xf``, us
    a launch under PDL): 8224 x 2048 8.96 -> 8.30, 2048 x 6144 8.33 -> 8.05, 4096 x 4096 9.17 -> 9.07, 2048 x 2048
    4.35 -> 4.87; x reaches the warps sooner (9B: 2.3 -> 1.0 us after the wait), the arithmetic ends about when it
    did."""
    v = env_choice("TENSORFOLD_TC_XFRAG", "1", ("0", "1", "ns"), "first GEMV's x fragments / LOP3 decode")
    return v == "1" or (v == "ns" and out != inp), v != "0"


def _dev_ptr(a) -> int:
    return int(a.__cuda_array_interface__["data"][0])


def _v3_enabled(out: int, inp: int) -> bool:
    """Whether ``qgemv``'s persistent kernel takes this weight shape. ``TENSORFOLD_GEMV_V3``: ``auto`` (default)
    for weights of at least ``V3_MIN_CODES`` codes, ``1`` for every shape it supports, ``0`` never. A function of
    the shape only (never of the row count), here also weights of >= ``V3_MID_CODES`` codes with >= ``V3_MID_IN``
    inputs (the 27B out_proj / o_proj, session 16): measured on the H200 at 12da6be (benchmarks/results/
    gemv3_2026-11-30_12da6be.md), 1 row / 8 rows, 4-bit g64: 9B gate/up 29.2 / 50.5 us against 43.3 / 53.1, 27B
    down 30.7 / 61.2 against 45.5 / 52.7, 2B head 105 / 171 against 169 / 195; the 2B gate/up (12288 x 2048) 12.3
    / 21.4 against 12.4 / 13.5, so smaller weights keep the first kernel. Session 15 (ncu): the first kernel streams
    about 1 TB/s at the 9B mid shapes (8 warps an SM at 4096 x 12288), so the line moved from 2^26 to 2^25 (the 9B
    in_proj, q_proj and down join): 9B decode 266-269 -> 300 tok/s at one stream, 1,522 -> 1,412 at eight (qgemv's
    eight rows cost 1.6-2x one row); the 2B shapes (< 2^25) stay (every shape on qgemv was slower at 2B)."""
    v = _v3_mode()
    if v == "0":
        return False
    return v == "1" or out * inp >= v3_min_codes() or (out * inp >= V3_MID_CODES and inp >= V3_MID_IN)


def _v3_mode() -> str:
    return os.environ.get("TENSORFOLD_GEMV_V3", "auto")


V3_MIN_CODES = 1 << 25
# and weights of >= 2^24 codes with >= 6,144 inputs (session 16, bench_gemv3: 27B out_proj / o_proj 5120x6144, 64
# launches a 27B step, 16.0 / 25.2 us at 1 / 8 rows on qgemv against 21.1 / 25.1 on the first kernel's w16)
V3_MID_CODES = 1 << 24
V3_MID_IN = 6144


def v3_min_codes() -> int:
    """The size rule's line: ``V3_MIN_CODES``, or ``2 ** TENSORFOLD_GEMV_V3_LOG2`` when set (measurements)."""
    v = os.environ.get("TENSORFOLD_GEMV_V3_LOG2", "").strip()
    if not v:
        return V3_MIN_CODES
    try:
        return 1 << int(v)
    except ValueError:
        raise ValueError(f"TENSORFOLD_GEMV_V3_LOG2={v!r}: want an integer (log2 of the fewest codes)") from None


def plan_qgemv(out: int, inp: int, bits: int, group: int, scales: str = "bf16", max_tpb: int = 256):
    """Geometry from the weight (shape, format, scale dtype ``scales``: "bf16", "f16" or "f32"), never from the row
    count (see the exactness rule). Formats of ``qgemv.FORMATS`` with bf16 scales get ``qgemv``'s kernel (a
    ``qgemv.V3Plan``) when enabled; other bits 2 (groups 64, 128), 4 and 8 the first tensor-core kernel unless
    ``TENSORFOLD_GEMV_TC=0``; the rest the CUDA-core kernel."""
    if bits != 16 and _tc_enabled() and _qgemv3.supported(bits, group, inp, scales):
        pf = _qgemv3.plan_pf(out, inp, bits, group) if _v3_mode() != "0" else None
        if pf is not None:  # opt-in (TENSORFOLD_GEMV_PF=1): the whole weight fits shared memory, prefetch it
            return pf
        if _v3_enabled(out, inp):
            return _qgemv3.plan(out, inp, bits, group)
    if bits != 16 and _tc_enabled() and _tc_supported(bits, group, inp):
        return plan_tc(out, inp, bits, group)
    return _plan_cuda_core(out, inp, bits, group, max_tpb)


def _rb_for(R: int) -> int:
    for rb in _RB_VARIANTS:
        if R <= rb:
            return rb
    return _RB_VARIANTS[-1]


def _scale_kind(S) -> str:
    dt = np.dtype(S.dtype)
    if dt == np.uint16:
        return "bf16"
    if dt == np.float32:
        return "f32"
    if dt == np.float16:
        return "f16"
    raise TypeError(f"qgemv: scales dtype {dt} (want uint16 bf16 bits, float16 or float32)")


scale_kind = _scale_kind  # the scale dtype name plan_qgemv takes ("bf16", "f32", "f16")


def glu_ok(plan, out: int) -> bool:
    """Whether the decode kernel of ``plan`` has the SwiGLU epilogue (``launch_qgemv(..., glu=True)``) for a fused
    gate | up weight of ``out = 2 I`` rows: the tensor-core kernels (qgemv's any plan, the first one's with one K
    split), ``I % 8 == 0``. Otherwise the caller runs the GEMV into ``[R, 2 I]`` and ``silu_mul_fused_k``."""
    if out % 16:
        return False
    return isinstance(plan, _qgemv3.V3Plan) or (isinstance(plan, GemvPlan) and plan.tc and plan.ks == 1)


def glu_faster(plan, out: int, rows: int) -> bool:
    """Whether a launch of ``rows`` rows should take the SwiGLU epilogue (same bits either way, so this is speed
    policy only): where :func:`glu_ok`, except qgemv launches with a piece of 1-4 rows (its one-n-tile kernel).
    Measured on the H200 (session 17, bench_gemv3 --glu, µs at 1 / 8 rows, plain -> epilogue; the plain figure
    leaves out the ~2 µs silu_mul launch): 2B gate+up (first kernel) 12.3 / 13.0 -> 12.0 / 13.3; 9B gate+up (qgemv)
    29.0 / 46.9 -> 35.4 / 42.0; 27B 44.1 / 70.4 -> 56.2 / 64.6. The one-row epilogue kernel was slow because ptxas
    placed its loads next to their uses (104 registers); compiled with launch bounds since session 18 it is no
    longer (1 row, one machine: 9B 27.8 plain against 29.3 epilogue, 27B 42.7 against 45.1), which with the silu
    launch (~2 us) is break-even, so the policy stands."""
    if not glu_ok(plan, out):
        return False
    return not isinstance(plan, _qgemv3.V3Plan) or not 1 <= rows % 8 <= 4


def launch_qgemv(W, S, B, x, y, bits: int, group: int, plan: GemvPlan | None = None, ws=None, stream=0, rows=None,
                 no: int | None = None, glu: bool = False, cnt=None, norm=None):
    """y[:R] = x[:R] @ dequant(W, S, B).T on the device (R = rows or x.shape[0], 1..16 rows per launch is the
    intended use; more rows work). Arrays are device arrays (or numpy in the simulator). ``ws`` is the split-K
    workspace (float32, at least ``[plan.ks, R, out]``) when ``plan.ks > 1``; ``stream`` may be a graph builder.
    ``no`` (weight rows per block) forces the CUDA-core kernel with that geometry (benchmarks, tests).
    ``glu``: W is a fused gate | up weight (``out = 2 I``) and ``y [R, I]`` gets ``swiglu(gate, up)`` in the
    GEMV's epilogue; only where :func:`glu_ok` (a ValueError otherwise). ``cnt``: qgemv's arrival counters
    (``qgemv.new_counters``; default the shared set). ``norm`` = (h, d, mult, h_out, eps): one row whose x the
    kernel makes first as ``norms.launch_add_rms_norm(d, h, mult, x, eps)`` would (the residual into ``h_out``);
    tensor-core plans only (:func:`norm_fusable`), a ValueError otherwise."""
    R = int(rows if rows is not None else x.shape[0])
    out, inp = S.shape[0], x.shape[1]  # rows from the scales: a swept weight (qgemv plan.sw) is [pieces, ...]
    if plan is None:
        plan = plan_qgemv(out, inp, bits, group, _scale_kind(S))
    if isinstance(plan, _qgemv3.V3Plan):
        if no is None:  # qgemv checks its own shapes (swept ones included) and the SwiGLU epilogue's
            if _scale_kind(S) != "bf16":
                raise ValueError(f"launch_qgemv: a qgemv plan needs bf16 scales, got {_scale_kind(S)} "
                                 "(plan with plan_qgemv(..., scales=...))")
            return _qgemv3.launch(W, S, B, x, y, plan, R, ws=ws, stream=stream, glu=glu, cnt=cnt, norm=norm)
        if plan.sw:
            raise ValueError("launch_qgemv: no= (the CUDA-core kernel) needs an MLX-layout weight, not a swept one")
    if glu and (no is not None or not glu_ok(plan, out) or y.shape[1] != out // 2):
        raise ValueError(f"launch_qgemv: no SwiGLU epilogue for this plan / shape ({plan}, y {tuple(y.shape)})")
    if isinstance(plan, _qgemv3.V3Plan):
        plan = _plan_cuda_core(out, inp, bits, group)
    if no is not None and plan.tc:
        plan = _plan_cuda_core(out, inp, bits, group)
    if norm is not None and not (no is None and norm_fusable(plan)):
        raise ValueError(f"launch_qgemv: a fused add + RMSNorm needs a tensor-core plan whose blocks all have K "
                         f"columns ({plan})")
    nrm, nargs = norms.fused_args(norm, x, R)
    tpb = plan.tpb
    if plan.tc:
        nt = 1 if R <= 8 else 2
        wh = tc_whole(plan, R, nt, glu, nrm, S, B)
        nw, vs, u, rg = tc_geometry(plan, wh)
        xf, l3 = tc_xfrag(out, inp)
        tpb = 32 * nw
        if wh:
            k = get_tc_kernel(bits, group, nt, nw, plan.mt, u, _scale_kind(S), True, 1, whole=wh, rg=rg,
                              wpre=tc_whole_pre(u), xf=xf)
        else:
            k = get_tc_kernel(bits, group, nt, nw, plan.mt, u, _scale_kind(S), plan.pipe, plan.depth, glu, nrm,
                              vs == 1 and tc_l2(out, inp), vs=vs, l3=l3)
        grid = (-(-out // (16 * plan.mt)), -(-R // (8 * nt)), plan.ks)
    else:
        rb = _rb_for(R)
        no = _no(rb) if no is None else no
        k = get_qgemv_kernel(bits, group, rb, plan.tpb, _scale_kind(S), no)
        grid = (-(-out // no), -(-R // rb), plan.ks)
    if plan.ks == 1:
        y3 = y.reshape((1,) + tuple(y.shape))
        k[grid, tpb, stream](W, S, B, x, y3, np.int32(R), np.int32(0), np.int32(0), *nargs)
    else:
        if ws is None:
            raise ValueError("launch_qgemv: plan.ks > 1 needs a workspace ws [ks, R, out] float32")
        k[grid, tpb, stream](W, S, B, x, ws, np.int32(R), np.int32(0), np.int32(0), *nargs)
        n = R * out
        _splitk_reduce[min(1024, -(-n // 256)), 256, stream](ws, y, np.int32(R))
    return y


def norm_fusable(plan) -> bool:
    """Whether :func:`launch_qgemv` takes ``norm=`` for a weight of this plan: the tensor-core kernels; a first-kernel
    plan only when no block's K range is empty (its warps read x from the block's own shared columns, and the
    pipelined form multiplies a skipped group by zero instead of branching: a column outside them would be
    uninitialized shared memory)."""
    if isinstance(plan, _qgemv3.V3Plan):
        return True
    if not (isinstance(plan, GemvPlan) and plan.tc):
        return False
    ng = plan.inp // plan.group
    return (plan.ks - 1) * -(-ng // plan.ks) < ng


def launch_dense_gemv(W32, x, y, plan: GemvPlan | None = None, ws=None, stream=0, rows=None):
    """bf16 dense GEMV: W32 is the uint32 view ``[out, in/2]`` of bf16 bits ``[out, in]`` (in a multiple of 8)."""
    out, inp = W32.shape[0], x.shape[1]
    R = int(rows if rows is not None else x.shape[0])
    if plan is None:
        plan = plan_qgemv(out, inp, 16, 0)
    rb = _rb_for(R)
    k = get_qgemv_kernel(16, 0, rb, plan.tpb, "none")
    grid = (-(-out // _no(rb)), -(-R // rb), plan.ks)
    if plan.ks == 1:
        k[grid, plan.tpb, stream](W32, x, y.reshape((1,) + tuple(y.shape)), np.int32(R), np.int32(0), np.int32(0))
    else:
        if ws is None:
            raise ValueError("launch_dense_gemv: plan.ks > 1 needs a workspace")
        k[grid, plan.tpb, stream](W32, x, ws, np.int32(R), np.int32(0), np.int32(0))
        _splitk_reduce[min(1024, -(-(R * out) // 256)), 256, stream](ws, y, np.int32(R))
    return y


# ----------------------------------------------------------------------------------------------------------------
# prompt GEMM: 64x64 output tiles, K tiles of 32, weight tile dequantized once into shared memory
# ----------------------------------------------------------------------------------------------------------------

GM_BM, GM_BN, GM_BK, GM_TPB = 64, 64, 32, 256


def _gen_gemm_source(name: str, bits: int, group: int, sk: str) -> str:
    BM, BN, BK = GM_BM, GM_BN, GM_BK
    L = []
    a = L.append
    a(f"def {name}(W, S, B, x, y, R):")
    a("    tid = cuda.threadIdx.x")
    a(f"    xs = cuda.shared.array(({BK}, {BM + 4}), np.float32)")  # transposed: xs[k, m]
    a(f"    wsh = cuda.shared.array(({BK}, {BN + 4}), np.float32)")  # transposed: wsh[k, n]
    a("    out = W.shape[0]")
    a("    K = x.shape[1]")
    a(f"    n0 = cuda.blockIdx.x * {BN}")
    a(f"    m0 = cuda.blockIdx.y * {BM}")
    a("    tx = tid & 15")
    a("    ty = tid >> 4")
    for i in range(4):
        for j in range(4):
            a(f"    c{i}_{j} = np.float32(0.0)")
    a(f"    for k0 in range(0, K, {BK}):")
    # x tile: BM*BK = 2048 floats, 8 per thread
    a(f"        for e in range(tid, {BM * BK}, 256):")
    a(f"            mm = e // {BK}")
    a(f"            kk = e - mm * {BK}")
    a("            gm = m0 + mm")
    a("            v = np.float32(0.0)")
    a("            if gm < R:")
    a("                v = x[gm, k0 + kk]")
    a("            xs[kk, mm] = v")
    # w tile: BN rows x BK codes; thread handles one (row, 8 consecutive codes)
    a(f"        for e in range(tid, {BN * BK // 8}, 256):")
    a(f"            nn = e // {BK // 8}")
    a(f"            kk8 = (e - nn * {BK // 8}) * 8")
    a("            gn = min(n0 + nn, out - 1)")
    a("            col = k0 + kk8")
    a(f"            gi = col // {group}")
    a(f"            s = {_scale_expr('S', 'gn', 'gi', sk)}")
    a(f"            b = {_scale_expr('B', 'gn', 'gi', sk)}")
    a(f"            bit0 = col * {bits}")
    m = (1 << bits) - 1
    for t in range(8):
        a(f"            off = bit0 + {t * bits}")
        a("            wi = off >> 5")
        a("            sh = off & 31")
        a("            v32 = W[gn, wi] >> np.uint32(sh)")
        if bits in (3, 5, 6):
            a(f"            if sh + {bits} > 32:")
            a("                v32 = v32 | (W[gn, wi + 1] << np.uint32(32 - sh))")
        a(f"            qf = np.uint32((v32 & np.uint32({m})) | np.uint32({_MAGIC})).view(np.float32) - _TWO23")
        a(f"            wsh[kk8 + {t}, nn] = s * qf + b")
    a("        cuda.syncthreads()")
    a(f"        for kk in range({BK}):")
    for i in range(4):
        a(f"            a{i} = xs[kk, ty * 4 + {i}]")
    for j in range(4):
        a(f"            b{j} = wsh[kk, tx * 4 + {j}]")
    for i in range(4):
        for j in range(4):
            a(f"            c{i}_{j} += a{i} * b{j}")
    a("        cuda.syncthreads()")
    for i in range(4):
        for j in range(4):
            a(f"    if m0 + ty * 4 + {i} < R and n0 + tx * 4 + {j} < out:")
            a(f"        y[m0 + ty * 4 + {i}, n0 + tx * 4 + {j}] = c{i}_{j}")
    return "\n".join(L) + "\n"


def get_qgemm_pyfunc(bits: int, group: int, sk: str = "bf16"):
    key = ("gpy", bits, group, sk)
    if key not in _KCACHE:
        name = f"qgemm_b{bits}_g{group}_{sk}"
        _KCACHE[key] = _build(name, _gen_gemm_source(name, bits, group, sk))
    return _KCACHE[key]


def get_qgemm_kernel(bits: int, group: int, sk: str = "bf16"):
    key = ("gk", bits, group, sk)
    if key not in _KCACHE:
        _KCACHE[key] = _kcache.jit(get_qgemm_pyfunc(bits, group, sk))
    return _KCACHE[key]


def launch_qgemm(W, S, B, x, y, bits: int, group: int, stream=0, rows=None):
    """Prompt GEMM y[:R] = x[:R] @ dequant(W).T for many rows (R any; in a multiple of 32)."""
    out, inp = W.shape[0], x.shape[1]
    if inp % GM_BK:
        raise ValueError(f"qgemm: in={inp} must be a multiple of {GM_BK}")
    R = int(rows if rows is not None else x.shape[0])
    k = get_qgemm_kernel(bits, group, _scale_kind(S))
    k[(-(-out // GM_BN), -(-R // GM_BM)), GM_TPB, stream](W, S, B, x, y, np.int32(R))
    return y


# ----------------------------------------------------------------------------------------------------------------
# compile tier
# ----------------------------------------------------------------------------------------------------------------

_Q = "void(uint32[:, ::1], uint16[:, ::1], uint16[:, ::1], float32[:, ::1], float32[:, :, ::1], int32, int32, int32)"
_QF = "void(uint32[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, ::1], float32[:, :, ::1], int32, int32, int32)"
_QN = _Q[:-1] + ", float32[:, ::1], float32[:, ::1], float32[::1], float32[:, ::1], float32)"  # + norms.FUSED_ARGS
_D = "void(uint32[:, ::1], float32[:, ::1], float32[:, :, ::1], int32, int32, int32)"
_G = "void(uint32[:, ::1], uint16[:, ::1], uint16[:, ::1], float32[:, ::1], float32[:, ::1], int32)"


def _specs():
    specs = []
    hot = set()
    # tensor-core GEMV (the default for bits 2/4/8): 4-bit g64 at the warps-per-block counts the plans choose for
    # the real shapes (1, 2, 4, 8) and both n-tile variants (hot); the other formats and float32 scales once
    for nt, nw in ((1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 4), (2, 8)):
        f = get_tc_pyfunc(4, 64, nt, nw)
        specs.append((f, _Q))
        hot.add(f.__name__)
    for bits, group, nw in ((8, 64, 4), (8, 128, 1), (8, 32, 8), (2, 64, 4), (2, 128, 1), (4, 32, 4), (4, 128, 2)):
        f = get_tc_pyfunc(bits, group, 1, nw)
        specs.append((f, _Q))
        if (bits, group) == (8, 64):
            hot.add(f.__name__)
    specs.append((get_tc_pyfunc(4, 64, 1, 4, sk="f32"), _QF))
    f = get_tc_pyfunc(4, 64, 1, 4, pipe=True)  # the pipelined form (opt-in, TENSORFOLD_GEMV_PIPE=1), once
    specs.append((f, _Q))
    hot.add(f.__name__)
    # the latency variants (TC_VARIANTS), 4-bit g64: both n-tiles at the most warps per block their plans choose for
    # the real shapes (9B / 27B MLP, 2B head), one n-tile at the fewest (hot). The 16-warp kernels assemble to
    # 80-106 registers (<= 128, the limit for 512-thread blocks; the GPU build also sets launch_bounds)
    real = ((12288, 4096), (4096, 12288), (17408, 5120), (5120, 17408), (248320, 2048))
    for vname in ("w16", "w16d2", "w16d3", "sk", "skd2", "pipe2"):
        ps = [plan_tc(out, inp, 4, 64, variant=vname) for out, inp in real]
        lo, hi = min(p.tpb for p in ps), max(p.tpb for p in ps)
        p = ps[0]
        for nt, tpb in ((1, hi), (2, hi), (1, lo)) if lo != hi else ((1, hi), (2, hi)):
            f = get_tc_pyfunc(4, 64, nt, tpb // 32, p.mt, p.u, "bf16", True, p.depth)
            specs.append((f, _Q))
            hot.add(f.__name__)
    # the SwiGLU epilogue at the 2B gate | up plan (12288 x 2048), both n-tiles (the first kernel's plan by name:
    # plan_qgemv gives a qgemv plan there under TENSORFOLD_GEMV_V3=1, which broke this module's import)
    p = plan_tc(12288, 2048, 4, 64)
    for nt in (1, 2):
        f = get_tc_pyfunc(4, 64, nt, p.tpb // 32, p.mt, p.u, "bf16", p.pipe, p.depth, glu=True)
        specs.append((f, _Q))
        hot.add(f.__name__)
    # the fused add + RMSNorm prologue (opt-in, TENSORFOLD_NORM_FUSE=1) in the one-row kernel of a 2B consumer of
    # a norm, once: gate | up with the SwiGLU epilogue (12288 x 2048)
    p = plan_tc(12288, 2048, 4, 64)
    f = get_tc_pyfunc(4, 64, 1, p.tpb // 32, p.mt, p.u, "bf16", p.pipe, p.depth, glu=True,
                      nrm=norms.norm_v_geometry(2048, False))
    specs.append((f, _QN))
    hot.add(f.__name__)
    # the L2 prefetch before the wait (opt-in, TENSORFOLD_TC_L2) at a square plan it is for, once: the 9B out_proj
    # / o_proj (4096 x 4096, pipe2 at 8 K ranges: TENSORFOLD_TC_VWARPS=0), one n-tile (hot)
    p = plan_tc(4096, 4096, 4, 64)
    f = get_tc_pyfunc(4, 64, 1, p.mw or p.tpb // 32, p.mt, p.u, "bf16", p.pipe, p.depth, l2=True)
    specs.append((f, _Q))
    hot.add(f.__name__)
    # the 9B square plan's launches of more than one row (TENSORFOLD_TC_VWARPS: 8 warps of two K ranges), both
    # n-tiles (hot)
    p = plan_tc(4096, 4096, 4, 64)
    nw, vs, u, _ = tc_geometry(p, 0)
    for nt in (1, 2):
        f = get_tc_pyfunc(4, 64, nt, nw, p.mt, u, "bf16", p.pipe, p.depth, vs=vs)
        if (f, _Q) not in specs:
            specs.append((f, _Q))
            hot.add(f.__name__)
    # the whole-share form (TENSORFOLD_TC_WHOLE=1), one row (hot), as tc_whole picks it: 9B 4096 x 4096 (pipe2 at
    # 16 K ranges: 4 groups a warp, 16 warps), and the 2B launches: out_proj / o_proj 2048 x 2048 (w16, 2 groups),
    # in_proj 8224 x 2048 (pipe2, 8 groups, scales eight a 16-byte load), q/k/v 5120 x 2048 (4 groups), down
    # 2048 x 6144 (w16, 6 groups); the 9B one also with half its share after the wait (TENSORFOLD_TC_WHOLE_HALF=1)
    def whole_spec(out, inp, half=False, xf=False):
        p = plan_tc(out, inp, 4, 64)
        nw, _, pw, rg = tc_geometry(p, 1)
        f = get_tc_pyfunc(4, 64, 1, nw, p.mt, pw, "bf16", True, 1, whole=8 if pw % 8 == 0 else 1, rg=rg,
                          wpre=pw // 2 if half else 0, xf=xf)
        if (f, _Q) not in specs:
            specs.append((f, _Q))
            hot.add(f.__name__)

    for out, inp in ((4096, 4096), (2048, 2048), (8224, 2048), (5120, 2048), (2048, 6144)):
        whole_spec(out, inp, xf=True)  # ... with x's fragments made once a block (the default, TENSORFOLD_TC_XFRAG)
    whole_spec(4096, 4096)  # ... and without (opt-out, TENSORFOLD_TC_XFRAG=0), once
    # the LOP3 decode (TENSORFOLD_TC_XFRAG, 1 or ns) of the other hot launches: the 2B gate | up with
    # the SwiGLU epilogue and the 9B square plan's launches of several rows (8 warps of two K ranges), both n-tiles
    p = plan_tc(12288, 2048, 4, 64)
    for nt in (1, 2):
        f = get_tc_pyfunc(4, 64, nt, p.tpb // 32, p.mt, p.u, "bf16", p.pipe, p.depth, glu=True, l3=True)
        specs.append((f, _Q))
        hot.add(f.__name__)
    p = plan_tc(4096, 4096, 4, 64)
    nw, vs, u, _ = tc_geometry(p, 0)
    for nt in (1, 2):
        f = get_tc_pyfunc(4, 64, nt, nw, p.mt, u, "bf16", p.pipe, p.depth, vs=vs, l3=True)
        specs.append((f, _Q))
        hot.add(f.__name__)
    whole_spec(4096, 4096, half=True)
    # ... and the 9B one at 8 K ranges (TENSORFOLD_TC_VWARPS=0: 8 groups a warp, scales eight a 16-byte load)
    f = get_tc_pyfunc(4, 64, 1, 8, 2, 8, "bf16", True, 1, whole=8)
    specs.append((f, _Q))
    hot.add(f.__name__)
    # 8-bit g64 through a 16-warp variant (capped at 8 warps for 4+ words a lane and group), both n-tiles
    p = plan_tc(12288, 4096, 8, 64, variant="w16d2")
    for nt in (1, 2):
        specs.append((get_tc_pyfunc(8, 64, nt, p.tpb // 32, p.mt, p.u, "bf16", True, p.depth), _Q))
    # the CUDA-core kernel (3/5/6 bits, and every format with TENSORFOLD_GEMV_TC=0)
    for rb, tpb in ((1, 128), (1, 192), (2, 128), (4, 192), (8, 128), (8, 192)):
        f = get_qgemv_pyfunc(4, 64, rb, tpb, "bf16")
        specs.append((f, _Q))
        if rb in (1, 8):
            hot.add(f.__name__)
    # other formats at one geometry each (the simulator tier checks every bits x group numerically)
    for bits, group in ((2, 32), (3, 64), (5, 32), (6, 64), (8, 64)):
        specs.append((get_qgemv_pyfunc(bits, group, 1, 128, "bf16"), _Q))
    specs.append((get_qgemv_pyfunc(4, 64, 1, 128, "f32"), _QF))
    for rb in (1, 8):
        f = get_qgemv_pyfunc(16, 0, rb, 128, "none")
        specs.append((f, _D))
        hot.add(f.__name__)
    specs.append((_splitk_reduce_py, "void(float32[:, :, ::1], float32[:, ::1], int32)"))
    for bits, group in ((4, 64), (6, 64)):
        specs.append((get_qgemm_pyfunc(bits, group, "bf16"), _G))
    return specs, hot


COMPILE_SPECS, HOT = _specs()

_ = (math, _device, IS_SIM)
