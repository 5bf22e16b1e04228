"""Where a prompt chunk's time goes: per-kernel GPU time, host launch time and hidden syncs of one eager prompt
forward of the cuda runtime on a synth model.

    python benchmarks/profile_prompt.py --geometry 2b --root /tmp/tfmodels --tokens 512,4096 \
        --variants "default;TENSORFOLD_PROMPT_ATTN=splitk,TENSORFOLD_CHUNK_INTER=32" --out prof.md

For each variant (a ``;``-separated list of ``NAME=VALUE,...`` environment settings applied before the runs, the
switches being read at launch time) and each prompt length L (one stream, one chunk of L rows, fresh slot):
1. wall time of ``CudaBackend.prefill(slot, ids, 0, want_logits=True)`` (what bench_decode times), best of
   ``--wall-reps`` runs after a warm-up prefill that compiles every kernel;
2. one more eager prefill with every kernel launch recorded (``numba.cuda.dispatcher._LaunchConfiguration.__call__``
   patched, as ``bench_decode.profile_step`` does) together with the host time spent inside each launch call, and
   counts of host syncs, device allocations, host<->device copies made during the forward;
3. each recorded launch replayed ``--reps`` times inside its own captured CUDA graph and timed with events
   (per-launch GPU time; the graph floor of ~1-2 us a launch is included);
4. all recorded launches captured into ONE graph and replayed: the forward's GPU time without Python;
then a per-kernel table (count, GPU total us, share, us a launch, grid sizes seen, host us inside the launch
calls) and the split wall = GPU(one graph) + what the host adds.

Replays rewrite the same buffers and caches (the residual and the recurrent state drift); only timing is read
from them. In the simulator (NUMBA_ENABLE_CUDASIM=1, e.g. ``--geometry tiny``) it runs as a dry run: launches are
recorded and host-timed, GPU times are 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _log_factory(path):
    lines = []

    def log(msg=""):
        print(msg, flush=True)
        lines.append(msg)
        if path:
            Path(path).write_text("\n".join(lines) + "\n")

    return log


def parse_variants(s):
    out = []
    for part in s.split(";"):
        part = part.strip()
        if not part:
            continue
        env = {}
        if part != "default":
            for kv in part.split(","):
                k, v = kv.split("=", 1)
                env[k.strip()] = v.strip()
        out.append((part, env))
    return out or [("default", {})]


class Spy:
    """Records every numba kernel launch (GPU dispatcher or simulator kernel) and counts host-side CUDA calls."""

    def __init__(self):
        self.rec = []  # (dispatcher, name, griddim, blockdim, sharedmem, args, host_s)
        self.calls = {}
        self._undo = []
        self.t_last = None

    def _count(self, key):
        self.calls[key] = self.calls.get(key, 0) + 1

    def _wrap(self, owner, attr, key):
        orig = getattr(owner, attr)
        spy = self

        def w(*a, **k):
            spy._count(key)
            return orig(*a, **k)

        setattr(owner, attr, w)
        self._undo.append((owner, attr, orig))

    def __enter__(self):
        from numba import cuda

        from tensorfold.kernels._device import IS_SIM

        spy = self
        if IS_SIM:
            import numba.cuda.simulator.kernel as SK

            orig = SK.FakeCUDAKernel.__call__

            def call(kself, *args):
                if kself._device:
                    return orig(kself, *args)
                t = time.perf_counter()
                r = orig(kself, *args)
                spy.t_last = time.perf_counter()
                spy.rec.append((kself, kself.fn.__name__, tuple(kself.grid_dim), tuple(kself.block_dim), 0, args,
                                spy.t_last - t))
                return r

            SK.FakeCUDAKernel.__call__ = call
            self._undo.append((SK.FakeCUDAKernel, "__call__", orig))
        else:
            import numba.cuda.dispatcher as D

            orig = D._LaunchConfiguration.__call__

            def call(lc, *args):
                for x in args:
                    if isinstance(x, np.ndarray) and x.ndim > 0:
                        spy._count("host ndarray passed to a kernel (copy in + out + sync)")
                t = time.perf_counter()
                r = orig(lc, *args)
                spy.t_last = time.perf_counter()
                spy.rec.append((lc.dispatcher, lc.dispatcher.py_func.__name__, tuple(lc.griddim),
                                tuple(lc.blockdim), lc.sharedmem, args, spy.t_last - t))
                return r

            D._LaunchConfiguration.__call__ = call
            self._undo.append((D._LaunchConfiguration, "__call__", orig))
            from numba.cuda.cudadrv import devicearray as DA
            from numba.cuda.cudadrv import driver as DR

            self._wrap(DA.DeviceNDArray, "copy_to_host", "copy_to_host (D2H)")
            self._wrap(DA.DeviceNDArray, "copy_to_device", "copy_to_device (H2D or D2D)")
            self._wrap(DR.Stream, "synchronize", "stream.synchronize")
        self._wrap(cuda, "synchronize", "cuda.synchronize")
        self._wrap(cuda, "device_array", "cuda.device_array (alloc)")
        self._wrap(cuda, "to_device", "cuda.to_device (alloc + H2D)")
        self._wrap(cuda, "pinned_array", "cuda.pinned_array (alloc)")
        return self

    def __exit__(self, *exc):
        for owner, attr, orig in reversed(self._undo):
            setattr(owner, attr, orig)
        self._undo.clear()
        return False


def _graph_time(launches, be, reps, cs):
    """GPU us of ``launches`` replayed ``reps`` times in one captured graph (``bench_decode.graph_time``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_decode import graph_time

    return graph_time(launches, be, reps, cs)


def _gemm_flops(name, args):
    """2 * rows * out * in of a GEMM launch (tensor-core gemm or affine.qgemm: args W, S, B, x, y, R, ...)."""
    if not (name.startswith("tcgemm") or "qgemm" in name):
        return 0.0
    try:
        W, x = args[0], args[3]
        R = int(args[5]) if len(args) > 5 and np.ndim(args[5]) == 0 else x.shape[0]
        return 2.0 * R * W.shape[0] * x.shape[1]
    except Exception:  # noqa: BLE001
        return 0.0


def _gemm_check(rec, be, reps, cs, log):
    """For the first GEMM launch of each shape: its graph-timed us with the runtime's arrays (arena views,
    buffer slices) and with fresh C-contiguous copies of every array argument (the bench_gemm condition)."""
    from numba import cuda

    seen, out = set(), []
    for disp, name, g, b, sm, args, hs in rec:
        if not name.startswith("tcgemm"):
            continue
        key = (name, tuple(args[0].shape), tuple(args[3].shape), int(args[5]))
        if key in seen:
            continue
        seen.add(key)
        try:
            fresh = []
            for x in args:
                if hasattr(x, "copy_to_host") and getattr(x, "ndim", 0) > 0:
                    y = cuda.device_array(x.shape, x.dtype)
                    y.copy_to_device(x.copy_to_host())
                    fresh.append(y)
                else:
                    fresh.append(x)
            t_run = _graph_time([(disp, g, b, sm, args)], be, reps, cs)
            t_fresh = _graph_time([(disp, g, b, sm, tuple(fresh))], be, reps, cs)
            fl = _gemm_flops(name, args)
            out.append((key, t_run, t_fresh, fl,
                        [(getattr(x, "strides", None), getattr(x, "shape", None)) for x in args[:5]]))
        except Exception as e:  # noqa: BLE001
            log(f"  gemm check {key}: {type(e).__name__}: {e}")
    return out


def profile_length(be, L, rng, log, reps=3, wall_reps=3, whole=True, per_launch=True, gemm_check=True):
    """Wall time, recorded launches, per-kernel GPU times of one L-token prompt chunk; returns a dict."""
    from numba import cuda

    from tensorfold.kernels._device import IS_SIM

    V = be.vocab_size
    ids = [int(x) for x in rng.integers(0, min(V, 240000), L)]
    walls = []
    for _ in range(wall_reps):
        s = be.new_slot()
        be.stream.synchronize()
        t = time.perf_counter()
        be.prefill(s, ids, 0, want_logits=True)
        walls.append(time.perf_counter() - t)
        be.free(s)
    s = be.new_slot()
    be.stream.synchronize()
    spy = Spy()
    t = time.perf_counter()
    with spy:
        be.prefill(s, ids, 0, want_logits=True)
    wall_rec = time.perf_counter() - t
    enq = (spy.t_last - t) if spy.t_last is not None else wall_rec
    rec = spy.rec
    host_launch = sum(r[6] for r in rec)
    out = dict(L=L, walls=walls, wall_rec=wall_rec, enq=enq, n=len(rec), host_launch=host_launch,
               calls=dict(spy.calls))
    cs = None
    if not IS_SIM:
        from cuda.core import Device

        dev = Device()
        dev.set_current()
        cs = dev.create_stream(be.stream)
    per = []
    t0 = time.perf_counter()
    for disp, name, g, b, sm, args, hs in rec:
        fl = _gemm_flops(name, args)
        us = 0.0
        if cs is not None and per_launch:
            try:
                us = _graph_time([(disp, g, b, sm, args)], be, reps, cs)
            except Exception as e:  # noqa: BLE001
                log(f"  {name}: not timed ({type(e).__name__}: {e})")
                us = float("nan")
        per.append((name, g, b, us, hs, fl))
    out["per"] = per
    out["per_s"] = time.perf_counter() - t0
    out["gemm_check"] = _gemm_check(rec, be, reps, cs, log) if cs is not None and per_launch and gemm_check else []
    out["graph_us"] = None
    if cs is not None and whole and rec:
        try:
            out["graph_us"] = _graph_time([(r[0], r[2], r[3], r[4], r[5]) for r in rec], be, 1, cs)
        except Exception as e:  # noqa: BLE001
            log(f"  whole-forward graph failed: {type(e).__name__}: {e}")
    be.free(s)
    return out


def _slot_state(be, slot, n):
    """Host copies of one slot's caches (per layer: recurrent state, conv tail, the first n K/V rows)."""
    cc = be.caches
    out = []
    for l in range(cc.rec.shape[0]):
        out.append(cc.rec[l, slot].copy_to_host())
        out.append(cc.conv[l, slot].copy_to_host())
    for l in range(cc.k.shape[0]):
        out.append(cc.k[l, slot, :n].copy_to_host())
        out.append(cc.v[l, slot, :n].copy_to_host())
    return out


def check_graph(be, rng, log, L1=700, L2=300):
    """Graphed prompt chunks (TENSORFOLD_PROMPT_GRAPH=1) vs eager ones: a first chunk of L1 tokens and a
    continuation chunk of L2 on three slots (eager; graphed, captured on first use; graphed, replayed): logits and
    the slots' caches must be equal bit for bit. Returns True when they are."""
    V = be.vocab_size
    ids1 = [int(x) for x in rng.integers(0, min(V, 240000), L1)]
    ids2 = [int(x) for x in rng.integers(0, min(V, 240000), L2)]
    saved = os.environ.get("TENSORFOLD_PROMPT_GRAPH")
    res = []
    try:
        for mode in ("0", "1", "1"):
            os.environ["TENSORFOLD_PROMPT_GRAPH"] = mode
            s = be.new_slot()
            a = be.prefill(s, ids1, 0, want_logits=True)
            b = be.prefill(s, ids2, L1, want_logits=True)
            res.append((s, a, b, _slot_state(be, s, L1 + L2)))
    finally:
        if saved is None:
            os.environ.pop("TENSORFOLD_PROMPT_GRAPH", None)
        else:
            os.environ["TENSORFOLD_PROMPT_GRAPH"] = saved
    ok = True
    for name, (s, a, b, st) in zip(("graphed (capture)", "graphed (replay)"), res[1:]):
        e = res[0]
        same = np.array_equal(a, e[1]) and np.array_equal(b, e[2])
        same_c = all(np.array_equal(x, y) for x, y in zip(st, e[3]))
        nan = bool(np.isnan(a).any() or np.isnan(b).any())
        d = float(max(np.abs(a - e[1]).max(), np.abs(b - e[2]).max()))
        log(f"- prompt graph check, {name} vs eager ({L1} + {L2} tokens): logits equal {same} (max |diff| {d:.3g}), "
            f"caches equal {same_c}, NaN {nan}")
        ok = ok and same and same_c and not nan
    for s, *_ in res:
        be.free(s)
    log(f"- prompt graph check: {'PASS' if ok else 'FAIL'}; runner error: {be.runner.prompt_graph_error}")
    return ok


def report(res, log, label):
    L = res["L"]
    per = res["per"]
    agg = {}
    for name, g, b, us, hs, fl in per:
        a = agg.setdefault(name, dict(n=0, us=0.0, hs=0.0, grids=set(), fl=0.0))
        a["n"] += 1
        a["fl"] += fl if us == us else 0.0
        a["us"] += 0.0 if us != us else us
        a["hs"] += hs
        a["grids"].add(int(np.prod(g)))
    tot = sum(a["us"] for a in agg.values())
    wall = min(res["walls"]) if res["walls"] else res["wall_rec"]
    log(f"### {label}: {L} tokens")
    log("")
    log(f"- wall of prefill (best of {len(res['walls'])}): {wall * 1e3:.1f} ms = {L / wall:,.0f} tok/s "
        f"(all: {', '.join(f'{w * 1e3:.1f}' for w in res['walls'])} ms); recorded run {res['wall_rec'] * 1e3:.1f} ms")
    log(f"- launches: {res['n']}; sum of per-launch GPU times {tot / 1e3:.2f} ms; host time inside launch calls "
        f"{res['host_launch'] * 1e3:.2f} ms ({1e6 * res['host_launch'] / max(res['n'], 1):.1f} us a launch); the last "
        f"launch returned {res['enq'] * 1e3:.1f} ms after the start of the recorded run ({res['wall_rec'] * 1e3:.1f} ms): "
        f"the host then waited {(res['wall_rec'] - res['enq']) * 1e3:.1f} ms for the GPU")
    if res.get("graph_us") is not None:
        g = res["graph_us"]
        log(f"- whole forward as one CUDA graph: {g / 1e3:.2f} ms GPU ({L / (g * 1e-6):,.0f} tok/s); wall - graph = "
            f"{(wall * 1e6 - g) / 1e3:.2f} ms of host / launch overhead not hidden behind the GPU")
    log(f"- host CUDA calls during the recorded forward: "
        + (", ".join(f"{k} x{v}" for k, v in sorted(res["calls"].items())) or "none"))
    if res.get("gemm_check"):
        log("")
        log("GEMM in place vs the same launch on fresh contiguous copies of its arrays (graph-timed):")
        log("")
        log("| kernel | W | x | rows | us in place | us fresh copies | TFLOP/s in place | fresh |")
        log("|---|---|---|---|---|---|---|---|")
        for key, tr, tf, fl, lay in res["gemm_check"]:
            log(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {tr:,.1f} | {tf:,.1f} | "
                f"{fl / (tr * 1e-6) / 1e12:.1f} | {fl / (tf * 1e-6) / 1e12:.1f} |")
        log(f"(strides/shapes of the first checked launch's W, S, B, x, y: {res['gemm_check'][0][4]})")
    log("")
    if not per:
        log("(no launches recorded: the chunk was a graph replay)")
        log("")
        return agg
    log("| kernel | launches | GPU total us | share | us a launch | blocks (min-max) | host us in launch calls | "
        "TFLOP/s |")
    log("|---|---|---|---|---|---|---|---|")
    for name, a in sorted(agg.items(), key=lambda kv: -kv[1]["us"]):
        gl = sorted(a["grids"])
        tf = f"{a['fl'] / (a['us'] * 1e-6) / 1e12:.1f}" if a["fl"] and a["us"] > 0 else ""
        log(f"| {name} | {a['n']} | {a['us']:,.1f} | {100 * a['us'] / max(tot, 1e-9):.1f} % | "
            f"{a['us'] / a['n']:,.1f} | {gl[0]}-{gl[-1]} | {a['hs'] * 1e6:,.0f} | {tf} |")
    log("")
    return agg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--geometry", default="2b")
    ap.add_argument("--root", default="/tmp/tfmodels")
    ap.add_argument("--tokens", default="512,4096")
    ap.add_argument("--variants", default="default")
    ap.add_argument("--parallel", type=int, default=32, help="streams of the backend (bench_decode uses its largest "
                    "stream count; it sets the buffer rows and the attention rows per launch)")
    ap.add_argument("--prompt-rows", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--wall-reps", type=int, default=3)
    ap.add_argument("--no-per-launch", action="store_true")
    ap.add_argument("--check-graph", action="store_true", help="first: graphed prompt chunks vs eager, bit for bit")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    log = _log_factory(a.out)
    from numba import cuda

    from tensorfold.kernels._device import IS_SIM
    from tensorfold.model.checkpoint import load_checkpoint
    from tensorfold.runtime.backend import CudaBackend

    import bench_decode as BD

    dev = cuda.get_current_device()
    name = getattr(dev, "name", "simulator")
    gpu = name.decode() if isinstance(name, bytes) else str(name)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        commit = "?"
    commit = os.environ.get("TF_COMMIT") or commit or "?"
    tokens = [int(x) for x in a.tokens.split(",")]
    log(f"# prompt profile: {a.geometry}, commit {commit}, {gpu}{' (simulator dry run)' if IS_SIM else ''}")
    log(f"command: python benchmarks/profile_prompt.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    d = BD._synth_dir(a.geometry, a.root, log)
    ck = load_checkpoint(d)
    t = time.perf_counter()
    be = CudaBackend(ck.tensors, ck.config, parallel=a.parallel, context=max(tokens) + 64, kv_cache="bf16",
                     prompt_rows=a.prompt_rows, use_graphs=False, model_name=f"synth {a.geometry}", progress=False)
    log(f"{be.startup_line} (total {time.perf_counter() - t:.1f} s; decode graphs off: prompts run eagerly anyway)")
    r = be.runner
    log(f"buffers: rows {r.rows_cap}, attention rows a launch {r.buf.att_rows}, prompt rows {r.prompt_rows}")
    rng = np.random.default_rng(0)
    summary = []
    for vi, (label, env) in enumerate(parse_variants(a.variants)):
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            t = time.perf_counter()
            s = be.new_slot()  # warm-up: compiles every prompt kernel of this variant
            be.prefill(s, [int(x) for x in rng.integers(0, min(be.vocab_size, 1000), min(300, max(tokens)))], 0, want_logits=True)
            be.free(s)
            log(f"[{label}] warm-up prefill {time.perf_counter() - t:.1f} s")
            for L in tokens:
                res = profile_length(be, L, rng, log, reps=a.reps, wall_reps=a.wall_reps,
                                     per_launch=not a.no_per_launch, gemm_check=vi == 0)
                report(res, log, label)
                wall = min(res["walls"])
                summary.append((label, L, wall, res.get("graph_us"), res["n"]))
                log(f"[{label}] {L} tokens done (per-launch timing took {res['per_s']:.1f} s)")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    if a.check_graph:
        t = time.perf_counter()
        try:
            check_graph(be, rng, log)
        except Exception as e:  # noqa: BLE001
            log(f"- prompt graph check: ERROR {type(e).__name__}: {e}")
        log(f"(graph check took {time.perf_counter() - t:.1f} s)")
        log("")
    log("## summary")
    log("")
    log("| variant | tokens | wall ms | tok/s | one-graph GPU ms | launches |")
    log("|---|---|---|---|---|---|")
    for label, L, wall, g, n in summary:
        gs = f"{g / 1e3:.2f}" if g is not None else "-"
        log(f"| {label} | {L} | {wall * 1e3:.1f} | {L / wall:,.0f} | {gs} | {n} |")
    be.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
    sys.exit(main())
