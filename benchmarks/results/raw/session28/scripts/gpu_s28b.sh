#!/usr/bin/env bash
# Session 28, call 2 (one GPU, about 9 minutes). First the GPU tests that session 27's defaults have not met on a
# GPU (the fused GDN norm's one-round-trip loads, the qgemv prefetch / mid-shape / deferred tests, the runtime's
# exactness tier: window == steps, alone == beside, graph == eager), side by side (compiles are CPU-bound; nothing
# timed). Then TENSORFOLD_GEMV_V3_LOG2=24 (2^24-code weights on qgemv: 9B out_proj / o_proj 4096x4096, 2B gate+up
# and in_all) in 2B decode, with $QENV (call 1's winner) applied to both sides. Prediction: 9B +2-3 % one stream
# (32 launches x ~2 us of a 2.8 ms step); 2B unknown (qgemv lost at 2B shapes in session 16, before the swept layout).
. benchmarks/_dec.sh
out_dir s28b
t0=$SECONDS
F=tests/kernels/test_gpu_qgemv.py
ptest qb 200 $F -k "prefetch or mid_shapes or deferred" &
ptest fused 200 tests/kernels/test_gpu_fused.py &
ptest runtime 300 tests/runtime/test_gpu_runtime.py &
wait
echo "== tests at $((SECONDS - t0)) s"; pack
export ${QENV:-TENSORFOLD_GEMV3_PRE=1}
for g in 2b 9b; do
if [ $((SECONDS - t0)) -lt 470 ]; then
dec ${g}_base $g --prompts ""
TENSORFOLD_GEMV_V3_LOG2=24 dec ${g}_l24 $g --prompts ""
pack
fi
done
echo "== done at $((SECONDS - t0)) s"
