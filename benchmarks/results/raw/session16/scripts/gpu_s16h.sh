#!/usr/bin/env bash
# Session 16, fifth device call (one GPU): the first kernel's w16 shape rule (<= 2,048 output rows or >= 6,144
# inputs): its GPU tests at the real shapes, the runtime GPU tier (2B geometry: the rule moves its down, out_proj
# and o_proj), then 2B (with a profile) and 27B decode at 1 / 8 streams.
set -u
OUT=${OUT:-/tmp/s16h}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
. benchmarks/_dec.sh
pack() { tar -czf "$OUT/s16h.tar.gz" -C "$OUT" r; }
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_gemv.py \
    -k "real_shapes_rows_1_2_8_16 or (variants and w16 and not w16d)" >"$R/gemv_tests.txt" 2>&1
echo "== gemv tests rc $?"; tail -n 2 "$R/gemv_tests.txt"; pack
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime >"$R/rt_tests.txt" 2>&1
echo "== runtime tests rc $?"; tail -n 2 "$R/rt_tests.txt"; pack
dec 2b 2b --profile 1; grep -A8 "profile, 1 stream" "$R/decode_2b.txt"; pack
dec 27b 27b; pack
