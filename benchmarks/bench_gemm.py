"""Prompt GEMM benchmark: v3 (``xprep`` + cp.async tensor-core kernel) vs v1 vs torch bf16 matmul.

Run on the GPU machine: ``NUMBA_ENABLE_CUDASIM=0 python benchmarks/bench_gemm.py [--out DIR] [--wait F1,F2]``

- Shapes: 2B, 9B and 27B gate/up (``I x H``) and down (``H x I``), 4-bit group 64, 512 and 4096 rows: v3 at its
  default geometry (both launches: pre-pass + ``tc3gemm``; ``TENSORFOLD_XPREP`` picks the pre-pass), each pre-pass
  alone (``xprep``, ``xprep2``), v1 at its default geometry, torch.
- v3 geometries (``VARIANT_GEOS``) at the 9B gate/up shape; their outputs must equal the default geometry's bit for
  bit (checked here: the tiling and ring depth decide who computes an output and when its data arrives, never how).
- Other formats at the 9B gate/up shape with 512 rows (v3: 8 bits, group 128; v1: 2 bits, group 32).
- ``--affine`` adds the old fp32-FMA ``affine.qgemm`` (slow: 30-50 ms per 4096-row launch).
- Timing: ``bench_kernels.time_case`` (launches captured into one CUDA graph, median of 5 replays, per launch),
  after a warm-up launch (compilation). Peer: torch bf16 ``matmul`` (CUDA events, median of 5).
- TFLOP/s counts ``2 * R * out * in``.
- ``--wait`` names files whose existence (or ``--wait-max`` seconds) is awaited after the warm-up, so that timing
  does not overlap GPU tests running at the same time.
Writes ``gemm_<UTC date>.md`` / ``.json`` (commit, GPU, command, figures) into ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

SHAPES = {"2B": (2048, 6144), "9B": (4096, 12288), "27B": (5120, 17408)}
VARIANT_GEOS = [(8, 1, 2, 4, 2), (8, 1, 2, 4, 3), (4, 1, 2, 4, 2), (4, 1, 2, 4, 4), (4, 2, 2, 4, 2),
                (8, 1, 2, 4, 2, 2), (8, 1, 2, 4, 3, 2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--wait", default="")
    ap.add_argument("--wait-max", type=float, default=120.0)
    ap.add_argument("--affine", action="store_true")
    ap.add_argument("--models", default=",".join(SHAPES))
    ap.add_argument("--rows", default="512,4096")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    from bench_kernels import Case, _ctx, time_case
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import gemm as G

    ctx = _ctx()
    cuda, cp, torch = ctx["cuda"], ctx["cp"], ctx["torch"]
    rows_out = []
    pending = []  # (label dict, Case) timed after the wait

    def qweights(out, inp, bits, group):
        P, _p = ctx["rand_u32"]((out, inp * bits // 32))
        S, _s = ctx["rand_bf16"]((out, inp // group))
        B, _b = ctx["rand_bf16"]((out, inp // group))
        return (P, S, B), (_p, _s, _b)

    def torch_peer(R, out, inp):
        if torch is None:
            return None
        W = torch.randn(out, inp, device="cuda", dtype=torch.bfloat16) * 0.02
        x = torch.randn(R, inp, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            torch.matmul(x, W.t())
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(10):
                torch.matmul(x, W.t())
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) / 10)
        ts.sort()
        del W, x
        return ts[2] * 1e3  # us

    def add(label, launch, n, flops):
        case = Case(name=label["kernel"], model=label["model"], shape=label["shape"], nbytes=0,
                    launches=[launch], flops=flops, n_in_graph=n)
        try:
            launch(0)  # compile + run once
            cuda.synchronize()
            pending.append((label, case))
        except Exception as e:  # noqa: BLE001
            label["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            traceback.print_exc()
            rows_out.append(label)

    keep = []
    checks = []
    gname = "x".join(map(str, G.GEO3))
    for model in args.models.split(","):
        H, I = SHAPES[model]
        for which, (out, inp) in (("gate/up", (I, H)), ("down", (H, I))):
            (P, S, B), k = qweights(out, inp, 4, 64)
            keep.append(k)
            for R in [int(v) for v in args.rows.split(",")]:
                x, _x = ctx["rand_f32"]((R, inp))
                y = cuda.device_array((R, out), dtype="float32")
                y1 = cuda.device_array((R, out), dtype="float32")
                keep.append((_x, y, y1))
                fl = 2 * R * out * inp
                shape = f"R={R} {out}x{inp}"
                base = {"model": model, "which": which, "shape": shape, "R": R, "out": out, "inp": inp,
                        "flops": fl, "format": "4b g64"}
                add(dict(base, kernel=f"v3 {gname} (xprep + tc3)"),
                    lambda s, P=P, S=S, B=B, x=x, y=y: G.launch_qgemm(P, S, B, x, y, 4, 64, stream=s, impl="v3"),
                    10, fl)
                Rp = -(-R // G.RPAD) * G.RPAD
                XF, SXT = G._scratch(None, Rp, inp, inp // 64)
                for ver in ("1", "2"):
                    add(dict(base, kernel=f"v3 xprep{'' if ver == '1' else '2'} alone"),
                        lambda s, x=x, XF=XF, SXT=SXT, R=R, ver=ver: G.launch_xprep(x, XF, SXT, R, 4, s, ver),
                        10, fl)
                add(dict(base, kernel=f"v1 {'x'.join(map(str, G.GEO))}"),
                    lambda s, P=P, S=S, B=B, x=x, y1=y1: G.launch_qgemm(P, S, B, x, y1, 4, 64, stream=s, impl="v1"),
                    10, fl)
                checks.append((f"{model} {which} {shape} v3 vs v1 (max |v3 - v1| / max |v1|)", y, y1))
                if model == "9B" and which == "gate/up":
                    for geo in VARIANT_GEOS:
                        yv = cuda.device_array((R, out), dtype="float32")
                        keep.append(yv)
                        add(dict(base, kernel=f"v3 {'x'.join(map(str, geo))}"),
                            lambda s, P=P, S=S, B=B, x=x, yv=yv, geo=geo: G.launch_qgemm(
                                P, S, B, x, yv, 4, 64, stream=s, impl="v3", geo=geo), 10, fl)
                        checks.append((f"{shape} v3 geo {geo} vs default", y, yv))
                if args.affine:
                    yo = cuda.device_array((R, out), dtype="float32")
                    keep.append(yo)
                    add(dict(base, kernel="affine.qgemm fp32 (oldest)"),
                        lambda s, P=P, S=S, B=B, x=x, yo=yo: A.launch_qgemm(P, S, B, x, yo, 4, 64, stream=s),
                        2 if R == 4096 else 3, fl)
                base_peer = dict(base, kernel="torch bf16 matmul (peer)")
                try:
                    base_peer["us"] = torch_peer(R, out, inp)
                    if base_peer["us"]:
                        base_peer["tflops"] = fl / (base_peer["us"] * 1e-6) / 1e12
                except Exception as e:  # noqa: BLE001
                    base_peer["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                rows_out.append(base_peer)
    # other formats, 9B gate/up, 512 rows
    H, I = SHAPES["9B"]
    R0 = int(args.rows.split(",")[0])
    for bits, group in ((8, 64), (4, 128), (8, 128), (2, 32), (4, 32)):
        (P, S, B), k = qweights(I, H, bits, group)
        x, _x = ctx["rand_f32"]((R0, H))
        keep.append((k, _x))
        fl = 2 * R0 * I * H
        for impl in ("v3", "v1"):
            if impl == "v3" and not G.supported3(H, bits, group):
                continue
            y = cuda.device_array((R0, I), dtype="float32")
            keep.append(y)
            geo = G.geo3(bits, group) if impl == "v3" else G.GEO
            add({"model": "9B", "which": "gate/up", "shape": f"R={R0} {I}x{H}", "R": R0, "out": I, "inp": H,
                 "flops": fl, "format": f"{bits}b g{group}", "kernel": f"{impl} {'x'.join(map(str, geo))}"},
                lambda s, P=P, S=S, B=B, x=x, y=y, bits=bits, group=group, impl=impl: G.launch_qgemm(
                    P, S, B, x, y, bits, group, stream=s, impl=impl), 10, fl)

    # wait for concurrent GPU tests to finish before timing
    waits = [w for w in args.wait.split(",") if w]
    t0 = time.time()
    while waits and not all(os.path.exists(w) for w in waits) and time.time() - t0 < args.wait_max:
        time.sleep(0.5)
    waited = time.time() - t0
    print(f"waited {waited:.1f}s for {waits}", flush=True)

    # the bit-for-bit geometry checks (all outputs were written by the warm-up launches)
    check_res = []
    for what, ya, yb in checks:
        a, b = ya.copy_to_host(), yb.copy_to_host()
        if "v1" in what:
            d = float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
            check_res.append(f"{what}: {d:.2e}")
        else:
            ok = a.view("uint32").tobytes() == b.view("uint32").tobytes()
            check_res.append(f"{what}: {'bit-identical' if ok else 'DIFFERENT'}")
    for c in check_res:
        print(c, flush=True)

    for label, case in pending:
        try:
            sec, mode = time_case(case, ctx)
            label["us"] = sec * 1e6
            label["tflops"] = label["flops"] / sec / 1e12
            label["mode"] = mode + case.notes
        except Exception as e:  # noqa: BLE001
            label["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows_out.append(label)
        print(json.dumps(label), flush=True)

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        commit = "unknown"
    gpu = cuda.get_current_device().name
    gpu = gpu.decode() if isinstance(gpu, bytes) else str(gpu)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    cmd = "NUMBA_ENABLE_CUDASIM=0 python " + " ".join(sys.argv)
    order = {}
    for r in rows_out:
        order.setdefault((r["model"], r["which"], r["format"], r["R"]), []).append(r)
    lines = [f"# Prompt GEMM benchmark {date}", "", f"GPU: {gpu}; commit {commit}.", f"Command: `{cmd}`", "",
             "Per launch, CUDA-graph replay (torch: CUDA events). TFLOP/s = 2*R*out*in / time.", "",
             "| model | proj | format | shape | kernel | us | TFLOP/s | notes |", "|---|---|---|---|---|---|---|---|"]
    for key, rs in order.items():
        for r in rs:
            us = f"{r['us']:.1f}" if r.get("us") else ""
            tf = f"{r['tflops']:.1f}" if r.get("tflops") else ""
            lines.append(f"| {r['model']} | {r['which']} | {r['format']} | {r['shape']} | {r['kernel']} | {us} | {tf} "
                         f"| {r.get('mode', '')}{r.get('error', '')} |")
    lines += ["", "Checks:", ""] + [f"- {c}" for c in check_res]
    md = "\n".join(lines) + "\n"
    print(md)
    with open(os.path.join(args.out, f"gemm_{date}.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, f"gemm_{date}.json"), "w") as f:
        json.dump({"commit": commit, "gpu": gpu, "command": cmd, "rows": rows_out, "checks": check_res}, f, indent=1)
    _ = cp


if __name__ == "__main__":
    main()
