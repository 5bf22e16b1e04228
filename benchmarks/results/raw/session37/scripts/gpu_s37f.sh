#!/usr/bin/env bash
# Session 37, call 6: the GPU tests of the final code (after the gated-norm fusion's removal): the kernel tier of the
# add + RMSNorm fusion (the test now launches swept weights through qgemv.launch, as the runner does; the 27B
# gate|up case failed in call 2 on the other path), the runner's fused-norm logits test, and the fused GDN step
# (delta_rule.py back to its pre-session-36 source). Predictions: pass.
. benchmarks/_dec.sh
out_dir s37f
t0=$SECONDS
ptest fuse_k 330 tests/kernels/test_gpu_norm_fuse.py -s &
ptest fuse_rt 330 tests/runtime/test_gpu_runtime.py -k "fused_norm" -s &
ptest gdn 330 tests/kernels/test_gpu_fused.py -s &
wait
pack
echo "== done at $((SECONDS - t0)) s"
