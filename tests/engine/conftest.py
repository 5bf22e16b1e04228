"""Fixtures for the engine tests: the tiny synthetic checkpoint (`write_synth("tiny")`), its ReferenceModel and
Tokenizer (shared per session, so dequantized weights are cached once), and an engine factory over the cpu backend.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from tensorfold.model.synth import write_synth

    d = tmp_path_factory.mktemp("tiny_engine")
    write_synth("tiny", d)
    return d


@pytest.fixture(scope="session")
def ref(tiny_dir):
    from tensorfold.model.checkpoint import load_checkpoint
    from tensorfold.reference.model import ReferenceModel

    ck = load_checkpoint(tiny_dir)
    return ReferenceModel(ck, ck.config, kv_cache="bf16")  # the cache Engine.from_model(kv_cache="bf16") uses


@pytest.fixture(scope="session")
def tiny_tok(tiny_dir):
    from tensorfold.tokenizer import Tokenizer

    return Tokenizer.from_dir(tiny_dir)


@pytest.fixture(scope="session")
def valid_vocab(tiny_tok, ref):
    return min(tiny_tok.vocab_size, ref.config.vocab_size)


@pytest.fixture
def make_engine(ref, tiny_tok):
    """make_engine(parallel=4, context=256, prompt_chunk=8, tokenizer=True, eos=None) -> Engine (cpu backend)
    sharing the session's ReferenceModel; eos=None takes the tokenizer's stop ids."""
    from tensorfold.config import EngineConfig
    from tensorfold.engine import Engine
    from tensorfold.engine.cpu_backend import CpuBackend

    def make(parallel=4, context=256, prompt_chunk=8, tokenizer=True, eos=None):
        cfg = EngineConfig(backend="cpu", parallel=parallel, context=context, prompt_chunk=prompt_chunk)
        be = CpuBackend(ref, parallel, context)
        eos = tiny_tok.stop_ids if eos is None else eos
        return Engine(be, tiny_tok if tokenizer else None, config=cfg, model_config=ref.config,
                      eos_token_ids=eos, valid_vocab=tiny_tok.vocab_size)

    return make
