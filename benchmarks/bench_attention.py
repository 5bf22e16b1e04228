"""Decode / verify attention (partials + merge) at real Qwen3.5 shapes, timed inside captured CUDA graphs, for the
current ``tensorfold.kernels.attention`` and, optionally, a previous version of that module (``--before PATH``,
e.g. ``git show 2f1501b:tensorfold/kernels/attention.py > /tmp/attention_before.py``) at the same shapes.

Standalone: ``NUMBA_ENABLE_CUDASIM=0 python benchmarks/bench_attention.py --out results.md [--before PATH]``.

Cases per model (2B / 9B / 27B) and cache format (bf16 / e4m3):
- ``B=b keys=n``: b streams, one decode row each, every row sees n keys, buffers and grid depth sized for n
  (what a launch with a known ``Batch.max_keys`` gets);
- ``B=b keys=n cap=C``: the same rows in buffers and with the grid depth of a C-key capacity, as a decode step
  replayed from a graph captured for that capacity gets (``nz = Buffers.nc``).
Bytes = the K and V rows the rows see (plus the e4m3 scales), read once; GB/s and % of the copy rate as in
``bench_kernels_b`` (whose timing helpers this script uses).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")

from numba import cuda  # noqa: E402

import bench_kernels_b as bkb  # noqa: E402
from tensorfold.kernels import attention as katt  # noqa: E402
from tensorfold.kernels import kv8 as kkv8  # noqa: E402

HD = bkb.HD
# (streams, keys each row sees, capacity the buffers / grid are sized for)
CASES = ((1, 4096, 4096), (8, 4096, 4096), (1, 32768, 32768), (1, 100, 16384), (1, 512, 16384),
         (1, 512, 32768), (8, 512, 16384))


def _load(path):
    spec = importlib.util.spec_from_file_location("attention_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench(mod, label, model, fmt, cases):
    _, _, nH, nKV = bkb.MODELS[model]
    rng = np.random.default_rng(2)
    eb = 2 if fmt == "bf16" else 1
    dt = np.uint16 if fmt == "bf16" else np.uint8
    out = []
    for B, n, cap in cases:
        kc = cuda.to_device(rng.integers(0, 0x3F, (B, n, nKV, HD), dtype=dt))
        vc = cuda.to_device(rng.integers(0, 0x3F, (B, n, nKV, HD), dtype=dt))
        if fmt == "e4m3":
            ks = cuda.to_device(np.full((B, n, nKV), 0.01, np.float32))
            vs = cuda.to_device(np.full((B, n, nKV), 0.01, np.float32))
        else:
            ks = vs = kkv8.empty_scale()
        q = bkb._f32(rng, (B, nH, HD))
        qg = bkb._f32(rng, (B, nH, 2 * HD))
        m, l, acc = mod.partial_buffers(B, nH, HD, cap)
        nz = mod.max_chunks(cap)
        meta = [bkb._i32(np.arange(B)), bkb._i32(np.full(B, n)), bkb._i32(np.zeros(B)), bkb._i32(np.zeros(B))]
        res = cuda.device_array((B, nH, HD), np.float32)

        def run(s, kc=kc, vc=vc, ks=ks, vs=vs, q=q, qg=qg, m=m, l=l, acc=acc, meta=meta, res=res, nz=nz):
            mod.launch_partials(q, kc, vc, ks, vs, *meta, HD ** -0.5, m, l, acc, nz=nz, stream=s)
            mod.launch_merge(m, l, acc, meta[0], meta[1], meta[2], qg, 1, res, stream=s)

        sec, how = bkb.graph_time(run)
        nbytes = B * n * nKV * (HD * eb * 2 + (8 if fmt == "e4m3" else 0))
        shape = f"B={B} keys={n}" + (f" cap={cap}" if cap != n else "")
        out.append(bkb._res(f"attention {fmt} ({label})", model, shape, sec, nbytes, how=how))
        del kc, vc
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", default="2B,9B,27B")
    ap.add_argument("--before", default=None, help="path of a previous attention.py to time at the same shapes")
    ap.add_argument("--budget-s", type=float, default=1e9)
    args = ap.parse_args()
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    outp = args.out or os.path.join(ROOT, "benchmarks", "results", f"attention_{day}.md")
    mods = [("after", katt)]
    if args.before:
        mods.insert(0, ("before", _load(args.before)))
    t0 = time.time()
    with open(outp, "w") as fh:
        fh.write(f"# attention partials + merge ({day})\n\n- GPU: {name}, commit {os.environ.get('TF_COMMIT', '?')}\n"
                 f"- command: `python benchmarks/bench_attention.py --models {args.models}"
                 f"{' --before ' + args.before if args.before else ''}`\n"
                 f"- graph-timed (20 launches a graph, 10 replays); copy rate {bkb.COPY_GBS:.0f} GB/s\n\n"
                 f"{bkb.HEADER}\n")
        for model in args.models.split(","):
            for fmt in ("bf16", "e4m3"):
                for label, mod in mods:
                    if time.time() - t0 > args.budget_s:
                        fh.write(f"| ({model} {fmt} {label} skipped: time budget) |||||||||\n")
                        continue
                    print(f"== {model} {fmt} {label}", flush=True)
                    try:
                        for r in bench(mod, label, model, fmt, CASES):
                            fh.write(bkb._fmt_row(r) + "\n")
                    except Exception as e:  # noqa: BLE001
                        print(f"  failed: {type(e).__name__}: {e}", flush=True)
                        fh.write(f"| {model} {fmt} {label} FAILED: {type(e).__name__}: {str(e)[:200]} |||||||||\n")
                    fh.flush()
    print(f"wrote {outp}")


if __name__ == "__main__":
    main()
