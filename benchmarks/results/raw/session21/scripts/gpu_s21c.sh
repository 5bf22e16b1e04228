#!/usr/bin/env bash
# Session 21, call 3 (one GPU, about 7 minutes): bf16-only x with its x preparation in one batch at one n-tile
# (16 loads a thread; call 2 had two batches, i.e. two L2 round trips, and one row was 5-8 % slower than hi + lo).
# Prediction: one row back within ~2 % of hi + lo; 8 rows as in call 2 (9B gate+up SwiGLU ~33.5 us).
. benchmarks/_dec.sh
out_dir s21c
timeout 150 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 --rows 1,8 --swept --only-sw --glu --xh --no-old \
    --out "$R" >"$R/gemv3_xh.txt" 2>&1
echo "== bench rc $?"; grep " sw" "$R/gemv3_xh.txt"; pack
TENSORFOLD_GEMV3_XH=1 dec 9b_xh 9b; pack
TENSORFOLD_GEMV3_XH=1 dec 27b_xh 27b; pack
timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    -k "bf16_x" >"$R/qgemv_xh.txt" 2>&1
echo "== qgemv gpu rc $?"; tail -2 "$R/qgemv_xh.txt"; pack
