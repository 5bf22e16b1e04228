#!/usr/bin/env bash
# Prepared in session 27 for the next session's first device call (one GPU, about 8 minutes): qgemv's x
# preparation, which session 27's timeline put at 2.3-2.6 us a launch (2.0 of it waiting for x's loads, queued
# behind the weight loads issued before the PDL wait). Opt-in forms, simulator-tested (same bits / row-exact):
#   TENSORFOLD_GEMV3_PRE=0  the first weight loads issued right after x's loads instead of before the wait;
#   TENSORFOLD_GEMV3_PRE=2  the same, with the first tile's run prefetched into L2 before the wait (swept layout);
#   TENSORFOLD_GEMV3_XQ=1   x's group sums by quad shuffles in the item pass (one barrier instead of two).
# Predictions (9B gate+up SwiGLU, one row, 23.2 us in session 27): PRE=0 -0.5 to +1 us; PRE=2 -1 to -2 us (x
# arrives about 1 us sooner, the first tile's loads hit L2); XQ=1 -0.3 to -0.6 us.
# 1. timelines (default; PRE=2 + XQ=1) at 9B gate+up SwiGLU and 27B down; 2. bench_gemv3 at 9B gate+up / down, 27B
# gate+up / down, one and eight rows: default, PRE=0, PRE=2, PRE=2 + XQ=1; 3. 9B decode, default vs PRE=2 + XQ=1.
. benchmarks/_dec.sh
out_dir s28a
t0=$SECONDS
for eq in "1 0" "2 1"; do set -- $eq
TENSORFOLD_GEMV3_PRE=$1 TENSORFOLD_GEMV3_XQ=$2 timeout 90 python3 benchmarks/qgemv_timeline.py \
    --shapes 24576x4096g,5120x17408 --out "$R" >"$R/timeline_e$1q$2.txt" 2>&1
echo "== timeline e$1 q$2 rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/timeline_e$1q$2.txt" | head -4
done; pack
for eq in "1 0" "0 0" "2 0" "2 1"; do set -- $eq
TENSORFOLD_GEMV3_PRE=$1 TENSORFOLD_GEMV3_XQ=$2 timeout 90 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 \
    --rows 1,8 --swept --glu --only-sw --no-old --out "$R/g3_e$1q$2" >"$R/gemv3_e$1q$2.txt" 2>&1
echo "== gemv3 e$1 q$2 rc $? at $((SECONDS - t0)) s"; grep -h " us " "$R/gemv3_e$1q$2.txt" | head -16
done; pack
dec 9b_e1q0 9b --prompts ""
TENSORFOLD_GEMV3_PRE=2 TENSORFOLD_GEMV3_XQ=1 dec 9b_e2q1 9b --prompts ""
pack
echo "== done at $((SECONDS - t0)) s"
