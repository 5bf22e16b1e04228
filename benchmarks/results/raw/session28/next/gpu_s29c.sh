#!/usr/bin/env bash
# Prepared in session 28 (one GPU, under 10 minutes): TENSORFOLD_GEMV_V3_LOG2=24 (the 2^24-code weights on qgemv:
# 9B out_proj / o_proj 4096x4096, 32 launches a step at about 9.1 us on the first kernel; the 2B gate+up and
# in_all). A plan-time switch, so one process per side (bench_decode's --ab-env cannot alternate it). With session
# 28's qgemv prologue, qgemv at 4096x4096 should be near 7 us (8.6 in session 22 before two changes). Prediction: 9B
# one stream +2-4 %; 2B unknown (qgemv lost at 2B shapes in session 16).
. benchmarks/_dec.sh
out_dir s29c
t0=$SECONDS
for g in 9b 2b; do
  dec ${g}_base $g --prompts ""
  TENSORFOLD_GEMV_V3_LOG2=24 dec ${g}_l24 $g --prompts ""
  pack
done
echo "== done at $((SECONDS - t0)) s"
