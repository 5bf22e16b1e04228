"""`tensorfold bench`: end-to-end engine throughput through the public Engine API, on any backend.

It measures what a user of the engine sees (scheduling, prefill, decode, sampling, host work), not single kernels:
`benchmarks/bench_kernels.py` and `benchmarks/bench_decode.py` do those on the GPU. Prompts are random token ids
(no template), greedy decoding with `ignore_eos` so every stream produces exactly `--gen` tokens.
"""

from __future__ import annotations

import time

import click
import numpy as np


def run_bench(engine, streams: int, prompt_len: int, gen: int, seed: int = 0) -> dict:
    """Prefill `streams` prompts of `prompt_len` random ids, then decode `gen` tokens each, all at once.

    Returns timings: prefill wall time (until every stream produced its first token), decode tok/s over the rest.
    """
    from tensorfold.sampling import SamplingParams

    rng = np.random.default_rng(seed)
    vocab = engine.tokenizer.vocab_size if engine.tokenizer is not None else 256
    specials = set(getattr(engine.tokenizer, "special_ids", ()) or ())
    params = SamplingParams(temperature=0.0, max_tokens=gen, ignore_eos=True)
    rids = []
    for _ in range(streams):
        ids = [int(t) for t in rng.integers(0, vocab, size=prompt_len) if int(t) not in specials] or [0]
        rids.append(engine.add_request(ids, params))
    produced = {rid: 0 for rid in rids}
    t0 = time.perf_counter()
    t_first_all = None
    while engine.has_unfinished():
        for out in engine.step():
            if out.request_id in produced:
                produced[out.request_id] += len(out.new_token_ids)
        if t_first_all is None and all(n > 0 for n in produced.values()):
            t_first_all = time.perf_counter()
    t1 = time.perf_counter()
    t_first_all = t_first_all or t1
    decode_tokens = sum(max(n - 1, 0) for n in produced.values())
    decode_s = max(t1 - t_first_all, 1e-9)
    return {
        "streams": streams,
        "prompt_len": prompt_len,
        "gen": gen,
        "prefill_s": t_first_all - t0,
        "prompt_tok_s": streams * prompt_len / max(t_first_all - t0, 1e-9),
        "decode_tok_s": decode_tokens / decode_s,
        "per_stream_tok_s": decode_tokens / decode_s / streams,
        "tokens": sum(produced.values()),
    }


@click.command("bench")
@click.argument("model", required=False)
@click.option("--streams", default="1,4", show_default=True, help="Comma list of concurrent stream counts.")
@click.option("--prompt-len", default=64, show_default=True, type=int)
@click.option("--gen", default=32, show_default=True, type=int, help="Tokens generated per stream.")
@click.option("--backend", default="auto", type=click.Choice(["auto", "cpu", "cuda"]), show_default=True)
@click.option("--kv-cache", default="bf16", type=click.Choice(["bf16", "fp8"]), show_default=True)
@click.option("--context", default=None, type=int, help="Context per stream (default: prompt + gen + 16).")
def bench_cmd(model, streams, prompt_len, gen, backend, kv_cache, context):
    """Engine throughput: prompt tok/s and decode tok/s at several stream counts (MODEL: path or hub id)."""
    from tensorfold.engine import Engine

    counts = [int(s) for s in str(streams).split(",") if s.strip()]
    if not counts or min(counts) < 1:
        raise click.BadParameter("--streams needs positive integers, e.g. 1,8", param_hint="--streams")
    ctx = context or (prompt_len + gen + 16)
    engine = Engine.from_model(model, backend=backend, parallel=max(counts), context=ctx, kv_cache=kv_cache)
    click.echo(engine.summary(), err=True)
    run_bench(engine, 1, min(prompt_len, 8), 2)  # warm-up: compiles kernels / captures graphs
    click.echo(f"{'streams':>8} {'prompt':>7} {'gen':>5} {'prompt tok/s':>13} {'decode tok/s':>13} {'per stream':>11}")
    for n in counts:
        r = run_bench(engine, n, prompt_len, gen)
        click.echo(
            f"{n:>8} {prompt_len:>7} {gen:>5} {r['prompt_tok_s']:>13.1f} {r['decode_tok_s']:>13.1f} "
            f"{r['per_stream_tok_s']:>11.1f}"
        )
    engine.close()
