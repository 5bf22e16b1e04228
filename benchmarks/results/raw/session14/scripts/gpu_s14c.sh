#!/usr/bin/env bash
# Session 14, call 3 (one GPU), from a `git archive`: does the SM's L1 / shared split stop a dependent launch from
# starting early? 2B decode with every graph kernel preferring the largest shared split (TENSORFOLD_SMEM_CARVEOUT=100)
# and without, with the qgemv prefetch form (TENSORFOLD_GEMV_PF=1) and without; 9B with and without the split.
set -u
OUT=${OUT:-/tmp/s14c}
R=$OUT/r
mkdir -p "$R"
. "$(dirname "$0")/_dec.sh"
TENSORFOLD_SMEM_CARVEOUT=100 dec 2b_c100 2b
dec 2b_base 2b
TENSORFOLD_SMEM_CARVEOUT=100 TENSORFOLD_GEMV_PF=1 dec 2b_pf_c100 2b --profile 1
TENSORFOLD_SMEM_CARVEOUT=100 dec 9b_c100 9b
dec 9b_base 9b
tar -czf "$OUT/s14c.tar.gz" -C "$OUT" r
