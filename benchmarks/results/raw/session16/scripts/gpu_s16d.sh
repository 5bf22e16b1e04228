#!/usr/bin/env bash
# Session 16, first device call (one GPU): qgemv3 with L2 hints for the tile l2 ahead (TENSORFOLD_GEMV3's 9th
# field) against the shipped geometry and the deeper register ring, at 2B / 9B / 27B shapes (bench_gemv3), then
# 9B decode with the shipped default and with l2 = 1.
set -u
OUT=${OUT:-/tmp/s16d}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
. benchmarks/_dec.sh
pack() { tar -czf "$OUT/s16d.tar.gz" -C "$OUT" r; }
C="4,1,4,1,396;4,1,4,1,396,0,0,0,1;4,1,4,1,396,0,0,0,2;4,1,4,2,396;4,1,4,2,396,0,0,0,1"
timeout 230 python3 benchmarks/bench_gemv3.py --rows 1,8 --shapes 2,3,5 --no-old --configs "$C" \
    --out "$R/g3a" >"$R/g3a.txt" 2>&1
echo "== g3a rc $?"; grep -E "v3p" "$R/g3a.txt"; pack
timeout 100 python3 benchmarks/bench_gemv3.py --rows 1,8 --shapes 0,1 --configs "4,1,4,1,396;4,1,4,1,396,0,0,0,1" \
    --out "$R/g3b" >"$R/g3b.txt" 2>&1
echo "== g3b rc $?"; grep -E "v3p|old" "$R/g3b.txt"; pack
dec 9b_base 9b; pack
TENSORFOLD_GEMV3="4,1,4,1,396,0,0,0,1" dec 9b_l2 9b; pack
