"""Shared fixtures for the runtime tests: the tiny synth model (simulator tier) and device runners over it."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    from tensorfold.model.checkpoint import load_checkpoint
    from tensorfold.model.synth import write_synth

    d = tmp_path_factory.mktemp("tiny")
    write_synth("tiny", d, bits=4, group_size=32)
    return load_checkpoint(d)


class Micro:
    """The tiny synth model cut to two layers (its linear-attention layer 0 and full-attention layer 3, renamed
    0 and 1): every kind of layer, half the simulator time. ``.tensors`` / ``.config`` like a Checkpoint."""

    def __init__(self, ckpt):
        import dataclasses

        c = ckpt.config
        lin, full = c.linear_attention_layers[0], c.full_attention_layers[0]
        self.config = dataclasses.replace(c, num_hidden_layers=2, layer_types=("linear_attention", "full_attention"))
        t = {}
        for name, w in ckpt.tensors.items():
            if not name.startswith("layers."):
                t[name] = w
                continue
            i, rest = name.split(".", 2)[1:]
            if int(i) == lin:
                t["layers.0." + rest] = w
            elif int(i) == full:
                t["layers.1." + rest] = w
        self.tensors = t


@pytest.fixture(scope="session")
def micro(tiny_ckpt):
    return Micro(tiny_ckpt)


@pytest.fixture(scope="session")
def micro_arena(micro):
    from tensorfold.runtime.arena import Arena

    return Arena.upload(micro.tensors, micro.config, progress=False)


def make_runner(ckpt, arena, kv="bf16", slots=4, ctx=32, rows=16, prompt_rows=16):
    from tensorfold.runtime.caches import Caches
    from tensorfold.runtime.forward import Runner

    caches = Caches(ckpt.config, slots, ctx, kv)
    for s in range(slots):
        caches.reset(s)
    return Runner(ckpt.config, arena, caches, rows=rows, log_rows=rows, prompt_rows=prompt_rows, att_rows=rows)


def kl(p_logits, q_logits):
    """KL(p || q) of softmax(p), softmax(q), float64."""
    p = np.asarray(p_logits, np.float64)
    q = np.asarray(q_logits, np.float64)
    lp = p - p.max() - np.log(np.exp(p - p.max()).sum())
    lq = q - q.max() - np.log(np.exp(q - q.max()).sum())
    return float((np.exp(lp) * (lp - lq)).sum())
