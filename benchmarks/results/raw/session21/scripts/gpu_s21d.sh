#!/usr/bin/env bash
# Session 21, call 4 (one GPU, under 3 minutes: the session's last 268 device seconds): bf16-only x with 1-4-row
# launches on the hi + lo loop with zero lo columns (xh 2; SASS loop 969 instructions against 1,000 for hi + lo and
# 1,132 for the 8-row form, 9B gate+up SwiGLU) and 5-8-row launches on the 8-row form (xh 1).
# Prediction: 9B one stream back to the hi + lo figure (338-347 tok/s) or a little above; 8 streams as call 2-3's
# xh (1,800-1,840 tok/s). The GPU test checks 1-4-row launches bit-equal to rows of 8-row launches on the H200.
. benchmarks/_dec.sh
out_dir s21d
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    -k "bf16_x and 9B" >"$R/qgemv_xh.txt" 2>&1
echo "== qgemv gpu rc $?"; tail -2 "$R/qgemv_xh.txt"; pack
TENSORFOLD_GEMV3_XH=1 dec 9b_xh 9b; pack
