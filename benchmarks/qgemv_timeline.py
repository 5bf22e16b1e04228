"""Where a decode GEMV's time goes, phase by phase, on the H200: qgemv's generated source with ``%globaltimer``
stamps added (a diagnostic copy; the library's kernels are untouched), launched back to back inside a captured CUDA
graph (rotated weights, as ``bench_gemv3``), with and without PDL.

Each warp's lane 0 records, in ns: its start (t0), the PDL wait's return (t1), the end of the x preparation (t2),
the end of its first tile (t5), the end of its main loop (t3) and the end of the kernel's split-K completion (t4),
plus its SM. A launch's phases are reported relative to its earliest start, and the gap to the previous launch's
last end: what the ~8 µs a qgemv launch spends beyond a plain read of its bytes is made of.

    python3 benchmarks/qgemv_timeline.py --shapes 24576x4096g,4096x12288 --rows 1,8 --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")

NSTAMP = 10  # t0 t1 t2 t3 t4 t5 smid ntw t6 t7


def _intrinsics():
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    @intrinsic
    def gtimer(typingctx):
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %globaltimer;", "=l",
                               side_effect=True)
            return builder.call(asm, [])

        return types.int64(), codegen

    @intrinsic
    def smid(typingctx):
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(32), []), "mov.u32 $0, %smid;", "=r", side_effect=True)
            return builder.call(asm, [])

        return types.int32(), codegen

    return gtimer, smid


def instrument(src: str, nw: int) -> str:
    """qgemv's kernel source with the stamps: a ``tl [warps, NSTAMP]`` int64 argument, lane 0 of a warp writes."""
    lines = src.split("\n")
    out = []
    seen_acc = False
    for i, ln in enumerate(lines):
        if i == 0:
            assert ln.startswith("def ") and ln.endswith("R):"), ln
            out.append(ln[:-2] + ", tl):")
            out.append("    tq0 = gtimer()")
            out.append("    tq5 = np.int64(0)")
            continue
        if ln == "    pdl_wait()":
            out.append(ln)
            out.append("    tq1 = gtimer()")
            continue
        if ln == "    cuda.syncthreads()" and not any(o.startswith("    tq6 =") for o in out):
            out.append("    tq6 = gtimer()")
            out.append(ln)
            out.append("    tq7 = gtimer()")
            continue
        if not seen_acc and ln.startswith("    acc0_0_") and ln.endswith("= np.float32(0.0)"):
            out.append("    tq2 = gtimer()")
            seen_acc = True
        if ln in ("    pdl_trigger()", "    if ks > 1:") and "tq3" not in "".join(out[-3:]) and seen_acc:
            if not any(o.startswith("    tq3 =") for o in out):
                out.append("    tq3 = gtimer()")
        if ln.startswith("        obc = obn"):
            out.append("        if jt == 0:")
            out.append("            tq5 = gtimer()")
        out.append(ln)
    while out and not out[-1].strip():
        out.pop()
    body = ["    tq4 = gtimer()",
            "    if lane == 0:",
            f"        gw = (kz * cuda.gridDim.x + bx) * {nw} + warp",
            "        tl[gw, 0] = tq0", "        tl[gw, 1] = tq1", "        tl[gw, 2] = tq2",
            "        tl[gw, 3] = tq3", "        tl[gw, 4] = tq4", "        tl[gw, 5] = tq5",
            "        tl[gw, 6] = smid()", "        tl[gw, 7] = ntw",
            "        tl[gw, 8] = tq6", "        tl[gw, 9] = tq7"]
    if not any(o.startswith("    tq3 =") for o in out):
        body.insert(0, "    tq3 = gtimer()")
    return "\n".join(out + body) + "\n"


def _cu_tag(cu) -> str:
    """``qgemv.cmp_unroll()``'s value as a name part: ``auto`` or ``EPLxKU``"""
    return cu if isinstance(cu, str) else f"{cu[0]}x{cu[1]}"


def build(p, glu: bool, rows: int = 1):
    """(kernel, nt): the instrumented register-ring kernel of swept plan ``p`` for launches of ``rows`` rows (1-8,
    one n-tile with bf16-only x: xh 2 for 1-4 rows, 1 for 5-8; 9-16, two n-tiles, under ``qgemv.rows16_on``, and
    17-32, four, under ``rows32_on``, at ``depth_for``'s depth), launch bounds as ``qgemv.get_kernel`` gives the
    one-n-tile kernels."""
    from numba import cuda

    from tensorfold.kernels import qgemv as Q
    from tensorfold.kernels._codegen import single_assignment

    gtimer, smid = _intrinsics()
    nt, xm = Q.nt_for(rows, p.xh), Q.xmode(rows, p.xh)
    most = 8 if not (p.xh and Q.rows16_on()) else (32 if Q.rows32_on() else 16)
    assert rows <= most, f"a launch takes at most {most} rows here (16 with bf16 x under R16, 32 under R32 too)"
    cu = Q.unroll_for(glu, p.ks)  # the unroll and the predicated loads the runtime's launch takes
    cp = Q.cpred_for(xm) and not glu and Q.cmp_mode() == 2
    rl = Q.rst_mode() == "late"
    depth = p.depth_for(nt)
    name = (f"tlq_{p.out}x{p.inp}_{int(glu)}_r{rows}_d{depth}_c{Q.cmp_mode()}_e{Q.pre_mode()}_q{int(Q.xq_on())}"
            f"_v{_cu_tag(cu)}{'_cp' if cp else ''}{'' if rl else '_re'}")
    src = Q._gen_source(name, p.bits, p.group, nt, p.nw, p.mt, p.cg, p.u, depth, 0, p.pb, 0, 0, 1, glu, False,
                        True, xm, False, Q.cmp_mode(), Q.pre_mode(), Q.xq_on(), cu, None, cp, rl)
    src = single_assignment(instrument(src, p.nw))
    glb = {k: getattr(Q, k) for k in ("mma_bf16", "pack_bf16x2", "split_bf16x2", "bf16_to_f32", "_bf_hi", "ld_w1",
                                      "ld_w2", "ld_w4", "ld_cg_f32", "ld_cg_f32_if", "ldg_f32x4_2d", "andor_m4",
                                      "andor_m2", "swiglu", "pdl_trigger", "pdl_wait", "warp_sum_i", "quad_sum",
                                      "pf_l2")}
    glb.update(cuda=cuda, np=np, _TWO23=np.float32(8388608.0), gtimer=gtimer, smid=smid)
    exec(compile(src, f"<tl:{name}>", "exec"), glb)
    fn = glb[name]
    fn.__module__ = "tensorfold.kernels.qgemv"
    kw = {"launch_bounds": (32 * p.nw, 3)} if Q._lb_on() and nt == 1 else {}
    try:
        k = cuda.jit(**kw)(fn)
    except TypeError:
        k = cuda.jit(fn)
    return k, nt


def analyse(T: np.ndarray, prev_end) -> dict:
    """Phase figures (µs) of one launch's stamps ``T [warps, NSTAMP]``; ``prev_end``: the previous launch's last
    t4 (ns) or None."""
    t0 = T[:, 0].astype(np.float64)
    base = t0.min()
    rel = {k: (T[:, j].astype(np.float64) - base) / 1e3 for k, j in (("start", 0), ("wait", 1), ("xprep", 2),
                                                                       ("loop", 3), ("end", 4), ("tile1", 5),
                                                                       ("items", 8), ("bar1", 9))}
    live = T[:, 7] > 0
    q = lambda a: [round(float(np.percentile(a, v)), 2) for v in (0, 50, 90, 100)]  # noqa: E731
    d = {"warps": int(len(T)), "live": int(live.sum()),
         "start (min/med/p90/max)": q(rel["start"]),
         "wait returns": q(rel["wait"]),
         "x prep done": q(rel["xprep"]),
         "first tile done": q(rel["tile1"][live]) if live.any() else None,
         "loop done": q(rel["loop"]),
         "kernel end": q(rel["end"]),
         "wait - start": q(rel["wait"] - rel["start"]),
         "x prep": q(rel["xprep"] - rel["wait"]),
         "  x items (loads + packing)": q(rel["items"] - rel["wait"]),
         "  first barrier": q(rel["bar1"] - rel["items"]),
         "  group sums + barrier": q(rel["xprep"] - rel["bar1"]),
         "loop": q(rel["loop"] - rel["xprep"]),
         "completion": q(rel["end"] - rel["loop"]),
         "sms": int(len(np.unique(T[:, 6])))}
    # the loops' spread: per tile count, and per SM (median loop time of an SM's warps with the modal tile count)
    loopd = rel["loop"] - rel["xprep"]
    for nt_ in np.unique(T[:, 7]):
        d[f"loop, {int(nt_)} tiles"] = q(loopd[T[:, 7] == nt_])
    mode = np.bincount(T[:, 7].astype(np.int64)).argmax()
    per_sm = [float(np.median(loopd[(T[:, 6] == sm) & (T[:, 7] == mode)])) for sm in np.unique(T[:, 6])
              if ((T[:, 6] == sm) & (T[:, 7] == mode)).any()]
    d[f"loop by SM ({int(mode)} tiles): SM medians"] = q(np.array(per_sm))
    d["loop end by SM: SM max - SM min (median over SMs)"] = round(float(np.median(
        [np.ptp(rel["loop"][T[:, 6] == sm]) for sm in np.unique(T[:, 6])])), 2)
    if prev_end is not None:
        d["prev end -> this start (us)"] = round((base - prev_end) / 1e3, 2)
        d["prev end -> wait min (us)"] = round(float((T[:, 1].min() - prev_end) / 1e3), 2)
    return d


def graph_phases(dev, stream, go, tls, n: int) -> dict:
    """``go(stream, i)`` launched ``n`` times in a captured graph, without and with PDL, each graph replayed three
    times; ``tls [n, warps, NSTAMP]`` holds the last replay's stamps. Per form: µs a launch over the graph, and the
    phases of the middle launch and the one after it."""
    from tensorfold.kernels import _pdl

    res = {}
    for label, pdl in (("graph", False), ("graph+pdl", True)):
        gb = dev.create_graph_builder()
        gb.begin_building()
        with _pdl.scope(pdl):
            for i in range(n):
                go(gb, i)
        graph = gb.end_building().complete()
        for _ in range(3):
            graph.launch(stream)
            stream.sync()
        T = tls.copy_to_host()
        ends = T[:, :, 4].max(axis=1)
        starts = T[:, :, 0].min(axis=1)
        mid = n // 2
        res[label] = {"us per launch": round(float((ends[-1] - starts[0]) / 1e3 / n), 2),
                      "launch mid": analyse(T[mid], ends[mid - 1]),
                      "launch mid+1": analyse(T[mid + 1], ends[mid])}
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="24576x4096g,24576x4096,4096x12288,34816x5120g,5120x17408,12352x4096",
                    help="OUTxIN, a trailing g: the SwiGLU epilogue form")
    ap.add_argument("--n", type=int, default=24, help="launches in a graph")
    ap.add_argument("--rows", default="1", help="comma-separated row counts (1-8; 1-16 under "
                    "TENSORFOLD_GEMV3_R16, the default; 1-32 under TENSORFOLD_GEMV3_R32) to time each shape at")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    import bench_kernels as bk
    from tensorfold.kernels import qgemv as Q

    ctx = bk._ctx()
    cuda = ctx["cuda"]
    cnt = Q.counters()
    try:
        from cuda.core import Device
    except ImportError:
        from cuda.core.experimental import Device
    dev = Device()
    dev.set_current()
    stream = dev.create_stream()
    report = {"commit": os.environ.get("TF_COMMIT", "?"), "cmp": Q.cmp_mode(), "pre": Q.pre_mode(),
              "xq": Q.xq_on(), "rows": args.rows, "shapes": {}}
    rows_list = [int(r) for r in args.rows.split(",") if r]
    for spec in [s for s in args.shapes.split(",") if s]:
        glu = spec.endswith("g")
        out, inp = (int(v) for v in spec.rstrip("g").split("x"))
        p0 = Q.plan(out, inp, 4, 64)
        p = dataclasses.replace(p0, sw=2 if glu else 1)
        wbytes, mats = bk.affine_copies(ctx, out, inp, 4, 64)
        sw = [(Q.sweep_pack_device(m[0], m[1], m[2], 4, 64, p.u, glu=glu, per=p.per), m[1], m[2]) for m in mats]
        del mats
        for rows in rows_list:
            k, nt = build(p, glu, rows)
            x, _x = ctx["rand_f32"]((rows, inp))
            y = cuda.device_array((rows, out // 2 if glu else out), dtype="float32")
            ws = (cuda.device_array((p.ks, rows, out), dtype="float32") if p.ks > 1
                  else cuda.device_array((1, 1, 1), np.float32))
            gx = p.grid_x(nt)
            nwarps = gx * p.ks * p.nw
            tls = cuda.to_device(np.zeros((args.n, nwarps, NSTAMP), np.int64))
            xm = Q.xmode(rows, p.xh)
            dyn = Q.xb_bytes(p.group, p.cg, nt) if Q.xb_dynamic(p.group, p.cg, nt, xm, 0) else 0

            def go(s, i, k=k, x=x, y=y, ws=ws, tls=tls, gx=gx, dyn=dyn, rows=rows):
                W, S, B = sw[i % len(sw)]
                k[(gx, p.ks), p.tpb, s, dyn](W, S, B, x, y, ws, cnt, np.int32(rows), tls[i])

            go(0, 0)
            cuda.synchronize()
            res = {"plan": f"nw {p.nw} mt {p.mt} cg {p.cg} u {p.u} ks {p.ks} grid {gx}x{p.ks}", "MB": wbytes / 1e6,
                   "rows": rows}
            res.update(graph_phases(dev, stream, go, tls, args.n))
            key = spec if rows == 1 else f"{spec}@{rows}"
            report["shapes"][key] = res
            print(json.dumps({key: res}, indent=1), flush=True)
            del tls
        del sw
    os.makedirs(args.out, exist_ok=True)
    tag = f"c{Q.cmp_mode()}_e{Q.pre_mode()}_q{int(Q.xq_on())}_v{_cu_tag(Q.cmp_unroll())}"
    with open(os.path.join(args.out, f"qgemv_timeline_{tag}.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
