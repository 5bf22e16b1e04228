#!/usr/bin/env bash
# Session 19, call 6 (diagnostic): is it the order? A plain read where each warp walks its own contiguous share
# (2 KB in flight a warp, qgemv's grid) against the grid-stride read, at 56.6 and 213.9 MB.
. benchmarks/_dec.sh
out_dir s19f
timeout 100 python3 benchmarks/bench_gemv3.py --no-old --rows 1 --shapes - --floor 56.6,213.9 --out "$R/f" \
    >"$R/floor.txt" 2>&1
echo "== floor rc $?"; grep "floor\|FAIL\|Error" "$R/floor.txt" | cut -c1-150; pack
