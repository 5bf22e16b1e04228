#!/usr/bin/env bash
# Session 15, call 7 (one GPU, the last device seconds): qgemv3's x preparation rewritten (items of contiguous
# 16-byte x loads; 915 SASS instructions before the loop instead of 2,228, 136 registers at one n-tile instead of 168;
# the same bits, sim): kernel timing at the 9B / 27B shapes, the real-shape GPU tests, then 9B decode if time is left.
set -u
OUT=${OUT:-/tmp/s15g}
R=$OUT/r
mkdir -p "$R"
. benchmarks/_dec.sh
timeout 60 python3 benchmarks/bench_gemv3.py --configs "4,1,4,1,396" --rows 1,8 --shapes 2,3,5 --no-old \
    --out "$R/g3" >"$R/g3.txt" 2>&1
echo "== g3 rc $?"; grep -E "v3p" "$R/g3.txt"
timeout 50 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    -k "real_shapes_rows or mid_shapes" >"$R/gpu_tests.txt" 2>&1
echo "== tests rc $?"; tail -n 2 "$R/gpu_tests.txt"
timeout 45 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1 --prompts 512 --steps 20 \
    >"$R/decode_9b.txt" 2>&1
echo "== 9b rc $?"; grep "decode \|prompt " "$R/decode_9b.txt"
