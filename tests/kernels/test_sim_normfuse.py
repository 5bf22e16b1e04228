"""Simulator tier for the residual add + RMSNorm fused into the first tensor-core GEMV's x loads
(``affine.launch_qgemv(..., norm=(d, mult, hn, eps))``): the GEMV reads ``x = RMSNorm(h + d) * mult`` without
``add_rms_norm`` writing it, and writes the new residual ``hn = h + d``.

Oracles, on fresh random weights, residuals, deltas and multipliers:
- bit for bit: ``norms.launch_add_rms_norm`` (the vectorized kernel the runtime runs unfused) followed by the same
  plan's GEMV (each tested against numpy elsewhere): y and hn;
- float64 numpy: the normed rows times the dequantized weight, within 1e-4 of each output's ``|x| @ |W|`` (a loose
  check that both paths are not wrong together);
- a row's result alone equals its result beside the others (launches of 1 and 3 rows against 11).
Covered: one warp and three warps a block (the norm items shared by the warps), one and two K splits, one and two
n-tiles (3 and 11 rows), the SwiGLU epilogue with the norm, and a width that is not a multiple of a virtual
thread's float4 columns (320 = 80 float4 over 32 virtual threads of 3).
"""

import numpy as np
import pytest

from tensorfold.kernels import affine as A
from tensorfold.kernels import norms
from tensorfold.kernels import activations
from tensorfold.model import quant

rng = np.random.default_rng()
EPS = 1e-6


def _case(out, K, R=11):
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, 4, 64)
    h = (rng.standard_normal((R, K)) * 2).astype(np.float32)
    d = (rng.standard_normal((R, K)) * 0.5).astype(np.float32)
    mult = (1.0 + 0.3 * rng.standard_normal(K)).astype(np.float32)
    return P, S, B, h, d, mult


@pytest.mark.parametrize("nw,mt,ks,glu", [(1, 1, 1, False), (3, 2, 2, False), (3, 1, 1, True)])
def test_first_kernel_norm_fused(nw, mt, ks, glu):
    bits, group, K, out = 4, 64, 5 * 64, 48
    P, S, B, h, d, mult = _case(out, K)
    R = h.shape[0]
    plan = A.GemvPlan(out, K, bits, group, 32 * nw, ks, True, mt, 2, True, 1, "pipe2")
    assert A.norm_ok(plan)
    yo = out // 2 if glu else out

    def two_launches(hh, dd):
        n = hh.shape[0]
        h2, x = hh.copy(), np.full_like(hh, np.nan)
        norms.launch_add_rms_norm(dd.copy(), h2, mult, x, EPS, vec=True)
        y = np.full((n, yo), np.nan, np.float32)
        ws = np.zeros((ks, n, out), np.float32) if ks > 1 else None
        A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=ws, glu=glu)
        return y, h2, x

    def fused(hh, dd):
        n = hh.shape[0]
        hn = np.full_like(hh, np.nan)
        y = np.full((n, yo), np.nan, np.float32)
        ws = np.zeros((ks, n, out), np.float32) if ks > 1 else None
        A.launch_qgemv(P, S, B, hh.copy(), y, bits, group, plan, ws=ws, glu=glu, norm=(dd.copy(), mult, hn, EPS))
        return y, hn

    for n in (3, R):
        want, hwant, x = two_launches(h[:n], d[:n])
        y, hn = fused(h[:n], d[:n])
        assert not np.isnan(y).any() and not np.isnan(hn).any(), "NaN / unwritten output"
        assert np.array_equal(hn.view(np.uint32), hwant.view(np.uint32)), "hn != h + d of add_rms_norm"
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), f"{n} rows: fused != add_rms_norm + GEMV"
    # float64: the normed rows through the dequantized weight
    Wd = quant.dequantize(P, S, B, bits, group).astype(np.float64)
    v = h.astype(np.float64) + d
    xn = v / np.sqrt((v * v).mean(1, keepdims=True) + EPS) * mult
    ref = xn @ Wd.T
    if glu:
        g, u = ref[:, :out // 2], ref[:, out // 2:]
        ref = g / (1 + np.exp(-g)) * u
        scale = np.abs(xn) @ np.abs(Wd.T)
        scale = scale[:, :out // 2] * (1 + np.abs(u)) + scale[:, out // 2:] * np.abs(g)
    else:
        scale = np.abs(xn) @ np.abs(Wd.T)
    assert (np.abs(y - ref) <= 1e-4 * scale + 1e-6).all(), f"max rel {(np.abs(y - ref) / scale).max():.2e}"
    # a row alone: the same bits as beside the others
    for r0, n in ((R - 1, 1), (2, 3)):
        yr, _ = fused(h[r0:r0 + n], d[r0:r0 + n])
        assert np.array_equal(yr.view(np.uint32), y[r0:r0 + n].view(np.uint32)), f"rows {r0}..{r0 + n - 1}"


def test_norm_fused_errors():
    P, S, B, h, d, mult = _case(48, 320, 2)
    plan = A.GemvPlan(48, 320, 4, 64, 32, 1, True, 1, 2, True, 1, "pipe2")
    y = np.zeros((2, 48), np.float32)
    with pytest.raises(ValueError, match="320 wide"):
        A.launch_qgemv(P, S, B, h, y, 4, 64, plan, norm=(d[:, :256], mult, h.copy(), EPS))
    cc = A.GemvPlan(48, 320, 4, 64, 128, 1, False)
    assert not A.norm_ok(cc)
    with pytest.raises(ValueError, match="no fused RMSNorm"):
        A.launch_qgemv(P, S, B, h, y, 4, 64, cc, norm=(d, mult, h.copy(), EPS))
