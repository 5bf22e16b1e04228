"""Perplexity of a text under a model, through the engine's own forward (any backend) or the numpy reference.

``perplexity(model_or_engine, text, backend="auto", kv_cache="bf16", max_tokens=None) -> (ppl, n_tokens)``

* ``model_or_engine``: an ``Engine`` (its backend is used as is), a model directory / hub id / None (the embedded
  default model; an Engine is built with ``backend`` and ``kv_cache``), or a ``ReferenceModel`` (the pure numpy
  path, which needs a tokenizer: pass ``tokenizer=`` or use ``reference_perplexity``).
* The text is tokenized without special tokens and cut to ``max_tokens`` tokens. Perplexity is
  ``exp(mean_i -log p(t_i | t_<i))`` over the tokens after the first (``n_tokens`` = how many were scored =
  len(ids) - 1). The log-softmax is taken in float64 over the first ``valid_vocab`` logits (embedding padding rows
  beyond the tokenizer's vocabulary are excluded, as the sampler excludes them).
* Engine path: the first token goes through ``backend.prefill`` and every following token through
  ``backend.decode`` one at a time, so every position's logits come out of exactly the forward that serves
  requests (works on every backend; a backend that returns no logits from ``decode`` falls back to a one-token
  ``prefill`` per position).
* Reference path: ``ReferenceModel.prompt`` on the whole sequence (chunked form), all logits at once.

``tensorfold perplexity [MODEL] FILE [--backend --kv-cache --max-tokens]`` prints ppl, scored tokens, backend and
cache format.
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import click
import numpy as np

__all__ = ["perplexity", "reference_perplexity", "nll_from_logits", "perplexity_cmd"]


def nll_from_logits(logits: np.ndarray, targets: Sequence[int], valid_vocab: int | None = None) -> np.ndarray:
    """-log softmax(logits[i])[targets[i]] per row, in float64, over the first valid_vocab columns."""
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if valid_vocab is not None:
        x = x[:, :valid_vocab]
    t = np.asarray(targets, dtype=np.int64)
    if x.shape[0] != t.shape[0]:
        raise ValueError(f"{x.shape[0]} logits rows for {t.shape[0]} targets")
    if (t < 0).any() or (t >= x.shape[1]).any():
        raise ValueError(f"target ids outside [0, {x.shape[1]})")
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return lse - x[np.arange(len(t)), t]


def _ids_for(tokenizer, text: str, max_tokens: int | None) -> list[int]:
    ids = list(tokenizer.encode(text))
    if max_tokens is not None:
        ids = ids[: int(max_tokens)]
    if len(ids) < 2:
        raise ValueError(f"perplexity needs at least 2 tokens, the text has {len(ids)}")
    return ids


def reference_perplexity(ref_model, tokenizer, text: str, max_tokens: int | None = None,
                         valid_vocab: int | None = None) -> tuple[float, int]:
    """Perplexity with ``ReferenceModel.prompt`` (all logits from one chunked forward)."""
    ids = _ids_for(tokenizer, text, max_tokens)
    if valid_vocab is None:
        valid_vocab = min(int(ref_model.config.vocab_size), int(getattr(tokenizer, "vocab_size", 1 << 62)))
    state = ref_model.new_state()
    logits = ref_model.prompt(state, ids[:-1])
    nll = nll_from_logits(logits, ids[1:], valid_vocab)
    return float(math.exp(nll.mean())), len(nll)


def engine_nll(engine, ids: Sequence[int]) -> np.ndarray:
    """Per-position NLL of ids[1:] through the engine's backend, one token at a time."""
    be = engine.backend
    vv = int(engine.valid_vocab)
    ids = [int(t) for t in ids]
    if len(ids) > engine.context:
        raise ValueError(f"{len(ids)} tokens exceed the engine's context of {engine.context}")
    out = np.empty(len(ids) - 1, dtype=np.float64)
    slot = be.new_slot()
    try:
        logits = be.prefill(slot, ids[:1], 0, want_logits=True)
        out[0] = nll_from_logits(np.asarray(logits, dtype=np.float32), ids[1:2], vv)[0]
        use_decode = True
        for i in range(1, len(ids) - 1):
            row = None
            if use_decode:
                try:
                    got = be.decode([slot], [ids[i]])
                    arr = np.asarray(got)
                    if arr.ndim == 2 and arr.shape[0] == 1 and arr.shape[1] >= vv:
                        row = arr[0]
                    else:  # a backend whose decode returned no logits consumed the token anyway
                        raise RuntimeError(f"backend {be.name}: decode returned {arr.shape}, not logits")
                except NotImplementedError:
                    use_decode = False
            if row is None:
                row = be.prefill(slot, ids[i : i + 1], i, want_logits=True)
            out[i] = nll_from_logits(np.asarray(row, dtype=np.float32), ids[i + 1 : i + 2], vv)[0]
    finally:
        be.free(slot)
    return out


def perplexity(model_or_engine=None, text: str = "", backend: str = "auto", kv_cache: str = "bf16",
               max_tokens: int | None = None, tokenizer=None) -> tuple[float, int]:
    """(perplexity, scored tokens) of ``text``; see the module docstring for what ``model_or_engine`` may be."""
    from tensorfold.reference.model import ReferenceModel

    if isinstance(model_or_engine, ReferenceModel):
        if tokenizer is None:
            raise ValueError("a ReferenceModel needs tokenizer=")
        return reference_perplexity(model_or_engine, tokenizer, text, max_tokens)
    engine = model_or_engine
    own = False
    if not hasattr(engine, "backend"):
        from tensorfold.engine.engine import Engine

        engine = Engine.from_model(model_or_engine, backend=backend, parallel=1, kv_cache=kv_cache)
        own = True
    try:
        ids = _ids_for(tokenizer or engine.tokenizer, text, max_tokens)
        nll = engine_nll(engine, ids)
    finally:
        if own:
            engine.close()
    return float(math.exp(nll.mean())), len(nll)


@click.command("perplexity")
@click.argument("args", nargs=-1, required=True, metavar="[MODEL] FILE")
@click.option("--backend", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--kv-cache", type=click.Choice(["bf16", "fp8"]), default="bf16", show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=2), default=None, help="Score at most this many tokens.")
def perplexity_cmd(args, backend, kv_cache, max_tokens):
    """Perplexity of the text in FILE ('-' = stdin) under MODEL (default: the embedded model)."""
    import sys

    from tensorfold.engine.engine import Engine

    if len(args) > 2:
        raise click.UsageError("expected [MODEL] FILE")
    model, path = (None, args[0]) if len(args) == 1 else args
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    engine = Engine.from_model(model, backend=backend, parallel=1, kv_cache=kv_cache)
    click.echo(engine.summary(), err=True)
    t0 = time.perf_counter()
    try:
        ids = _ids_for(engine.tokenizer, text, max_tokens)
        nll = engine_nll(engine, ids)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        engine.close()
    dt = time.perf_counter() - t0
    ppl = math.exp(nll.mean())
    cache = engine.info.get("kv_cache", kv_cache)
    click.echo(f"perplexity: {ppl:.4f}")
    click.echo(f"tokens: {len(nll)} scored ({len(ids)} in the text after --max-tokens), "
               f"mean nll {nll.mean():.4f} nats/token")
    click.echo(f"backend: {engine.backend.name} | kv cache: {cache} | model: {engine.model_name} | {dt:.1f} s")
