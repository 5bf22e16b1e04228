#!/usr/bin/env bash
# Session 16, seventh device call (one GPU): first-kernel plans with overrides (bench_gemv3 --tcplans) at the 2B
# gate+up 12288 x 2048 and in_all 8224 x 2048 (pipe now) and the 27B out_proj / o_proj 5120 x 6144 (w16 now), with
# qgemv3's default geometry beside them.
set -u
OUT=${OUT:-/tmp/s16j}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
timeout 280 python3 benchmarks/bench_gemv3.py --rows 1,8 --shapes 0 --custom "8224,2048;5120,6144" \
    --configs "4,1,4,1,396" --tcplans "pipe:mt=1;pipe:u=2;pipe:depth=2;w16:u=4" --variants w16 \
    --out "$R/tc" >"$R/tc.txt" 2>&1
echo "== tc rc $?"; grep -E " us " "$R/tc.txt"
tar -czf "$OUT/s16j.tar.gz" -C "$OUT" r
