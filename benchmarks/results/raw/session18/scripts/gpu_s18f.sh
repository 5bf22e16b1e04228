#!/usr/bin/env bash
# Session 18, sixth device call: what float32-class x costs the first tensor-core GEMV (the 2B decode GEMVs):
# decode 2B at 1 / 8 streams with profiles, default (bf16 hi + lo x) against TENSORFOLD_GEMV_XLO=0 (bf16 x only,
# one mma a k-step), one machine.
. benchmarks/_dec.sh
out_dir s18f
dec 2b 2b --profile 1; grep -A8 "profile, 1 stream" "$R/decode_2b.txt"; pack
TENSORFOLD_GEMV_XLO=0 dec 2b_xh 2b --profile 1; grep -A8 "profile, 1 stream" "$R/decode_2b_xh.txt"; pack
dec 2b_again 2b; pack
