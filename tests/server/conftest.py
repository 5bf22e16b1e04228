"""Fixtures for the server tests: a real `Server` on a free loopback port, serving a real `Engine` on the cpu
backend with the embedded default model (one test also uses a toy LM with the Qwen3.5 thinking template). The
whole path runs: HTTP, validation, the engine thread, the real scheduler, sampler and detokenizer.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _blas_threads(n: int | None = None) -> int | None:
    """Get (and with `n`, set) numpy's OpenBLAS thread count; None when the BLAS offers no such call."""
    import ctypes

    paths = {ln.split()[-1] for ln in open("/proc/self/maps") if "openblas" in ln.lower() and ".so" in ln}
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    old = get()
                    if n is not None:
                        put(n)
                    return old
    return None


@pytest.fixture(scope="module", autouse=True)
def _one_blas_thread():
    """The tiny model's matrices are far too small for threaded BLAS, whose spinning threads cost ~4x the CPU on
    the 2-core CI machine; one thread while these tests run, restored afterwards."""
    try:
        old = _blas_threads(1)
    except OSError:
        old = None
    yield
    if old:
        _blas_threads(old)


class ToyModel:
    """Deterministic recurrent LM with the ReferenceModel interface (new_state / prompt / step)."""

    def __init__(self, vocab, d=16, seed=0, max_pos=4096, eos=()):
        rng = np.random.default_rng(seed)
        self.E = rng.standard_normal((vocab, d))
        self.W = rng.standard_normal((d, d)) / np.sqrt(d)
        self.U = rng.standard_normal((vocab, d)) * 2.0
        self.d = d

        class C:
            vocab_size = vocab
            max_position_embeddings = max_pos
            eos_token_ids = tuple(eos)
            quantization = None

        self.config = C()

    class State:
        def __init__(self, d):
            self.h = np.zeros(d)
            self.pos = 0

    def new_state(self):
        return ToyModel.State(self.d)

    def step(self, state, t):
        time.sleep(0.002)  # a little compute time, so that cancellation and concurrency are observable
        state.h = np.tanh(self.W @ state.h + self.E[int(t)] + 0.01 * state.pos)
        state.pos += 1
        return (self.U @ state.h).astype(np.float32)

    def prompt(self, state, ids):
        return np.stack([self.step(state, t) for t in ids])


def build_engine(parallel: int = 4, context: int = 256, toy: bool = False):
    """The embedded default model on the cpu backend; `toy`: the toy LM with the tiny tokenizer and the Qwen3.5
    *thinking* template (the default model's template never thinks)."""
    from tensorfold.engine import Engine

    if not toy:
        return Engine.from_model(None, backend="cpu", parallel=parallel, context=context)
    from tokenizers import Tokenizer as HFTokenizer

    from tensorfold.config import EngineConfig
    from tensorfold.engine.cpu_backend import CpuBackend
    from tensorfold.model.tokenizer_build import build_tiny_tokenizer, tiny_special_ids
    from tensorfold.tokenizer import Tokenizer, builtin_template

    tj = build_tiny_tokenizer()
    specials = tiny_special_ids(tj)
    eos = [specials["<|im_end|>"], specials["<|endoftext|>"]]
    tok = Tokenizer(HFTokenizer.from_str(json.dumps(tj)), chat_template=builtin_template("qwen3_5_think"),
                    stop_ids=eos, name="tiny")
    model = ToyModel(tok.vocab_size, eos=eos)
    cfg = EngineConfig(backend="cpu", parallel=parallel, context=context)
    be = CpuBackend(model, parallel, context)
    return Engine(be, tok, config=cfg, model_config=model.config, model_name="toy", eos_token_ids=eos)


class ServerThread:
    """A `tensorfold.server.app.Server` on its own event loop in a thread; `url` once started."""

    def __init__(self, engine_factory, **config):
        from tensorfold.server.app import Server, ServerConfig

        config.setdefault("host", "127.0.0.1")
        config.setdefault("port", 0)
        self.server = Server(ServerConfig(**config), engine_factory)
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._started.wait(30), "server did not start"
        self.url = f"http://127.0.0.1:{self.server.port}"

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.start())
        self._started.set()
        self.loop.run_forever()

    def wait_loaded(self, timeout=120):
        fut = asyncio.run_coroutine_threadsafe(self.server.wait_loaded(), self.loop)
        assert fut.result(timeout), f"model failed to load: {self.server.bridge.load_error}"
        return self

    def stop(self):
        fut = asyncio.run_coroutine_threadsafe(self.server.shutdown(grace=5), self.loop)
        fut.result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="session")
def served():
    """The shared server: parallel 4, context 256, queue 64, request log in a temp file."""
    import tempfile

    d = tempfile.mkdtemp(prefix="tf-serve-")
    st = ServerThread(lambda: build_engine(parallel=4, context=256), queue=64,
                      request_log=os.path.join(d, "requests.jsonl")).wait_loaded()
    st.log_path = os.path.join(d, "requests.jsonl")
    yield st
    st.stop()
