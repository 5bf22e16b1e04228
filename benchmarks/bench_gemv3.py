"""Decode GEMV on the H200: ``tensorfold.kernels.qgemv`` (geometries given on the command line) against the first
tensor-core kernel (``affine``'s shape default) at real 2B / 9B / 27B shapes, 4-bit g64, 1 / 8 / 16 rows.

Each case is timed inside a captured CUDA graph (``bench_kernels.time_case``), weights rotated over >= 256 MB so L2
serves none of them; GB/s = (weights + scales + x + y bytes) / time, as a share of the measured copy bandwidth.

    python3 benchmarks/bench_gemv3.py --configs "4,1,4,1,396;4,1,4,2,396" --rows 1,8 --out DIR

A config is ``nw,mt,u,depth,blocks[,stages,pb,occ1,cg]`` (``qgemv.plan``'s knobs; cg: groups a K chunk, 0 the plan's; the tile-layout column of session
11's calls, measured at b44290d and not adopted, is gone). ``--custom "out,in;..."`` adds shapes (e.g. a size sweep
at one K, whose line gives a kernel's fixed cost and its streaming rate). ``--tcplans "w16;pipe:u=2"`` times the
first kernel's variants (``affine.TC_VARIANTS``), each with optional ``plan_tc`` overrides. Writes ``gemv3_<commit>.json`` and prints
a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")

SHAPES = [("2B", "gate/up", 12288, 2048), ("2B", "down", 2048, 6144), ("9B", "gate/up", 24576, 4096),
          ("9B", "down", 4096, 12288), ("27B", "gate/up", 34816, 5120), ("27B", "down", 5120, 17408),
          ("2B", "head", 248320, 2048)]


def _read_kernel():
    import numpy as np
    from numba import cuda

    from tensorfold.kernels.qgemv import ld_w4

    @cuda.jit
    def read_all(W, out):
        """every 16-byte word of W read once (grid-stride, 16-byte loads), xor-folded; written only if it hits a
        value random data will not give, so the loads cannot be dropped"""
        tid = cuda.grid(1)
        n = W.shape[0] // 4
        acc = np.uint32(0)
        for i in range(tid, n, cuda.gridsize(1)):
            a, b, c, d = ld_w4(W, i * 4)
            acc ^= a ^ b ^ c ^ d
        if acc == np.uint32(0x9E3779B9):
            out[0] = acc

    return read_all


def _region_kernel(aware=False):
    """``read_regions``; ``aware``: the PDL-aware form (``aware_regions``), the floor of a decode GEMV as the
    runtime chains it (its first loads before the dependency wait, the signal to dependents after its loop)"""
    import numpy as np
    from numba import cuda

    from tensorfold.kernels import _device as D  # D.pdl_wait by attribute: ``_pdl.aware`` reads co_names
    from tensorfold.kernels.qgemv import ld_w4

    if aware:
        @cuda.jit
        def aware_regions(W, out):
            """``read_regions`` with a decode GEMV's PDL contract, over exactly W's words (a multiple of 128): warp
            w reads 512-byte units [w U / nw, (w + 1) U / nw), four a step (an index past its share re-reads the
            share's last unit: no branch in the loop); the first step is loaded before ``pdl_wait`` (as qgemv loads
            its first weights), ``pdl_trigger`` follows the loop, and the one possible store comes after the wait"""
            lane = cuda.threadIdx.x & 31
            warp = cuda.grid(1) >> 5
            nwarp = cuda.gridsize(1) >> 5
            units = W.shape[0] >> 7
            u0 = warp * units // nwarp
            u1 = (warp + 1) * units // nwarp
            acc = np.uint32(0)
            if u1 > u0:
                last = u1 - 1
                a0, b0, c0, d0 = ld_w4(W, u0 * 128 + lane * 4)
                a1, b1, c1, d1 = ld_w4(W, min(u0 + 1, last) * 128 + lane * 4)
                a2, b2, c2, d2 = ld_w4(W, min(u0 + 2, last) * 128 + lane * 4)
                a3, b3, c3, d3 = ld_w4(W, min(u0 + 3, last) * 128 + lane * 4)
                D.pdl_wait()
                acc = a0 ^ b0 ^ c0 ^ d0 ^ a1 ^ b1 ^ c1 ^ d1 ^ a2 ^ b2 ^ c2 ^ d2 ^ a3 ^ b3 ^ c3 ^ d3
                for u in range(u0 + 4, u1, 4):
                    a0, b0, c0, d0 = ld_w4(W, u * 128 + lane * 4)
                    a1, b1, c1, d1 = ld_w4(W, min(u + 1, last) * 128 + lane * 4)
                    a2, b2, c2, d2 = ld_w4(W, min(u + 2, last) * 128 + lane * 4)
                    a3, b3, c3, d3 = ld_w4(W, min(u + 3, last) * 128 + lane * 4)
                    acc ^= a0 ^ b0 ^ c0 ^ d0 ^ a1 ^ b1 ^ c1 ^ d1 ^ a2 ^ b2 ^ c2 ^ d2 ^ a3 ^ b3 ^ c3 ^ d3
            else:
                D.pdl_wait()
            D.pdl_trigger()
            if acc == np.uint32(0x9E3779B9):
                out[0] = acc

        return aware_regions

    @cuda.jit
    def read_regions(W, out):
        """each warp reads its own contiguous share of W front to back, 512 bytes a warp load, four loads (2 KB)
        issued before any is used: the order a persistent GEMV's warp walks its tiles in (bytes in flight as
        qgemv's one iteration ahead), against the grid-stride sweep of ``read_all``"""
        lane = cuda.threadIdx.x & 31
        warp = cuda.grid(1) >> 5
        nwarp = cuda.gridsize(1) >> 5
        per = W.shape[0] // nwarp // 512 * 512  # words a warp (a multiple of 4 loads of 128 words)
        base = warp * per
        acc = np.uint32(0)
        for i in range(0, per, 512):
            a0, b0, c0, d0 = ld_w4(W, base + i + lane * 4)
            a1, b1, c1, d1 = ld_w4(W, base + i + 128 + lane * 4)
            a2, b2, c2, d2 = ld_w4(W, base + i + 256 + lane * 4)
            a3, b3, c3, d3 = ld_w4(W, base + i + 384 + lane * 4)
            acc ^= a0 ^ b0 ^ c0 ^ d0 ^ a1 ^ b1 ^ c1 ^ d1 ^ a2 ^ b2 ^ c2 ^ d2 ^ a3 ^ b3 ^ c3 ^ d3
        if acc == np.uint32(0x9E3779B9):
            out[0] = acc

    return read_regions


_BULK_BARS = 128  # mbarriers a block of the bulk floor read: warps x stages must not exceed it


def _bulk_kernel():
    import numpy as np
    from numba import cuda

    from tensorfold.kernels._bulk import bulk_g2s, fence_async, mbar_fence_init, mbar_init, mbar_try_wait

    @cuda.jit
    def read_bulk(W, out, S, PW):
        """each warp reads its own contiguous share of W in pieces of PW words through a ring of S shared stages
        filled by bulk copies (lane 0 issues, an mbarrier a stage), S pieces in flight from the start; the lanes read
        a landed piece back with 16-byte shared loads and xor-fold it (the consumer side of a bulk-copy GEMV)"""
        ring = cuda.shared.array(0, np.uint32)
        bars = cuda.shared.array(_BULK_BARS, np.uint64)
        lane = cuda.threadIdx.x & 31
        wl = cuda.threadIdx.x >> 5
        warp = cuda.grid(1) >> 5
        nwarp = cuda.gridsize(1) >> 5
        per = W.shape[0] // nwarp // PW  # pieces a warp
        base = warp * per * PW
        rb = wl * S * PW
        if lane == 0:
            for s in range(S):
                mbar_init(bars, wl * S + s, 1)
            mbar_fence_init()
        cuda.syncwarp()
        if lane == 0:
            for s in range(min(S, per)):
                bulk_g2s(ring, rb + s * PW, W, base + s * PW, PW * 4, bars, wl * S + s)
        acc = np.uint32(0)
        for i in range(per):
            s = i % S
            par = (i // S) & 1
            while mbar_try_wait(bars, wl * S + s, par) == 0:
                pass
            o = rb + s * PW
            for j in range(lane * 4, PW, 128):
                acc ^= ring[o + j] ^ ring[o + j + 1] ^ ring[o + j + 2] ^ ring[o + j + 3]
            cuda.syncwarp()
            if lane == 0 and i + S < per:
                fence_async()
                bulk_g2s(ring, o, W, base + (i + S) * PW, PW * 4, bars, wl * S + s)
        if acc == np.uint32(0x9E3779B9):
            out[0] = acc

    return read_bulk


def read_floor_bulk(ctx, bk, bw, mbs, confs, res):
    """``--floor-bulk``: the bulk-copy ring read (``_bulk_kernel``) at each config ``S,PW,blocks,tpb`` and size,
    beside the register-load regions read at qgemv's grid"""
    from tensorfold.kernels.qgemv import _allow_dyn

    cuda = ctx["cuda"]
    kb = _bulk_kernel()
    kr = _region_kernel()
    o = cuda.device_array(1, dtype="uint32")
    for mb in mbs:
        n = int(mb * 2**20) // 16 * 4
        mats = [ctx["rand_u32"]((n,)) for _ in range(bk._copies(n * 4))]
        for c in [(0, 0, 396, 128)] + confs:
            S, PW, blocks, tpb = c
            nwarp = blocks * tpb // 32
            if S == 0:
                def mk(m):
                    return lambda s: kr[blocks, tpb, s](m[0], o)
                nm, nb = f"regions {blocks}x{tpb}", n // nwarp // 512 * 512 * nwarp * 4
            else:
                if (tpb // 32) * S > _BULK_BARS:  # session 26 call 1: 12 warps x 8 stages overran 64 barriers
                    print(f"floor bulk {mb} MB S{S} {blocks}x{tpb}: skipped (more than {_BULK_BARS} barriers)")
                    continue
                dyn = (tpb // 32) * S * PW * 4

                def mk(m, S=S, PW=PW, blocks=blocks, tpb=tpb, dyn=dyn):
                    def go(s):
                        cfg = kb[blocks, tpb, s, dyn]
                        if dyn > 48 * 1024:
                            cfg.pre_launch_callbacks.append(_allow_dyn(dyn))
                        cfg(m[0], o, S, PW)
                    return go
                nm, nb = f"bulk S{S} P{PW * 4} {blocks}x{tpb}", n // nwarp // PW * PW * nwarp * 4
            _time_floor(ctx, bk, bw, res, "bulk", nm, mb, n, nb, [mk(m) for m in mats])
        del mats


def gemv_launcher(m, x, y, bits, group, p, R, ws, glu, keep=None):
    """``stream -> launch`` of one decode GEMV on weight copy ``m`` (W, S, B, ...): a swept plan goes to qgemv
    directly (``affine`` takes MLX arrays only), any other through ``affine.launch_qgemv``. ``keep``: buffers the
    launch must keep alive (the cupy arrays behind ``x``)."""
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q

    if getattr(p, "sw", 0):
        return lambda s, keep=keep: Q.launch(m[0], m[1], m[2], x, y, p, R, ws=ws, stream=s, glu=glu)
    return lambda s, keep=keep: A.launch_qgemv(m[0], m[1], m[2], x, y, bits, group, p, ws=ws, stream=s, rows=R,
                                               glu=glu)


def swept_copies(ctx, mats, bits, group, keys):
    """{(u, glu, per): [(Wswept, S, B, keep)]}: the weight copies in ``qgemv.sweep_pack``'s layout (gate / up rows
    paired where ``glu``, runs of ``per`` iterations), one device repack a copy, so rotating still defeats L2"""
    from tensorfold.kernels import qgemv as Q

    cuda = ctx["cuda"]
    res = {}
    for u, glu, per in sorted(keys):
        res[(u, glu, per)] = [(Q.sweep_pack_device(m[0], m[1], m[2], bits, group, u, glu=glu, per=per), m[1], m[2])
                              for m in mats]
    cuda.synchronize()
    return res


def read_floor(ctx, bk, bw, mbs, res):
    cuda = ctx["cuda"]
    k = _read_kernel()
    kr = _region_kernel()
    o = cuda.device_array(1, dtype="uint32")
    for mb in mbs:
        n = int(mb * 2**20) // 16 * 4
        mats = [ctx["rand_u32"]((n,)) for _ in range(bk._copies(n * 4))]
        for blocks, tpb in ((132 * 4, 256), (132 * 8, 256), (132 * 16, 256), (-396, 128), (-792, 128)):
            def mk(m, blocks=blocks, tpb=tpb):
                if blocks < 0:  # per-warp regions, qgemv's grid (396 blocks of 4 warps) and twice it
                    return lambda s: kr[-blocks, tpb, s](m[0], o)
                return lambda s: k[blocks, tpb, s](m[0], o)

            nm = f"regions {-blocks}x{tpb}" if blocks < 0 else f"read {blocks}x{tpb}"
            nwarp = -blocks * tpb // 32
            nb = (n // nwarp // 512 * 512 * nwarp if blocks < 0 else n) * 4  # the regions read whole 2 KB steps
            _time_floor(ctx, bk, bw, res, "read", nm, mb, n, nb, [mk(m) for m in mats])
        del mats


def _time_floor(ctx, bk, bw, res, label, nm, mb, n, nb, launches):
    """one floor case (``nb`` bytes read, launches over the rotated copies) timed, printed and added to ``res``"""
    case = bk.Case(name=nm, model="-", shape=f"{mb} MB", nbytes=nb, launches=launches)
    try:
        sec, how = bk.time_case(case, ctx)
    except Exception as e:  # noqa: BLE001
        print(f"floor {label} {mb} MB {nm}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
        return
    gbs = nb / sec / 1e9
    res.append(dict(model="floor", label=label, out=n * 4, inp=0, R=0, kernel=nm, us=sec * 1e6, gbs=gbs,
                    pct=100 * gbs / bw, geo="", how=how))
    print(f"floor {label} {mb:7.1f} MB {nm:26s} {sec * 1e6:8.1f} us {gbs:7.0f} GB/s {100 * gbs / bw:5.1f} %",
          flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="4,1,4,1,396")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--shapes", default="", help="comma list of indices into SHAPES (default all)")
    ap.add_argument("--no-old", action="store_true")
    ap.add_argument("--tcplans", default="", help='first-kernel plans (affine.TC_VARIANTS) to time as well, with '
                    'optional overrides: "w16;pipe:mt=1,u=2;..."')
    ap.add_argument("--custom", default="", help='extra shapes "out,in;out,in" (label "sweep")')
    ap.add_argument("--only-sw", action="store_true", help="with --swept: time the swept forms only")
    ap.add_argument("--xh", action="store_true", help="time each qgemv form with hi + lo x (xh 0) and, labelled "
                    "xh, bf16-only x (xh 1); without it a plan keeps its default (TENSORFOLD_GEMV3_XH)")
    ap.add_argument("--floor", default="", help="MB list: time a plain 16-byte-load read of that many MB first "
                    "(what any kernel of that size can reach inside a graph)")
    ap.add_argument("--floor-bulk", default="", help="MB list: the bulk-copy ring read (and qgemv's regions read) "
                    "at each --bulk-confs config")
    ap.add_argument("--bulk-confs", default="2,576,396,128;4,576,396,128;8,576,396,128;4,2304,396,128",
                    help="S,PW,blocks,tpb;...: ring stages, words a piece, grid")
    ap.add_argument("--swept", action="store_true", help="time each qgemv plan on the swept layout too "
                    "(qgemv.sweep_pack of the same weights; same bits)")
    ap.add_argument("--glu", action="store_true", help="time each plan's SwiGLU-epilogue form too (gate | up "
                    "weights: y [R, out / 2]; the shape's out must be a multiple of 16)")
    ap.add_argument("--pdl", action="store_true", help="capture the graphs with programmatic dependent launch (the "
                    "decode graphs' form: a launch's pre-wait loads overlap the previous launch's tail)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    import bench_kernels as bk
    from tensorfold.kernels import _pdl
    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q

    ctx = bk._ctx()
    cuda = ctx["cuda"]
    Q.counters()
    bw = bk.copy_bandwidth(ctx)
    commit = os.environ.get("TF_COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                                                           capture_output=True, text=True).stdout.strip()
    print(f"copy bandwidth {bw:.0f} GB/s, commit {commit}, pdl {int(args.pdl)}, qgemv cmp {Q.cmp_mode()} pre "
          f"{Q.pre_mode()} xq {int(Q.xq_on())} cmpu {Q.cmp_unroll()}", flush=True)
    configs = [tuple(int(v) for v in c.split(",")) for c in args.configs.split(";") if c]
    rows = [int(r) for r in args.rows.split(",")]
    res = []
    if args.floor:
        read_floor(ctx, bk, bw, [float(v) for v in args.floor.split(",")], res)
    if args.floor_bulk:
        read_floor_bulk(ctx, bk, bw, [float(v) for v in args.floor_bulk.split(",")],
                        [tuple(int(v) for v in c.split(",")) for c in args.bulk_confs.split(";") if c], res)
    shapes = [] if args.shapes == "-" else (SHAPES if not args.shapes else [SHAPES[int(i)] for i in args.shapes.split(",")])
    shapes = shapes + [("-", "sweep", int(c.split(",")[0]), int(c.split(",")[1]))
                       for c in args.custom.split(";") if c]
    for model, label, out, inp in shapes:
        bits, group = 4, 64
        wbytes, mats = bk.affine_copies(ctx, out, inp, bits, group)
        smats = None
        for R in rows:
            x, _x = ctx["rand_f32"]((R, inp))
            y = cuda.device_array((R, out), dtype="float32")
            yg = cuda.device_array((R, out // 2), dtype="float32")
            plans = [] if args.no_old else [("old " + A.plan_tc(out, inp, bits, group).variant,
                                             A.plan_tc(out, inp, bits, group))]
            for spec in [t for t in args.tcplans.split(";") if t]:
                v, _, kv = spec.partition(":")
                kw = {k: int(val) for k, val in (e.split("=") for e in kv.split(",") if e)}
                plans.append((f"old {spec}", A.plan_tc(out, inp, bits, group, variant=v, **kw)))
            for c in configs:
                nw, mt, u, depth, blocks = c[:5]
                stages, pb, occ1, cg = (list(c[5:9]) + [0, 0, 0, 0])[:4]
                ng = inp // group
                if cg and ng % cg:  # a chunk size this shape cannot take: its largest divisor not above cg
                    cg = max(d for d in range(1, cg + 1) if ng % d == 0 and d % u == 0)
                plans.append((f"v3p {','.join(str(v) for v in c)}",
                              Q.plan(out, inp, bits, group, nw=nw, mt=mt, u=u, depth=depth, blocks=blocks,
                                     stages=stages, pb=pb, occ1=occ1, cg=cg or None)))
            forms = [(nm, p, False, mats) for nm, p in plans]
            if args.glu:
                forms += [(nm + " glu", p, True, mats) for nm, p in plans if A.glu_ok(p, out)]
            if args.swept:
                v3 = [(nm, p) for nm, p in plans if isinstance(p, Q.V3Plan) and p.u in (2, 4)]
                keys = ({(p.u, False, p.per) for _, p in v3}
                        | {(p.u, True, p.per) for _, p in v3 if args.glu and A.glu_ok(p, out)})
                smats = smats or swept_copies(ctx, mats, bits, group, keys)
                forms += [(nm + " sw", dataclasses.replace(p, sw=1), False, smats[(p.u, False, p.per)])
                          for nm, p in v3]
                forms += [(nm + " sw glu", dataclasses.replace(p, sw=2), True, smats[(p.u, True, p.per)])
                          for nm, p in v3 if (p.u, True, p.per) in smats]
            if args.only_sw:
                forms = [f for f in forms if getattr(f[1], "sw", 0)]
            if args.xh:  # hi + lo x (xh 0) and bf16-only x (xh 1, the default since session 22) side by side
                v3f = [f for f in forms if isinstance(f[1], Q.V3Plan)]
                forms = ([f for f in forms if not isinstance(f[1], Q.V3Plan)]
                         + [(nm, dataclasses.replace(p, xh=0), glu, m_) for nm, p, glu, m_ in v3f]
                         + [(nm + " xh", dataclasses.replace(p, xh=1), glu, m_) for nm, p, glu, m_ in v3f])
            for name, p, glu, mats_ in forms:
                ws = cuda.device_array((p.ks, R, out), dtype="float32") if p.ks > 1 else None

                def mk(m, p=p, ws=ws, x=x, y=(yg if glu else y), R=R, keep=_x, glu=glu):
                    return gemv_launcher(m, x, y, bits, group, p, R, ws, glu, keep)

                case = bk.Case(name=name, model=model, shape=f"{out}x{inp}", nbytes=wbytes + R * (inp + out) * 4,
                               launches=[mk(m) for m in mats_])
                try:
                    with _pdl.scope(args.pdl):  # --pdl: the graph's launches carry the PDL attribute, as in decode
                        sec, how = bk.time_case(case, ctx)
                except Exception as e:  # noqa: BLE001
                    print(f"{model} {label} R={R} {name}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                us = sec * 1e6
                gbs = case.nbytes / sec / 1e9
                geo = (f"ks {p.ks} cg {p.cg} blocks {p.grid_x(Q.nt_for(min(R, 8))) * p.ks}" if isinstance(p, Q.V3Plan)
                       else f"ks {p.ks} tpb {p.tpb}")
                if isinstance(p, Q.V3Plan) and Q.kin_ok(p, R, glu, False, None):  # TENSORFOLD_GEMV3_KIN=1
                    geo = f"chunks in a block: ks {p.ks} cg {p.cg} blocks {Q.kin_grid(p)} of {32 * p.ks} threads"
                row = dict(model=model, label=label, out=out, inp=inp, R=R, kernel=name, us=us, gbs=gbs,
                           pct=100 * gbs / bw, geo=geo, how=how)
                res.append(row)
                print(f"{model} {label} {out}x{inp} R={R} {name:24s} {us:8.1f} us {gbs:7.0f} GB/s "
                      f"{100 * gbs / bw:5.1f} %  ({geo})", flush=True)
            del x, _x
        del mats, smats
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"gemv3_{commit}.json"), "w") as f:
        json.dump(dict(commit=commit, copy_gbs=bw, pdl=args.pdl, cmp=Q.cmp_mode(), pre=Q.pre_mode(), xq=Q.xq_on(),
                       cmpu=list(Q.cmp_unroll()), rows=res), f, indent=1)


if __name__ == "__main__":
    main()
