#!/usr/bin/env bash
# Session 22, call 1 (one GPU): the first half of session 21's gpu_s22a.sh. bf16-only x (TENSORFOLD_GEMV3_XH=1:
# 1-4-row launches on the hi + lo loop with zero lo columns, 5-8 rows on the 8-row form) against the default.
# Prediction: 9B one stream back to the hi + lo figure (338-347 tok/s) or a little above; 8 streams 1,800-1,840.
. benchmarks/_dec.sh
out_dir s22a
timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    -k "bf16_x" >"$R/qgemv_xh.txt" 2>&1
echo "== qgemv gpu rc $?"; tail -2 "$R/qgemv_xh.txt"; pack
TENSORFOLD_GEMV3_XH=1 dec 9b_xh 9b; pack
dec 9b 9b; pack
timeout 200 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 --rows 1,4,8 --swept --only-sw --glu --xh --no-old \
    --out "$R" >"$R/gemv3_xz.txt" 2>&1
echo "== bench rc $?"; grep " sw" "$R/gemv3_xz.txt"; pack
TENSORFOLD_GEMV3_XH=1 dec 27b_xh 27b; pack
dec 27b 27b; pack
