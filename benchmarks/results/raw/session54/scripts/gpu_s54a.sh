#!/usr/bin/env bash
# session 54 call 1: the GPU tier owed from session 53 (qgemv / gemv on the final commit); then, at one row under PDL
# (400 launches a graph), qgemv's occupancy and load depth at the small decode shapes (9B in_proj, q/k/v, down; 27B
# out_proj): the plan (3 blocks an SM, launch bounds) against 4 and 5 blocks an SM with registers capped (occ1), and
# depth 2; then the one-row timeline of the 27B out_proj beside the 9B down.
. benchmarks/_dec.sh
begin s54a
ptest qgemv 170 tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_gemv.py
pack
timeout 210 python3 benchmarks/bench_gemv3.py --configs "4,1,4,1,396,0,0,0,16;4,1,4,1,528,0,0,4,16;4,1,4,1,660,0,0,5,16;4,1,4,2,396,0,0,0,16" \
    --rows 1 --swept --only-sw --pdl --no-old --shapes 3 --custom "12352,4096;10240,4096;5120,6144" --out "$R/occ" > "$R/occ.txt" 2>&1
echo "== occ rc $? at $((SECONDS - t0)) s"; grep -v "^$" "$R/occ.txt" | tail -24; pack
left=$((LIMIT - (SECONDS - t0)))
timeout $((left < 150 ? left : 150)) python3 benchmarks/qgemv_timeline.py --shapes 5120x6144,4096x12288 --rows 1 --out "$R/tl" > "$R/tl.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; tail -40 "$R/tl.txt"; pack
