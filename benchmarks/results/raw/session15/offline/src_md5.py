import os, sys, hashlib
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
sys.path.insert(0, sys.argv[1])
from tensorfold.kernels import qgemv as Q, gemm as G
out = {}
for (o, i) in ((24576, 4096), (4096, 12288), (5120, 17408), (12352, 4096), (248320, 2048)):
    p = Q.plan(o, i, 4, 64)
    for nt in (1, 2):
        src = Q._gen_source("k", 4, 64, nt, p.nw, p.mt, p.cg, p.u, p.depth)
        out[f"qgemv3 {o}x{i} nt{nt}"] = hashlib.md5(src.encode()).hexdigest()
for bits, group in ((4, 64), (8, 128), (4, 128)):
    src = G._gen_source3("k", bits, group, "bf16", G.geo3(bits, group))
    out[f"tc3gemm b{bits} g{group}"] = hashlib.md5(src.encode()).hexdigest()
    out[f"xprep2 b{bits}"] = hashlib.md5(G._gen_xprep2("k", bits).encode()).hexdigest()
for k, v in out.items(): print(k, v)
