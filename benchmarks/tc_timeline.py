"""Where a first tensor-core GEMV launch's time goes (``affine``'s kernel), phase by phase: its generated source with
``%globaltimer`` stamps added (a diagnostic copy; the library's kernels are untouched), launched back to back
inside a captured CUDA graph with rotated weights, with and without PDL. The first kernel's counterpart of
``qgemv_timeline.py`` (same stamps table, same ``analyse``).

Each warp's lane 0 records, in ns: its start, the PDL wait's return, x ready (the whole-share form's staging
barrier; the wait otherwise), the end of its groups, the reduction barrier's entry and exit, and the kernel's end.
Forms: the shape's plan (``plan``), and with ``--whole`` its whole-share form (``TENSORFOLD_TC_WHOLE``; the same
bits), with ``--half`` also that form with half the share loaded after the wait (``TENSORFOLD_TC_WHOLE_HALF``),
with ``--xf`` also that form with x's fragments made once a block (``TENSORFOLD_TC_XFRAG``; the same bits), each at
one row.

    python3 benchmarks/tc_timeline.py --shapes 4096x4096,2048x2048 --whole --out DIR
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

from qgemv_timeline import NSTAMP, _intrinsics, graph_phases  # noqa: E402


def instrument(src: str, nw: int, whole: bool) -> str:
    """The kernel source with the stamps: a ``tl [warps, NSTAMP]`` int64 argument that lane 0 of a warp writes."""
    lines = src.split("\n")
    out = []
    waited = staged = done = False
    nsync = sum(1 for ln in lines if ln == "    cuda.syncthreads()")
    seen_sync = 0
    for i, ln in enumerate(lines):
        if i == 0:
            assert ln.startswith("def ") and ln.endswith("):"), ln
            out.append(ln[:-2] + ", tl):")
            out.append("    tq0 = gtimer()")
            continue
        if ln == "    pdl_wait()":
            out.append(ln)
            out.append("    tq1 = gtimer()")
            if not whole:
                out.append("    tq2 = tq1")
            waited = True
            continue
        if ln == "    cuda.syncthreads()":
            seen_sync += 1
            if whole and not staged:  # x staged in shared memory
                out.append(ln)
                out.append("    tq2 = gtimer()")
                staged = True
                continue
            if seen_sync == nsync:  # the warps' partial tiles: reduction barrier
                out.append("    tq6 = gtimer()")
                out.append(ln)
                out.append("    tq7 = gtimer()")
                continue
        if waited and not done and (ln.startswith("    red[warp") or ln == "    pdl_trigger()"
                                    or (nw == 1 and ln.startswith("    if o0"))):
            out.append("    tq3 = gtimer()")
            done = True
        out.append(ln)
    while out and not out[-1].strip():
        out.pop()
    assert waited and done, "stamps not placed"
    if nw == 1:
        out.insert(len(out), "    tq6 = tq3")
        out.append("    tq7 = tq3")
    body = ["    tq4 = gtimer()",
            "    if lane == 0:",
            f"        gw = ((kz * cuda.gridDim.y + cuda.blockIdx.y) * cuda.gridDim.x + cuda.blockIdx.x) * {nw} + warp",
            "        tl[gw, 0] = tq0", "        tl[gw, 1] = tq1", "        tl[gw, 2] = tq2",
            "        tl[gw, 3] = tq3", "        tl[gw, 4] = tq4", "        tl[gw, 5] = tq3",
            "        tl[gw, 6] = smid()", "        tl[gw, 7] = 1",
            "        tl[gw, 8] = tq6", "        tl[gw, 9] = tq7"]
    return "\n".join(out + body) + "\n"


def build(plan, whole: int, half: bool = False, xf: bool = False):
    """(kernel, warps, u): the instrumented first kernel of ``plan`` at one row as ``launch_qgemv`` runs it
    (``whole``: its whole-share form, with ``half``: half the share loaded after the wait as under
    ``TENSORFOLD_TC_WHOLE_HALF=1``; otherwise a plan's ``mw`` warps of several K ranges each)."""
    from numba import cuda

    from tensorfold.kernels import affine as A
    from tensorfold.kernels import qgemv as Q

    gtimer, smid = _intrinsics()
    nw, vs, u, rg = A.tc_geometry(plan, whole)
    wpre = u // 2 if half and whole and u >= 2 else 0
    name = f"tlc_{plan.out}x{plan.inp}_w{nw}_m{plan.mt}_u{u}_wh{whole}_vs{vs}_rg{rg}_pre{wpre}_xf{int(xf)}"
    src = A._gen_tc_source(name, plan.bits, plan.group, 1, nw, plan.mt, u, "bf16", plan.pipe,
                           1 if whole else plan.depth, whole=whole, vs=vs, rg=rg, wpre=wpre, xf=xf)
    src = instrument(src, nw, bool(whole))
    extra = dict(A._tc_helpers(plan.bits, plan.group, lop3=xf), _tc_mma2=A._tc_mma2, _tc_epi=A._tc_epi,
                 _tc_sb_bf16=A._tc_sb_bf16, _tc_sb_f=A._tc_sb_f, mma_bf16=A.mma_bf16, swiglu=A.swiglu,
                 _ldf_h8=A._ldf_h8, _bf_hi=Q._bf_hi, gtimer=gtimer, smid=smid)
    fn = A._build(name, src, extra)
    kw = {} if nw <= 8 else {"launch_bounds": 32 * nw}
    return cuda.jit(**kw)(fn), nw, u


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x4096,2048x2048", help="OUTxIN list")
    ap.add_argument("--whole", action="store_true", help="the whole-share form too")
    ap.add_argument("--half", action="store_true", help="and the whole form with half its share after the wait")
    ap.add_argument("--xf", action="store_true", help="and the whole form with x's fragments made once a block")
    ap.add_argument("--forms", default="", help='more geometries of the plan\'s variant, "mt,warps[,w[,xf]]" '
                    '";"-separated (w: 1 for their whole-share form; xf: 1 for its x fragments made once a block), '
                    'e.g. "2,16,1;1,8,1,1"')
    ap.add_argument("--n", type=int, default=24, help="launches in a graph")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    import bench_kernels as bk
    from tensorfold.kernels import affine as A

    ctx = bk._ctx()
    cuda = ctx["cuda"]
    try:
        from cuda.core import Device
    except ImportError:
        from cuda.core.experimental import Device
    dev = Device()
    dev.set_current()
    stream = dev.create_stream()
    report = {"commit": os.environ.get("TF_COMMIT", "?"), "shapes": {}}
    for spec in [s for s in args.shapes.split(",") if s]:
        out, inp = (int(v) for v in spec.split("x"))
        plan = A.plan_tc(out, inp, 4, 64)
        wbytes, mats = bk.affine_copies(ctx, out, inp, 4, 64)
        x, _x = ctx["rand_f32"]((1, inp))
        res = {"plan": f"{plan.variant} nw {plan.tpb // 32} mw {plan.mw} mt {plan.mt} u {plan.u} ks {plan.ks}",
               "MB": wbytes / 1e6}
        forms = [("plan", 0)]
        if args.whole:  # the value tc_whole gives these bf16 arrays
            pw = inp // 64 // (plan.ks * (plan.tpb // 32))
            forms.append(("whole", 8 if pw % 8 == 0 else 1))
            if args.half:
                forms.append(("whole half", forms[1][1]))
            if args.xf:
                forms.append(("whole xf", forms[1][1]))
        plans = {"plan": plan, "whole": plan, "whole half": plan, "whole xf": plan}
        for f in [f for f in args.forms.split(";") if f]:
            mt, nw, *w = (int(v) for v in f.split(","))
            p2 = dataclasses.replace(plan, mt=mt, tpb=32 * nw, mw=0)
            pw = inp // 64 // (p2.ks * nw)
            name = f"mt{mt} nw{nw}" + (" whole" if w and w[0] else "") + (" xf" if len(w) > 1 and w[1] else "")
            plans[name] = p2
            forms.append((name, (8 if pw % 8 == 0 else 1) if w and w[0] else 0))
        ys = {}
        for form, whole in forms:
            plan = plans[form]
            k, nw, u = build(plan, whole, form.endswith(" half"), xf=form.endswith(" xf"))
            y = cuda.device_array((plan.ks, 1, out), dtype="float32")
            res.setdefault("geometry", {})[form] = f"mt {plan.mt} nw {nw} ks {plan.ks} u {u}"
            gx = -(-out // (16 * plan.mt))
            nwarps = gx * plan.ks * nw
            tls = cuda.to_device(np.zeros((args.n, nwarps, NSTAMP), np.int64))

            def go(s, i, k=k, y=y, tls=tls, gx=gx, nw=nw):
                W, S, B = mats[i % len(mats)][:3]
                k[(gx, 1, plan.ks), 32 * nw, s](W, S, B, x, y, np.int32(1), np.int32(0), np.int32(0), tls[i])

            go(0, 0)
            cuda.synchronize()
            ys[form] = y.copy_to_host()
            r = {"u": u, "whole": whole}
            r.update(graph_phases(dev, stream, go, tls, args.n))
            res[form] = r
            print(json.dumps({spec: {form: r}}, indent=1), flush=True)
            del tls
        plan = plans["plan"]
        if "whole" in ys:  # the first launch used weights 0 in both forms: the same bits
            res["same bits"] = bool(np.array_equal(ys["plan"].view(np.uint32), ys["whole"].view(np.uint32)))
            print(f"{spec}: same bits {res['same bits']}", flush=True)
        if "whole half" in ys:
            res["same bits whole half"] = bool(np.array_equal(ys["whole"].view(np.uint32),
                                                              ys["whole half"].view(np.uint32)))
            print(f"{spec}: whole half same bits as whole {res['same bits whole half']}", flush=True)
        if "whole xf" in ys:
            res["same bits whole xf"] = bool(np.array_equal(ys["whole"].view(np.uint32),
                                                            ys["whole xf"].view(np.uint32)))
            print(f"{spec}: whole xf same bits as whole {res['same bits whole xf']}", flush=True)
        for nm in [n for n in ys if n.endswith(" whole xf")]:  # a geometry's xf form against its plain form
            if nm[:-9] in ys:
                same = bool(np.array_equal(ys[nm[:-9]].view(np.uint32), ys[nm].view(np.uint32)))
                res[f"same bits {nm}"] = same
                print(f"{spec}: {nm} same bits as its plain form {same}", flush=True)
        for nm in [n for n in ys if n.endswith(" whole")]:  # a geometry's whole form against its plain form
            if nm[:-6] in ys:
                same = bool(np.array_equal(ys[nm[:-6]].view(np.uint32), ys[nm].view(np.uint32)))
                res[f"same bits {nm}"] = same
                print(f"{spec}: {nm} same bits as its plain form {same}", flush=True)
        report["shapes"][spec] = res
        del mats
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tc_timeline.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
