"""The fast synth generators of the real geometries (``model.synth``: SFC64 raw codes in 1 MB blocks, one
float32 draw per scale / bias block, shared through a cache): a tensor's rows do not depend on how they are
asked for (whole, by block, across blocks, scales before or after biases), and the dequantized weight has the
intended statistics (mean ~ 0, std ~ target 1/sqrt(in) within 5 %, scales of both signs in U(0.8, 1.2) * mag).
Oracle: the definitions in synth's docstring, computed here independently of the generator."""

from __future__ import annotations

import math

import numpy as np

from tensorfold.model import bf16
from tensorfold.model.synth import plan_synth


def _get(ts, name):
    return next(t for t in ts if t.name == name)


def test_fast_generators_blocks_and_statistics():
    base = "language_model.model.layers.0.mlp.down_proj"  # [2048, 6144] at 2B: codes are 12 MB (several blocks)
    ts = plan_synth("2b", bits=4, group_size=64, layers=1)
    W, S, B = (_get(ts, base + s) for s in (".weight", ".scales", ".biases"))
    n = W.shape[0]
    whole = W.make(0, n)
    assert whole.dtype == np.uint32 and whole.shape == W.shape
    assert np.array_equal(np.concatenate([W.make(0, 700), W.make(700, 1333), W.make(1333, n)]), whole)
    # scales asked first here (the writer asks biases first): same values either way, and again after the cache
    s1, b1 = S.make(0, n), B.make(0, n)
    ts2 = plan_synth("2b", bits=4, group_size=64, layers=1)
    S2, B2 = (_get(ts2, base + s) for s in (".scales", ".biases"))
    b2, s2 = B2.make(0, n), S2.make(0, n)
    assert np.array_equal(s1, s2) and np.array_equal(b1, b2)
    assert np.array_equal(S.make(5, 9), s1[5:9])
    # statistics: dequantize 256 rows by hand (4-bit codes, low nibble first)
    rows = 256
    codes = (whole[:rows, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & np.uint32(15)
    q = codes.reshape(rows, -1).astype(np.float32)  # [rows, 6144]
    sc = bf16.to_f32(s1[:rows]).repeat(64, axis=1)
    bi = bf16.to_f32(b1[:rows]).repeat(64, axis=1)
    w = q * sc + bi
    want = (1 / math.sqrt(2 * 24)) / math.sqrt(6144)  # out_scale / sqrt(in) for down_proj at native depth 24
    assert abs(w.std() / want - 1) < 0.05, (w.std(), want)
    assert abs(w.mean()) < 0.05 * want
    mag = want * math.sqrt(12.0 / (15 * 17))
    a = np.abs(bf16.to_f32(s1))
    assert a.min() >= 0.79 * mag and a.max() <= 1.21 * mag
    assert 0.45 < float(np.mean(bf16.to_f32(s1) < 0)) < 0.55
