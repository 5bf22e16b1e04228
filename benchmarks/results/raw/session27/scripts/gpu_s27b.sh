#!/usr/bin/env bash
# Session 27, call 2 (one GPU): the batched split-K completion (TENSORFOLD_GEMV3_CMP=2, the new default) against
# the one-tile-at-a-time form (CMP=1). Call 1's timeline: a qgemv kernel ended 4-9 us after its last main loop.
# 1. timelines (with the x preparation split into loads / barrier / sums) under both; 2. bench_gemv3 at the 9B /
# 27B gate+up (SwiGLU) and down shapes, 1 / 8 rows, both; 3. 9B decode A/B; 4. the qgemv GPU tests (CMP=2).
. benchmarks/_dec.sh
out_dir s27b
t0=$SECONDS
SH=24576x4096g,4096x12288,34816x5120g,5120x17408,12352x4096
for c in 2 1; do
TENSORFOLD_GEMV3_CMP=$c timeout 110 python3 benchmarks/qgemv_timeline.py --shapes $SH --out "$R" >"$R/timeline_c$c.txt" 2>&1
echo "== timeline c$c rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/timeline_c$c.txt" | head -12; pack
done
for c in 2 1; do
TENSORFOLD_GEMV3_CMP=$c timeout 150 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 --rows 1,8 --swept --glu \
    --only-sw --no-old --out "$R/g3_c$c" >"$R/gemv3_c$c.txt" 2>&1
echo "== gemv3 c$c rc $? at $((SECONDS - t0)) s"; grep -h " us " "$R/gemv3_c$c.txt" | head -16; pack
done
for c in 2 1; do
TENSORFOLD_GEMV3_CMP=$c dec 9b_c$c 9b --prompts ""
pack
done
ptest qgemv 150 tests/kernels/test_gpu_qgemv.py
pack
echo "== done at $((SECONDS - t0)) s"
