"""`tensorfold serve`: the OpenAI-compatible HTTP server command.

The listener starts first (so `/health` answers 503 while loading), the engine is built on its own thread,
and a startup line reports model, weight format, cache format, context, streams and load time. SIGTERM/SIGINT
stop accepting, cancel what runs and exit 0; SIGHUP re-reads `--api-key-file`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

import click

from .app import Server, ServerConfig
from .auth import KeyFileError


def engine_factory(model, backend, parallel, context, kv_cache):
    """A no-argument callable that builds the Engine (run on the engine thread). MODEL is resolved by the
    engine: a directory, a hub id (`tensorfold.model.hub.resolve_model`), or None for the embedded default."""

    def build():
        from tensorfold.engine import Engine

        return Engine.from_model(model, backend=backend, parallel=parallel, context=context, kv_cache=kv_cache)

    return build


def describe_engine(engine, kv_cache: str) -> str:
    """Weight format, cache format and backend, from what the engine exposes (`engine.info`, configs)."""
    info = getattr(engine, "info", None) or {}
    wf = info.get("weights") or getattr(engine, "weight_format", None)
    if wf is None:
        q = getattr(getattr(engine, "model_config", None), "quantization", None)
        wf = f"affine {q.bits}-bit g{q.group_size}" if q is not None else "unknown"
    cache = info.get("kv_cache") or getattr(getattr(engine, "config", None), "kv_cache", None) or kv_cache
    backend = info.get("backend") or getattr(getattr(engine, "backend", None), "name", None)
    out = f"weights {wf}, kv cache {cache}"
    if isinstance(backend, str):
        out += f", backend {backend}"
    return out


async def run_server(config: ServerConfig, factory, kv_cache: str = "bf16", model_label: str = "default") -> int:
    server = Server(config, factory)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.keys.reload)
    await server.start()
    print(f"tensorfold serve: listening on http://{config.host}:{server.port} (loading {model_label})",
          flush=True)
    t0 = time.perf_counter()
    load = asyncio.ensure_future(server.wait_loaded())
    stopper = asyncio.ensure_future(stop.wait())
    while not load.done():
        done, _ = await asyncio.wait({load, stopper}, timeout=5.0, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            print("tensorfold serve: stopped while loading", flush=True)
            await server.shutdown(grace=0)
            return 0
        if not done:
            print(f"tensorfold serve: loading {model_label} ... {time.perf_counter() - t0:.0f}s", flush=True)
    if not load.result():
        print(f"tensorfold serve: model failed to load: {server.bridge.load_error}", file=sys.stderr, flush=True)
        stopper.cancel()
        await server.shutdown(grace=0)
        return 1
    eng = server.bridge.engine
    d = server.defaults
    print(f"tensorfold serve: ready: model {d.model_names[0]} ({describe_engine(eng, kv_cache)}), "
          f"context {d.context}, streams {config.parallel}, loaded in {server.bridge.load_seconds:.1f}s, "
          f"http://{config.host}:{server.port}/v1" + (", api keys on" if server.keys.enabled else ""), flush=True)
    await stopper
    print("tensorfold serve: shutting down", flush=True)
    await server.shutdown()
    print("tensorfold serve: stopped", flush=True)
    return 0


@click.command("serve")
@click.argument("model", required=False)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8888, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port")
@click.option("--name", default=None, help="model id clients use (default: the model's name)")
@click.option("--parallel", default=4, show_default=True, type=click.IntRange(1, 4096), help="concurrent streams")
@click.option("--context", default=4096, show_default=True, type=click.IntRange(16), help="tokens per stream")
@click.option("--queue", "queue", default=256, show_default=True, type=click.IntRange(0),
              help="requests waiting beyond --parallel before 503")
@click.option("--max-tokens", default=None, type=click.IntRange(1), help="limit (and default) for completion length")
@click.option("--kv-cache", type=click.Choice(["bf16", "fp8"]), default="bf16", show_default=True)
@click.option("--backend", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--api-key", "api_keys", multiple=True, help="accepted key (repeatable); also TENSORFOLD_API_KEY")
@click.option("--api-key-file", type=click.Path(dir_okay=False), default=None,
              help="one key a line, mode 600; SIGHUP re-reads it")
@click.option("--temperature", default=1.0, show_default=True, type=click.FloatRange(0, 2))
@click.option("--top-p", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True))
@click.option("--top-k", default=0, show_default=True, type=click.IntRange(-1))
@click.option("--min-p", default=0.0, show_default=True, type=click.FloatRange(0, 1))
@click.option("--request-log", type=click.Path(dir_okay=False), default=None, help="append one JSON line a request")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
def serve_cmd(model, host, port, name, parallel, context, queue, max_tokens, kv_cache, backend, api_keys,
              api_key_file, temperature, top_p, top_k, min_p, request_log, log_level):
    """Serve MODEL (a local directory or hub id; none: the embedded default) over an OpenAI-compatible API."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level != "debug":  # numba logs every device allocation and free at INFO
        logging.getLogger("numba").setLevel(logging.WARNING)
    keys = list(api_keys)
    env_key = os.environ.get("TENSORFOLD_API_KEY")
    if env_key:
        keys.append(env_key)
    config = ServerConfig(host=host, port=port, name=name, aliases=(model,) if model else (), parallel=parallel,
                          queue=queue, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                          top_k=0 if top_k == -1 else top_k, min_p=min_p, api_keys=tuple(keys),
                          api_key_file=api_key_file, request_log=request_log)
    factory = engine_factory(model, backend, parallel, context, kv_cache)
    try:
        rc = asyncio.run(run_server(config, factory, kv_cache, model or "embedded default model"))
    except KeyFileError as e:
        raise click.UsageError(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"cannot start the server: {e}") from None
    # Everything is shut down in order by now (requests ended, engine closed on its thread, request log closed).
    # Leave without the interpreter's teardown: its finalizers may free GPU memory after the CUDA context is gone,
    # which crashed a cuda-backend server on SIGTERM (exit 139) once prompt graphs existed.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
