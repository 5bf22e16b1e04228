#!/usr/bin/env bash
# Session 16, third device call (one GPU): the bf16-dequantized prompt GEMM is now the default. Its GPU tier at real
# shapes (test_dq_real_shapes) beside the hi + lo kernel's (pinned off by the file's fixture), the runtime's prompt
# tests with the new default, then 27B decode at 1 / 8 streams with the shipped code.
set -u
OUT=${OUT:-/tmp/s16f}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
. benchmarks/_dec.sh
pack() { tar -czf "$OUT/s16f.tar.gz" -C "$OUT" r; }
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short -s tests/kernels/test_gpu_gemm.py \
    -k "dq or xprep or (real_shapes and v3)" >"$R/gemm_tests.txt" 2>&1
echo "== gemm tests rc $?"; grep -E "max err|passed|failed" "$R/gemm_tests.txt" | tail -n 20; pack
timeout 130 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime/test_gpu_runtime.py \
    tests/runtime/test_gpu_prefill.py >"$R/rt_tests.txt" 2>&1
echo "== runtime prompt tests rc $?"; tail -n 3 "$R/rt_tests.txt"; pack
dec 27b 27b; pack
