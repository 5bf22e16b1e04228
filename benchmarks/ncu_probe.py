"""Launch a few hot kernels once each, eagerly, for Nsight Compute to profile (``benchmarks/gpu_ncu.sh``).

Kernels (MLX affine 4-bit g64, random codes and bf16 scales / biases, x random):
- the decode GEMV the runtime plans (``affine.plan_qgemv``) at one row: the 2B gate+up 12288 x 2048 and down
  2048 x 6144 (the first tensor-core kernel), the 9B gate+up 24576 x 4096 and 27B down 5120 x 17408 / gate+up 34816 x 5120
  (qgemv3), the 9B down 4096 x 12288;
- the prompt GEMM (``gemm.launch_qgemm``, v3: x pre-pass + tensor-core GEMM) at 4,096 rows on the 2B gate+up.

Each is launched twice before a device sync (the first compiles), then ``--reps`` more times; profile the last
launches with ``ncu --launch-skip``. Prints the plan of each shape. No timing here: ncu's numbers are the point.
``--glu``: instead, the 9B gate+up at one row in qgemv's plain and SwiGLU-epilogue forms only (session 17: the
epilogue form streams 22-27 % slower with the same main loop; ptxas gives it 104 registers against 136).

    python benchmarks/ncu_probe.py [--reps 2] [--tiny] [--glu]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def main(argv=None) -> int:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="small shapes (a simulator smoke run of this script)")
    ap.add_argument("--glu", action="store_true", help="the 9B gate+up in qgemv's plain and epilogue forms only")
    a = ap.parse_args(argv)
    from numba import cuda

    from tensorfold.kernels import affine, gemm
    from tensorfold.model import bf16

    rng = np.random.default_rng(0)

    def rand_q(out, inp, group=64):
        P = rng.integers(0, 2**32, (out, inp // 8), dtype=np.uint64).astype(np.uint32)
        S = bf16.from_f32((rng.standard_normal((out, inp // group)) * 0.02).astype(np.float32))
        B = bf16.from_f32((rng.standard_normal((out, inp // group)) * 0.02).astype(np.float32))
        return [cuda.to_device(v) for v in (P, S, B)]

    shapes = (("2B gate+up", 12288, 2048), ("2B down", 2048, 6144), ("9B gate+up", 24576, 4096),
              ("9B down", 4096, 12288), ("27B down", 5120, 17408), ("27B gate+up", 34816, 5120))
    if a.tiny:
        shapes = (("tiny a", 64, 128), ("tiny b", 32, 256))
    if a.glu:
        out, inp = (64, 256) if a.tiny else (24576, 4096)
        W, S, B = rand_q(out, inp)
        p = affine.plan_qgemv(out, inp, 4, 64)
        x = cuda.to_device(rng.standard_normal((1, inp)).astype(np.float32))
        ws = cuda.device_array((max(p.ks, 1), 1, out), np.float32)
        for glu in (False, True):
            y = cuda.device_array((1, out // 2 if glu else out), np.float32)
            print(f"9B gate+up glu={glu}: {p}", flush=True)
            for _ in range(2 + a.reps):
                affine.launch_qgemv(W, S, B, x, y, 4, 64, plan=p, ws=ws if p.ks > 1 else None, rows=1, glu=glu)
            cuda.synchronize()
        return 0
    for label, out, inp in shapes:
        W, S, B = rand_q(out, inp)
        p = affine.plan_qgemv(out, inp, 4, 64)
        x = cuda.to_device(rng.standard_normal((1, inp)).astype(np.float32))
        y = cuda.device_array((1, out), np.float32)
        ws = cuda.device_array(p.workspace_shape or (1,), np.float32)
        print(f"{label}: {p}", flush=True)
        for _ in range(2 + a.reps):
            affine.launch_qgemv(W, S, B, x, y, 4, 64, plan=p, ws=ws, rows=1)
        cuda.synchronize()
    R, out, inp = (32, 64, 128) if a.tiny else (4096, 12288, 2048)
    W, S, B = rand_q(out, inp)
    x = cuda.to_device(rng.standard_normal((R, inp)).astype(np.float32))
    y = cuda.device_array((R, out), np.float32)
    ws = gemm.workspace(R, inp)
    print(f"prompt GEMM 2B gate+up at {R} rows", flush=True)
    for _ in range(2 + a.reps):
        gemm.launch_qgemm(W, S, B, x, y, 4, 64, rows=R, ws=ws)
    cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
