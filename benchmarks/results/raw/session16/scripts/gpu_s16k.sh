#!/usr/bin/env bash
# Session 16, last device call (one GPU, ~220 s left): the pipe2 rule (K <= 2,048) and qgemv for 5120 x 6144: GPU
# tests of the default plans at the real shapes and of the pipe2 variant, then 27B and 2B decode at the final code.
set -u
OUT=${OUT:-/tmp/s16k}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
pack() { tar -czf "$OUT/s16k.tar.gz" -C "$OUT" r; }
timeout 75 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_gemv.py \
    -k "real_shapes_rows_1_2_8_16 or (variants and pipe2)" >"$R/gemv_tests.txt" 2>&1
echo "== gemv tests rc $?"; tail -n 2 "$R/gemv_tests.txt"; pack
timeout 80 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1 --prompts 512 --steps 20 \
    --out "$R/d27.md" >"$R/d27.txt" 2>&1
echo "== 27b rc $?"; grep -h "decode \|Error" "$R/d27.txt"; pack
timeout 60 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts 512 --steps 30 \
    --out "$R/d2.md" >"$R/d2.txt" 2>&1
echo "== 2b rc $?"; grep -h "decode \|Error" "$R/d2.txt"; pack
