"""MLX affine quantized (and bf16 dense) matrix-vector products for 1..16 rows, and the prompt GEMM.

Owns
- ``qgemv``: ``y[r, o] = sum_i x[r, i] * (s[o, g] * q[o, i] + b[o, g])`` for bits 2, 3, 4, 5, 6, 8 and groups 32,
  64, 128, straight from MLX packing (packed uint32 ``[out, in*bits/32]``, scales / biases ``[out, in/group]`` as
  bf16 bits (uint16), float16 or float32). x float32 ``[R, in]``, y float32 ``[R, out]``. Per segment of a group
  that one thread handles (16 bytes of weights for 2/4/8 bits = 64/32/16 codes; a whole group for 3/5/6 bits) it
  computes ``s * dot(q, x) + b * sum(x)`` with fp32 accumulation, MLX's ``qdot`` form.
- ``dense_gemv``: the same for bias-free bf16 weights (``uint16 [out, in]`` bits, passed as their ``uint32`` view
  ``[out, in/2]``).
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

Measured on the H200 (benchmarks/results/kernels_2026-11-30.md; copy ceiling 4.23 TB/s): 4-bit g64 at 1 row
28-40 % of copy (9B gate 12288x4096 23.8 us, 9B head 248320x4096 337 us; torch bf16 matmul 30 / 480 us), i.e.
instruction-bound on the decode (about 9 PTX instructions per weight), not yet the 70 % target; 8 rows 5.4x the
1-row time (NO=4); dense bf16 at 1 row 73 % of copy (on par with torch); prompt GEMM 13.5 TFLOP/s fp32.

Launch geometry (qgemv): grid ``(ceil(out / NO), ceil(R / RB), KS)``, block ``TPB`` threads (a multiple of 32,
chosen so every thread gets whole 16-byte chunks of the row), ``NO = 4`` weight rows per block (``no=`` overrides); every thread
strides over the row's 16-byte chunks (coalesced 512 bytes per warp-load), keeps ``NO * RB`` accumulators in
registers, then a warp butterfly and a fixed-order sum over the block's warps. Split-K (``KS > 1``, for
tall-skinny shapes with too few blocks) writes partial sums to a workspace ``[KS, R, out]`` that
``_splitk_reduce`` adds in fixed order. qgemm: grid ``(ceil(out / 64), ceil(R / 64))``, 256 threads, each a 4x4
register tile; K in tiles of 32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import cuda

from . import _device
from ._device import IS_SIM, bf16_to_f32, ldg_f32x4_2d, ldg_u32x4_2d, warp_sum

__all__ = [
    "GemvPlan",
    "plan_qgemv",
    "launch_qgemv",
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


def _build(name: str, src: str):
    glb = {
        "cuda": cuda,
        "np": np,
        "bf16_to_f32": bf16_to_f32,
        "ldg_u32x4_2d": ldg_u32x4_2d,
        "ldg_f32x4_2d": ldg_f32x4_2d,
        "warp_sum": warp_sum,
        "_TWO23": np.float32(8388608.0),
    }
    glb.update(_HELPERS)
    code = compile(src, f"<tensorfold.kernels.affine:{name}>", "exec")
    exec(code, glb)
    fn = glb[name]
    fn.__module__ = __name__
    fn._tf_source = src
    return fn


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
        _KCACHE[key] = cuda.jit(get_qgemv_pyfunc(bits, group, rb, tpb, sk, no))
    return _KCACHE[key]


def _splitk_reduce_py(ws, y, R):
    """y[r, o] = sum_z ws[z, r, o] in z order (grid-stride over R*out)."""
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


_splitk_reduce = cuda.jit(_splitk_reduce_py)


# ----------------------------------------------------------------------------------------------------------------
# planning and launch
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemvPlan:
    out: int
    inp: int
    bits: int
    group: int
    tpb: int
    ks: int

    @property
    def workspace_shape(self):
        """Shape of the float32 split-K workspace for ``rows`` = 16 (None when ks == 1)."""
        return None if self.ks == 1 else (self.ks, 16, self.out)


def plan_qgemv(out: int, inp: int, bits: int, group: int, max_tpb: int = 256) -> GemvPlan:
    """Geometry from the weight shape only (never from the row count: see the exactness rule)."""
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


def launch_qgemv(W, S, B, x, y, bits: int, group: int, plan: GemvPlan | None = None, ws=None, stream=0, rows=None,
                 no: int | None = None):
    """y[:R] = x[:R] @ dequant(W, S, B).T on the device (R = rows or x.shape[0], 1..16 rows per launch is the
    intended use; more rows work). Arrays are device arrays (or numpy in the simulator). ``ws`` is the split-K
    workspace (float32, at least ``[plan.ks, R, out]``) when ``plan.ks > 1``; ``stream`` may be a graph builder."""
    out, inp = W.shape[0], x.shape[1]
    R = int(rows if rows is not None else x.shape[0])
    if plan is None:
        plan = plan_qgemv(out, inp, bits, group)
    rb = _rb_for(R)
    no = _no(rb) if no is None else no
    k = get_qgemv_kernel(bits, group, rb, plan.tpb, _scale_kind(S), no)
    grid = (-(-out // no), -(-R // rb), plan.ks)
    if plan.ks == 1:
        y3 = y.reshape((1,) + tuple(y.shape))
        k[grid, plan.tpb, stream](W, S, B, x, y3, np.int32(R), np.int32(0), np.int32(0))
    else:
        if ws is None:
            raise ValueError("launch_qgemv: plan.ks > 1 needs a workspace ws [ks, R, out] float32")
        k[grid, plan.tpb, stream](W, S, B, x, ws, np.int32(R), np.int32(0), np.int32(0))
        n = R * out
        _splitk_reduce[min(1024, -(-n // 256)), 256, stream](ws, y, np.int32(R))
    return y


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
        _KCACHE[key] = cuda.jit(get_qgemm_pyfunc(bits, group, sk))
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
_D = "void(uint32[:, ::1], float32[:, ::1], float32[:, :, ::1], int32, int32, int32)"
_G = "void(uint32[:, ::1], uint16[:, ::1], uint16[:, ::1], float32[:, ::1], float32[:, ::1], int32)"


def _specs():
    specs = []
    hot = set()
    # the decode shapes' geometry: 4-bit g64 at 4 and 6 warps for 1 and 8 rows (hot), and every bits x group once
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
