"""Simulator tier for the e4m3 KV format and the fused q/k-norm + RoPE + cache store (issue 3, part B).

- ``reference.kv8`` (the e4m3 twin) against an independent decode table (torch.float8_e4m3fn) and torch's
  round-to-nearest-even cast; the device helpers (``_device.f32_to_e4m3 / e4m3_to_f32``) against the twin.
- ``kv8.qk_norm_rope_store`` in f32 / bf16 / e4m3 against ``ops.qk_norm_rope`` + the twins. Tolerances: f32
  1e-5; bf16 caches must equal ``bf16.from_f32`` of the reference within 1 bf16 ulp; e4m3 codes within 1 code
  of the twin's quantization of the reference (rounding-boundary flips), scales 1e-5 relative.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from numba import cuda

from tensorfold.kernels import _device, kv8 as kkv8
from tensorfold.model import bf16
from tensorfold.reference import kv8, ops


def test_decode_table_matches_torch():
    t = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    ours = kv8.decode_table()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(t))
    ok = ~np.isnan(t)
    np.testing.assert_array_equal(ours[ok], t[ok])


def test_encode_matches_torch_rne():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        (rng.standard_normal(20000) * 50).astype(np.float32),
        (rng.standard_normal(2000) * 1e-3).astype(np.float32),
        kv8.decode_table()[:126],  # exact grid values
        ((kv8.decode_table()[:125] + kv8.decode_table()[1:126]) / 2).astype(np.float32),  # ties
        -((kv8.decode_table()[:125] + kv8.decode_table()[1:126]) / 2).astype(np.float32),
        np.array([448.0, -448.0, 0.0, -0.0], np.float32),
    ])
    x = np.clip(x, -448, 448).astype(np.float32)
    ref = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(kv8.e4m3_encode(x), ref)
    assert kv8.e4m3_encode(np.array([1e6, -1e6, np.inf], np.float32)).tolist() == [0x7E, 0xFE, 0x7E]
    assert kv8.e4m3_encode(np.array([np.nan], np.float32))[0] == 0x7F


def test_device_helpers_match_twin():
    rng = np.random.default_rng(1)
    x = np.concatenate([(rng.standard_normal(300) * 30).astype(np.float32),
                        ((kv8.decode_table()[:125] + kv8.decode_table()[1:126]) / 2).astype(np.float32)])
    n = x.size

    @cuda.jit
    def k(xin, codes, back):
        i = cuda.grid(1)
        while i < xin.size:
            c = _device.f32_to_e4m3(xin[i])
            codes[i] = c
            back[i] = _device.e4m3_to_f32(c)
            i += cuda.gridsize(1)

    codes = cuda.device_array(n, np.uint8)
    back = cuda.device_array(n, np.float32)
    k[1, 64](cuda.to_device(x), codes, back)
    np.testing.assert_array_equal(codes.copy_to_host(), kv8.e4m3_encode(x))
    np.testing.assert_array_equal(back.copy_to_host(), kv8.e4m3_decode(kv8.e4m3_encode(x)))


def test_quantize_rows_roundtrip():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 3, 64)).astype(np.float32)
    x[0, 0] = 0.0
    codes, sc = kv8.quantize_rows(x)
    assert sc[0, 0] == 0 and not codes[0, 0].any()
    y = kv8.dequantize_rows(codes, sc)
    assert np.all(np.abs(y - x) <= np.abs(x) * 0.0625 + 1e-6 + sc[..., None] * 2.0 ** -9)
    np.testing.assert_allclose(np.abs(y).max(-1), np.abs(x).max(-1), rtol=1e-6)


nH, nKV, hd, R_ROT = 4, 2, 64, 16
THETA = 1e7
EPS = 1e-6


def _store_case(fmt, seed):
    rng = np.random.default_rng(seed)
    R, slots, ctx = 3, 2, 8
    qg = rng.standard_normal((R, nH, 2 * hd)).astype(np.float32) * 2
    k = rng.standard_normal((R, nKV, hd)).astype(np.float32) * 2
    v = rng.standard_normal((R, nKV, hd)).astype(np.float32)
    qn = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
    kn = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
    pos = np.array([5, 1000, 70000], np.int32)
    row_slot = np.array([1, -1, 0], np.int32)
    cache_idx = np.array([3, 2, 7], np.int32)
    dt = {"f32": np.float32, "bf16": np.uint16, "e4m3": np.uint8}[fmt]
    kc = cuda.to_device(np.zeros((slots, ctx, nKV, hd), dt))
    vc = cuda.to_device(np.zeros((slots, ctx, nKV, hd), dt))
    if fmt == "e4m3":
        ks = cuda.to_device(np.full((slots, ctx, nKV), -1, np.float32))
        vs = cuda.to_device(np.full((slots, ctx, nKV), -1, np.float32))
    else:
        ks = vs = kkv8.empty_scale()
    q_out = cuda.to_device(np.full((R, nH, hd), np.nan, np.float32))
    inv = ops.rope_inv_freq(R_ROT, THETA)
    kkv8.launch_qk_norm_rope_store(cuda.to_device(qg), cuda.to_device(k), cuda.to_device(v), cuda.to_device(qn),
                                   cuda.to_device(kn), cuda.to_device(inv), cuda.to_device(pos),
                                   cuda.to_device(row_slot), cuda.to_device(cache_idx), EPS, q_out, kc, vc, ks, vs,
                                   row_blocks=1)
    q_ref = ops.qk_norm_rope(qg[:, :, :hd], qn, EPS, pos, R_ROT, THETA)
    k_ref = ops.qk_norm_rope(k, kn, EPS, pos, R_ROT, THETA)
    return dict(qo=q_out.copy_to_host(), kc=kc.copy_to_host(), vc=vc.copy_to_host(),
                ks=ks.copy_to_host(), vs=vs.copy_to_host(), q_ref=q_ref, k_ref=k_ref, v=v, row_slot=row_slot,
                cache_idx=cache_idx)


@pytest.mark.parametrize("fmt", ["f32", "bf16", "e4m3"])
def test_qk_norm_rope_store(fmt):
    c = _store_case(fmt, 3)
    qo = c["qo"]
    np.testing.assert_allclose(qo[[0, 2]], c["q_ref"][[0, 2]], rtol=1e-5, atol=1e-5)
    assert np.isnan(qo[1]).all()  # padding row untouched
    for r in (0, 2):
        s, t = c["row_slot"][r], c["cache_idx"][r]
        kc, vc = c["kc"][s, t], c["vc"][s, t]
        if fmt == "f32":
            np.testing.assert_allclose(kc, c["k_ref"][r], rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(vc, c["v"][r])
        elif fmt == "bf16":
            ulp = np.abs(bf16.to_f32(bf16.from_f32(c["k_ref"][r])) * 2.0 ** -7) + 1e-30
            assert np.all(np.abs(bf16.to_f32(kc) - c["k_ref"][r]) <= ulp)
            np.testing.assert_array_equal(vc, bf16.from_f32(c["v"][r]))
        else:
            codes, sc = kv8.quantize_rows(c["k_ref"][r])
            np.testing.assert_allclose(c["ks"][s, t], sc, rtol=1e-5)
            dk = np.abs(kc.astype(np.int32) - codes.astype(np.int32))
            assert dk.max() <= 1 and (dk > 0).mean() < 0.05
            vcodes, vsc = kv8.quantize_rows(c["v"][r])
            np.testing.assert_array_equal(c["vs"][s, t], vsc)
            np.testing.assert_array_equal(vc, vcodes)  # v is not transformed: bit-exact
    # nothing else written
    written = np.zeros(c["kc"].shape[:2], bool)
    written[1, 3] = written[0, 7] = True
    assert not c["kc"][~written].any() and not c["vc"][~written].any()
