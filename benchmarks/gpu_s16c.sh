#!/usr/bin/env bash
# Prepared in session 15 (one GPU): qgemv3 geometries that the rewritten x preparation newly allows. Its register
# peak at one n-tile fell from 168 to 136 (ptxas sm_90), so, offline:
#   4,1,4,2  loads two iterations ahead: 142 registers, still 3 blocks an SM, 4 KB in flight a warp (was 2 KB);
#   4,1,2,4  four iterations of 2 groups ahead: 132 registers, 4 KB in flight a warp;
#   ...,0,0,4  one-n-tile launches at 4 blocks an SM, registers capped at 128 (8-20 bytes of spills).
# ncu (session 15) had the loop waiting on its loads at 12 warps an SM; these put 2-2.7x the bytes in flight an SM.
# The geometry never changes a bit (tests: test_groups_an_iteration_and_depth_do_not_change_bits,
# test_occupancy_knob_is_launch_geometry_only).
set -u
OUT=${OUT:-/tmp/s16c}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
timeout 400 python3 benchmarks/bench_gemv3.py --rows 1,8 --shapes 2,3,4,5 --no-old \
    --configs "4,1,4,1,396;4,1,4,2,396;4,1,2,4,396;4,1,4,1,396,0,0,4;4,1,4,2,396,0,0,4;4,1,2,4,396,0,0,4" \
    --out "$R/g3" >"$R/g3.txt" 2>&1
echo "== g3 rc $?"; grep -E "v3p" "$R/g3.txt"
tar -czf "$OUT/s16c.tar.gz" -C "$OUT" r
