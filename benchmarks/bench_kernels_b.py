"""Kernel benchmarks for issue 3 part B (delta rule, conv, attention, fp8 KV store, compaction) at real Qwen3.5
2B / 9B / 27B shapes, timed inside captured CUDA graphs (cuda.core graph builder, gpu.md §2), with bytes moved and
GB/s against the measured device copy rate (4,241 GB/s read+write on the H200), TFLOP/s for the chunked delta
rule, and fla's ``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule`` at the same shapes as the peer
(timed inside torch CUDA graphs).

Standalone: ``NUMBA_ENABLE_CUDASIM=0 python benchmarks/bench_kernels_b.py --out results.md [--models 2B,9B,27B]``.
For a harness: ``ENTRIES`` = [(name, fn(model) -> list[dict])]; each dict has name, model, shape, us, bytes,
gbs, pct_copy, tflops (some None).

Byte counts are the minimum a kernel must move (state read + written once, cache rows read once, inputs and
outputs once); GB/s = bytes / time.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")

from numba import cuda  # noqa: E402

from tensorfold.kernels import attention as katt  # noqa: E402
from tensorfold.kernels import attention_prompt  # noqa: E402
from tensorfold.kernels import compact, conv  # noqa: E402
from tensorfold.kernels import delta_rule as dr  # noqa: E402
from tensorfold.kernels import delta_intra_tc  # noqa: E402
from tensorfold.kernels import kv8 as kkv8  # noqa: E402

MODELS = {  # Hk, Hv, nH, nKV
    "2B": (16, 16, 8, 2),
    "9B": (16, 32, 16, 4),
    "27B": (16, 48, 24, 4),
}
D = 128
HD = 256
COPY_GBS = 4241.0
ATT_CASES = ((1, 4096), (8, 4096), (1, 32768))  # (streams, keys per stream)


# ----------------------------------------------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------------------------------------------

_DEV = {}


def _core():
    if "dev" not in _DEV:
        try:
            from cuda.core import Device
        except ImportError:  # older cuda-python
            from cuda.core.experimental import Device
        dev = Device()
        dev.set_current()
        _DEV["dev"] = dev
        _DEV["stream"] = dev.create_stream()
    return _DEV["dev"], _DEV["stream"]


def graph_time(launch, reps=20, iters=10):
    """Seconds per ``launch(stream)`` call: warm once, capture ``reps`` calls into one graph, replay ``iters``
    times. Falls back to plain launches timed with events (marked) when capture fails."""
    launch(0)
    cuda.synchronize()
    try:
        dev, s = _core()
        gb = dev.create_graph_builder()
        gb.begin_building()
        for _ in range(reps):
            launch(gb)
        graph = gb.end_building().complete()
        graph.launch(s)
        s.sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            graph.launch(s)
        s.sync()
        return (time.perf_counter() - t0) / (iters * reps), "graph"
    except Exception as e:  # noqa: BLE001
        print(f"  (graph capture failed: {type(e).__name__}: {str(e)[:200]}; timing plain launches)", flush=True)
        e0, e1 = cuda.event(), cuda.event()
        e0.record()
        for _ in range(reps * iters):
            launch(0)
        e1.record()
        e1.synchronize()
        return cuda.event_elapsed_time(e0, e1) / 1e3 / (reps * iters), "events"


def torch_graph_time(fn, reps=20, iters=10):
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                fn()
        g.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            g.replay()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / (iters * reps), "torch-graph"
    except Exception as e:  # noqa: BLE001
        print(f"  (torch graph failed: {type(e).__name__}: {str(e)[:200]}; events)", flush=True)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps * iters):
            fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) / 1e3 / (reps * iters), "events"


def _res(name, model, shape, sec, nbytes=None, flops=None, how="graph"):
    us = sec * 1e6
    gbs = nbytes / sec / 1e9 if nbytes else None
    r = dict(name=name, model=model, shape=shape, us=us, bytes=nbytes, gbs=gbs,
             pct_copy=(100 * gbs / COPY_GBS) if gbs else None, tflops=(flops / sec / 1e12) if flops else None,
             how=how)
    print("  " + _fmt_row(r), flush=True)
    return r


def _i32(x):
    return cuda.to_device(np.ascontiguousarray(x, np.int32))


def _f32(rng, shape, scale=1.0, shift=0.0):
    return cuda.to_device((rng.standard_normal(shape) * scale + shift).astype(np.float32))


# ----------------------------------------------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------------------------------------------


def bench_gdn(model):
    Hk, Hv, _, _ = MODELS[model]
    C = 2 * Hk * D + Hv * D
    rng = np.random.default_rng(0)
    out = []
    A_log = _f32(rng, Hv, 0.5)
    dt_bias = _f32(rng, Hv)
    for B in (1, 8, 32):
        qkv, a, b = _f32(rng, (B, C)), _f32(rng, (B, Hv), 1, -1), _f32(rng, (B, Hv))
        state = _f32(rng, (B, Hv, D, D), 0.05)
        o = cuda.device_array((B, Hv, D), np.float32)
        e3 = cuda.device_array((0, Hk, D), np.float32)
        e3v = cuda.device_array((0, Hv, D), np.float32)
        e2 = cuda.device_array((0, Hv), np.float32)
        segs = [_i32(np.arange(B)), _i32(np.ones(B)), _i32(np.arange(B)), _i32(np.ones(B))]
        par = _i32(-np.ones(B))

        def run(s, qkv=qkv, a=a, b=b, state=state, o=o, segs=segs, par=par, e3=e3, e3v=e3v, e2=e2):
            dr.launch_recurrent(qkv, a, b, A_log, dt_bias, state, *segs, par, o, e3, e3v, e2, stream=s)

        sec, how = graph_time(run)
        nbytes = B * (Hv * D * D * 4 * 2 + C * 4 + Hv * 8 + Hv * D * 4)
        out.append(_res("gdn_recurrent step (in place)", model, f"B={B}", sec, nbytes, how=how))
    # the runtime's decode step (session 22): conv + SiLU, gates, l2 norms, the delta rule and the gated RMSNorm in
    # one launch (``launch_fused``, committed in place), each launch of the graph on its own copy of the state
    # (>= 256 MB of copies, so the state comes from DRAM as in a decode step, not from L2)
    cw = _f32(rng, (C, dr.CONVK), 0.5)
    nw = _f32(rng, D, 0.1, 1.0)
    for B in (1, 8):
        qkv, a, b = _f32(rng, (B, C)), _f32(rng, (B, Hv), 1, -1), _f32(rng, (B, Hv))
        z = _f32(rng, (B, Hv * D))
        tail = _f32(rng, (B, dr.CONVK - 1, C))
        sbytes = B * Hv * D * D * 4
        ncp = max(2, min(64, -(-(256 << 20) // sbytes)))
        states = [_f32(rng, (B, Hv, D, D), 0.05) for _ in range(ncp)]
        o = cuda.device_array((B, Hv, D), np.float32)
        gn = cuda.device_array((B, Hv * D), np.float32)
        xlog = cuda.device_array((0, C), np.float32)
        e3 = cuda.device_array((0, Hk, D), np.float32)
        e3v = cuda.device_array((0, Hv, D), np.float32)
        e2 = cuda.device_array((0, Hv), np.float32)
        cnt = dr.fused_counters(B, Hv)
        segs = [_i32(np.arange(B)), _i32(np.ones(B)), _i32(np.arange(B)), _i32(np.ones(B))]
        par = _i32(-np.ones(B))
        turn = [0]

        def runf(s, qkv=qkv, a=a, b=b, z=z, tail=tail, states=states, o=o, gn=gn, xlog=xlog, segs=segs, par=par,
                 e3=e3, e3v=e3v, e2=e2, cnt=cnt, turn=turn):
            st = states[turn[0] % len(states)]
            turn[0] += 1
            dr.launch_fused(qkv, cw, tail, xlog, z, nw, a, b, A_log, dt_bias, st, *segs, par, o, gn, cnt, e3, e3v,
                            e2, 1e-6, stream=s)

        sec, how = graph_time(runf, reps=ncp)
        nbytes = B * (Hv * D * D * 4 * 2 + C * 4 * 4 + Hv * 8 + Hv * D * 4 * 2)
        out.append(_res(f"gdn_fused_step (conv + delta + gated norm; {ncp} state copies)", model, f"B={B}", sec,
                        nbytes, how=how))
    # verify window of 4 rows, 1 stream, logged, not committed
    R = 4
    qkv, a, b = _f32(rng, (R, C)), _f32(rng, (R, Hv), 1, -1), _f32(rng, (R, Hv))
    state = _f32(rng, (1, Hv, D, D), 0.05)
    o = cuda.device_array((R, Hv, D), np.float32)
    lk, ld, la = (cuda.device_array((R, Hk, D), np.float32), cuda.device_array((R, Hv, D), np.float32),
                  cuda.device_array((R, Hv), np.float32))
    segs = [_i32([0]), _i32([R]), _i32([0]), _i32([0])]
    par = _i32([-1, 0, 1, 2])

    def runw(s):
        dr.launch_recurrent(qkv, a, b, A_log, dt_bias, state, *segs, par, o, lk, ld, la, stream=s)

    sec, how = graph_time(runw)
    nbytes = Hv * D * D * 4 + R * (C * 4 + Hv * 8 + 2 * Hv * D * 4 + Hk * D * 4 + Hv * 4)
    out.append(_res("gdn_recurrent verify window 4 (logged)", model, "B=1 R=4", sec, nbytes, how=how))
    # tree of 8 rows (2 branches of 4), 1 stream
    R8 = 8
    qkv8, a8, b8 = _f32(rng, (R8, C)), _f32(rng, (R8, Hv), 1, -1), _f32(rng, (R8, Hv))
    o8 = cuda.device_array((R8, Hv, D), np.float32)
    lk8, ld8, la8 = (cuda.device_array((R8, Hk, D), np.float32), cuda.device_array((R8, Hv, D), np.float32),
                     cuda.device_array((R8, Hv), np.float32))
    segs8 = [_i32([0]), _i32([R8]), _i32([0]), _i32([0])]
    par8 = _i32([-1, 0, 1, 2, -1, 4, 5, 6])

    def runt(s):
        dr.launch_recurrent(qkv8, a8, b8, A_log, dt_bias, state, *segs8, par8, o8, lk8, ld8, la8, stream=s)

    sec, how = graph_time(runt)
    nbytes = Hv * D * D * 4 + R8 * (C * 4 + Hv * 8 + 2 * Hv * D * 4 + Hk * D * 4 + Hv * 4)
    out.append(_res("gdn_recurrent verify tree 8 (2 branches)", model, "B=1 R=8", sec, nbytes, how=how))
    # commit of a 4-row path (one layer)
    st5 = cuda.to_device(np.zeros((1, 1, Hv, D, D), np.float32))
    lk5, ld5, la5 = (cuda.to_device(lk.copy_to_host()[None]), cuda.to_device(ld.copy_to_host()[None]),
                     cuda.to_device(la.copy_to_host()[None]))
    cseg = [_i32([0]), _i32([3])]

    def runc(s):
        compact.launch_gdn_commit(st5, lk5, ld5, la5, par, *cseg, stream=s)

    sec, how = graph_time(runc)
    out.append(_res("gdn_commit path 4 (1 layer)", model, "B=1", sec, Hv * D * D * 8 + 4 * (Hv * D + Hk * D) * 4,
                    how=how))
    # conv, one row per stream
    for B in (1, 8):
        x = _f32(rng, (B, C))
        w = _f32(rng, (C, 4))
        tail = _f32(rng, (B, 3, C))
        y = cuda.device_array((B, C), np.float32)
        xl = cuda.device_array((B, C), np.float32)
        rs, pr = _i32(np.arange(B)), _i32(-np.ones(B))

        def runv(s, x=x, w=w, tail=tail, y=y, xl=xl, rs=rs, pr=pr):
            conv.launch_conv(x, w, tail, rs, pr, y, xl, stream=s)

        sec, how = graph_time(runv)
        out.append(_res("conv_rows (logged)", model, f"B={B}", sec, B * C * 4 * 6 + C * 16, how=how))
    return out


def _chunk_flops(L, Hv):
    n = 64
    per = 2 * n * n * D + n * n * (2 * D) + n * n * D + 6 * n * D * D
    return (L / n) * Hv * per


def bench_chunked(model, L=8192):
    Hk, Hv, _, _ = MODELS[model]
    C = 2 * Hk * D + Hv * D
    rng = np.random.default_rng(1)
    qkv, a, b = _f32(rng, (L, C)), _f32(rng, (L, Hv), 1, -2), _f32(rng, (L, Hv))
    A_log, dt_bias = _f32(rng, Hv, 0.5), _f32(rng, Hv)
    state = _f32(rng, (1, Hv, D, D), 0.05)
    o = cuda.device_array((L, Hv, D), np.float32)
    work = dr.chunk_workspace(L, Hk, Hv, D, D)
    segs = [_i32([0]), _i32([L]), _i32([0])]

    out = []
    # inter pass (CHUNK_TC, --tc): CUDA cores (0), tensor cores at 8 / 16 value columns a block; suffix "i": the
    # intra pass on tensor cores; "pi" / "pii" add prep + intra alone (CUDA-core / tensor-core intra)
    for spec in CHUNK_TC:
        if spec.startswith("p"):
            continue
        tc, itc = int(spec.replace("i", "")), spec.endswith("i")

        def run(s, tc=tc, itc=itc):
            dr.launch_chunked(qkv, a, b, A_log, dt_bias, state, *segs, o, work, max_rows_per_seg=L, stream=s,
                              tc=tc, intra_tc=itc)

        sec, how = graph_time(run, reps=2, iters=3)
        name = ("gdn chunked prompt (prep+intra+inter" + (f", tc inter {tc}" if tc else "")
                + (", tc intra" if itc else "") + ")")
        out.append(_res(name, model, f"L={L}", sec, L * (C * 4 + Hv * D * 4) + Hv * D * D * 8,
                        _chunk_flops(L, Hv), how=how))

    def run_pi(s, itc):  # prep + intra alone: what the inter pass adds is the difference
        k = dr.k_prep[(min((L + dr.PREP_NW - 1) // dr.PREP_NW, 4096), Hk), dr.NT, s]
        k(qkv, a, b, A_log, dt_bias, work["qn"], work["kn"], work["g"], work["beta"])
        nch = (L + dr.CH - 1) // dr.CH
        args = (work["qn"], work["kn"], qkv, work["g"], work["beta"], segs[0], segs[1], work["cum"], work["P"],
                work["U"], work["W"])
        if itc:
            delta_intra_tc.launch(*args, nch=nch, stream=s)
        else:
            dr.k_chunk_intra[(nch, Hv, 1), dr.NT, s](*args)

    for spec in ("pi", "pii"):
        if spec in CHUNK_TC:
            sec, how = graph_time(lambda s, itc=spec == "pii": run_pi(s, itc), reps=2, iters=3)
            name = "gdn chunked prep+intra only" + (" (tc intra)" if spec == "pii" else "")
            out.append(_res(name, model, f"L={L}", sec, None, None, how=how))
    return out


CHUNK_TC = ["0", "8", "16", "16i", "pi", "pii"]


def bench_attention(model):
    _, _, nH, nKV = MODELS[model]
    rng = np.random.default_rng(2)
    out = []
    for fmt in ("bf16", "e4m3"):
        eb = 2 if fmt == "bf16" else 1
        dt = np.uint16 if fmt == "bf16" else np.uint8
        for B, ctx in ATT_CASES:
            kc = cuda.to_device(rng.integers(0, 0x3F, (B, ctx, nKV, HD)).astype(dt))
            vc = cuda.to_device(rng.integers(0, 0x3F, (B, ctx, nKV, HD)).astype(dt))
            if fmt == "e4m3":
                ks = cuda.to_device(np.full((B, ctx, nKV), 0.01, np.float32))
                vs = cuda.to_device(np.full((B, ctx, nKV), 0.01, np.float32))
            else:
                ks = vs = kkv8.empty_scale()
            q = _f32(rng, (B, nH, HD))
            qg = _f32(rng, (B, nH, 2 * HD))
            m, l, acc = katt.partial_buffers(B, nH, HD, ctx)
            meta = [_i32(np.arange(B)), _i32(np.full(B, ctx)), _i32(np.zeros(B)), _i32(np.zeros(B))]
            res = cuda.device_array((B, nH, HD), np.float32)

            def run(s, kc=kc, vc=vc, ks=ks, vs=vs, q=q, qg=qg, m=m, l=l, acc=acc, meta=meta, res=res):
                katt.launch_partials(q, kc, vc, ks, vs, *meta, HD ** -0.5, m, l, acc, stream=s)
                katt.launch_merge(m, l, acc, meta[0], meta[1], meta[2], qg, 1, res, stream=s)

            sec, how = graph_time(run)
            nbytes = B * ctx * nKV * (HD * eb * 2 + (8 if fmt == "e4m3" else 0))
            out.append(_res(f"attention partials+merge {fmt}", model, f"B={B} ctx={ctx}", sec, nbytes, how=how))
        # rope + norm + store of 8 rows
        R = 8
        kc = cuda.to_device(np.zeros((R, 64, nKV, HD), dt))
        vc = cuda.to_device(np.zeros((R, 64, nKV, HD), dt))
        if fmt == "e4m3":
            ks = cuda.to_device(np.zeros((R, 64, nKV), np.float32))
            vs = cuda.to_device(np.zeros((R, 64, nKV), np.float32))
        else:
            ks = vs = kkv8.empty_scale()
        qg = _f32(rng, (R, nH, 2 * HD))
        k, v = _f32(rng, (R, nKV, HD)), _f32(rng, (R, nKV, HD))
        qn, kn = _f32(rng, HD, 0.1, 1.0), _f32(rng, HD, 0.1, 1.0)
        inv = cuda.to_device((1.0 / (1e7 ** (np.arange(0, 64, 2) / 64))).astype(np.float32))
        pos = _i32(np.arange(R) + 1000)
        rs = _i32(np.arange(R))
        ci = _i32(np.arange(R) + 7)
        q_out = cuda.device_array((R, nH, HD), np.float32)

        def runs(s, kc=kc, vc=vc, ks=ks, vs=vs):
            kkv8.launch_qk_norm_rope_store(qg, k, v, qn, kn, inv, pos, rs, ci, 1e-6, q_out, kc, vc, ks, vs,
                                           stream=s)

        sec, how = graph_time(runs)
        out.append(_res(f"qk_norm_rope_store {fmt}", model, f"R={R}", sec,
                        R * (nH * HD * 4 * 2 + nKV * HD * 8 + nKV * HD * eb * 2), how=how))
    return out


def bench_fla(model, L=8192):
    out = []
    try:
        import torch
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except Exception as e:  # noqa: BLE001
        print(f"  fla unavailable: {e!r}", flush=True)
        return out
    Hk, Hv, _, _ = MODELS[model]
    dev = "cuda"
    torch.manual_seed(0)
    for B in (1, 8, 32):
        q = torch.randn(B, 1, Hk, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, 1, Hk, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, 1, Hv, D, device=dev, dtype=torch.bfloat16)
        g = -torch.rand(B, 1, Hv, device=dev, dtype=torch.float32)
        beta = torch.rand(B, 1, Hv, device=dev, dtype=torch.float32)
        h0 = torch.randn(B, Hv, D, D, device=dev, dtype=torch.float32) * 0.05

        def f(q=q, k=k, v=v, g=g, beta=beta, h0=h0):
            return fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0,
                                                    output_final_state=True, use_qk_l2norm_in_kernel=True)

        try:
            sec, how = torch_graph_time(f)
            out.append(_res("fla fused_recurrent (peer, bf16 qkv, fp32 state)", model, f"B={B}", sec,
                            B * (Hv * D * D * 8 + (2 * Hk + Hv) * D * 2 + Hv * D * 2), how=how))
        except Exception as e:  # noqa: BLE001
            print(f"  fla fused_recurrent failed: {e!r}", flush=True)
    q = torch.randn(1, L, Hk, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, L, Hk, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, L, Hv, D, device=dev, dtype=torch.bfloat16)
    g = torch.nn.functional.logsigmoid(torch.randn(1, L, Hv, device=dev, dtype=torch.float32))
    beta = torch.rand(1, L, Hv, device=dev, dtype=torch.float32)
    h0 = torch.randn(1, Hv, D, D, device=dev, dtype=torch.float32) * 0.05

    def fc():
        return chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True)

    try:
        sec, how = torch_graph_time(fc, reps=2, iters=3)
        out.append(_res("fla chunk_gated_delta_rule (peer, bf16)", model, f"L={L}", sec, None,
                        _chunk_flops(L, Hv), how=how))
    except Exception as e:  # noqa: BLE001
        print(f"  fla chunk failed: {e!r}", flush=True)
    return out


def bench_attn_prompt(model, L=4096):
    """One causal prompt of L rows (positions 0 .. L - 1, bf16 cache): the tensor-core prompt kernel
    (``attention_prompt``) against the split-K decode kernels in launches of 64 rows (what the runtime ran before),
    and torch's scaled_dot_product_attention (bf16 q / k / v, causal, GQA) as the peer. FLOPs: 2 nH L^2 hd."""
    _, _, nH, nKV = MODELS[model]
    rng = np.random.default_rng(4)
    kc = cuda.to_device(((rng.standard_normal((1, L, nKV, HD)).astype(np.float32).view(np.uint32)) >> 16)
                        .astype(np.uint16))
    vc = cuda.to_device(((rng.standard_normal((1, L, nKV, HD)).astype(np.float32).view(np.uint32)) >> 16)
                        .astype(np.uint16))
    q = _f32(rng, (L, nH, HD))
    qg = _f32(rng, (L, nH, 2 * HD))
    rs, nk = _i32(np.zeros(L)), _i32(np.arange(L) + 1)
    tz = _i32(np.zeros(L))
    res = cuda.device_array((L, nH, HD), np.float32)
    flops = 2.0 * nH * L * L * HD
    out = []

    def run_tc(s):
        attention_prompt.launch(q, kc, vc, rs, nk, qg, HD ** -0.5, 1, res, stream=s)

    sec, how = graph_time(run_tc, reps=2, iters=3)
    out.append(_res("prompt attention, tensor cores (attention_prompt)", model, f"L={L}", sec, None, flops, how=how))
    Ra = 64
    m, l, acc = katt.partial_buffers(Ra, nH, HD, L)

    def run_sk(s):
        for r0 in range(0, L, Ra):
            sl = slice(r0, r0 + Ra)
            katt.launch_partials(q[sl], kc, vc, kkv8.empty_scale(), kkv8.empty_scale(), rs[sl], nk[sl], tz[sl],
                                 tz[sl], HD ** -0.5, m, l, acc, stream=s)
            katt.launch_merge(m, l, acc, rs[sl], nk[sl], tz[sl], qg[sl], 1, res[sl], stream=s)

    sec, how = graph_time(run_sk, reps=1, iters=2)
    out.append(_res("prompt attention, split-K partials+merge, 64 rows a launch", model, f"L={L}", sec, None, flops,
                    how=how))
    try:
        import torch

        tq = torch.randn(1, nH, L, HD, device="cuda", dtype=torch.bfloat16)
        tk = torch.randn(1, nKV, L, HD, device="cuda", dtype=torch.bfloat16)
        tv = torch.randn(1, nKV, L, HD, device="cuda", dtype=torch.bfloat16)

        def ft():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True)

        sec, how = torch_graph_time(ft, reps=2, iters=3)
        out.append(_res("torch scaled_dot_product_attention (peer, bf16, causal)", model, f"L={L}", sec, None, flops,
                        how=how))
    except Exception as e:  # noqa: BLE001
        print(f"  torch sdpa failed: {e!r}", flush=True)
    return out


ENTRIES = [("gdn", bench_gdn), ("chunked", bench_chunked), ("attention", bench_attention), ("fla", bench_fla),
           ("attn_prompt", bench_attn_prompt)]


def _fmt_row(r):
    f = lambda x, p: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
    mb = "-" if r["bytes"] is None else f"{r['bytes'] / 2**20:.2f}"
    return (f"| {r['name']} | {r['model']} | {r['shape']} | {f(r['us'], 2)} | {mb} | {f(r['gbs'], 0)} | "
            f"{f(r['pct_copy'], 1)} | {f(r['tflops'], 2)} | {r['how']} |")


HEADER = ("| kernel | model | shape | µs | MiB moved | GB/s | % of copy | TFLOP/s | timed |\n"
          "|---|---|---|---|---|---|---|---|---|")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", default="2B,9B,27B")
    ap.add_argument("--only", default="gdn,chunked,attention,fla")
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip remaining entries after this many seconds")
    ap.add_argument("--tc", default=",".join(CHUNK_TC),
                    help="chunked entry's passes: 0 (CUDA cores), 8, 16 (tc inter), suffix i (tc intra); pi / pii "
                         "(prep + intra alone, CUDA-core / tc intra)")
    args = ap.parse_args()
    CHUNK_TC[:] = args.tc.split(",")
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = args.out or os.path.join(ROOT, "benchmarks", "results", f"kernels_b_{day}.md")
    head = (f"# Kernel benchmarks, issue 3 part B ({day})\n\n"
            f"- GPU: {name}, commit {os.environ.get('TF_COMMIT', '?')}\n"
            f"- command: `python benchmarks/bench_kernels_b.py --models {args.models} --only {args.only} "
            f"--tc {args.tc}`\n"
            f"- timed inside captured CUDA graphs (20 launches a graph, 10 replays; chunked: 2 x 3); "
            f"copy rate {COPY_GBS:.0f} GB/s\n\n{HEADER}\n")
    t0 = time.time()
    with open(out, "w") as fh:
        fh.write(head)
        for ename, fn in ENTRIES:
            if ename not in args.only.split(","):
                continue
            for model in args.models.split(","):
                if time.time() - t0 > args.budget_s:
                    fh.write(f"| ({ename} {model} skipped: time budget) |||||||||\n")
                    continue
                print(f"== {ename} {model}", flush=True)
                try:
                    for r in fn(model):
                        fh.write(_fmt_row(r) + "\n")
                except Exception as e:  # noqa: BLE001
                    print(f"  {ename} {model} failed: {type(e).__name__}: {e}", flush=True)
                    fh.write(f"| {ename} {model} FAILED: {type(e).__name__}: {str(e)[:200]} |||||||||\n")
                fh.flush()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
