#!/usr/bin/env bash
# Session 18, third device call: the SwiGLU epilogue with the gate | up rows interleaved in 8-row blocks (a tile
# reads 16 adjacent rows, as a plain tile does) against the plain GEMV, at the 2B / 9B / 27B gate + up shapes.
. benchmarks/_dec.sh
out_dir s18c
timeout 300 python3 benchmarks/bench_gemv3.py --configs "4,1,4,1,396" --rows 1,4,8 --shapes 0,2,4 --glu \
    --out "$R" >"$R/gemv3_glu.txt" 2>&1
echo "== bench rc $?"; tail -n 30 "$R/gemv3_glu.txt"; pack
