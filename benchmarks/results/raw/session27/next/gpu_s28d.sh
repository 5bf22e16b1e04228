#!/usr/bin/env bash
# Prepared in session 27 (one GPU, about 3 minutes): qgemv's K chunk again, now that the completion is batched.
# Smaller chunks (cg 8) give smaller work units (4.6 KB a warp-tile instead of 9.2), so the warps' loop times
# even out (session 27: median 13.1 vs max 14.9 us at 9B gate+up), at the cost of twice the partials. cg 8 lost
# before (session 22, 4096x4096: 10.6 vs 8.6 us), when each completed tile cost a fence and a round trip.
# Prediction: cg 8 -0.5 to +1 us at one row; cg 32 slower at one row (session 23), faster at eight. Then the
# runtime GPU tests (about 5 minutes).
. benchmarks/_dec.sh
out_dir s28d
t0=$SECONDS
timeout 200 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 --rows 1,8 --swept --glu --only-sw --no-old \
    --configs "4,1,4,1,396,0,0,0,8;4,1,4,1,396;4,1,4,1,396,0,0,0,32" --out "$R" >"$R/gemv3_cg.txt" 2>&1
echo "== cg rc $? at $((SECONDS - t0)) s"; grep -h " us " "$R/gemv3_cg.txt" | head -48; pack
# the runtime's GPU tier with session 27's defaults (batched completion, the fused GDN norm's loads): exactness
# (window == steps, alone == beside, graph == eager) was last run on the GPU before them
ptest runtime 300 tests/runtime/test_gpu_runtime.py
pack
echo "== done at $((SECONDS - t0)) s"
