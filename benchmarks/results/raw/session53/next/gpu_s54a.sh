#!/usr/bin/env bash
# Prepared in session 53 for session 54 (its last call was refused: 340 s left). Where the worst qgemv shape's one-row launch goes, the 27B
# out_proj / o_proj 5120 x 6144 (ks 6; 11.7 µs vs a 5.8 µs read floor, 36 % of copy), beside the 9B down
# 4096 x 12288 (12.5 vs 7.9), phase by phase (qgemv_timeline: x preparation, main loop, completion), with and
# without PDL. Expectation: the main loop streams near copy rate and the fixed phases (x preparation ~2.3 µs,
# completion 1.3-5 µs) make up most of the 6 µs gap.
. benchmarks/_dec.sh
begin s54a
timeout 150 python3 benchmarks/qgemv_timeline.py --shapes 5120x6144,4096x12288 --rows 1 --out "$R/tl" > "$R/tl.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; tail -40 "$R/tl.txt"; pack
# issue 3's table for the 2B shapes too, without the host bias (a graph of 400 launches)
timeout 200 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --floor --models 2B --min-graph 400 \
    --out "$R/floor_2b" > "$R/floor_2b.txt" 2>&1
echo "== 2B table rc $? at $((SECONDS - t0)) s"; pack
