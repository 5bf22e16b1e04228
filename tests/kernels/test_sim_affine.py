"""Simulator tier for tensorfold.kernels.affine: quantized GEMV (every bits x group), row-count independence bit
for bit, split-K, float32 / float16 scales, dense bf16 GEMV and the prompt GEMM, against the numpy reference
(``ops.affine_dequant`` + float64 matmul). Tolerance: max |y - ref| <= 2e-6 * (|x| @ |W|) elementwise bound
scaled (fp32 accumulation over <= 512 inputs); NaN / unwritten outputs fail (outputs are poisoned with NaN).

The tensor-core GEMV (bits 2 (g64, g128), 4, 8) is checked with 1e-5 * bound: x enters the mma as a bf16 pair
hi + lo that equals x to about 2^-18 relative per element (the codes are exact), on top of fp32 accumulation.
Every supported bits x group pair, rows 1..19 (both n-tile variants and grid.y), partial row tiles, several warps
per block, split-K and float32 / float16 scales; a row's result is the same bits alone or beside others.
"""

import numpy as np
import pytest

from tensorfold.kernels import affine as A
from tensorfold.model import bf16, quant
from tensorfold.reference import ops

rng = np.random.default_rng()


def _ref(x, P, S, B, bits, group):
    W = ops.affine_dequant(P, S, B, bits, group).astype(np.float64)
    x = x.astype(np.float64)
    return x @ W.T, np.abs(x) @ np.abs(W).T


def _check(y, ref, bound, tol=2e-6):
    assert not np.isnan(y).any(), "NaN / unwritten output"
    err = np.abs(y - ref)
    assert (err <= tol * bound + 1e-30).all(), f"max err {err.max():.3e} vs bound {(tol * bound).max():.3e}"


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_qgemv_formats(bits, group):
    out, K, R = 5, 256, 2
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = np.full((R, out), np.nan, np.float32)
    A.launch_qgemv(P, S, B, x, y, bits, group, A._plan_cuda_core(out, K, bits, group))  # the CUDA-core kernel
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)


def test_rows_independent_bit_for_bit():
    """A row's result must not depend on how many rows share the launch (RB variants 1/2/4/8 and grid.y)."""
    out, K, bits, group = 6, 512, 4, 64
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    x = rng.standard_normal((10, K)).astype(np.float32)
    plan = A.GemvPlan(out, K, bits, group, tpb=64, ks=1)
    single = np.full((10, out), np.nan, np.float32)
    for r in range(10):
        yr = np.full((1, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x[r:r + 1], yr, bits, group, plan)
        single[r] = yr[0]
    for R in (2, 3, 7, 10):
        y = np.full((R, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x[:R], y, bits, group, plan)
        assert np.array_equal(y.view(np.uint32), single[:R].view(np.uint32)), f"R={R} differs from R=1"
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(single, ref, bound)


def test_splitk_and_scale_dtypes():
    out, K, bits, group = 7, 1024, 4, 32
    w = rng.standard_normal((out, K)).astype(np.float32)
    for sd in ("f32", "f16"):
        P, S, B = quant.quantize(w, bits, group, scale_dtype=sd)
        x = rng.standard_normal((3, K)).astype(np.float32)
        plan = A.GemvPlan(out, K, bits, group, tpb=32, ks=2)
        ws = np.full((2, 3, out), np.nan, np.float32)
        y = np.full((3, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=ws)
        ref, bound = _ref(x, P, S, B, bits, group)
        _check(y, ref, bound)


def test_plan_ignores_rows_and_splits_tall_skinny(monkeypatch):
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "0")  # the first tensor-core kernel's rule (qgemv takes 12288 x 4096)
    p = A.plan_qgemv(2048, 12288, 4, 64)  # K spread over many warps: inside a block (w16) or across blocks
    assert p.ks * (p.tpb // 32) >= 8 and p.tpb % 32 == 0
    assert A.plan_qgemv(12288, 4096, 4, 64).ks == 1


def test_dense_bf16_gemv():
    out, K, R = 6, 128, 3
    Wb = bf16.from_f32(rng.standard_normal((out, K)).astype(np.float32))
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = np.full((R, out), np.nan, np.float32)
    A.launch_dense_gemv(Wb.view(np.uint32), x, y)
    W = bf16.to_f32(Wb).astype(np.float64)
    _check(y, x.astype(np.float64) @ W.T, np.abs(x.astype(np.float64)) @ np.abs(W).T)


@pytest.mark.parametrize("bits,group", [(4, 64), (3, 32)])
def test_qgemm(bits, group):
    out, K, R = 70, 64, 66  # partial tiles in both directions
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = np.full((R, out), np.nan, np.float32)
    A.launch_qgemm(P, S, B, x, y, bits, group)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound)


def test_rows_per_block_variants_bit_identical():
    """NO (weight rows per block) changes the geometry only, never a row's arithmetic."""
    out, K = 19, 256
    w = rng.standard_normal((out, K)).astype(np.float32)
    P, S, B = quant.quantize(w, 4, 64)
    x = rng.standard_normal((3, K)).astype(np.float32)
    ys = []
    for no in (2, 4, 8, 16):
        y = np.full((3, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x, y, 4, 64, no=no)
        ys.append(y)
    assert all(np.array_equal(ys[0].view(np.uint32), y.view(np.uint32)) for y in ys[1:])
    ref, bound = _ref(x, P, S, B, 4, 64)
    _check(ys[0], ref, bound)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_code_decoders_exact(bits):
    """The generated decoders (codes masked in place into a float whose mantissa step is 1, or via the word shifted
    down by 16, or a funnel shift across words) return every code exactly, as quant.unpack reads it."""
    glb = {"np": np, "_TWO23": np.float32(8388608.0)}
    exec(A._gen_helpers_source(), glb)
    P = rng.integers(0, 2**32, size=(1, 64 * bits), dtype=np.uint64).astype(np.uint32)
    P[0, :bits] = 0xFFFFFFFF  # all-ones codes (largest values, every bit set)
    codes = quant.unpack(P, bits, 64 * 32).astype(np.float32)[0]
    got = []
    if bits in (2, 4, 8):
        for w in P[0]:
            got.extend(glb[f"_dec{bits}"](np.uint32(w)))
    else:
        for b0 in range(0, P.shape[1], bits):
            got.extend(glb[f"_dec{bits}x32"](*[np.uint32(w) for w in P[0, b0:b0 + bits]]))
    got = np.array(got, np.float32)
    assert got.shape == codes.shape
    assert np.array_equal(got.view(np.uint32), codes.view(np.uint32))


# ---------------------------------------------------------------------------------------------- tensor-core GEMV

TC_FORMATS = [(b, g) for b in (2, 4, 8) for g in (32, 64, 128) if (b, g) != (2, 32)]


def _tc_plan(out, K, bits, group, nw=1, ks=1, mt=1, u=2, pipe=False):
    return A.GemvPlan(out, K, bits, group, 32 * nw, ks, True, mt, u, pipe)


def _q(out, K, bits, group, **kw):
    w = rng.standard_normal((out, K)).astype(np.float32)
    return quant.quantize(w, bits, group, **kw)


def test_tc_supported_formats_and_plan(monkeypatch):
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "0")  # the first tensor-core kernel's plans (qgemv has its own tests)
    assert [(b, g) for b in (2, 3, 4, 5, 6, 8) for g in (32, 64, 128) if A._tc_supported(b, g, 4096)] == TC_FORMATS
    for out, K in ((12288, 4096), (4096, 12288), (2048, 12288), (248320, 2048), (5120, 17408)):
        p = A.plan_qgemv(out, K, 4, 64)
        assert p.tc and p.tpb % 32 == 0 and 32 <= p.tpb <= 512 and p.ks >= 1
        assert p.tpb <= 256 or p.mt == 1  # 512 threads only with one 16-row tile a warp (the register budget)
        assert (K // 64) // (p.tpb // 32 * p.ks) >= p.u  # every warp has at least one full iteration
    assert not A.plan_qgemv(4096, 4096, 6, 64).tc and not A.plan_qgemv(4096, 4096, 2, 32).tc


@pytest.mark.parametrize("bits,group", TC_FORMATS)
def test_tc_formats(bits, group):
    out, K, R = 20, (256 if group == 128 else 128), 3  # two 16-row tiles, the second partial
    P, S, B = _q(out, K, bits, group)
    x = rng.standard_normal((R, K)).astype(np.float32)
    y = np.full((R, out), np.nan, np.float32)
    A.launch_qgemv(P, S, B, x, y, bits, group, _tc_plan(out, K, bits, group, nw=2 if group < 128 else 1))
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound, tol=1e-5)


def test_tc_rows_alone_equal_rows_together():
    """Rows 1..19 (n-tile variants 1 and 2, and grid.y): a row's bits never depend on the other rows."""
    out, K, bits, group = 16, 256, 4, 64
    P, S, B = _q(out, K, bits, group)
    x = rng.standard_normal((19, K)).astype(np.float32)
    plan = _tc_plan(out, K, bits, group, nw=2, mt=1, u=2)
    full = np.full((19, out), np.nan, np.float32)
    A.launch_qgemv(P, S, B, x, full, bits, group, plan)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(full, ref, bound, tol=1e-5)
    for r0, R in ((0, 1), (0, 5), (0, 8), (0, 9), (0, 16), (12, 1), (18, 1), (3, 8)):
        y = np.full((R, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x[r0:r0 + R], y, bits, group, plan)
        assert np.array_equal(y.view(np.uint32), full[r0:r0 + R].view(np.uint32)), f"rows {r0}..{r0 + R - 1}"


def test_tc_default_geometry_splitk_and_scale_dtypes():
    """The default tile shape (2 row tiles a warp, 4 groups an iteration, uneven warps' ranges), split-K with the
    workspace reduce, and float32 / float16 scales."""
    out, K, bits, group = 40, 640, 4, 64  # 10 groups: 3 warps' ranges of 4, 4, 2
    for sd, ks in (("bf16", 1), ("f32", 2), ("f16", 1)):
        kw = {} if sd == "bf16" else {"scale_dtype": sd}
        P, S, B = _q(out, K, bits, group, **kw)
        x = rng.standard_normal((2, K)).astype(np.float32)
        plan = _tc_plan(out, K, bits, group, nw=3 if ks == 1 else 1, ks=ks, mt=2, u=4)
        ws = np.full((ks, 2, out), np.nan, np.float32)
        y = np.full((2, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=ws)
        ref, bound = _ref(x, P, S, B, bits, group)
        _check(y, ref, bound, tol=1e-5)


# opt-in (TENSORFOLD_GEMV_PIPE=1): 4-bit in CI, the other formats marked ``variant`` (run with -m variant)
@pytest.mark.parametrize("bits,group", [(4, 64), pytest.param(8, 128, marks=pytest.mark.variant),
                                        pytest.param(2, 64, marks=pytest.mark.variant)])
def test_tc_pipelined_form(bits, group):
    """The pipelined form (next iteration's weights prefetched, out-of-range groups scaled by 0 instead of skipped,
    separate hi / lo chains): against the reference with uneven warp ranges and a partial last iteration, and a row
    alone == beside others bit for bit."""
    out, K = 20, 5 * group  # 5 groups over 2 warps: ranges of 3 and 2, u = 2
    P, S, B = _q(out, K, bits, group)
    x = rng.standard_normal((10, K)).astype(np.float32)
    plan = _tc_plan(out, K, bits, group, nw=2, mt=1, u=2, pipe=True)
    y = np.full((10, out), np.nan, np.float32)
    A.launch_qgemv(P, S, B, x, y, bits, group, plan)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound, tol=1e-5)
    if bits == 4:
        for r0, R in ((0, 1), (9, 1), (2, 8)):
            yr = np.full((R, out), np.nan, np.float32)
            A.launch_qgemv(P, S, B, x[r0:r0 + R], yr, bits, group, plan)
            assert np.array_equal(yr.view(np.uint32), y[r0:r0 + R].view(np.uint32)), f"rows {r0}+{R}"


# ------------------------------------------------------------------------- latency variants (TC_VARIANTS)

NEW_VARIANTS = ["w16", "w16d2", "w16d3", "sk", "skd2", "pipe2"]
# simulated kernels: only the variants some shape uses by default (the others run in the GPU tier's variant test
# at real shapes; the simulator tier keeps its minutes for the defaults)
SIM_VARIANTS = ["sk", "w16", "pipe2"]


def test_tc_variant_plans_and_env(monkeypatch):
    """Every variant's geometry at the real shapes: whole warps, at most 16 a block (512 threads only with one
    16-row tile a warp, the register budget), every warp at least one full iteration of groups, split-K only in the
    variants that ask for it; the environment switches select them for plan_qgemv."""
    real = ((12288, 4096), (4096, 12288), (17408, 5120), (5120, 17408), (248320, 2048), (248320, 4096))
    for v, cfg in A.TC_VARIANTS.items():
        for out, K in real:
            p = A.plan_tc(out, K, 4, 64, variant=v)
            assert p.tc and p.variant == v and p.tpb % 32 == 0 and 32 <= p.tpb <= 512, (v, p)
            assert p.tpb <= 256 or p.mt == 1, (v, p)
            assert (p.mt, p.u, p.pipe, p.depth) == (cfg["mt"], cfg["u"], cfg["pipe"], cfg["depth"])
            assert (K // 64) // (p.tpb // 32 * p.ks) >= p.u, (v, p)
            assert p.ks == 1 or cfg["ks_blocks"] > 0
    assert A.plan_tc(12288, 4096, 4, 64, variant="w16").tpb == 512
    assert A.plan_tc(5120, 17408, 4, 64, variant="sk").ks > 1
    for bits, group in ((8, 64), (8, 128), (4, 128)):  # 4+ words a lane and group: at most 8 warps (registers)
        assert A.plan_tc(12288, 4096, bits, group, variant="w16d2").tpb <= 256
    monkeypatch.delenv("TENSORFOLD_GEMV_PIPE", raising=False)
    monkeypatch.delenv("TENSORFOLD_GEMV_VARIANT", raising=False)
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "0")  # the first kernel's rule (qgemv takes these shapes by default)
    assert A.plan_qgemv(12288, 4096, 4, 64).variant == "pipe2"  # the shape rule: small weights, K <= 4,096 -> pipe2
    assert A.plan_qgemv(17408, 5120, 4, 64).variant == "sk"  # >= 2^26 codes -> split-K variant
    assert A.plan_qgemv(248320, 2048, 4, 64).variant == "sk"
    for out, K in ((2048, 6144), (2048, 2048), (5120, 6144)):  # <= 2,048 rows or >= 6,144 inputs -> w16
        assert A.plan_qgemv(out, K, 4, 64) == A.plan_tc(out, K, 4, 64, variant="w16")
    for out, K in ((8224, 2048), (12288, 2048), (5120, 2048), (4096, 4096)):  # the rest with K <= 4,096 -> pipe2
        assert A.plan_qgemv(out, K, 4, 64) == A.plan_tc(out, K, 4, 64, variant="pipe2")
    monkeypatch.setenv("TENSORFOLD_TC_VWARPS", "0")  # (with 16 K ranges the square plan is test_tc_vwarps_plan's)
    p2, p1 = A.plan_tc(4096, 4096, 4, 64, variant="pipe2"), A.plan_tc(4096, 4096, 4, 64, variant="pipe")
    assert (p2.tpb, p2.ks, p2.mt) == (p1.tpb, p1.ks, p1.mt)  # only u differs: the same bits as "pipe"
    monkeypatch.delenv("TENSORFOLD_TC_VWARPS")
    assert A.plan_qgemv(4096, 5120, 4, 64).variant == "pipe"
    monkeypatch.setenv("TENSORFOLD_GEMV_PIPE", "1")
    assert A.plan_qgemv(12288, 4096, 4, 64) == A.plan_tc(12288, 4096, 4, 64, variant="pipe")
    for v in NEW_VARIANTS:
        monkeypatch.setenv("TENSORFOLD_GEMV_VARIANT", v)
        assert A.plan_qgemv(12288, 4096, 4, 64) == A.plan_tc(12288, 4096, 4, 64, variant=v)
    monkeypatch.setenv("TENSORFOLD_GEMV_VARIANT", "nope")
    with pytest.raises(ValueError):
        A.plan_qgemv(12288, 4096, 4, 64)


@pytest.mark.parametrize("variant", SIM_VARIANTS)
def test_tc_latency_variant(variant):
    """Each variant's kernel (its tile, groups per iteration and prefetch depth) with more warps than C entries per
    warp tile (warps that store nothing), uneven warp ranges and warps with no group, split-K across blocks for the
    split-K variants: 9 rows (two n-tiles) against the reference; row 8 alone (one n-tile) == the same row of the
    9-row launch, bit for bit. Small (one block along out) because the simulator runs every thread."""
    cfg = A.TC_VARIANTS[variant]
    ks = 2 if cfg["ks_blocks"] else 1
    nw = 5 if cfg["mt"] == 1 else 2
    out = 12 if cfg["mt"] == 1 else 20  # one block along out, its last tile partial
    K, bits, group = 9 * 64, 4, 64  # 9 groups: per split 5 / 4, warps' ranges 1-2 groups, some empty
    P, S, B = _q(out, K, bits, group)
    x = rng.standard_normal((9, K)).astype(np.float32)
    plan = A.GemvPlan(out, K, bits, group, 32 * nw, ks, True, cfg["mt"], cfg["u"], True, cfg["depth"], variant)
    ws = np.full((ks, 9, out), np.nan, np.float32) if ks > 1 else None
    y = np.full((9, out), np.nan, np.float32)
    A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=ws)
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(y, ref, bound, tol=1e-5)
    for r in (8,):
        yr = np.full((1, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x[r:r + 1], yr, bits, group, plan, ws=ws)
        assert np.array_equal(yr.view(np.uint32), y[r:r + 1].view(np.uint32)), f"row {r}"


# ------------------------------------------------------------------------- L2 prefetch before the wait (l2)


@pytest.mark.variant  # an opt-in form (off by default): run with -m variant
@pytest.mark.parametrize("case", ["pipe2_ks2", "w16_glu", "f32_scales"])
def test_tc_l2_prefetch_same_bits(case, monkeypatch):
    """``l2`` (the warp's whole share of W / S / B asked of L2 before the PDL wait) changes the load order only: the
    same bits as without it, with uneven warp ranges, warps with no group, split-K, the SwiGLU epilogue and float32
    scales. The simulator's ``pf_l2`` asserts every prefetched offset lies inside its array (the clamps at the last
    row and the last element of a run). The switch: ``TENSORFOLD_TC_L2`` = 0 / 1 / sq (square weights only)."""
    bits, group = 4, 64
    K = 9 * group  # 9 groups: uneven warp ranges, some empty
    glu = case == "w16_glu"
    out = 32 if glu else 20  # partial last tile (plain); gate | up of 16 rows each (glu)
    kw = {"scale_dtype": "f32"} if case == "f32_scales" else {}
    P, S, B = _q(out, K, bits, group, **kw)
    x = rng.standard_normal((9, K)).astype(np.float32)
    if case == "pipe2_ks2":
        plan = A.GemvPlan(out, K, bits, group, 64, 2, True, 2, 2, True, 1, "pipe2")
    else:
        plan = A.GemvPlan(out, K, bits, group, 32 * 5, 1, True, 1, 2, True, 1, "w16")
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "0")
    seen = []  # the l2 argument of every kernel lookup the launches make
    lookup = A.get_tc_kernel
    monkeypatch.setattr(A, "get_tc_kernel", lambda *a, **k: seen.append(a[-1]) or lookup(*a, **k))
    ys = []
    for l2 in ("0", "1"):
        monkeypatch.setenv("TENSORFOLD_TC_L2", l2)
        ws = np.full((plan.ks, 9, out), np.nan, np.float32) if plan.ks > 1 else None
        y = np.full((9, out // 2 if glu else out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x, y, bits, group, plan, ws=ws, glu=glu)
        assert not np.isnan(y).any()
        ys.append(y)
    assert seen == [False, True], seen  # the second launch took the l2 kernel
    assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32))
    if not glu:
        ref, bound = _ref(x, P, S, B, bits, group)
        _check(ys[1], ref, bound, tol=1e-5)
    monkeypatch.setenv("TENSORFOLD_TC_L2", "sq")
    assert A.tc_l2(2048, 2048) and not A.tc_l2(6144, 2048)
    monkeypatch.setenv("TENSORFOLD_TC_L2", "1")
    assert A.tc_l2(6144, 2048)
    monkeypatch.setenv("TENSORFOLD_TC_L2", "0")
    assert not A.tc_l2(2048, 2048)
    monkeypatch.setenv("TENSORFOLD_TC_L2", "2")
    with pytest.raises(ValueError, match="TENSORFOLD_TC_L2"):
        A.tc_l2(2048, 2048)


# ------------------------------------------------------------------------- whole share before the wait (whole)


@pytest.mark.parametrize("case", ["vec8", "f32_ks2", "bf16_scalar"])
def test_tc_whole_same_bits(case, monkeypatch):
    """``whole`` (the warp's weights, scales and biases loaded before the PDL wait, x staged in shared memory, one
    straight block of ``u`` groups): the same bits as the plan's pipelined kernel for one row, against the float64
    reference too; so does the form that makes x's fragments once a block (``TENSORFOLD_TC_XFRAG=1``). Cases: bf16
    scales eight a 16-byte load (``whole`` 8; partial last row tile, a second block),
    float32 scales with split-K (``whole`` 1), bf16 scales whose warps own 2 groups (scalar loads). Launches the form
    does not fit (two rows, uneven warp ranges) keep the plan's kernel."""
    bits, group = 4, 32
    nw, ks, pw, kw = {"vec8": (2, 1, 8, {}), "f32_ks2": (2, 2, 2, {"scale_dtype": "f32"}),
                      "bf16_scalar": (4, 1, 2, {})}[case]
    K = pw * nw * ks * group
    out = 40  # 32-row blocks: the second one partial
    P, S, B = _q(out, K, bits, group, **kw)
    x = rng.standard_normal((3, K)).astype(np.float32)
    plan = A.GemvPlan(out, K, bits, group, 32 * nw, ks, True, 2, 2, True, 1, "pipe2")
    seen = []  # the whole argument of every kernel lookup
    lookup = A.get_tc_kernel
    monkeypatch.setattr(A, "get_tc_kernel", lambda *a, **k: seen.append(k.get("whole", 0)) or lookup(*a, **k))

    def run(rows):
        ws = np.full((ks, rows, out), np.nan, np.float32) if ks > 1 else None
        y = np.full((rows, out), np.nan, np.float32)
        A.launch_qgemv(P, S, B, x[:rows], y, bits, group, plan, ws=ws)
        assert not np.isnan(y).any()
        return y

    monkeypatch.setenv("TENSORFOLD_TC_XFRAG", "0")  # the whole form as it was first built (xf below)
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "0")
    base = run(1)
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
    y1 = run(1)
    want = 8 if case == "vec8" else 1
    assert seen == [0, want], seen
    assert np.array_equal(base.view(np.uint32), y1.view(np.uint32))
    ref, bound = _ref(x[:1], P, S, B, bits, group)
    _check(y1, ref, bound, tol=1e-5)
    # TENSORFOLD_TC_WHOLE_HALF: half the warp's weight words after the wait, behind x's loads (the same bits)
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE_HALF", "1")
    pres = []
    monkeypatch.setattr(A, "get_tc_kernel", lambda *a, **k: pres.append(k.get("wpre", 0)) or lookup(*a, **k))
    assert np.array_equal(run(1).view(np.uint32), y1.view(np.uint32))
    assert pres == [pw // 2], pres
    # TENSORFOLD_TC_XFRAG: x's fragments and group sums made once a block, one thread an item (the same bits), with
    # and without the half share
    monkeypatch.setenv("TENSORFOLD_TC_XFRAG", "1")
    xfs = []
    monkeypatch.setattr(A, "get_tc_kernel", lambda *a, **k: xfs.append((k.get("xf"), k.get("wpre"))) or
                        lookup(*a, **k))
    assert np.array_equal(run(1).view(np.uint32), y1.view(np.uint32))
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE_HALF", "0")
    assert np.array_equal(run(1).view(np.uint32), y1.view(np.uint32))
    monkeypatch.setenv("TENSORFOLD_TC_XFRAG", "ns")  # xf on this non-square weight
    assert np.array_equal(run(1).view(np.uint32), y1.view(np.uint32))
    assert xfs == [(True, pw // 2), (True, 0), (True, 0)], xfs
    monkeypatch.setenv("TENSORFOLD_TC_XFRAG", "0")
    monkeypatch.setattr(A, "get_tc_kernel", lambda *a, **k: seen.append(k.get("whole", 0)) or lookup(*a, **k))
    seen.clear()
    y2 = run(2)  # two rows: the plan's kernel; row 0 the same bits as alone
    assert seen == [0]
    assert np.array_equal(y2[:1].view(np.uint32), y1.view(np.uint32))


def test_tc_whole_switch(monkeypatch):
    """``TENSORFOLD_TC_WHOLE``: 0 / 1 / sq (square weights only), and which launches the form fits."""
    def plan(out, K, tpb=64, pipe=True):
        return A.GemvPlan(out, K, 4, 64, tpb, 1, True, 2, 2, pipe, 1, "pipe2" if pipe else "default")

    def sb(out, K):
        return np.zeros((out, K // 64), np.uint16)

    sq, wide = plan(1024, 1024), plan(2048, 1024)  # 16 groups over 2 warps: 8 a warp
    for v, want_sq, want_wide in (("0", 0, 0), ("1", 8, 8), ("sq", 8, 0)):
        monkeypatch.setenv("TENSORFOLD_TC_WHOLE", v)
        assert A.tc_whole(sq, 1, 1, False, None, sb(1024, 1024), sb(1024, 1024)) == want_sq
        assert A.tc_whole(wide, 1, 1, False, None, sb(2048, 1024), sb(2048, 1024)) == want_wide
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
    S = sb(1024, 1024)
    assert A.tc_whole(sq, 2, 1, False, None, S, S) == 0  # two rows
    assert A.tc_whole(sq, 1, 1, True, None, S, S) == 0  # SwiGLU epilogue
    assert A.tc_whole(plan(1024, 1024, pipe=False), 1, 1, False, None, S, S) == 0  # not pipelined
    assert A.tc_whole(plan(1024, 1024, tpb=96), 1, 1, False, None, S, S) == 0  # 16 groups over 3 warps
    S2 = sb(64, 2048)
    assert A.tc_whole(plan(64, 2048), 1, 1, False, None, S2, S2) == 0  # 16 groups a warp: past WHOLE_MAX_U
    S4 = sb(64, 512)
    assert A.tc_whole(plan(64, 512), 1, 1, False, None, S4, S4) == 1  # 4 groups a warp: scalar loads
    F = S.astype(np.float32)
    assert A.tc_whole(sq, 1, 1, False, None, F, F) == 1  # float32 scales
    p8 = A.GemvPlan(1024, 1024, 8, 64, 64, 1, True, 2, 2, True, 1, "pipe2")  # 8-bit: 4 words a lane and group
    assert A.tc_whole(p8, 1, 1, False, None, S, S) == 0  # 8 groups x 2 tiles x 2 rows x 4 words > WHOLE_MAX_WORDS
    p8h = A.GemvPlan(1024, 512, 8, 64, 64, 1, True, 2, 2, True, 1, "pipe2")  # 4 groups a warp: 64 words
    assert A.tc_whole(p8h, 1, 1, False, None, sb(1024, 512), sb(1024, 512)) == 1
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "2")
    with pytest.raises(ValueError, match="TENSORFOLD_TC_WHOLE"):
        A.tc_whole(sq, 1, 1, False, None, S, S)


def test_tc_geo_override(monkeypatch):
    """``TENSORFOLD_TC_GEO`` (measurements): a listed shape's first-kernel plan takes the given tiles and warps and no
    split-K; other shapes keep theirs; malformed values are refused with the variable's name."""
    monkeypatch.delenv("TENSORFOLD_TC_GEO", raising=False)
    base = A.plan_tc(4096, 4096, 4, 64)
    other = A.plan_tc(2048, 2048, 4, 64)
    monkeypatch.setenv("TENSORFOLD_TC_GEO", "4096x4096=2,16; 5120x6144=1,8")
    p = A.plan_tc(4096, 4096, 4, 64)
    assert (p.mt, p.tpb, p.ks) == (2, 512, 1) and (p.u, p.pipe) == (base.u, base.pipe)
    assert A.plan_tc(2048, 2048, 4, 64) == other
    for bad in ("4096x4096=2", "4096=2,16", "4096x4096=3,8", "4096x4096=2,12"):
        monkeypatch.setenv("TENSORFOLD_TC_GEO", bad)
        with pytest.raises(ValueError, match="TENSORFOLD_TC_GEO"):
            A.plan_tc(4096, 4096, 4, 64)


@pytest.mark.parametrize("case", ["even", "uneven_ks2", "one_warp"])
def test_tc_vwarps_same_bits(case, monkeypatch):
    """``GemvPlan.mw`` (``_gen_tc_source(vs=...)``): a plan of ``nv`` K ranges launched with ``mw`` warps of
    ``nv / mw`` ranges each gives the same bits, row by row, as the ``nv``-warp kernel whose cross-warp sum adds
    ``nv / mw`` partial tiles at a time first (``rg``, launched directly), and as the one-row whole-share form at
    ``nv`` warps, at 1, 3 and 10 rows (both n-tile kernels); rows alone equal rows together; all match the
    float64 reference. Cases: 4 ranges of 2 groups on 2 warps (2 groups an iteration); 9 groups a block (ranges
    of 3, 3, 3 and an empty one, one group an iteration) with split-K over float32 scales on 2 warps; 4 ranges on
    one warp."""
    bits, group = 4, 32
    nv, mw, ng, ks, kw = {"even": (4, 2, 8, 1, {}), "uneven_ks2": (4, 2, 9, 2, {"scale_dtype": "f32"}),
                          "one_warp": (4, 1, 8, 1, {})}[case]
    vs = nv // mw
    K = ng * ks * group
    out = 40  # 32-row blocks: the second one partial
    P, S, B = _q(out, K, bits, group, **kw)
    x = rng.standard_normal((10, K)).astype(np.float32)
    plan = A.GemvPlan(out, K, bits, group, 32 * nv, ks, True, 2, 2, True, 1, "pipe2", mw)
    assert A.tc_geometry(plan, 0) == (mw, vs, 1 if ng % nv else 2, 1)
    assert A.tc_geometry(plan, 1) == (nv, 1, ng // nv, vs)
    sk = "f32" if kw else "bf16"

    def wide(rows):  # nv warps, one range each, partial tiles summed vs at a time first
        nt = 1 if rows <= 8 else 2
        k = A.get_tc_kernel(bits, group, nt, nv, 2, 2, sk, True, 1, rg=vs)
        y = np.full((ks, rows, out), np.nan, np.float32)
        k[(2, -(-rows // (8 * nt)), ks), 32 * nv](P, S, B, x[:rows], y, np.int32(rows), np.int32(0), np.int32(0))
        t = y[0]
        for z in range(1, ks):  # the split-K reduce's order
            t = t + y[z]
        return t.view(np.uint32)

    seen = []  # (warps, whole, vs) of every kernel lookup by the launch
    lookup = A.get_tc_kernel

    def run(rows):
        ws = np.full((ks, rows, out), np.nan, np.float32) if ks > 1 else None
        y = np.full((rows, out), np.nan, np.float32)
        monkeypatch.setattr(A, "get_tc_kernel", lambda *a, **k: seen.append((a[3], k.get("whole", 0),
                                                                              k.get("vs", 1))) or lookup(*a, **k))
        A.launch_qgemv(P, S, B, x[:rows], y, bits, group, plan, ws=ws)
        monkeypatch.setattr(A, "get_tc_kernel", lookup)
        assert not np.isnan(y).any()
        return y.view(np.uint32)

    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "0")
    got = {r: run(r) for r in (1, 3, 10)}
    assert seen == [(mw, 0, vs)] * 3, seen
    for r in (1, 3, 10):
        assert np.array_equal(got[r], wide(r)), r
        assert np.array_equal(got[r][:1], got[1]) and np.array_equal(got[10][:r], got[r]), r
    if case != "uneven_ks2":  # every range the same length: the whole form fits one row
        monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "1")
        seen.clear()
        assert np.array_equal(run(1), got[1])
        assert seen == [(nv, 1, 1)], seen
    ref, bound = _ref(x, P, S, B, bits, group)
    _check(got[10].view(np.float32), ref, bound, tol=1e-5)


def test_tc_vwarps_plan(monkeypatch):
    """``TENSORFOLD_TC_VWARPS``: ``sq`` (default) gives the 9B square plan (4096 x 4096, 4-bit g64) 16 K ranges, run
    by 8 warps (two ranges each) except in the whole-share form (16 warps, 4 groups each); ``0``, other shapes and
    formats whose 16-warp kernels spill keep theirs; ``TENSORFOLD_TC_GEO`` takes precedence."""
    for v in ("TENSORFOLD_TC_VWARPS", "TENSORFOLD_TC_GEO", "TENSORFOLD_GEMV_VARIANT", "TENSORFOLD_GEMV_PIPE"):
        monkeypatch.delenv(v, raising=False)
    p = A.plan_tc(4096, 4096, 4, 64)
    assert (p.variant, p.tpb, p.mw, p.ks, p.u) == ("pipe2", 512, 8, 1, 2)
    assert A.tc_geometry(p, 0) == (8, 2, 2, 1) and A.tc_geometry(p, 1) == (16, 1, 4, 2)
    S = np.zeros((4096, 64), np.uint16)
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "sq")
    assert A.tc_whole(p, 1, 1, False, None, S, S) == 1  # 4 groups a warp: scalar scale loads
    assert A.tc_whole(p, 2, 1, False, None, S, S) == 0
    for shape in ((8224, 2048), (12288, 2048), (2048, 2048)):
        assert A.plan_tc(*shape, 4, 64).mw == 0, shape
    assert A.plan_tc(4096, 4096, 8, 64).mw == 0  # 4 words a lane and group
    monkeypatch.setenv("TENSORFOLD_TC_VWARPS", "0")
    p0 = A.plan_tc(4096, 4096, 4, 64)
    assert (p0.tpb, p0.mw) == (256, 0) and A.tc_geometry(p0, 0) == (8, 1, 2, 1)
    monkeypatch.setenv("TENSORFOLD_TC_VWARPS", "sq")
    monkeypatch.setenv("TENSORFOLD_TC_GEO", "4096x4096=2,16")
    assert A.plan_tc(4096, 4096, 4, 64).mw == 0
    monkeypatch.delenv("TENSORFOLD_TC_GEO")
    monkeypatch.setenv("TENSORFOLD_TC_VWARPS", "1")
    with pytest.raises(ValueError, match="TENSORFOLD_TC_VWARPS"):
        A.plan_tc(4096, 4096, 4, 64)


# ------------------------------------------------------------------------- LOP3 decode (TENSORFOLD_TC_XFRAG=1)


def test_tc_xfrag_rule(monkeypatch):
    """``tc_xfrag(out, inp)``: ``(xf, l3)`` a launch; the default ``1`` takes both everywhere, ``ns`` makes x's
    fragments once a block on non-square weights only (the H100's best) with the LOP3 decode everywhere, ``0``
    neither; another value is refused by name."""
    monkeypatch.delenv("TENSORFOLD_TC_XFRAG", raising=False)
    assert A.tc_xfrag(4096, 4096) == (True, True)
    monkeypatch.setenv("TENSORFOLD_TC_XFRAG", "ns")
    assert A.tc_xfrag(8224, 2048) == (True, True)
    assert A.tc_xfrag(4096, 4096) == (False, True)
    monkeypatch.setenv("TENSORFOLD_TC_XFRAG", "0")
    assert A.tc_xfrag(8224, 2048) == (False, False)
    monkeypatch.setenv("TENSORFOLD_TC_XFRAG", "1")
    assert A.tc_xfrag(4096, 4096) == (True, True)
    monkeypatch.setenv("TENSORFOLD_TC_XFRAG", "2")
    with pytest.raises(ValueError, match="TENSORFOLD_TC_XFRAG"):
        A.tc_xfrag(4096, 4096)


@pytest.mark.parametrize("bits,group,glu", [(4, 64, False), (2, 64, False), (4, 32, True)])
def test_tc_lop3_decode_same_bits(bits, group, glu, monkeypatch):
    """``TENSORFOLD_TC_XFRAG=1`` / ``ns`` also decode every first-kernel launch's code pairs with ``(w & mask) | c``
    in one LOP3 (``l3`` kernels; the whole form's ``xf`` ones): the same bits as without at 1, 3 and 11 rows (one
    and two n-tiles), with the SwiGLU epilogue too, against the float64 reference; the launches did take ``l3``
    kernels."""
    out, K = 80, 8 * group
    P, S, B = _q(out, K, bits, group)
    x = rng.standard_normal((11, K)).astype(np.float32)
    plan = A.GemvPlan(out, K, bits, group, 64, 1, True, 2, 2, True, 1, "pipe2")
    monkeypatch.setenv("TENSORFOLD_TC_WHOLE", "0")  # the plan's kernel at every row count (xf has its own test)
    seen = []
    lookup = A.get_tc_kernel
    monkeypatch.setattr(A, "get_tc_kernel", lambda *a, **k: seen.append(k.get("l3")) or lookup(*a, **k))
    got = {}
    for v in ("0", "1", "ns"):
        monkeypatch.setenv("TENSORFOLD_TC_XFRAG", v)
        got[v] = []
        for rows in (1, 3, 11):
            y = np.full((rows, out // 2 if glu else out), np.nan, np.float32)
            A.launch_qgemv(P, S, B, x[:rows], y, bits, group, plan, glu=glu)
            assert not np.isnan(y).any()
            got[v].append(y)
    assert seen == [False] * 3 + [True] * 6, seen
    for a, b, c in zip(got["0"], got["1"], got["ns"]):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert np.array_equal(a.view(np.uint32), c.view(np.uint32))
    if not glu:
        ref, bound = _ref(x, P, S, B, bits, group)
        _check(got["1"][2], ref, bound, tol=1e-5)
