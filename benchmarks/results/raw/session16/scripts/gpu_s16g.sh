#!/usr/bin/env bash
# Session 16, fourth device call (one GPU): the first tensor-core kernel's variants (affine.TC_VARIANTS) at the
# shapes that kernel serves by default (2B gate+up, down, in_all, out_proj; 9B out_proj; 27B o_proj), 1 and 8 rows.
# The 2B down (2048 x 6144, plan "pipe": 64 tiles x 2 chunks, 8 warps a block, plus a reduce launch) is the worst
# GEMV of the 2B step; "w16" (16 warps a block splitting K, one tile, no second launch) is the candidate.
set -u
OUT=${OUT:-/tmp/s16g}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
timeout 420 python3 benchmarks/bench_gemv3.py --rows 1,8 --shapes 1,0 --custom "2048,2048;8224,2048;4096,4096;5120,6144" \
    --configs ";" --variants w16,w16d3,skd2,sk --out "$R/var" >"$R/var.txt" 2>&1
echo "== var rc $?"; grep -E " us " "$R/var.txt"
tar -czf "$OUT/s16g.tar.gz" -C "$OUT" r
