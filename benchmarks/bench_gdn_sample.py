"""Benchmarks for the lean delta-rule step, the general recurrence (window / tree), the chunked prompt form, the
greedy pass (``glue.launch_argmax``) and the sampler at vocab 248,320, timed inside captured CUDA graphs with the
helpers of ``bench_kernels_b.py`` (20 launches a graph, 10 replays). Peer: fla's ``fused_recurrent_gated_delta_rule``
(bf16 q/k/v, fp32 state, l2norm in kernel) in torch CUDA graphs, when fla imports.

``NUMBA_ENABLE_CUDASIM=0 python benchmarks/bench_gdn_sample.py --out results.md [--only gdn,sample,chunked,fla]
[--before DIR]``: with ``--before``, DIR holds older copies of ``delta_rule.py``, ``sample.py`` and ``glue.py`` (e.g.
``git show <commit>:tensorfold/kernels/delta_rule.py``); the same cases run on them too, rows marked "before", so a
before/after pair comes from one process on one GPU.

Bytes: the state read + written once (plus q/k/v/gates/output) for the delta rule, the logits read once for the
greedy pass and the sampler; GB/s = bytes / time.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")

from bench_kernels_b import (D, HEADER, MODELS, _f32, _fmt_row, _i32, _res, bench_chunked, graph_time,  # noqa: E402
                             torch_graph_time)
from numba import cuda  # noqa: E402

from tensorfold.kernels import delta_rule as _dr  # noqa: E402
from tensorfold.kernels import sample as _K  # noqa: E402
from tensorfold.runtime import glue as _glue  # noqa: E402

VOCAB = 248320
MODS = {"dr": _dr, "K": _K, "glue": _glue, "tag": ""}


def _load(name, path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    spec.loader.exec_module(m)
    return m


def _before_mods(d):
    return {"dr": _load("tensorfold.kernels._before_delta_rule", os.path.join(d, "delta_rule.py")),
            "K": _load("tensorfold.kernels._before_sample", os.path.join(d, "sample.py")),
            "glue": _load("tensorfold.runtime._before_glue", os.path.join(d, "glue.py")), "tag": "before: "}


def bench_chunked_mod(model, L=8192):
    """bench_kernels_b.bench_chunked on the delta_rule module in MODS."""
    import bench_kernels_b as bkb

    saved = bkb.dr
    bkb.dr = MODS["dr"]
    try:
        rows = bench_chunked(model, L)
    finally:
        bkb.dr = saved
    for r in rows:
        r["name"] = MODS["tag"] + r["name"]
    return rows


def bench_gdn(model):
    dr, tag = MODS["dr"], MODS["tag"]
    Hk, Hv, _, _ = MODELS[model]
    C = 2 * Hk * D + Hv * D
    rng = np.random.default_rng(0)
    out = []
    A_log, dt_bias = _f32(rng, Hv, 0.5), _f32(rng, Hv)
    e3, e3v, e2 = (cuda.device_array((0, Hk, D), np.float32), cuda.device_array((0, Hv, D), np.float32),
                   cuda.device_array((0, Hv), np.float32))
    for B in (1, 8, 32):
        qkv, a, b = _f32(rng, (B, C)), _f32(rng, (B, Hv), 1, -1), _f32(rng, (B, Hv))
        state = _f32(rng, (B, Hv, D, D), 0.05)
        o = cuda.device_array((B, Hv, D), np.float32)
        segs = [_i32(np.arange(B)), _i32(np.ones(B)), _i32(np.arange(B)), _i32(np.ones(B))]
        par = _i32(-np.ones(B))

        def run(s, qkv=qkv, a=a, b=b, state=state, o=o, segs=segs, par=par):
            dr.launch_recurrent(qkv, a, b, A_log, dt_bias, state, *segs, par, o, e3, e3v, e2, stream=s)

        sec, how = graph_time(run)
        nbytes = B * (Hv * D * D * 4 * 2 + C * 4 + Hv * 8 + Hv * D * 4)
        out.append(_res(tag + "gdn step (no log, in place)", model, f"B={B}", sec, nbytes, how=how))
    for R, par_h, name in ((4, [-1, 0, 1, 2], "verify window 4 (logged)"),
                           (8, [-1, 0, 1, 2, -1, 4, 5, 6], "verify tree 8 (2 branches)")):
        qkv, a, b = _f32(rng, (R, C)), _f32(rng, (R, Hv), 1, -1), _f32(rng, (R, Hv))
        state = _f32(rng, (1, Hv, D, D), 0.05)
        o = cuda.device_array((R, Hv, D), np.float32)
        lk, ld, la = (cuda.device_array((R, Hk, D), np.float32), cuda.device_array((R, Hv, D), np.float32),
                      cuda.device_array((R, Hv), np.float32))
        segs = [_i32([0]), _i32([R]), _i32([0]), _i32([0])]
        par = _i32(par_h)

        def runw(s, qkv=qkv, a=a, b=b, state=state, o=o, lk=lk, ld=ld, la=la, segs=segs, par=par):
            dr.launch_recurrent(qkv, a, b, A_log, dt_bias, state, *segs, par, o, lk, ld, la, stream=s)

        sec, how = graph_time(runw)
        nbytes = Hv * D * D * 4 + R * (C * 4 + Hv * 8 + 2 * Hv * D * 4 + Hk * D * 4 + Hv * 4)
        out.append(_res(f"{tag}gdn_recurrent {name}", model, f"B=1 R={R}", sec, nbytes, how=how))
    return out


def bench_fla_step(model):
    out = []
    try:
        import torch
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    except Exception as e:  # noqa: BLE001
        print(f"  fla unavailable: {e!r}", flush=True)
        return out
    Hk, Hv, _, _ = MODELS[model]
    torch.manual_seed(0)
    for B in (1, 8, 32):
        q, k = (torch.randn(B, 1, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v = torch.randn(B, 1, Hv, D, device="cuda", dtype=torch.bfloat16)
        g = -torch.rand(B, 1, Hv, device="cuda", dtype=torch.float32)
        beta = torch.rand(B, 1, Hv, device="cuda", dtype=torch.float32)
        h0 = torch.randn(B, Hv, D, D, device="cuda", dtype=torch.float32) * 0.05

        def f(q=q, k=k, v=v, g=g, beta=beta, h0=h0):
            return fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0,
                                                    output_final_state=True, use_qk_l2norm_in_kernel=True)

        try:
            sec, how = torch_graph_time(f)
            out.append(_res("fla fused_recurrent (peer)", model, f"B={B}", sec,
                            B * (Hv * D * D * 8 + (2 * Hk + Hv) * D * 2 + Hv * D * 2), how=how))
        except Exception as e:  # noqa: BLE001
            print(f"  fla fused_recurrent failed: {e!r}", flush=True)
    return out


def bench_sample(_model):
    K, glue, tag = MODS["K"], MODS["glue"], MODS["tag"]
    rng = np.random.default_rng(3)
    out = []
    for n in (1, 8, 64):
        lg = _f32(rng, (n, VOCAB), 3.0)
        ids = cuda.device_array(n, np.int32)

        def run(s, lg=lg, ids=ids):
            glue.launch_argmax(lg, VOCAB, ids, stream=s)

        sec, how = graph_time(run)
        out.append(_res(tag + "glue.launch_argmax", "-", f"n={n} V={VOCAB}", sec, n * VOCAB * 4, how=how))
    for n, (t, k, p) in ((1, (0.0, 0, 1.0)), (8, (0.0, 0, 1.0)), (64, (0.0, 0, 1.0)), (1, (0.8, 40, 0.95)),
                         (8, (0.8, 0, 0.95)), (8, (1.0, 0, 1.0))):
        lg = _f32(rng, (n, VOCAB), 3.0)
        ids = cuda.device_array(n, np.int32)
        bufs = [cuda.to_device(np.full(n, t, np.float32)), cuda.to_device(np.full(n, k, np.int32)),
                cuda.to_device(np.full(n, p, np.float32)), cuda.to_device(np.zeros(n, np.float32)),
                cuda.to_device(np.arange(n, dtype=np.int64)), cuda.to_device(np.arange(n, dtype=np.int64))]

        def runs(s, lg=lg, ids=ids, bufs=bufs):
            K.launch_sample(lg, ids, *bufs, VOCAB, stream=s)

        sec, how = graph_time(runs)
        out.append(_res(tag + "launch_sample", "-", f"n={n} T={t} k={k} p={p}", sec, n * VOCAB * 4, how=how))
    return out


ENTRIES = [("gdn", bench_gdn), ("sample", bench_sample), ("chunked", bench_chunked_mod), ("fla", bench_fla_step)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", default="2B,9B,27B")
    ap.add_argument("--only", default="gdn,sample,chunked,fla")
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip remaining entries after this many seconds")
    ap.add_argument("--before", default=None, help="folder with older delta_rule.py / sample.py / glue.py")
    args = ap.parse_args()
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = args.out or os.path.join(HERE, "results", f"gdn_sample_{day}.md")
    head = (f"# delta-rule step / greedy / sampler benchmarks ({day})\n\n"
            f"- GPU: {name}, commit {os.environ.get('TF_COMMIT', '?')}\n"
            f"- command: `python benchmarks/bench_gdn_sample.py --models {args.models} --only {args.only}`\n"
            f"- timed inside captured CUDA graphs (20 launches a graph, 10 replays; chunked: 2 x 3)\n\n{HEADER}\n")
    t0 = time.time()
    sets = [dict(MODS)] + ([_before_mods(args.before)] if args.before else [])
    with open(out, "w") as fh:
        fh.write(head)
        for ename, fn in ENTRIES:
            if ename not in args.only.split(","):
                continue
            models = ["-"] if ename == "sample" else args.models.split(",")
            for mods in (sets if ename != "fla" else sets[:1]):
                MODS.update(mods)
                for model in models:
                    if time.time() - t0 > args.budget_s:
                        fh.write(f"| ({mods['tag']}{ename} {model} skipped: time budget) |||||||||\n")
                        continue
                    print(f"== {mods['tag']}{ename} {model}", flush=True)
                    try:
                        for r in fn(model):
                            fh.write(_fmt_row(r) + "\n")
                    except Exception as e:  # noqa: BLE001
                        print(f"  {ename} {model} failed: {type(e).__name__}: {e}", flush=True)
                        fh.write(f"| {mods['tag']}{ename} {model} FAILED: {type(e).__name__}: {str(e)[:200]} "
                                 f"|||||||||\n")
                    fh.flush()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
