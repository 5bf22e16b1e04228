"""md5 of the generated decode-GEMV kernel sources the default plans launch (2B / 9B / 27B shapes, 4-bit g64, one and
two n-tiles, plain and SwiGLU-epilogue forms) and of the hand-written kernel files' sources, at the checkout this
runs in. Run at ad050ef (the code session 17's call 5 ran on the H200) and at a later commit: equal lines mean the
later commit launches the same kernel code. Simulator import, no GPU:

    NUMBA_ENABLE_CUDASIM=1 python benchmarks/results/raw/session17/offline/gen_src_md5.py
"""
import hashlib
import inspect

from tensorfold.kernels import activations, affine as A, delta_rule, qgemv as Q

SHAPES = [(12288, 2048), (8224, 2048), (2048, 6144), (2048, 2048), (5120, 2048), (248320, 2048),
          (24576, 4096), (12352, 4096), (10240, 4096), (4096, 12288), (4096, 4096), (248320, 4096),
          (34816, 5120), (16480, 5120), (14336, 5120), (5120, 17408), (5120, 6144), (248320, 5120)]


def md5(s):
    return hashlib.md5(s.encode()).hexdigest()[:12]


for out, inp in SHAPES:
    p = A.plan_qgemv(out, inp, 4, 64)
    for nt in (1, 2):
        for glu in ((False, True) if A.glu_ok(p, out) else (False,)):
            if isinstance(p, Q.V3Plan):
                src = Q._gen_source("k", 4, 64, nt, p.nw, p.mt, p.cg, p.u, p.depth, p.stages_for(nt), p.pb,
                                    glu=glu)
            else:
                src = A._gen_tc_source("k", 4, 64, nt, p.tpb // 32, p.mt, p.u, "bf16", p.pipe, p.depth, glu)
            print(f"{out}x{inp} nt{nt} glu{int(glu)} {type(p).__name__} {md5(src)}")
for f in (activations.swiglu, activations.silu_mul_k, activations.silu_mul_fused_k):
    print(f.__name__ if hasattr(f, "__name__") else f, md5(inspect.getsource(getattr(f, "py_func", f))))
print("delta_rule._make_recurrent", md5(inspect.getsource(delta_rule._make_recurrent)))
