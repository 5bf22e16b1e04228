#!/usr/bin/env bash
# Session 18, last device call: qgemv's one-n-tile kernels compiled with launch bounds (128 threads, 3 blocks an
# SM) against without (TENSORFOLD_GEMV3_LB=0), plain and SwiGLU-epilogue forms, 9B / 27B gate + up and 9B down.
. benchmarks/_dec.sh
out_dir s18h
for lb in 1 0; do
    TENSORFOLD_GEMV3_LB=$lb timeout 70 python3 benchmarks/bench_gemv3.py --no-old --rows 1 --shapes 2,4 --glu \
        --configs "4,1,4,1,396" --out "$R/lb$lb" >"$R/gemv3_lb$lb.txt" 2>&1
    echo "== lb $lb rc $?"; grep "us " "$R/gemv3_lb$lb.txt" | grep -v Warn; pack
done
