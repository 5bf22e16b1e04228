#!/usr/bin/env bash
# Prepared in session 27 for the next session's first device call (one GPU, about 8 minutes): qgemv's x
# preparation, which session 27's timeline put at 2.3-2.6 us a launch (2.0 of it waiting for x's loads, queued
# behind the weight loads issued before the PDL wait). Two opt-in forms, simulator-tested (same bits / row-exact):
#   TENSORFOLD_GEMV3_PRE=0  the first weight loads issued right after x's loads instead of before the wait;
#   TENSORFOLD_GEMV3_XQ=1   x's group sums by quad shuffles in the item pass (one barrier instead of two).
# Predictions (9B gate+up SwiGLU, one row, 23.2 us in session 27): PRE=0 -0.5 to +1 us (x arrives about 1 us sooner,
# the overlap with the previous kernel is lost); XQ=1 -0.3 to -0.6 us.
# 1. timelines of the four combinations at 9B gate+up SwiGLU and 27B down; 2. bench_gemv3 at 9B gate+up / down,
# 27B gate+up / down, one and eight rows, the four combinations; 3. 9B decode for the default and XQ=1.
. benchmarks/_dec.sh
out_dir s28a
t0=$SECONDS
for e in 1 0; do for q in 0 1; do
TENSORFOLD_GEMV3_PRE=$e TENSORFOLD_GEMV3_XQ=$q timeout 100 python3 benchmarks/qgemv_timeline.py \
    --shapes 24576x4096g,5120x17408 --out "$R" >"$R/timeline_e${e}q$q.txt" 2>&1
echo "== timeline e$e q$q rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/timeline_e${e}q$q.txt" | head -4
done; done; pack
for e in 1 0; do for q in 0 1; do
TENSORFOLD_GEMV3_PRE=$e TENSORFOLD_GEMV3_XQ=$q timeout 120 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 \
    --rows 1,8 --swept --glu --only-sw --no-old --out "$R/g3_e${e}q$q" >"$R/gemv3_e${e}q$q.txt" 2>&1
echo "== gemv3 e$e q$q rc $? at $((SECONDS - t0)) s"; grep -h " us " "$R/gemv3_e${e}q$q.txt" | head -16
done; done; pack
for q in 0 1; do
TENSORFOLD_GEMV3_XQ=$q dec 9b_q$q 9b --prompts ""
done; pack
echo "== done at $((SECONDS - t0)) s"
