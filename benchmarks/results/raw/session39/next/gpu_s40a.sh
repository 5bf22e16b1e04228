#!/usr/bin/env bash
# Prepared in session 39 (its device time ran out). The GPU tier of 8da8817, side by side (compile-bound, nothing
# timed): run-ahead + backend parity with the defaults; run-ahead again with the ids chain inside the step graphs
# (TENSORFOLD_CHAIN_GRAPH=1, timed +0.5 % at 2B in s39: make it the default if this passes); the graph tests; the
# attention kernels after the fused merge's revert; the first kernel's L2 prefetch test. Predictions: all pass.
. benchmarks/_dec.sh
out_dir s40a
t0=$SECONDS
ptest ahead 420 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
TENSORFOLD_CHAIN_GRAPH=1 ptest ahead_chain 420 tests/runtime/test_gpu_ahead.py -s &
ptest graphs 420 tests/runtime/test_gpu_graphs.py -s &
ptest attn 420 tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py -k "not variants" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
