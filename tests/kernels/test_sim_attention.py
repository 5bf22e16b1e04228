"""Simulator tier for the chunked attention kernels (issue 3, part B).

Against ``reference.ops.attention`` (f32 caches: 1e-5) and the chunked twin ``reference.attention`` (bf16 / e4m3
caches: same decoded values, 1e-5), plus exactness: a row's output is bit-identical alone or beside other rows
and streams, with any grid depth, and a chain-tree row equals the window row it stands for (its tree keys straddle
a split boundary); every finite e4m3 code through the V path exactly; the split rule (a row's split count fits the
partial buffers sized by ``max_chunks``). Shapes: nH 4, nKV 2 (GQA 2), hd 64, up to 70 keys (3 splits of 32).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from tensorfold.kernels import attention as katt
from tensorfold.kernels import kv8 as kkv8
from tensorfold.model import bf16
from tensorfold.reference import attention as ratt
from tensorfold.reference import kv8, ops

nH, nKV, hd = 4, 2, 64
SLOTS, CTX = 2, 100
SCALE = hd ** -0.5


def _caches(rng, fmt):
    kf = rng.standard_normal((SLOTS, CTX, nKV, hd)).astype(np.float32)
    vf = rng.standard_normal((SLOTS, CTX, nKV, hd)).astype(np.float32)
    if fmt == "f32":
        return kf, vf, None, None
    if fmt == "bf16":
        return bf16.from_f32(kf), bf16.from_f32(vf), None, None
    kc, ks = kv8.quantize_rows(kf)
    vc, vs = kv8.quantize_rows(vf)
    return kc, vc, ks, vs


def _run(q, kc, vc, ks, vs, meta, qg=None, nz=None):
    row_slot, nk, tmask, tbase = (np.ascontiguousarray(m, np.int32) for m in meta)
    R = q.shape[0]
    m, l, acc = katt.partial_buffers(R, nH, hd, CTX + 32)
    dks = cuda.to_device(ks) if ks is not None else kkv8.empty_scale()
    dvs = cuda.to_device(vs) if vs is not None else kkv8.empty_scale()
    d = [cuda.to_device(x) for x in (row_slot, nk, tmask, tbase)]
    katt.launch_partials(cuda.to_device(q), cuda.to_device(kc), cuda.to_device(vc), dks, dvs, *d, SCALE, m, l, acc,
                         nz=nz)
    out = cuda.to_device(np.full((R, nH, hd), np.nan, np.float32))
    use_gate = qg is not None
    qgd = cuda.to_device(qg if use_gate else np.zeros((R, nH, 2 * hd), np.float32))
    katt.launch_merge(m, l, acc, d[0], d[1], d[2], qgd, int(use_gate), out)
    return out.copy_to_host()


META = ([1, -1, 0], [70, 4, 5], [0, 0, 0b1011], [0, 0, 80])


@pytest.mark.parametrize("fmt", ["f32", "bf16", "e4m3"])
def test_attention_vs_reference(fmt):
    rng = np.random.default_rng({"f32": 0, "bf16": 1, "e4m3": 2}[fmt])
    kc, vc, ks, vs = _caches(rng, fmt)
    q = rng.standard_normal((3, nH, hd)).astype(np.float32)
    qg = rng.standard_normal((3, nH, 2 * hd)).astype(np.float32)
    out = _run(q, kc, vc, ks, vs, META, qg=qg, nz=2)
    assert np.isnan(out[1]).all()
    kf = ratt.decode_cache(kc, ks)
    vf = ratt.decode_cache(vc, vs)
    gate = qg[:, :, hd:]
    twin = ratt.attention_rows(q, kc, vc, ks, vs, *[np.asarray(m) for m in META], SCALE, gate=gate)
    for r in (0, 2):
        pos = ratt.row_positions(META[1][r], META[2][r], META[3][r])
        s = META[0][r]
        ref = ops.attention(q[r:r + 1], kf[s, pos], vf[s, pos], [10 ** 6], SCALE)[0]
        ref = ops.sigmoid_gate(ref, gate[r])
        np.testing.assert_allclose(out[r], ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out[r], twin[r], rtol=1e-5, atol=1e-5)


def test_exactness_alone_batched_window_tree():
    rng = np.random.default_rng(5)
    kc, vc, _, _ = _caches(rng, "bf16")
    q1 = rng.standard_normal((1, nH, hd)).astype(np.float32)
    T = 62
    # window row i=2 of a stream with committed length T, and the same row as a chain-tree row
    q = np.concatenate([q1, rng.standard_normal((1, nH, hd)).astype(np.float32), q1])
    meta = ([1, 0, 1], [T + 3, 9, T], [0, 0, 0b111], [0, 0, T])
    batched = _run(q, kc, vc, None, None, meta)
    alone = _run(q1, kc, vc, None, None, ([1], [T + 3], [0], [0]), nz=1)
    np.testing.assert_array_equal(batched[0], alone[0])
    np.testing.assert_array_equal(batched[2], alone[0])


def test_split_rule():
    for ctx in (1, 31, 32, 33, 100, 1024, 1025, 4096, 8192, 8193, 16384, 32768, 100000):
        worst = max(katt.num_splits(n) for n in range(1, ctx + 1))
        assert worst == katt.max_chunks(ctx) <= katt.NSMAX
    assert katt.num_splits(100) == 4 and katt.num_splits(4096) == 64 and katt.num_splits(32768) == 128
    for n in (1, 40, 1000, 5000, 20000, 40000):  # splits cover the keys exactly once, in order
        w, ns = katt.split_width(n), katt.num_splits(n)
        assert w % 32 == 0 and (ns - 1) * w < n <= ns * w


def test_e4m3_codes_exact():
    """One key: the output is its decoded V row; every finite code, both kv heads, compared bit for bit."""
    H, KV, D = 4, 2, 256
    codes = np.arange(256, dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # NaN codes are never written by the store
    rng = np.random.default_rng(9)
    vc = np.zeros((1, 2, KV, D), np.uint8)
    vc[0, 0, 0] = codes
    vc[0, 0, 1] = codes[::-1]
    vs = np.full((1, 2, KV), 0.37, np.float32)
    kc = rng.integers(0, 0x70, (1, 2, KV, D)).astype(np.uint8)
    ks = np.full((1, 2, KV), 0.01, np.float32)
    q = rng.standard_normal((1, H, D)).astype(np.float32)
    m, l, acc = katt.partial_buffers(1, H, D, 2)
    d = [cuda.to_device(np.asarray(x, np.int32)) for x in ([0], [1], [0], [0])]
    out = cuda.to_device(np.full((1, H, D), np.nan, np.float32))
    katt.launch_partials(cuda.to_device(q), cuda.to_device(kc), cuda.to_device(vc), cuda.to_device(ks),
                         cuda.to_device(vs), *d, D ** -0.5, m, l, acc)
    katt.launch_merge(m, l, acc, d[0], d[1], d[2], cuda.to_device(np.zeros((1, H, 2 * D), np.float32)), 0, out)
    oh = out.copy_to_host()
    vdec = kv8.dequantize_rows(vc, vs)[0, 0]
    for h in range(H):
        np.testing.assert_array_equal(oh[0, h], vdec[h // (H // KV)])
