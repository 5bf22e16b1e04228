#!/usr/bin/env bash
# Session 16, sixth device call (one GPU): the mid shapes still on the first kernel's "pipe" plan (9B out_proj /
# o_proj 4096 x 4096, 2B attention qkv 5120 x 2048, 2B in_all 8224 x 2048) against qgemv3 geometries and the w16 /
# skd2 variants, 1 and 8 rows.
set -u
OUT=${OUT:-/tmp/s16i}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
timeout 300 python3 benchmarks/bench_gemv3.py --rows 1,8 --shapes - --custom "4096,4096;5120,2048;8224,2048" \
    --configs "4,1,4,1,396;4,1,4,1,264;4,1,2,1,396" --variants w16,skd2 --out "$R/mid" >"$R/mid.txt" 2>&1
echo "== mid rc $?"; grep -E " us " "$R/mid.txt"
tar -czf "$OUT/s16i.tar.gz" -C "$OUT" r
