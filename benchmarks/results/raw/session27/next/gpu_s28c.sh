#!/usr/bin/env bash
# Prepared in session 27 (one GPU, about 5 minutes): move the 2^24-code weights onto qgemv
# (TENSORFOLD_GEMV_V3_LOG2=24: the 9B out_proj / o_proj 4096x4096, 32 launches a step at about 9.1 us on the first
# kernel; the 2B gate+up 12288x2048 and in_all 8224x2048). Session 22 timed 4096x4096 at 8.6 (qgemv cg 16) vs
# 10.6 us (pipe2) at one row, before the batched completion. Prediction: 9B one stream +2-3 % (32 x 2 us of a
# 2.8 ms step); 2B unknown (session 16 found qgemv slower at 2B shapes, before the swept layout and the batched
# completion). Decode at 1 / 8 streams, default then LOG2=24, 9B and 2B; the kernels as the runtime plans them.
. benchmarks/_dec.sh
out_dir s28c
t0=$SECONDS
for g in 9b 2b; do
dec ${g}_base $g --prompts ""
TENSORFOLD_GEMV_V3_LOG2=24 dec ${g}_l24 $g --prompts ""
pack
done
TENSORFOLD_GEMV_V3_LOG2=24 timeout 150 python3 benchmarks/bench_kernels.py --only decode --out "$R" >"$R/kdec_l24.txt" 2>&1
echo "== kernels l24 rc $? at $((SECONDS - t0)) s"; grep -h "4096x4096\|12288x2048\|8224x2048" "$R/kdec_l24.txt" | head -12
pack
echo "== done at $((SECONDS - t0)) s"
