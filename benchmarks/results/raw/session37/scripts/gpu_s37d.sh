#!/usr/bin/env bash
# Session 37, call 2: every GPU test still owed, side by side in one call (compile-bound; nothing is timed).
# (1) the kernel GPU tier of the fused norms (gpu_s37b.sh), (2) the runner's exactness tests with both fusions on
# (gpu_s37b.sh), (3) the graph tests, which cover the greedy graphs (on by default since session 35, never run on
# a GPU; gpu_s36a.sh part 2). Predictions: pass.
. benchmarks/_dec.sh
out_dir s37d
t0=$SECONDS
ptest fuse_k 540 tests/kernels/test_gpu_norm_fuse.py -s &
ptest graphs 540 tests/runtime/test_gpu_graphs.py tests/runtime/test_gpu_graphs_large.py -s &
export TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=1
ptest fuse_rt 560 tests/runtime/test_gpu_runtime.py -k "fused_norm or window_tree or alone_vs_batched" -s &
unset TENSORFOLD_NORM_FUSE TENSORFOLD_GNORM_FUSE
wait
pack
echo "== done at $((SECONDS - t0)) s"
