#!/usr/bin/env bash
# Prepared in session 15 for the next session's first device call (one GPU): what session 15 could not measure.
# - 2B decode with qgemv3 for every shape (TENSORFOLD_GEMV_V3=1): it lost at 2B before (561 vs 590 tok/s) when its x
#   preparation cost 2,228 instructions a warp; session 15's rewrite cut that to 915.
# - 9B decode at 1 / 8 streams and 27B at 1 stream with the rewritten preparation (the shipped default).
# (benchmarks/gpu_s16b.sh: the prompt GEMM's dq form and the runtime GPU tier; the two do not fit one 600 s call.)
set -u
OUT=${OUT:-/tmp/s16a}
R=$OUT/r
mkdir -p "$R"
. benchmarks/_dec.sh
pack() { tar -czf "$OUT/s16a.tar.gz" -C "$OUT" r; }
dec 2b_base 2b --profile 1; pack
TENSORFOLD_GEMV_V3=1 dec 2b_v3all 2b --profile 1; pack
dec 9b 9b; pack
timeout 150 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1 --prompts 512 --steps 10 \
    --out "$R/d27.md" >"$R/d27.txt" 2>&1
echo "== 27b rc $?"; grep -h "decode \|prompt " "$R/d27.txt"; pack
