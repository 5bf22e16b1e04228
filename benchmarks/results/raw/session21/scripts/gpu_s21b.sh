#!/usr/bin/env bash
# Session 21, call 2 (one GPU, about 9 minutes): bf16-only x in qgemv (plan xh = 1: one B column a batch row,
# 8 rows an n-tile, one mma a k-step for 1-8 rows).
# Prediction: one row unchanged within ~3 % (same mma count; no lo split); 8 rows fall from ~1.9x to ~1.1-1.2x one
# row (9B gate+up 47.4 -> ~28 us), so 8-stream decode rises (9B 1,583 -> ~2,000 tok/s) and one stream moves little.
. benchmarks/_dec.sh
out_dir s21b
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    -k "bf16_x or swept" >"$R/qgemv_xh.txt" 2>&1
echo "== qgemv gpu rc $?"; tail -2 "$R/qgemv_xh.txt"; pack
timeout 200 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 --rows 1,8 --swept --glu --xh --no-old \
    --out "$R" >"$R/gemv3_xh.txt" 2>&1
echo "== bench rc $?"; grep " sw" "$R/gemv3_xh.txt"; pack
TENSORFOLD_GEMV3_XH=1 dec 9b_xh 9b; pack
dec 9b 9b; pack
TENSORFOLD_GEMV3_XH=1 dec 27b_xh 27b; pack
dec 27b 27b; pack
TENSORFOLD_GEMV3_XH=1 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/runtime/test_gpu_runtime.py >"$R/runtime_xh.txt" 2>&1
echo "== runtime xh rc $?"; tail -3 "$R/runtime_xh.txt"; pack
