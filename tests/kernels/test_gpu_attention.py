"""GPU tier for the split-K attention kernels at real Qwen3.5 shapes (2B 8/2, 9B 16/4, 27B 24/4 heads, hd 256).

Run on the device: ``NUMBA_ENABLE_CUDASIM=0 python -m pytest -m gpu tests/kernels/test_gpu_attention.py``.
bf16 and e4m3 caches (the real conversion code, libdevice exp, fma contraction) against the numpy twin
``tensorfold.reference.attention`` on the same decoded caches (1e-4, as in test_gpu_b), at 100 / 4096 / 32768 keys
with 1 and 8 streams, plus tree rows (a chain-tree row must equal the window row it stands for, bit for bit) and a
row alone == the same row beside other streams, bit for bit (the grid and the other rows differ). And every
finite e4m3 code through the V path against ``reference.kv8`` exactly (one key: the output is the decoded row).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":  # pragma: no cover - collected on CPU only with -m gpu
    pytest.skip("GPU tier (NUMBA_ENABLE_CUDASIM=1)", allow_module_level=True)

from numba import cuda  # noqa: E402

from tensorfold.kernels import attention as katt  # noqa: E402
from tensorfold.kernels import kv8 as kkv8  # noqa: E402
from tensorfold.model import bf16  # noqa: E402
from tensorfold.reference import attention as ratt  # noqa: E402
from tensorfold.reference import kv8  # noqa: E402

GEOM = {"2B": (8, 2), "9B": (16, 4), "27B": (24, 4)}  # nH, nKV
HD = 256
SCALE = HD ** -0.5


def _i32(x):
    return cuda.to_device(np.ascontiguousarray(x, np.int32))


def _cache(rng, fmt, slots, ctx, nKV):
    if fmt == "bf16":
        kf = rng.standard_normal((slots, ctx, nKV, HD), dtype=np.float32)
        vf = rng.standard_normal((slots, ctx, nKV, HD), dtype=np.float32)
        return bf16.from_f32(kf), bf16.from_f32(vf), None, None
    # e4m3: random finite codes (both signs, every exponent) and per-row scales, as the store could write them
    # (drawn directly: quantizing 10^8 values in numpy would take most of the device minute)
    shape = (slots, ctx, nKV, HD)
    kc = (rng.integers(0, 0x7F, shape, dtype=np.uint8) | (rng.integers(0, 2, shape, dtype=np.uint8) << 7))
    vc = (rng.integers(0, 0x7F, shape, dtype=np.uint8) | (rng.integers(0, 2, shape, dtype=np.uint8) << 7))
    ks = rng.uniform(0.001, 0.004, shape[:3]).astype(np.float32)
    vs = rng.uniform(0.001, 0.004, shape[:3]).astype(np.float32)
    return kc.astype(np.uint8), vc.astype(np.uint8), ks, vs


def _attend(q, dev, meta, qg, ctx):
    dkc, dvc, dks, dvs = dev
    R, nH, _ = q.shape
    m, l, acc = katt.partial_buffers(R, nH, HD, ctx)
    d = [_i32(x) for x in meta]
    out = cuda.device_array((R, nH, HD), np.float32)
    katt.launch_partials(cuda.to_device(q), dkc, dvc, dks, dvs, *d, SCALE, m, l, acc)
    katt.launch_merge(m, l, acc, d[0], d[1], d[2], cuda.to_device(qg), 1, out)
    return out.copy_to_host()


CASES = [(1, 100), (8, 100), (1, 4096), (8, 4096), (1, 32768)]


@pytest.mark.parametrize("fmt", ["bf16", "e4m3"])
@pytest.mark.parametrize("model", ["2B", "9B", "27B"])
def test_attention_vs_twin(model, fmt):
    nH, nKV = GEOM[model]
    rng = np.random.default_rng({"2B": 10, "9B": 11, "27B": 12}[model] + (fmt == "e4m3"))
    for B, T in CASES:
        ctx = T + 8
        kc, vc, ks, vs = _cache(rng, fmt, B, ctx, nKV)
        dev = (cuda.to_device(kc), cuda.to_device(vc), cuda.to_device(ks) if ks is not None else kkv8.empty_scale(),
               cuda.to_device(vs) if vs is not None else kkv8.empty_scale())
        # B decode rows (stream b sees T - 7 b keys), then for stream 0: a window row seeing T keys and the
        # chain-tree row standing for it (nk = T - 3, 3 tree keys at T - 3 ..), and a branch row of a tree (bits
        # 0 and 2: positions T - 3 and T - 1)
        rows_nk = [T - 7 * b for b in range(B)] + [T, T - 3, T - 3]
        meta = (list(range(B)) + [0, 0, 0], rows_nk, [0] * B + [0, 0b111, 0b101], [0] * B + [0, T - 3, T - 3])
        R = len(rows_nk)
        q = rng.standard_normal((R, nH, HD), dtype=np.float32)
        q[B + 1] = q[B]
        qg = rng.standard_normal((R, nH, 2 * HD), dtype=np.float32)
        qg[B + 1] = qg[B]
        out = _attend(q, dev, meta, qg, ctx)
        assert np.isfinite(out).all()
        twin = ratt.attention_rows(q, kc, vc, ks, vs, *[np.asarray(x) for x in meta], SCALE, gate=qg[:, :, HD:])
        np.testing.assert_allclose(out, twin, rtol=1e-4, atol=1e-4, err_msg=f"{model} {fmt} B={B} T={T}")
        np.testing.assert_array_equal(out[B + 1], out[B])  # chain-tree row == window row
        # a row alone (other grid, no neighbours) == the same row in the batch, bit for bit
        for r in (0, B + 2):
            alone = _attend(q[r:r + 1], dev, tuple([x[r]] for x in meta), qg[r:r + 1], ctx)
            np.testing.assert_array_equal(alone[0], out[r], err_msg=f"{model} {fmt} B={B} T={T} row {r}")


def test_e4m3_codes_exact():
    nH, nKV = GEOM["2B"]
    codes = np.arange(256, dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # the NaN codes are never written
    rng = np.random.default_rng(3)
    vc = np.zeros((1, 4, nKV, HD), np.uint8)
    vc[0, 0, 0] = codes
    vc[0, 0, 1] = codes[::-1]
    vs = np.full((1, 4, nKV), 0.37, np.float32)
    kc = rng.integers(0, 0x70, (1, 4, nKV, HD)).astype(np.uint8)
    ks = np.full((1, 4, nKV), 0.01, np.float32)
    dev = (cuda.to_device(kc), cuda.to_device(vc), cuda.to_device(ks), cuda.to_device(vs))
    q = rng.standard_normal((1, nH, HD), dtype=np.float32)
    m, l, acc = katt.partial_buffers(1, nH, HD, 4)
    d = [_i32(x) for x in ([0], [1], [0], [0])]
    out = cuda.device_array((1, nH, HD), np.float32)
    katt.launch_partials(cuda.to_device(q), *dev, *d, SCALE, m, l, acc)
    katt.launch_merge(m, l, acc, d[0], d[1], d[2], cuda.to_device(np.zeros((1, nH, 2 * HD), np.float32)), 0, out)
    oh = out.copy_to_host()
    vdec = kv8.dequantize_rows(vc, vs)[0, 0]  # [nKV, HD]
    G = nH // nKV
    for h in range(nH):
        np.testing.assert_array_equal(oh[0, h], vdec[h // G])
