"""GPU tier for the tensor-core prompt attention (``attention_prompt``) at real Qwen3.5 shapes (2B 8/2, 9B 16/4,
27B 24/4 heads, hd 256, bf16 caches): two prompt segments in two slots (300 rows at positions 1,000..1,299 and 77
rows at 0..76, the second starting inside a 16-row tile of the first) and a padding row, NaN in every cache
position no row may see, fresh random q / caches / gates; against a float64 softmax attention (1e-4 absolute and
relative, as the split-K kernels' GPU test) and the 77-row segment alone == beside the other, bit for bit.

Run on the device: ``NUMBA_ENABLE_CUDASIM=0 python -m pytest -m gpu tests/kernels/test_gpu_attention_prompt.py``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":  # pragma: no cover - collected on CPU only with -m gpu
    pytest.skip("GPU tier (NUMBA_ENABLE_CUDASIM=1)", allow_module_level=True)

from numba import cuda  # noqa: E402

from tensorfold.kernels import attention_prompt as ap  # noqa: E402
from tensorfold.model import bf16  # noqa: E402

GEOM = {"2B": (8, 2), "9B": (16, 4), "27B": (24, 4)}  # nH, nKV
HD = 256
SCALE = HD ** -0.5
CTX = 1400


def _run(q, kc, vc, rs, nk, qg):
    out = cuda.to_device(np.full(q.shape, 7.0, np.float32))
    ap.launch(cuda.to_device(q), kc, vc, cuda.to_device(rs), cuda.to_device(nk), cuda.to_device(qg), SCALE, 1, out)
    cuda.synchronize()
    return out.copy_to_host()


@pytest.mark.parametrize("model", ["2B", "9B", "27B"])
def test_prompt_attention_real_shapes(model):
    nH, nKV = GEOM[model]
    G = nH // nKV
    rng = np.random.default_rng(50)
    segs = [(1, 1000, 300), (0, 0, 77)]
    kc = np.full((2, CTX, nKV, HD), 0x7FC0, np.uint16)
    vc = np.full((2, CTX, nKV, HD), 0x7FC0, np.uint16)
    rs, nk = [], []
    for s, p0, n in segs:
        kc[s, :p0 + n] = bf16.from_f32(rng.standard_normal((p0 + n, nKV, HD)))
        vc[s, :p0 + n] = bf16.from_f32(rng.standard_normal((p0 + n, nKV, HD)))
        rs += [s] * n
        nk += list(range(p0 + 1, p0 + n + 1))
    rs.append(-1)
    nk.append(3)
    rs, nk = np.array(rs, np.int32), np.array(nk, np.int32)
    R = len(rs)
    q = (rng.standard_normal((R, nH, HD)) * 0.5).astype(np.float32)
    qg = rng.standard_normal((R, nH, 2 * HD)).astype(np.float32)
    dk, dv = cuda.to_device(kc), cuda.to_device(vc)
    o = _run(q, dk, dv, rs, nk, qg)
    K, V = bf16.to_f32(kc).astype(np.float64), bf16.to_f32(vc).astype(np.float64)
    for r in range(R - 1):
        Kr, Vr = K[rs[r], :nk[r]], V[rs[r], :nk[r]]  # [n, nKV, HD]
        for h in range(nH):
            s = Kr[:, h // G] @ q[r, h].astype(np.float64) * SCALE
            p = np.exp(s - s.max())
            ref = (p @ Vr[:, h // G]) / p.sum() / (1.0 + np.exp(-qg[r, h, HD:].astype(np.float64)))
            np.testing.assert_allclose(o[r, h], ref, rtol=1e-4, atol=1e-4, err_msg=f"row {r} head {h}")
    assert (o[R - 1] == 7.0).all()  # the padding row is not written
    ob = _run(q[300:377], dk, dv, rs[300:377], nk[300:377], qg[300:377])
    assert np.array_equal(ob.view(np.uint32), o[300:377].view(np.uint32))
