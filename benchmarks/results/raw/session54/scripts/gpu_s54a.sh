#!/usr/bin/env bash
# session 54 call 1: the GPU tier owed from session 53 (qgemv / gemv on the final commit), then the one-row timeline
# of the worst qgemv shape (27B out_proj 5120 x 6144) beside the 9B down, then issue 3's 2B table without host bias.
. benchmarks/_dec.sh
begin s54a
ptest qgemv 170 tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_gemv.py
pack
timeout 150 python3 benchmarks/qgemv_timeline.py --shapes 5120x6144,4096x12288 --rows 1 --out "$R/tl" > "$R/tl.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; tail -40 "$R/tl.txt"; pack
left=$((LIMIT - (SECONDS - t0)))
timeout $((left < 200 ? left : 200)) python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --floor --models 2B --min-graph 400 \
    --out "$R/floor_2b" > "$R/floor_2b.txt" 2>&1
echo "== 2B table rc $? at $((SECONDS - t0)) s"; tail -30 "$R/floor_2b.txt"; pack
