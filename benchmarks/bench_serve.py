"""Benchmark a running OpenAI-compatible server the way `vllm bench serve` does (docs/serving.md, anchors.md §4c).

For each concurrency level (default 1, 8, 32) it sends `--num-prompts` streaming requests (`include_usage`, so
token counts are exact) with random prompts of `--input-len` tokens and `--output-len` completion tokens
(`ignore_eos`), keeping at most that many in flight, and reports:

  TTFT  send -> first streamed content            TPOT  (E2EL - TTFT) / (output tokens - 1), per request
  ITL   every gap between streamed content chunks  E2EL  send -> last byte
  throughput: requests/s, output tok/s, total (input + output) tok/s over the level's wall time

as medians and p90/p99, and writes `benchmarks/results/serve_<model>_<date>.md` with the command and commit.

Prompts are exact token-id lists sent to /v1/completions (random text tokenized by the server's /tokenize, then
cut to length), so the input length is what the table says. `--endpoint chat` sends the same text as a chat
message instead (lengths then include the template).

    python benchmarks/bench_serve.py --url http://127.0.0.1:8888 --input-len 1024 --output-len 256
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np

WORDS = ("the of and to in is was for on that with as by at from his her an which or be are this had not but "
         "were they their one all been has have when who will more no if out so said what up its about into "
         "than them can only other new some could time these two may then do first any my now such like our "
         "over man me even most made after also did many before must through back years where much your way "
         "well down should because each just those people how too little state good very make world still own "
         "see men work long get here between both life being under never day same another know while last "
         "river model token cache stream kernel tensor matrix").split()


def random_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def pct(xs, q):
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if len(xs) else float("nan")


class Result:
    def __init__(self):
        self.ok = False
        self.error = None
        self.ttft = None
        self.e2el = None
        self.itl: list[float] = []
        self.prompt_tokens = 0
        self.output_tokens = 0


async def one_request(session: aiohttp.ClientSession, url: str, payload: dict, headers: dict) -> Result:
    res = Result()
    t0 = time.perf_counter()
    last = None
    try:
        async with session.post(url, json=payload, headers=headers) as resp:
            if resp.status != 200:
                res.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return res
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    if not event.startswith(b"data: "):
                        continue
                    data = event[6:]
                    if data == b"[DONE]":
                        continue
                    obj = json.loads(data)
                    if "error" in obj:
                        res.error = obj["error"].get("message")
                        continue
                    if obj.get("usage"):
                        res.prompt_tokens = obj["usage"]["prompt_tokens"]
                        res.output_tokens = obj["usage"]["completion_tokens"]
                    for ch in obj.get("choices") or []:
                        text = ch.get("text")
                        if text is None:
                            d = ch.get("delta") or {}
                            text = (d.get("content") or "") + (d.get("reasoning_content") or "")
                        if text:
                            now = time.perf_counter()
                            if res.ttft is None:
                                res.ttft = now - t0
                            else:
                                res.itl.append(now - last)
                            last = now
            res.e2el = time.perf_counter() - t0
            if res.ttft is None:      # no visible text at all: first byte of the end is the first content
                res.ttft = res.e2el
            res.ok = res.error is None and res.output_tokens > 0
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


async def run_level(args, base: str, model: str, prompts, concurrency: int, headers: dict) -> dict:
    endpoint = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    sem = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    conn = aiohttp.TCPConnector(limit=concurrency + 4)

    def payload(p):
        body = {"model": model, "max_tokens": args.output_len, "temperature": args.temperature, "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True}
        if args.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": p}]
        else:
            body["prompt"] = p
        return body

    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as s:
        async def task(p):
            async with sem:
                return await one_request(s, base + endpoint, payload(p), headers)

        t0 = time.perf_counter()
        results = await asyncio.gather(*(task(p) for p in prompts))
        wall = time.perf_counter() - t0
    ok = [r for r in results if r.ok]
    errors = [r.error for r in results if not r.ok]
    ttft = [r.ttft for r in ok]
    e2el = [r.e2el for r in ok]
    tpot = [(r.e2el - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    itl = [g for r in ok for g in r.itl]
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens for r in ok)
    return {"concurrency": concurrency, "requests": len(results), "completed": len(ok), "errors": errors[:5],
            "n_errors": len(errors), "wall_s": wall, "req_per_s": len(ok) / wall, "out_tok_per_s": out_tok / wall,
            "total_tok_per_s": (in_tok + out_tok) / wall, "mean_in": in_tok / max(1, len(ok)),
            "mean_out": out_tok / max(1, len(ok)),
            **{f"{name}_{stat}": (pct(xs, q) * 1e3) for name, xs in (("ttft", ttft), ("tpot", tpot), ("itl", itl),
                                                                     ("e2el", e2el))
               for stat, q in (("p50", 50), ("p90", 90), ("p99", 99))}}


async def make_prompts(args, base: str, headers: dict, n: int, rng: random.Random):
    """n prompts of exactly input_len tokens (completions) or about that many (chat)."""
    out = []
    async with aiohttp.ClientSession() as s:
        for _ in range(n):
            ids: list[int] = []
            words = max(8, args.input_len)
            while len(ids) < args.input_len:
                async with s.post(base + "/tokenize", json={"prompt": random_text(rng, words)},
                                  headers=headers) as r:
                    r.raise_for_status()
                    ids = (await r.json())["tokens"]
                words *= 2
            ids = ids[:args.input_len]
            if args.endpoint == "chat":
                async with s.post(base + "/detokenize", json={"tokens": ids}, headers=headers) as r:
                    out.append((await r.json())["prompt"])
            else:
                out.append(ids)
    return out


def git_commit() -> str:
    if os.environ.get("TF_COMMIT"):  # the device copy has no git metadata
        return os.environ["TF_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                                       text=True, stderr=subprocess.DEVNULL).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def render(args, model: str, health: dict, rows: list[dict]) -> str:
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0])] + sys.argv[1:])
    lines = [f"# Serving benchmark: {model}", "",
             f"- date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
             f"- commit: {git_commit()}", f"- command: `{cmd}`", f"- server: {args.url}",
             f"- endpoint: /v1/{'chat/completions' if args.endpoint == 'chat' else 'completions'}, streaming, "
             f"include_usage, ignore_eos, temperature {args.temperature}",
             f"- random prompts: {args.input_len} tokens in, {args.output_len} tokens out; "
             f"{args.num_prompts or 'max(16, 4 x concurrency)'} requests per level",
             f"- server health: `{json.dumps(health)}`", "",
             "Definitions as `vllm bench serve`: TTFT send -> first content; TPOT (E2EL - TTFT)/(out - 1) per "
             "request; ITL every gap between content chunks, pooled; E2EL send -> last byte. Times in ms.", "",
             "| conc | done/sent | mean in/out tok | req/s | out tok/s | total tok/s | TTFT p50 | TTFT p90 | "
             "TTFT p99 | TPOT p50 | TPOT p90 | TPOT p99 | ITL p50 | ITL p90 | ITL p99 | E2EL p50 | E2EL p90 | "
             "E2EL p99 |",
             "|" + "---|" * 18]
    for r in rows:
        lines.append(f"| {r['concurrency']} | {r['completed']}/{r['requests']} | "
                     f"{r['mean_in']:.0f}/{r['mean_out']:.0f} | {r['req_per_s']:.2f} | "
                     f"{r['out_tok_per_s']:.1f} | {r['total_tok_per_s']:.1f} | "
                     + " | ".join(f"{r[f'{m}_{s}']:.1f}" for m in ("ttft", "tpot", "itl", "e2el")
                                  for s in ("p50", "p90", "p99")) + " |")
    errs = [(r["concurrency"], r["n_errors"], r["errors"]) for r in rows if r["n_errors"]]
    if errs:
        lines += ["", "Errors:"] + [f"- concurrency {c}: {n} failed, e.g. {e}" for c, n, e in errs]
    return "\n".join(lines) + "\n"


async def main_async(args) -> int:
    base = args.url.rstrip("/")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with aiohttp.ClientSession() as s:
        async with s.get(base + "/health") as r:
            health = await r.json()
            if r.status != 200:
                print(f"server not ready: {health}", file=sys.stderr)
                return 1
        async with s.get(base + "/v1/models", headers=headers) as r:
            r.raise_for_status()
            model = args.model or (await r.json())["data"][0]["id"]
    rng = random.Random(args.seed)
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    warm = await make_prompts(args, base, headers, 1, rng)
    await run_level(args, base, model, warm, 1, headers)
    for c in levels:
        n = args.num_prompts or max(16, 4 * c)
        prompts = await make_prompts(args, base, headers, n, rng)
        row = await run_level(args, base, model, prompts, c, headers)
        rows.append(row)
        print(f"concurrency {c}: {row['completed']}/{row['requests']} ok, {row['req_per_s']:.2f} req/s, "
              f"{row['out_tok_per_s']:.1f} out tok/s, TTFT p50 {row['ttft_p50']:.1f} ms, "
              f"TPOT p50 {row['tpot_p50']:.2f} ms, ITL p50 {row['itl_p50']:.2f} ms, E2EL p50 {row['e2el_p50']:.0f} ms",
              flush=True)
    text = render(args, model, health, rows)
    if args.out:
        out = Path(args.out)
    else:
        safe = "".join(ch if ch.isalnum() or ch in "-._" else "-" for ch in model)
        out = (Path(__file__).parent / "results" /
               f"serve_{safe}_{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%d-%H%M')}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    return 0 if all(r["completed"] == r["requests"] for r in rows) else 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8888")
    ap.add_argument("--model", default=None, help="model id (default: the first of /v1/models)")
    ap.add_argument("--api-key", default=os.environ.get("TENSORFOLD_API_KEY"))
    ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated levels")
    ap.add_argument("--num-prompts", type=int, default=0, help="requests per level (default max(16, 4 x conc))")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=None, help="prompt RNG seed (default: fresh)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per request, seconds")
    ap.add_argument("--out", default=None, help="report path (default benchmarks/results/serve_<model>_<date>.md)")
    args = ap.parse_args(argv)
    if args.input_len < 1 or args.output_len < 1:
        ap.error("--input-len and --output-len must be >= 1")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
