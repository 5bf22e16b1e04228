#!/usr/bin/env bash
# Prepared in session 23: the 27B half of gpu_s24a.sh (one GPU, about 5 minutes). See gpu_s24a.sh for the
# prediction: 27B one stream +2-4 % with TENSORFOLD_GEMV_DEFER=1 (64 down + 64 output projections defer), and
# 5120 x 6144 at cg 32 (session 23: 14.2 / 20.6 -> 13.4 / 17.4 us at 1 / 8 rows) about +0.7 % more.
. benchmarks/_dec.sh
out_dir s24b
t0=$SECONDS
dec 27b 27b; pack
TENSORFOLD_GEMV_DEFER=1 dec 27b_defer 27b; pack
TENSORFOLD_GEMV_DEFER=1 TENSORFOLD_GEMV3_CG="5120x6144=32" dec 27b_defer_cg32 27b; pack
echo "== done at $((SECONDS - t0)) s"
