#!/usr/bin/env bash
# Session 19, call 4 (diagnostic): qgemv's register-ring kernels with the dequantize-and-mma work removed
# (TENSORFOLD_GEMV3_NOC=1: loads, x preparation and split-K completion only) at depth 1 and 2, one row, against a
# plain 16-byte read of the same sizes (--floor). Compare with call 3's full kernels (epi block).
. benchmarks/_dec.sh
out_dir s19d
TENSORFOLD_GEMV3_NOC=1 timeout 150 python3 benchmarks/bench_gemv3.py --no-old --rows 1 --shapes 2,3,4,5 \
    --floor 28.3,50.1,56.6,79.2 --configs "4,1,4,1,396;4,1,4,2,396" --out "$R/noc" >"$R/gemv3_noc.txt" 2>&1
echo "== noc rc $?"; grep "us \|FAIL" "$R/gemv3_noc.txt" | grep -v Warn | cut -c1-150; pack
