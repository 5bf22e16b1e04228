#!/usr/bin/env bash
# Prepared in session 36: (1) the kernel GPU tier of the fused norms at the real shapes (fused == standalone + GEMV,
# bit for bit; side by side with (2), both compile-bound). (2) The runner's fused norms at 2B (default plans, and
# every linear on qgemv): prompt, one-row steps and a 6-stream step give the same logits with and without them;
# the exactness tests that compare one-row steps against multi-row forwards, run with the fusion on (a one-row step
# fuses, a window or a multi-stream step does not: these now compare the two paths).
# Predictions: pass. 27B decode is in gpu_s37c.sh.
. benchmarks/_dec.sh
out_dir s37b
t0=$SECONDS
ptest fuse_k 400 tests/kernels/test_gpu_norm_fuse.py -s &
export TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=1  # fused_norm sets its own; the others run fused
ptest fuse_rt 560 tests/runtime/test_gpu_runtime.py -k "fused_norm or window_tree or alone_vs_batched" -s &
unset TENSORFOLD_NORM_FUSE TENSORFOLD_GNORM_FUSE
wait
pack
echo "== done at $((SECONDS - t0)) s"
