#!/usr/bin/env bash
# Session 15, call 6 (one GPU, the session's last device seconds): the shipped defaults' kernel GPU tests: qgemv at
# the 9B shapes that moved onto it (line 2^25) and its real-shape test; the v3 prompt GEMM with xprep2 (default).
set -u
OUT=${OUT:-/tmp/s15f}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=/tmp/tfkc
timeout 230 python3 -m pytest -m gpu -v -p no:cacheprovider -rfE --tb=short \
    "tests/kernels/test_gpu_qgemv.py::test_mid_shapes_now_on_qgemv" \
    "tests/kernels/test_gpu_gemm.py::test_xprep_layout_real_shape" \
    "tests/kernels/test_gpu_gemm.py::test_real_shapes_512_and_4096_rows" -k "not v1" >"$R/gpu_tests.txt" 2>&1
echo "== tests rc $?"; grep -E "PASS|FAIL|ERROR|passed|failed" "$R/gpu_tests.txt" | tail -14
