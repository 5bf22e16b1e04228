"""Offline evidence (no GPU): the decode plans of every 4-bit g64 projection shape of the 2B / 9B / 27B geometries
and the md5 of the kernel sources they generate (both n-tiles), plus the prompt GEMM's default (dq) sources, for the
tree given as argv[1]. Two trees print the same lines when their default GPU kernels are the same code.

    python plan_src_md5.py TREE
"""
import hashlib
import os
import sys

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
sys.path.insert(0, sys.argv[1])
from tensorfold.kernels import affine as A, gemm as G, qgemv as Q  # noqa: E402

SHAPES = {  # (out, in) of the decode projections and heads
    "2B": [(8224, 2048), (2048, 2048), (5120, 2048), (12288, 2048), (2048, 6144), (248320, 2048)],
    "9B": [(12352, 4096), (4096, 4096), (10240, 4096), (24576, 4096), (4096, 12288), (248320, 4096)],
    "27B": [(16480, 5120), (5120, 6144), (14336, 5120), (34816, 5120), (5120, 17408), (248320, 5120)],
}
md5 = lambda s: hashlib.md5(s.encode()).hexdigest()[:12]  # noqa: E731
for model, shapes in SHAPES.items():
    for o, i in shapes:
        p = A.plan_qgemv(o, i, 4, 64)
        for nt in (1, 2):
            if isinstance(p, Q.V3Plan):
                src = Q._gen_source("k", 4, 64, nt, p.nw, p.mt, p.cg, p.u, p.depth)
                what = f"qgemv3 nw{p.nw} cg{p.cg} u{p.u} d{p.depth}"
            else:
                src = A._gen_tc_source("k", 4, 64, nt, p.tpb // 32, p.mt, p.u, "bf16", p.pipe, p.depth)
                what = f"tc {p.variant} nw{p.tpb // 32} mt{p.mt} u{p.u} ks{p.ks} d{p.depth}"
            print(f"{model} {o}x{i} nt{nt}: {what} {md5(src)}")
for bits, group in ((4, 64), (8, 128), (4, 128)):
    src = G._gen_source3("k", bits, group, "bf16", G.geo3(bits, group), G.XLO, G.DQ)
    print(f"prompt GEMM b{bits} g{group} dq={G.DQ}: {md5(src)} xprep2 {md5(G._gen_xprep2('k', bits))}")
