#!/usr/bin/env bash
# Prepared in session 29 (one GPU, under 10 minutes), after gpu_s30a.sh.
# 1. Where the down projections' time goes at HEAD's qgemv defaults (PRE=2, XQ=1): they sit at 48-56 % of copy at
#    one row (14.0 us at 9B down against 7.1 us of copy), 7-9 us over their copy time, while 27B gate+up reaches
#    75 %. The timeline splits a launch into x preparation, first tile, main loop, completion, by SM.
#    Prediction: the down shapes give a warp about 2 items (ks 12 / 17 chunks of 16-row tiles over 1,584 warps), so
#    x preparation plus completion (about 2 + 2 us) and the ramp are half the launch.
# 2. TENSORFOLD_GEMV_V3_LOG2=24 at 9B (session 28's gpu_s29c.sh, unrun): one process a side (a plan-time switch).
. benchmarks/_dec.sh
out_dir s30b
t0=$SECONDS
timeout 200 python3 benchmarks/qgemv_timeline.py --shapes 4096x12288,5120x17408,24576x4096g --out "$R/tl" \
    > "$R/timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us\|rror" "$R/timeline.txt" | head -30
pack
dec 9b_base 9b --prompts ""
TENSORFOLD_GEMV_V3_LOG2=24 dec 9b_l24 9b --prompts ""
pack
echo "== done at $((SECONDS - t0)) s"
