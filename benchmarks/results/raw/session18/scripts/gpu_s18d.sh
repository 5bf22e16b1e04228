#!/usr/bin/env bash
# Session 18, fourth device call: qgemv's prefetch depth and groups an iteration re-measured since the session 15
# x-preparation rewrite (the 1-row kernel has 136 registers, 32 under the 3-blocks-an-SM limit), and the SwiGLU
# epilogue kernel without SwiGLU in its tile loop when the plan has several K chunks (glu=2), at the 9B / 27B
# gate + up and down shapes, 1 and 8 rows.
. benchmarks/_dec.sh
out_dir s18d
timeout 420 python3 benchmarks/bench_gemv3.py --no-old --rows 1,8 --shapes 2,3,4,5 --glu \
    --configs "4,1,4,1,396;4,1,4,2,396;4,1,2,2,396;4,1,2,4,396;4,1,4,1,264" \
    --out "$R" >"$R/gemv3_depth.txt" 2>&1
echo "== bench rc $?"; grep -v Warning "$R/gemv3_depth.txt" | grep -v "warn(" | tail -n 60; pack
