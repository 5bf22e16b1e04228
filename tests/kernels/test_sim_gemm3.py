"""Simulator tier for the v3 prompt GEMM of tensorfold.kernels.gemm (``xprep`` pre-split + ``tc3gemm``).

Oracles: the pre-split layout is rebuilt here in numpy from its specification (``tensorfold.model.bf16.from_f32``
for the bf16 high part and the residual, float64 group sums); the GEMM is checked against ``ops.affine_dequant``
and a float64 matmul. Tolerances: fragments bit-exact (bf16 rounding is deterministic); group sums
``|sx - ref| <= 1e-6 * sum |x|`` (fp32 sum of at most 128 values); GEMM ``|y - ref| <= 1e-5 * (|x| @ |W|)``
elementwise, the same bound as v1 (x enters the mma's as bf16 high + bf16 residual, about 2^-17 relative, exact
integer codes, fp32 accumulation). Inputs are fresh random values each run (never zeros); outputs are poisoned
with NaN. The simulated mma is slow: shapes are tiny, most tests use one-warp geometries.
"""

import numpy as np
import pytest

from tensorfold.kernels import gemm as G
from tensorfold.model import bf16, quant
from tensorfold.reference import ops
from test_sim_gemm import _check, _rand_q, _ref  # the v1 file's random MLX weights, float64 oracle and bound

rng = np.random.default_rng()

SMALL = (1, 1, 1, 1, 2)  # 1 warp: 16 outputs x 8 rows per block, 2 stages


@pytest.fixture(autouse=True)
def _hi_lo_kernel(monkeypatch):
    """These tests state the hi + lo kernel's bounds; the bf16-dequantized default (``gemm.DQ``) has its own test."""
    monkeypatch.setattr(G, "DQ", False)


def dq_ref(x, W):
    """The bf16-dequantized kernel's oracle: float64 ``hi(x) @ bf16(W).T`` with ``hi`` / ``bf16`` the rounding
    ``bf16.from_f32`` specifies (a weight the kernel rounds once and this twice, through fp32, differs by at most one
    bf16 ulp: inside the 1e-5 bound)."""
    Wq = bf16.to_f32(bf16.from_f32(W)).astype(np.float64)
    hi = bf16.to_f32(bf16.from_f32(x)).astype(np.float64)
    return hi @ Wq.T


def _run(P, S, B, x, bits, group, geo=SMALL, R=None, ws=None, impl="v3"):
    R = x.shape[0] if R is None else R
    y = np.full((R, P.shape[0]), np.nan, np.float32)
    G.launch_qgemm(P, S, B, x[:R], y, bits, group, geo=geo, impl=impl, ws=ws)
    return y


def _expected_prep(x, bits, group):
    """XF / SXT as the layout comment in gemm.py specifies them (rows past R, up to a multiple of 8, repeat row
    R - 1); also sum |x| per (group, row) for the tolerance."""
    R, K = x.shape
    Rp = -(-R // 8) * 8
    xp = x[np.minimum(np.arange(Rp), R - 1)]
    hi = bf16.from_f32(xp)
    lo = bf16.from_f32(xp - bf16.to_f32(hi))
    nst = K // 64
    XF = np.zeros((Rp // 8, nst, 4, 8, 4, 4), np.uint32)  # [n-tile, stage, k-step S, g, t, word]
    for w, part in enumerate((hi, hi, lo, lo)):
        slot = w & 1
        pv = part.astype(np.uint32).reshape(Rp // 8, 8, nst, 4, 16)  # [n-tile, g, stage, t, code in 16t block]
        for S in range(4):
            c0, c1 = G._pair_codes3(bits, S, slot)
            word = pv[..., c0] | (pv[..., c1] << np.uint32(16))  # [n-tile, g, stage, t]
            XF[:, :, S, :, :, w] = word.transpose(0, 2, 1, 3)
    xg = xp.astype(np.float64).reshape(Rp, K // group, group)
    return XF.reshape(-1), xg.sum(-1).T, np.abs(xg).sum(-1).T


@pytest.mark.parametrize("version", ["1", "2"])
@pytest.mark.parametrize("bits,group", [(4, 64), (8, 128)])
def test_xprep_layout(bits, group, version):
    """Both pre-pass kernels (xprep, xprep2) write the specified layout; their group sums are bit-identical."""
    R, K = 11, 256
    x = rng.standard_normal((R, K)).astype(np.float32)
    Rp = 16
    XF = np.zeros(Rp * K, np.uint32)
    SXT = np.full((K // group, Rp), np.nan, np.float32)
    G.launch_xprep(x, XF, SXT, R, bits, version=version)
    eXF, esx, eabs = _expected_prep(x, bits, group)
    assert np.array_equal(XF, eXF)
    assert not np.isnan(SXT).any()
    assert (np.abs(SXT - esx) <= 1e-6 * eabs).all()
    other = np.full_like(SXT, np.nan)
    G.launch_xprep(x, np.zeros_like(XF), other, R, bits, version="2" if version == "1" else "1")
    assert np.array_equal(other.view(np.uint32), SXT.view(np.uint32))


def test_xprep2_gemm_bit_identical(monkeypatch):
    """The GEMM gives the same bits with either pre-pass (TENSORFOLD_XPREP=2 selects xprep2)."""
    out, K, R, bits, group = 16, 128, 10, 4, 64
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    a = _run(P, S, B, x, bits, group)
    monkeypatch.setattr(G, "XPREP", "2")
    b = _run(P, S, B, x, bits, group)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(b, ref, bound)


def test_pair_codes_cover_stage_once():
    """Per lane, the (k-step, slot, half) positions hold the 16 codes of its quarter of the stage exactly once, and
    the 4-bit / 8-bit decoders read exactly those codes (plain-integer stand-ins for the bf16x2 helpers)."""
    words = rng.integers(0, 2**32, 16, dtype=np.uint64).astype(np.uint32)

    def fma_bf16x2(v, one, neg):
        v = int(v)
        return ((v & 0xFFFF) - 0x4300, (v >> 16) - 0x4300)

    def pack_bf16x2(lo, hi):
        return (int(lo), int(hi))

    def and_or(a, m, c):
        return (int(a) & int(m)) | int(c)

    glb = {"np": np, "fma_bf16x2": fma_bf16x2, "pack_bf16x2": pack_bf16x2, "and_or": and_or,
           "_TWO23": np.float32(8388608.0), "_ONE2": 0, "_NEG128": 0, "_M4": 0x000F000F, "_MAGIC": 0x43004300,
           "w": words}
    for bits in (4, 8):
        codes = quant.unpack(words[None, :2 * bits], bits, 64)[0]  # one row's stage: 64 codes
        lw = bits // 2
        for t in range(4):
            seen = []
            for S in range(4):
                for slot in range(2):
                    c = G._pair_codes3(bits, S, slot)
                    seen += list(c)
                    expr = G._decode3(bits, S, slot, lambda j: f"w[{t * lw + j}]")
                    assert eval(expr, glb) == (codes[16 * t + c[0]], codes[16 * t + c[1]]), (bits, t, S, slot)
            assert sorted(seen) == list(range(16))


@pytest.mark.parametrize("bits,group", [(4, 64), (4, 128), (8, 64), (8, 128)])
def test_formats(bits, group):
    """K = 256: four stages through a two-stage ring (g128: two groups of two stages); 2 x 2 partial blocks."""
    out, K, R = 24, 256, 13
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = _run(P, S, B, x, bits, group)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)


def test_quantized_weights():
    out, K, R, bits, group = 20, 128, 9, 4, 64
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = _run(P, S, B, x, bits, group)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)


def test_rows_independent_bit_for_bit():
    """A row's result does not depend on how many rows share the launch (R = 1, 17, 20)."""
    out, K, R, bits, group = 16, 128, 20, 4, 64
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    full = _run(P, S, B, x, bits, group)
    for r in (0, 19):
        one = _run(P, S, B, x[r:r + 1], bits, group)
        assert np.array_equal(one[0].view(np.uint32), full[r].view(np.uint32)), f"row {r}: R=1 != R=20"
    part = _run(P, S, B, x, bits, group, R=17)
    assert np.array_equal(part.view(np.uint32), full[:17].view(np.uint32))
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(full, ref, bound)


def test_geometries_and_stages_bit_identical():
    """Tiling and ring depth decide who computes an output and when its data arrives, never how: five stages
    (K = 320) through rings of 2, 3 and 4 stages and other warp layouts give the same bits."""
    out, K, R, bits, group = 32, 320, 9, 4, 64
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    base = _run(P, S, B, x, bits, group)
    for geo in ((1, 1, 1, 1, 3), (1, 1, 1, 1, 4), (2, 1, 1, 2, 2), (1, 2, 1, 1, 3)):
        y = _run(P, S, B, x, bits, group, geo=geo)
        assert np.array_equal(y.view(np.uint32), base.view(np.uint32)), f"geo {geo}"
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(base, ref, bound)


@pytest.mark.parametrize("sdtype", ["f32", "f16"])
def test_scale_dtypes(sdtype):
    out, K, R, bits, group = 16, 128, 5, 4, 64
    P, S, B = _rand_q(out, K, bits, group, sdtype)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = _run(P, S, B, x, bits, group)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)


def test_workspace_and_dispatch():
    """An explicit workspace gives the module cache's bits; a too-small one is refused; formats v3 does not cover
    (2 bits, group 32) go to v1 and stay correct; v1 and v3 agree with the oracle on the same inputs."""
    out, K, R, bits, group = 16, 128, 10, 4, 64
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    a = _run(P, S, B, x, bits, group)
    b = _run(P, S, B, x, bits, group, ws=G.workspace(R, K))
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    with pytest.raises(ValueError):
        _run(P, S, B, x, bits, group, ws=G.workspace(R, K - 64))
    assert G.supported3(K, 4, 64) and G.supported3(K, 8, 128)
    assert not G.supported3(K, 4, 32) and not G.supported3(K, 2, 64)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(_run(P, S, B, x, bits, group, geo=(1, 1, 2, 2), impl="v1"), ref, bound)
    P2, S2, B2 = _rand_q(out, K, 2, 32)
    y2 = _run(P2, S2, B2, x, 2, 32, geo=None)  # v3 requested, v1 serves it (its default geometry)
    ref2, bound2 = _ref(x, P2, S2, B2, 2, 32)
    _check(y2, ref2, bound2)


def test_production_geometry():
    """The default geometry (one partial block of it) gives the reference result and the one-warp geometry's bits."""
    out, K, R, bits, group = 40, 64, 5, 4, 64
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = _run(P, S, B, x, bits, group, geo=G.GEO3)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)
    small = _run(P, S, B, x, bits, group)
    assert np.array_equal(y.view(np.uint32), small.view(np.uint32))


@pytest.mark.parametrize("bits,group", [(4, 64), (8, 128)])
def test_hi_only_x(bits, group, monkeypatch):
    """``TENSORFOLD_GEMM_XLO=0`` (``gemm.XLO`` False): the codes meet the bf16 high part of x only. Oracle: float64
    ``hi(x) @ (s q).T + x @ b.T`` (the bias term keeps the full x through the group sums), where ``hi`` is the
    bf16 rounding ``bf16.from_f32`` specifies; bound 1e-5 * (|x| @ |W|). It must differ from the hi + lo kernel (the
    residual is dropped) and still be within 2^-7 relative of the exact product."""
    out, K, R = 16, 128, 5
    P, S, B = _rand_q(out, K, bits, group)
    x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
    full = _run(P, S, B, x, bits, group)
    monkeypatch.setattr(G, "XLO", False)
    y = _run(P, S, B, x, bits, group)
    W = ops.affine_dequant(P, S, B, bits, group).astype(np.float64)
    Bx = np.repeat(bf16.to_f32(B).astype(np.float64), group, axis=1)
    hi = bf16.to_f32(bf16.from_f32(x)).astype(np.float64)
    ref = hi @ (W - Bx).T + x.astype(np.float64) @ Bx.T
    bound = np.abs(x.astype(np.float64)) @ np.abs(W).T
    _check(y, ref, bound)
    assert not np.array_equal(y, full)
    exact, _ = _ref(x, P, S, B, bits, group)
    assert (np.abs(y - exact) <= 2.0 ** -7 * bound).all()


@pytest.mark.parametrize("bits,group", [(4, 64), (8, 128)])
def test_bf16_dequantized_weights(bits, group, monkeypatch):
    """``gemm.DQ`` (the default; ``TENSORFOLD_GEMM_DQ=0`` turns it off): weights dequantized to bf16 in the
    registers (one rounding of ``s q + b``) and met by the bf16 high part of x, the accumulators carried over the
    whole K. Oracle: ``dq_ref`` with ``W`` from ``ops.affine_dequant``; bound 1e-5 * (|x| @ |W|) (fp32 accumulation). It must differ from the default kernel and stay within
    2^-6 relative of the exact product. Scales other than bf16 keep the default kernel."""
    out, K, R = 16, 256, 5
    P, S, B = _rand_q(out, K, bits, group)
    x = (rng.standard_normal((R, K)) * 3).astype(np.float32)
    full = _run(P, S, B, x, bits, group)
    monkeypatch.setattr(G, "DQ", True)
    y = _run(P, S, B, x, bits, group)
    W = ops.affine_dequant(P, S, B, bits, group)
    bound = np.abs(x.astype(np.float64)) @ np.abs(W.astype(np.float64)).T
    _check(y, dq_ref(x, W), bound)
    assert not np.array_equal(y, full)
    exact, _ = _ref(x, P, S, B, bits, group)
    assert (np.abs(y - exact) <= 2.0 ** -6 * bound).all()
    assert np.array_equal(_run(P, S, B, x[:2], bits, group).view(np.uint32), y[:2].view(np.uint32))  # rows alone


@pytest.mark.parametrize("bits,group,u,out,glu,per", [(4, 64, 4, 40, False, 1), (4, 64, 2, 48, True, 2),
                                                      (8, 128, 2, 32, False, 1), (4, 64, 2, 32, True, 1),
                                                      (4, 64, 2, 40, False, 2)])
def test_swept_layout_same_bits(monkeypatch, bits, group, u, out, glu, per):
    """The prompt GEMM on ``qgemv.sweep_pack``'s layout (the runtime's single copy of a decode weight) gives the
    bits of the MLX-layout kernel (bf16-dequantized form, ``gemm.DQ``): a partial last 16-row unit (40 rows, padded
    with zeros), g128 stages, and gate | up rows paired (``glu``) written back to their logical columns."""
    from tensorfold.kernels import qgemv as Q

    monkeypatch.setattr(G, "DQ", True)
    K, R = 256, 10
    P, S, B = _rand_q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    base = _run(P, S, B, x, bits, group)
    W = ops.affine_dequant(P, S, B, bits, group)
    _check(base, dq_ref(x, W), np.abs(x.astype(np.float64)) @ np.abs(W.astype(np.float64)).T)
    Wp = Q.sweep_pack(P, S, B, bits, group, u, glu=glu, per=per)
    y = np.full((R, out), np.nan, np.float32)
    G.launch_qgemm_swept(Wp, x, y, bits, group, u, out, glu=glu, per=per, geo=SMALL)
    assert np.array_equal(y.view(np.uint32), base.view(np.uint32))
    with pytest.raises(ValueError, match="swept"):
        G.launch_qgemm_swept(Wp, x[:, :K - 32], y[:, :], 2, 32, u, out)
