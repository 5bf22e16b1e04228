#!/usr/bin/env bash
# Session 18, second device call (one GPU): the residual add + RMSNorm fused into the first tensor-core GEMV
# (affine.launch_qgemv(..., norm=...)) and qgemv's x preparation over the live rows only. GPU tests of both (and
# the epilogue's, whose one-n-tile kernel changed), the runtime GPU tier (2B geometry, the fusion on), then decode:
# 2B with a profile and again with TENSORFOLD_NORM_FUSE=0 (A/B on one machine), 9B and 27B with profiles.
. benchmarks/_dec.sh
out_dir s18b
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_normfuse.py \
    tests/kernels/test_gpu_glu.py >"$R/k_tests.txt" 2>&1
echo "== kernel tests rc $?"; tail -n 3 "$R/k_tests.txt"; pack
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime >"$R/rt_tests.txt" 2>&1
echo "== runtime tests rc $?"; tail -n 2 "$R/rt_tests.txt"; pack
dec 2b 2b --profile 1; grep -A10 "profile, 1 stream" "$R/decode_2b.txt"; pack
TENSORFOLD_NORM_FUSE=0 dec 2b_nofuse 2b; pack
dec 9b 9b --profile 1; grep -A4 "profile, 1 stream" "$R/decode_9b.txt"; pack
dec 27b 27b; pack
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    >"$R/q_tests.txt" 2>&1
echo "== qgemv tests rc $?"; tail -n 3 "$R/q_tests.txt"; pack
