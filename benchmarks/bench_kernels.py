"""Kernel benchmark harness (part A owns it; part B adds entries in ``benchmarks/bench_kernels_b.py``).

Run on the GPU machine:  ``NUMBA_ENABLE_CUDASIM=0 python benchmarks/bench_kernels.py [--out DIR] [--only SUBSTR]``

What it does
- Measures the copy ceiling: device-to-device copy of 1 GiB with cupy (bytes read + written), median of 5.
- Runs every registered case: compiles and runs it once (warm), captures ``n`` launches of it into one CUDA graph
  (``cuda.core`` graph builder: ``kernel[grid, block, gb](...)``) and times replays (host clock around
  ``graph.launch(stream); stream.sync()``, median of 5 replays, divided by the launches per graph). If capture
  fails it falls back to timing back-to-back launches (then Python dispatch is included) and says so per row.
- Weights are rotated over enough copies (>= 256 MB in total) that replays cannot run out of the 50 MB L2.
- ``--pdl``: the graph is built with programmatic dependent launch for PDL-aware kernels, as the runtime's decode
  graphs are (each launch's first weight loads overlap the previous launch's tail); rows say ``graph+pdl``.
- Reports time, bytes moved (weights + scales + activations in and out), GB/s and % of the copy rate, TFLOP/s for
  GEMMs, and a peer time (torch bf16 ``matmul`` at the same shape, same rotation, CUDA events) where given.
- Writes ``kernels_<UTC date>.md`` and ``.json`` (commit hash, GPU name, command) into ``--out``.

Part B's ``benchmarks/bench_kernels_b.py`` is imported when present: its self-timed ``ENTRIES`` =
``[(name, fn(model) -> list[dict])]`` (dicts with name, model, shape, us, bytes, gbs, tflops) are run for 2B, 9B,
27B and added to the same table (``--no-b`` skips them). Alternatively it can use the registry::

    from bench_kernels import register, Case
    @register("delta_rule")
    def _cases(ctx):            # ctx: dict with cuda (numba.cuda), cp (cupy), torch, dev_rand_f32(shape) ...
        ...
        return [Case(name="gdn step", model="9B", shape="...", nbytes=..., launches=[lambda s: k[g, b, s](...)])]

``launches`` is a list of callables taking a stream (a graph builder while capturing); the harness cycles
through them (one per rotated weight copy). ``flops`` and ``peer`` (a callable returning milliseconds) are
optional.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

REGISTRY: list = []


@dataclass
class Case:
    name: str
    model: str
    shape: str
    nbytes: int
    launches: list
    flops: int = 0
    peer: object = None
    peer_name: str = "torch bf16 matmul"
    n_in_graph: int = 0
    notes: str = ""
    result: dict = field(default_factory=dict)
    tag: dict = field(default_factory=dict)  # copied into the row (the GEMV variant table reads it)


def _selected(only: str, name: str) -> bool:
    """--only takes a comma list of substrings; empty selects everything."""
    parts = [p for p in only.split(",") if p]
    return not parts or any(p in name for p in parts)


def register(name):
    def deco(fn):
        REGISTRY.append((name, fn))
        return fn

    return deco


SHAPES = {  # (hidden, intermediate, vocab)
    "2B": (2048, 6144, 248320),
    "9B": (4096, 12288, 248320),
    "27B": (5120, 17408, 248320),
}
L2_DEFEAT_BYTES = 256 << 20
# --pdl: the graphs are built with programmatic dependent launch for aware kernels (``kernels._pdl.scope``), as the
# runtime's decode graphs are, so a launch's first weight loads overlap the previous launch's tail
PDL = [False]
# --floor: the decode table gains, a shape, the read floor of its weight bytes (``_floor_cases``)
FLOOR = [False]
DEC_ROWS = [(1, 8)]  # --rows: the decode group's row counts
# --min-graph: launches a graph holds for a case without its own count (``Case.n_in_graph``). A replay is timed on
# the host (graph launch + stream sync), and that fixed cost is divided over the graph's launches: at 10 (the count
# until session 53) it added several µs to every launch of a small kernel. Cases that set their own count (the
# elementwise and norm cases: 50; sampling: 20; the prompt GEMM: 5) keep it, and their bias with it
MIN_GRAPH = [400]
DEC_MODELS = [("2B", "9B", "27B")]  # --models: the decode group's geometries


# ----------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------


def _ctx():
    import cupy as cp
    import numpy as np
    from numba import cuda

    try:
        import torch
    except Exception:  # noqa: BLE001
        torch = None

    def rand_u32(shape):
        a = cp.random.randint(0, 2**31 - 1, size=shape, dtype=cp.int64).astype(cp.uint32)
        a ^= cp.random.randint(0, 2, size=shape, dtype=cp.int64).astype(cp.uint32) << cp.uint32(31)
        return cuda.as_cuda_array(a), a

    def rand_f32(shape, scale=1.0):
        a = (cp.random.standard_normal(shape, dtype=cp.float32) * cp.float32(scale)).astype(cp.float32)
        return cuda.as_cuda_array(a), a

    def rand_bf16(shape, scale=0.02):
        f = cp.random.standard_normal(shape, dtype=cp.float32) * cp.float32(scale)
        a = (f.view(cp.uint32) >> cp.uint32(16)).astype(cp.uint16)
        return cuda.as_cuda_array(a), a

    return {"cuda": cuda, "cp": cp, "np": np, "torch": torch, "rand_u32": rand_u32, "rand_f32": rand_f32,
            "rand_bf16": rand_bf16}


def _copies(nbytes):
    return max(1, min(40, -(-L2_DEFEAT_BYTES // max(1, nbytes))))


def copy_bandwidth(ctx):
    cp = ctx["cp"]
    n = 1 << 30
    a = cp.random.randint(0, 255, n, dtype=cp.uint8)
    b = cp.empty_like(a)
    cp.copyto(b, a)
    cp.cuda.runtime.deviceSynchronize()
    ts = []
    for _ in range(5):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        for _ in range(10):
            cp.copyto(b, a)
        e1.record()
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) / 10)
    ms = statistics.median(ts)
    return 2 * n / (ms * 1e-3) / 1e9


def time_case(case: Case, ctx):
    """Median seconds per launch: graph replay if capture works, else back-to-back launches."""
    cuda = ctx["cuda"]
    for f in case.launches:  # warm: compile + run every variant
        f(0)
    cuda.synchronize()
    n = case.n_in_graph or max(len(case.launches), MIN_GRAPH[0])
    try:
        try:
            from cuda.core import Device
        except ImportError:  # older cuda.core
            from cuda.core.experimental import Device
        dev = Device()
        dev.set_current()
        stream = dev.create_stream()
        from tensorfold.kernels import _pdl

        gb = dev.create_graph_builder()
        gb.begin_building()
        with _pdl.scope(PDL[0]):
            pdl = _pdl.active()
            for i in range(n):
                case.launches[i % len(case.launches)](gb)
        graph = gb.end_building().complete()
        graph.launch(stream)
        stream.sync()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            graph.launch(stream)
            stream.sync()
            ts.append((time.perf_counter() - t0) / n)
        return statistics.median(ts), "graph+pdl" if pdl else "graph"
    except Exception as e:  # noqa: BLE001
        case.notes += f" graph capture failed ({type(e).__name__}: {str(e)[:120]}); timed back-to-back launches"
        ts = []
        for _ in range(5):
            cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(n):
                case.launches[i % len(case.launches)](0)
            cuda.synchronize()
            ts.append((time.perf_counter() - t0) / n)
        return statistics.median(ts), "launch-loop"


def torch_matmul_peer(ctx, R, out, inp):
    torch = ctx["torch"]
    if torch is None:
        return None
    nbytes = out * inp * 2
    ncp = _copies(nbytes)
    Ws = [torch.randn(out, inp, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(ncp)]
    x = torch.randn(R, inp, device="cuda", dtype=torch.bfloat16)

    def run():
        for _ in range(3):
            for W in Ws:
                torch.matmul(x, W.t())
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            reps = max(10, len(Ws))
            e0.record()
            for i in range(reps):
                torch.matmul(x, Ws[i % len(Ws)].t())
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) / reps)
        del Ws[:]
        return statistics.median(ts)

    return run


# ----------------------------------------------------------------------------------------------------------------
# part A cases
# ----------------------------------------------------------------------------------------------------------------


def affine_copies(ctx, out, inp, bits, group):
    """(bytes of one copy, [(P, S, B, keep...)]): enough random MLX-packed copies of a weight (bf16 scales /
    biases) that rotating through them defeats L2."""
    wbytes = out * inp * bits // 8 + 2 * 2 * out * (inp // group)
    mats = []
    for _ in range(_copies(wbytes)):
        P, _p = ctx["rand_u32"]((out, inp * bits // 32))
        S, _s = ctx["rand_bf16"]((out, inp // group))
        B, _b = ctx["rand_bf16"]((out, inp // group))
        mats.append((P, S, B, _p, _s, _b))
    return wbytes, mats


def _qgemv_case(ctx, model, label, out, inp, R, bits=4, group=64, peer=True, no=None, plan=None):
    from tensorfold.kernels import affine as A

    cuda = ctx["cuda"]
    if plan is None:
        plan = A._plan_cuda_core(out, inp, bits, group) if no is not None else A.plan_qgemv(out, inp, bits, group)
    wbytes, mats = affine_copies(ctx, out, inp, bits, group)
    x, _x = ctx["rand_f32"]((R, inp))
    y = cuda.device_array((R, out), dtype="float32")
    ws = cuda.device_array((plan.ks, R, out), dtype="float32") if plan.ks > 1 else None

    def mk(m):  # m and _x keep the cupy buffers alive
        return lambda s, m=m, keep=_x: A.launch_qgemv(m[0], m[1], m[2], x, y, bits, group, plan, ws=ws, stream=s, no=no)

    nbytes = wbytes + R * inp * 4 + R * out * 4
    if no is not None:
        label = f"{label} cuda-core NO={no}"
    elif plan.tc:
        label = f"{label} tc [{plan.variant}] mt={plan.mt} u={plan.u}"
    else:
        label = f"{label} cuda-core"
    geo = f"tpb {plan.tpb}, ks {plan.ks}"
    return Case(name=f"qgemv {bits}b g{group} {label}", model=model, shape=f"R={R} {out}x{inp} ({geo})",
                nbytes=nbytes, flops=2 * R * out * inp, launches=[mk(m) for m in mats],
                peer=torch_matmul_peer(ctx, R, out, inp) if peer else None)


GEMV_VARIANTS: list = []  # --variants: the affine group's variants to time (empty: all)

GEMV_VSHAPES = [  # (model, label, out, in): the variant table's shapes (4-bit g64)
    ("9B", "gate", 12288, 4096), ("9B", "down", 4096, 12288), ("27B", "gate", 17408, 5120),
    ("27B", "down", 5120, 17408), ("2B", "head", 248320, 2048),
]


def decode_shapes(model):
    """(label, out, in, glu) of one decode step's GEMVs at the ``tensorfold.model.synth`` geometry of ``model``
    (2B / 9B / 27B): the fused linears the runtime launches (``Arena``: GDN in_proj qkv | z | b | a, attention
    q (with its gate) | k | v, gate | up with the SwiGLU epilogue), the output projections, down and the head."""
    from tensorfold.model import synth

    g = synth.GEOMETRIES[model.lower()]
    H, I = g["hidden_size"], g["intermediate_size"]
    Hk, Hv, D = g["linear_num_key_heads"], g["linear_num_value_heads"], 128  # GDN key / value head dim
    nh, nkv, hd = g["num_attention_heads"], g["num_key_value_heads"], g.get("head_dim", 256)
    return [("gdn in_proj", 2 * Hk * D + 2 * Hv * D + 2 * Hv, H, False), ("gdn out_proj", H, Hv * D, False),
            ("attn qkv", 2 * nh * hd + 2 * nkv * hd, H, False), ("attn o_proj", H, nh * hd, False),
            ("mlp gate|up (SwiGLU)", 2 * I, H, True), ("mlp down", H, I, False), ("head", 248320, H, False)]


@register("decode")
def _decode_cases(ctx):
    """The decode GEMVs as the runtime runs them (session 22 defaults): ``affine.plan_qgemv``'s plan per shape;
    a qgemv plan with u 2 / 4 reads the swept layout (``qgemv.sweep_pack``, gate | up rows paired for the SwiGLU
    epilogue), bf16-only x by default (``TENSORFOLD_GEMV3_XH``); 1 and 8 rows, 4-bit g64, beside torch's bf16
    matmul at the same shape (4x the weight bytes). One set of rotated copies a shape."""
    import dataclasses

    from bench_gemv3 import gemv_launcher, swept_copies
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q
    from tensorfold.runtime.forward import sweepable

    cuda = ctx["cuda"]
    cases = []
    bits, group = 4, 64
    for model in DEC_MODELS[0]:
        for label, out, inp, glu in decode_shapes(model):
            p = A.plan_qgemv(out, inp, bits, group)
            glu = glu and A.glu_ok(p, out)
            wbytes, mats = affine_copies(ctx, out, inp, bits, group)
            sw = sweepable(p, inp, bits, group)
            if sw:
                smats = swept_copies(ctx, mats, bits, group, {(p.u, glu, p.per)})[(p.u, glu, p.per)]
                p = dataclasses.replace(p, sw=2 if glu else 1)
            yo = out // 2 if glu else out
            kind = (f"qgemv{' swept' if sw else ''}{' bf16-x' if getattr(p, 'xh', 0) else ''} ks {p.ks}"
                    if isinstance(p, Q.V3Plan) else f"tc {p.variant} ks {p.ks}")
            for R in DEC_ROWS[0]:
                x, _x = ctx["rand_f32"]((R, inp))
                y = cuda.device_array((R, yo), dtype="float32")
                ws = cuda.device_array((p.ks, R, out), dtype="float32") if p.ks > 1 else None
                cases.append(Case(name=f"{label} [{kind}]", model=model, shape=f"R={R} {out}x{inp}",
                                  nbytes=wbytes + R * (inp + yo) * 4, flops=2 * R * out * inp,
                                  launches=[gemv_launcher(m, x, y, bits, group, p, R, ws, glu, _x) for m in
                                            (smats if sw else mats)],
                                  peer=torch_matmul_peer(ctx, R, out, inp)))
            if FLOOR[0]:
                cases += _floor_cases(ctx, model, label, wbytes)
    return cases


def _floor_cases(ctx, model, label, wbytes):
    """``--floor``: a plain read of one shape's weight bytes, each warp walking its own contiguous share (the
    regions read of ``bench_gemv3``, 512-byte units split evenly) on 396 and 792 blocks of 4 warps, in the
    PDL-aware form (first loads before the wait, the signal after the loop), so that under ``--pdl`` it chains as a
    decode GEMV does. What a GEMV of that size could take if it did nothing but stream its weights; bytes are the
    words actually read."""
    from bench_gemv3 import _region_kernel

    cuda = ctx["cuda"]
    k = _region_kernel(aware=True)
    o = cuda.device_array(1, dtype="uint32")
    n = wbytes // 512 * 128  # whole 512-byte units: at most 508 bytes short of the shape's weights
    nb = n * 4
    mats = [ctx["rand_u32"]((n,)) for _ in range(_copies(nb))]
    cases = []
    for blocks in (396, 792):
        cases.append(Case(name=f"{label} [read floor {blocks}x128]", model=model, shape=f"R=1 {nb / 2**20:.1f} MiB",
                          nbytes=nb, launches=[lambda s, m=m, blocks=blocks: k[blocks, 128, s](m[0], o)
                                               for m in mats]))
    return cases


@register("affine")
def _affine_cases(ctx):
    """Decode GEMV variants: every tensor-core plan variant (``affine.TC_VARIANTS``) at 1 and 8 rows and the
    CUDA-core kernel (NO=8) at 1 row, for the 9B gate / down, 27B gate / down and the 2B head (4-bit g64). One set
    of rotated weight copies per shape, shared by its cases. ``main`` prints the compact table and the fastest
    variant per shape at 1 row. (The other decode rows, dense, 8/2-bit, heads and qgemm are the ``qextra`` group.)"""
    from tensorfold.kernels import affine as A

    cuda = ctx["cuda"]
    cases = []
    for model, label, out, inp in GEMV_VSHAPES:
        bits, group = 4, 64
        wbytes, mats = affine_copies(ctx, out, inp, bits, group)
        xs = {R: ctx["rand_f32"]((R, inp)) for R in (1, 8)}
        y8 = cuda.device_array((8, out), dtype="float32")
        ys = {1: y8[:1], 8: y8}
        plans = [(v, A.plan_tc(out, inp, bits, group, variant=v)) for v in A.TC_VARIANTS]
        plans.append(("cuda-core", A._plan_cuda_core(out, inp, bits, group)))
        if GEMV_VARIANTS:
            plans = [(v, p) for v, p in plans if v in GEMV_VARIANTS]
        for v, plan in plans:
            ws = cuda.device_array((plan.ks, 8, out), dtype="float32") if plan.ks > 1 else None
            for R in ((1,) if v == "cuda-core" else (1, 8)):
                x, _x = xs[R]
                no = 8 if v == "cuda-core" else None

                def mk(m, x=x, keep=_x, y=ys[R], plan=plan, ws=ws, no=no):
                    return lambda s: A.launch_qgemv(m[0], m[1], m[2], x, y, bits, group, plan, ws=ws, stream=s, no=no)

                geo = (f"NO=8 tpb {plan.tpb} ks {plan.ks}" if no else
                       f"mt {plan.mt} u {plan.u} d {plan.depth if plan.pipe else 0} warps {plan.tpb // 32} ks {plan.ks}"
                       + (" x-staged" if getattr(plan, "xs", False) else ""))
                cases.append(Case(name=f"qgemv 4b g64 {label} [{v}]", model=model,
                                  shape=f"R={R} {out}x{inp} ({geo})",
                                  nbytes=wbytes + R * inp * 4 + R * out * 4, flops=2 * R * out * inp,
                                  launches=[mk(m) for m in mats],
                                  tag={"gemv_shape": f"{model} {label} {out}x{inp}", "variant": v, "R": R}))
    return cases


@register("qextra")
def _qextra_cases(ctx):
    """The other decode / prompt rows of the earlier affine group: 9B / 27B heads, 16 rows, tall-skinny, 8-bit and
    2-bit, tile shapes, the CUDA-core kernel at 8 rows, dense bf16 GEMV and the prompt GEMM."""
    from tensorfold.kernels import affine as A

    cases = []
    for model in ("9B", "27B"):
        H, I, V = SHAPES[model]
        for R in (1, 8):
            cases.append(_qgemv_case(ctx, model, "head", V, H, R, peer=False))
    cases.append(_qgemv_case(ctx, "9B", "gate/up", 12288, 4096, 16, peer=False))
    cases.append(_qgemv_case(ctx, "-", "tall-skinny", 2048, 12288, 1, peer=False))
    for R in (1, 8):
        cases.append(_qgemv_case(ctx, "9B", "8-bit gate", 12288, 4096, R, bits=8, group=64, peer=False))
    cases.append(_qgemv_case(ctx, "9B", "2-bit gate", 12288, 4096, 1, bits=2, group=64, peer=False))
    for mt, u, rows in ((1, 4, (1, 8)), (4, 2, (1, 8)), (2, 2, (1,))):  # tile variants, same warps-per-block rule
        for R in rows:
            p = A.plan_tc(12288, 4096, 4, 64, mt=mt, u=u)
            cases.append(_qgemv_case(ctx, "9B", "gate/up", 12288, 4096, R, peer=False, plan=p))
    cases.append(_qgemv_case(ctx, "9B", "gate/up", 12288, 4096, 8, no=4, peer=False))  # the CUDA-core kernel
    # dense bf16 gemv
    from tensorfold.kernels import affine as A

    cuda = ctx["cuda"]
    for R in (1, 8):
        out, inp = 12288, 4096
        wb = out * inp * 2
        mats = [ctx["rand_bf16"]((out, inp)) for _ in range(_copies(wb))]  # (numba view, cupy owner)
        x, _xo = ctx["rand_f32"]((R, inp))
        y = cuda.device_array((R, out), dtype="float32")
        plan = A.plan_qgemv(out, inp, 16, 0)
        w32 = [(m[0].view("uint32"), m[1]) for m in mats]
        cases.append(Case(name="dense bf16 gemv", model="9B", shape=f"R={R} {out}x{inp} (tpb {plan.tpb})",
                          nbytes=wb + R * (inp + out) * 4, flops=2 * R * out * inp,
                          launches=[(lambda s, w=w, x=x, y=y, keep=_xo: A.launch_dense_gemv(w[0], x, y, plan, stream=s))
                                    for w in w32],
                          peer=torch_matmul_peer(ctx, R, out, inp)))
    # prompt GEMM
    for model, (H, I, V) in (("9B", SHAPES["9B"]),):
        R, out, inp = 512, I, H
        P, _p = ctx["rand_u32"]((out, inp // 8))
        S, _s = ctx["rand_bf16"]((out, inp // 64))
        B, _b = ctx["rand_bf16"]((out, inp // 64))
        x, _x = ctx["rand_f32"]((R, inp))
        y = cuda.device_array((R, out), dtype="float32")
        keep = (_p, _s, _b, _x)
        cases.append(Case(name="qgemm prompt 4b g64", model=model, shape=f"R={R} {out}x{inp}",
                          nbytes=out * inp // 2 + R * (inp + out) * 4, flops=2 * R * out * inp,
                          launches=[lambda s, keep=keep: A.launch_qgemm(P, S, B, x, y, 4, 64, stream=s)],
                          peer=torch_matmul_peer(ctx, R, out, inp), n_in_graph=5))
    return cases


@register("norm")
def _norm_cases(ctx):
    """add + RMSNorm (and plain RMSNorm) at 1 and 8 rows of the 2B / 9B / 27B hidden sizes: the scalar kernel
    (``vec=False``, before) and the vectorized one-pass kernel (the launch default)."""
    from tensorfold.kernels import norms as N

    cases = []
    for model, (H, I, V) in SHAPES.items():
        for R in (1, 8):
            x, _a = ctx["rand_f32"]((R, H))
            h, _b = ctx["rand_f32"]((R, H))
            m, _c = ctx["rand_f32"]((H,))
            y = ctx["cuda"].device_array((R, H), dtype="float32")
            for vec in (False, True):
                cases.append(Case(name=f"add_rms_norm {'vec' if vec else 'scalar'}", model=model, shape=f"R={R} H={H}",
                                  nbytes=4 * R * H * 4 + H * 4, n_in_graph=50,
                                  launches=[lambda s, x=x, h=h, m=m, y=y, vec=vec, k=(_a, _b, _c):
                                            N.launch_add_rms_norm(x, h, m, y, 1e-6, stream=s, vec=vec)]))
            if R == 1:
                for vec in (False, True):
                    cases.append(Case(name=f"rms_norm {'vec' if vec else 'scalar'}", model=model, shape=f"R={R} H={H}",
                                      nbytes=2 * R * H * 4 + H * 4, n_in_graph=50,
                                      launches=[lambda s, x=x, m=m, y=y, vec=vec, k=(_a, _c):
                                                N.launch_rms_norm(x, m, y, 1e-6, stream=s, vec=vec)]))
    return cases


@register("elementwise")
def _elementwise_cases(ctx):
    from tensorfold.kernels import activations as Ak
    from tensorfold.kernels import embedding as E
    from tensorfold.kernels import norms as N

    cuda = ctx["cuda"]
    cases = []
    for model, (H, I, V) in SHAPES.items():
        R = 8
        x, _a = ctx["rand_f32"]((R, H))
        h, _b = ctx["rand_f32"]((R, H))
        m, _c = ctx["rand_f32"]((H,))
        y = cuda.device_array((R, H), dtype="float32")
        cases.append(Case(name="add_rms_norm", model=model, shape=f"R={R} H={H}", nbytes=4 * R * H * 4 + H * 4,
                          launches=[lambda s, x=x, h=h, m=m, y=y, k=(_a, _b, _c): N.launch_add_rms_norm(x, h, m, y, 1e-6, stream=s)],
                          n_in_graph=50))
        gu, _g = ctx["rand_f32"]((R, 2 * I))
        ya = cuda.device_array((R, I), dtype="float32")
        cases.append(Case(name="silu_mul fused", model=model, shape=f"R={R} I={I}", nbytes=3 * R * I * 4,
                          launches=[lambda s, gu=gu, ya=ya, k=_g: Ak.launch_silu_mul_fused(gu, ya, stream=s)],
                          n_in_graph=50))
    P, _p = ctx["rand_u32"]((248320, 4096 // 8))
    S, _s = ctx["rand_bf16"]((248320, 64))
    B, _b = ctx["rand_bf16"]((248320, 64))
    import numpy as np

    ids = cuda.to_device(np.random.default_rng(0).integers(0, 248320, 8).astype(np.int32))
    ye = cuda.device_array((8, 4096), dtype="float32")
    cases.append(Case(name="embed 4b g64", model="9B", shape="8 ids H=4096", nbytes=8 * 4096 * (0.5 + 4) + 8 * 64 * 4,
                      launches=[lambda s, k=(_p, _s, _b): E.launch_embed_affine(ids, P, S, B, ye, 4, 64, stream=s)],
                      n_in_graph=50))
    return cases


@register("sample")
def _sample_cases(ctx):
    from tensorfold.kernels import sample as K

    cuda = ctx["cuda"]
    import numpy as np

    cases = []
    V = 248320
    for n, (t, k, p) in ((1, (0.0, 0, 1.0)), (1, (0.8, 40, 0.95)), (8, (0.8, 0, 0.95))):
        lg, _l = ctx["rand_f32"]((n, V), 3.0)
        out = cuda.device_array(n, dtype="int32")
        bufs = [cuda.to_device(np.full(n, t, np.float32)), cuda.to_device(np.full(n, k, np.int32)),
                cuda.to_device(np.full(n, p, np.float32)), cuda.to_device(np.zeros(n, np.float32)),
                cuda.to_device(np.arange(n, dtype=np.int64)), cuda.to_device(np.arange(n, dtype=np.int64))]
        cases.append(Case(name="sample", model="-", shape=f"n={n} V={V} T={t} k={k} p={p}", nbytes=n * V * 4,
                          launches=[lambda s, lg=lg, out=out, b=bufs, k_=_l: K.launch_sample(lg, out, *b, V, stream=s)],
                          n_in_graph=20))
    return cases


# ----------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--only", default="")
    ap.add_argument("--no-b", action="store_true", help="skip part B's entries (benchmarks/bench_kernels_b.py)")
    ap.add_argument("--variants", default="", help="comma list of GEMV variants for the affine group (default: every "
                    "TC_VARIANTS entry and the CUDA-core kernel; x-staged ones only when named here)")
    ap.add_argument("--pdl", action="store_true", help="build each case's graph with PDL for aware kernels (the "
                    "runtime's decode graphs do); the timing column says graph+pdl where it took effect")
    ap.add_argument("--min-graph", type=int, default=MIN_GRAPH[0], help="launches a graph for cases without their "
                    "own count (the host's replay cost is divided over them; 10 before session 53)")
    ap.add_argument("--floor", action="store_true", help="decode group: time, beside each shape, a plain read of "
                    "its weight bytes (the PDL-aware regions read of bench_gemv3) at 396 and 792 blocks")
    ap.add_argument("--rows", default="1,8", help="decode group: rows a GEMV case (above 8, qgemv.launch splits "
                    "into launches of 8, or 16 under TENSORFOLD_GEMV3_R16=1)")
    ap.add_argument("--models", default="2B,9B,27B", help="decode group: the geometries")
    args = ap.parse_args(argv)
    FLOOR[0] = args.floor
    MIN_GRAPH[0] = args.min_graph
    DEC_ROWS[0] = tuple(int(r) for r in args.rows.split(",") if r)
    DEC_MODELS[0] = tuple(m for m in args.models.split(",") if m)
    GEMV_VARIANTS[:] = [v for v in args.variants.split(",") if v]
    PDL[0] = args.pdl
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
    kb = None
    if not args.no_b:
        try:
            import bench_kernels_b as kb  # registers part B's cases (register()) and/or exposes ENTRIES
        except ImportError as e:
            if "bench_kernels_b" not in str(e):
                print(f"bench_kernels_b import failed: {e!r}")
    ctx = _ctx()
    cuda = ctx["cuda"]
    gpu = cuda.get_current_device().name
    gpu = gpu.decode() if isinstance(gpu, bytes) else str(gpu)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        commit = "unknown"
    commit = os.environ.get("TF_COMMIT", commit)
    bw = copy_bandwidth(ctx)
    print(f"GPU {gpu}  copy bandwidth {bw:.0f} GB/s (1 GiB d2d, read+write)", flush=True)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    cmd = "NUMBA_ENABLE_CUDASIM=0 python benchmarks/bench_kernels.py " + " ".join(argv or sys.argv[1:])
    meta = {"date": date, "commit": commit, "gpu": gpu, "copy_gbs": bw, "command": cmd, "min_graph": MIN_GRAPH[0]}
    rows = []
    for gname, fn in REGISTRY:
        if not _selected(args.only, gname):
            continue
        try:
            cases = fn(ctx)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rows.append({"group": gname, "name": "(setup)", "error": repr(e)[:300]})
            continue
        for c in cases:
            r = {"group": gname, "name": c.name, "model": c.model, "shape": c.shape, "bytes": int(c.nbytes)}
            if c.tag:
                r["tag"] = dict(c.tag)
            try:
                sec, how = time_case(c, ctx)
                r.update(us=sec * 1e6, gbs=c.nbytes / sec / 1e9, pct_copy=100 * c.nbytes / sec / 1e9 / bw, timing=how)
                if c.flops:
                    r["tflops"] = c.flops / sec / 1e12
                if c.peer is not None:
                    pm = c.peer()
                    if pm:
                        r["peer_us"] = pm * 1e3
                        r["peer"] = c.peer_name
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                r["error"] = repr(e)[:300]
            if c.notes:
                r["notes"] = c.notes.strip()
            rows.append(r)
            c.launches = []
            print(_fmt_row(r), flush=True)
            try:
                ctx["cp"].get_default_memory_pool().free_all_blocks()
            except Exception:  # noqa: BLE001
                pass
        _write(args.out, meta, rows)  # after every group, so a run cut short keeps what it measured
    # part B's self-timed entries: ENTRIES = [(name, fn(model) -> list[dict(name, model, shape, us, bytes, gbs,
    # pct_copy, tflops, ...)])]; % of copy is recomputed against this run's copy rate
    for ename, fn in (getattr(kb, "ENTRIES", None) or []) if kb is not None else []:
        if not _selected(args.only, ename):
            continue
        for model in SHAPES:
            try:
                res = fn(model) or []
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rows.append({"group": ename, "name": "(entry)", "model": model, "error": repr(e)[:300]})
                continue
            for d in res:
                r = {"group": ename, "name": str(d.get("name", ename)), "model": str(d.get("model", model)),
                     "shape": str(d.get("shape", "")), "bytes": int(d.get("bytes") or 0)}
                us = d.get("us")
                if us:
                    r["us"] = float(us)
                    r["gbs"] = float(d.get("gbs") or (r["bytes"] / (us * 1e-6) / 1e9))
                    r["pct_copy"] = 100 * r["gbs"] / bw
                    r["timing"] = str(d.get("how", d.get("timing", "graph")))
                    if d.get("tflops"):
                        r["tflops"] = float(d["tflops"])
                    if d.get("peer_us"):
                        r["peer_us"] = float(d["peer_us"])
                else:
                    r["error"] = str(d.get("error", "no time"))
                rows.append(r)
                print(_fmt_row(r), flush=True)
        _write(args.out, meta, rows)
    vtable = _gemv_variant_table(rows)
    if vtable:
        print("\n".join(vtable), flush=True)
    print(f"wrote {_write(args.out, meta, rows)}")


def _write(out_dir, meta, rows):
    """kernels_<date>.md and .json into ``out_dir`` (rows so far; rewritten as the run goes) -> the .md path"""
    vtable = _gemv_variant_table(rows)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"kernels_{meta['date']}")
    with open(base + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(base + ".md", "w") as f:
        f.write(f"# Kernel benchmarks {meta['date']}\n\nGPU: {meta['gpu']}; commit {meta['commit']}; copy ceiling "
                f"{meta['copy_gbs']:.0f} GB/s (1 GiB device-to-device, read + write).\n"
                f"Command: `{meta['command']}`\n\n")
        f.write(f"Times per kernel launch (graph replay unless noted; a graph holds {meta['min_graph']} launches, or "
                "its case's own count), weights rotated over >= 256 MB of copies.\n\n")
        f.write("| group | kernel | model | shape | us | GB/s | % copy | TFLOP/s | peer us | notes |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write("| " + " | ".join(_cells(r)) + " |\n")
        if vtable:
            f.write("\n## Decode GEMV variants (us per launch, R=1 / R=8; % of copy at R=1)\n\n" + "\n".join(vtable)
                    + "\n")
    return base + ".md"


def _gemv_variant_table(rows):
    """Markdown lines: one row per GEMV shape, one column per variant (``R=1 / R=8`` us, % of copy at R=1), then a
    line naming the fastest variant per shape at 1 row."""
    tagged = [r for r in rows if r.get("tag") and "us" in r]
    if not tagged:
        return []
    shapes, variants, cell = [], [], {}
    for r in tagged:
        t = r["tag"]
        if t["gemv_shape"] not in shapes:
            shapes.append(t["gemv_shape"])
        if t["variant"] not in variants:
            variants.append(t["variant"])
        cell[(t["gemv_shape"], t["variant"], t["R"])] = r
    out = ["| shape | " + " | ".join(variants) + " |", "|---" * (len(variants) + 1) + "|"]
    best = []
    for sh in shapes:
        cs = []
        for v in variants:
            r1, r8 = cell.get((sh, v, 1)), cell.get((sh, v, 8))
            c = f"{r1['us']:.1f}" if r1 else "-"
            c += f" / {r8['us']:.1f}" if r8 else ""
            c += f" ({r1['pct_copy']:.0f} %)" if r1 else ""
            cs.append(c)
        out.append(f"| {sh} | " + " | ".join(cs) + " |")
        ones = [(cell[(sh, v, 1)]["us"], v) for v in variants if (sh, v, 1) in cell]
        if ones:
            us, v = min(ones)
            best.append(f"{sh}: {v} {us:.1f} us ({cell[(sh, v, 1)]['pct_copy']:.0f} %)")
    out.append("")
    out.append("FASTEST AT 1 ROW: " + "; ".join(best))
    return out


def _cells(r):
    if "error" in r:
        return [r["group"], r["name"], r.get("model", ""), r.get("shape", ""), "ERROR", "", "", "", "",
                r["error"].replace("|", "/")]
    return [r["group"], r["name"], r["model"], r["shape"], f"{r['us']:.1f}", f"{r['gbs']:.0f}",
            f"{r['pct_copy']:.0f}", f"{r['tflops']:.2f}" if "tflops" in r else "",
            f"{r['peer_us']:.1f}" if "peer_us" in r else "",
            (r.get("timing", "") + " " + r.get("notes", "")).strip().replace("|", "/")]


def _fmt_row(r):
    return " | ".join(_cells(r))


if __name__ == "__main__":
    main()
