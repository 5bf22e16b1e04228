#!/usr/bin/env bash
# Prepared at the end of session 37 (its device budget was spent: 9 s left). The GPU tier of the final code
# (e1d6cf4 or later), side by side (compile-bound, nothing timed): run-ahead at 2B with graphs (test_gpu_ahead),
# the engine over the GPU backend, which now runs ahead by default (test_backend_parity_gpu), the add + RMSNorm
# fusion's kernel tier with the corrected launch path (its 27B gate|up case failed in s37 call 2 on the old path)
# and runner test, the fused GDN kernels (delta_rule.py restored to 8249dcb's file) and the graph tests.
# Then run-ahead's 27B decode A/B (gpu_s37h.sh GEOMS=27b). Predictions: every test passes; 27B +0 to +1 %.
. benchmarks/_dec.sh
out_dir s38a
t0=$SECONDS
ptest ahead 420 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest fuse 420 tests/kernels/test_gpu_norm_fuse.py tests/kernels/test_gpu_fused.py -s &
ptest graphs 420 tests/runtime/test_gpu_graphs.py tests/runtime/test_gpu_runtime.py -k "graph or fused_norm" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
