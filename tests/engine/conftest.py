"""Fixtures for the engine tests: the byte tokenizer (an independent, tiny decoder), engines over the cpu backend.

`ByteTokenizer` is a stand-in tokenizer with an obvious decode (ids 0..255 are UTF-8 bytes, 256 = <eos>) so the
detokenizer and stop-string tests have an oracle that shares no code with the engine.
"""

from __future__ import annotations

import numpy as np
import pytest


class ByteTokenizer:
    vocab_size = 257
    eos = 256
    chat_template = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class ToyState:
    def __init__(self, d):
        self.h = np.zeros(d, np.float64)
        self.pos = 0


class ToyModel:
    """A small deterministic recurrent LM with the ReferenceModel interface (new_state / prompt / step).

    Used where a test is about scheduling and bookkeeping, not numerics (it is fast enough for hundreds of
    rounds); the exactness tests use the real ReferenceModel on a tiny synthetic checkpoint.
    """

    def __init__(self, vocab=257, d=16, seed=0, max_pos=4096):
        rng = np.random.default_rng(seed)
        self.E = rng.standard_normal((vocab, d))
        self.W = rng.standard_normal((d, d)) / np.sqrt(d)
        self.U = rng.standard_normal((vocab, d)) * 3.0
        self.d = d

        class C:
            vocab_size = vocab
            max_position_embeddings = max_pos
            eos_token_ids = (256,)

        self.config = C()

    def new_state(self):
        return ToyState(self.d)

    def step(self, state, t):
        state.h = np.tanh(self.W @ state.h + self.E[int(t)] + 0.01 * state.pos)
        state.pos += 1
        return (self.U @ state.h).astype(np.float32)

    def prompt(self, state, ids):
        return np.stack([self.step(state, t) for t in ids])


@pytest.fixture
def byte_tok():
    return ByteTokenizer()


@pytest.fixture
def toy_engine():
    """factory: toy_engine(parallel=4, context=256, prompt_chunk=8, tokenizer=True) -> Engine over a ToyModel."""
    from tensorfold.config import EngineConfig
    from tensorfold.engine import Engine
    from tensorfold.engine.cpu_backend import CpuBackend

    def make(parallel=4, context=256, prompt_chunk=8, tokenizer=True, model=None):
        model = model or ToyModel()
        cfg = EngineConfig(backend="cpu", parallel=parallel, context=context, prompt_chunk=prompt_chunk)
        be = CpuBackend(model, parallel, context)
        return Engine(be, ByteTokenizer() if tokenizer else None, config=cfg, model_config=model.config,
                      eos_token_ids=(256,))

    return make

