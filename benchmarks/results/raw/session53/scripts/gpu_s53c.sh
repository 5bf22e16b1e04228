#!/usr/bin/env bash
# session 53 call 3: is the kernel table's per-launch time biased by the host's replay cost? Call 2 (H200) gave every
# 1-row decode GEMV and torch's peer 3.7-4.3 µs more than session 48's H200 table of the same kernels, while 9B
# decode at 1 stream was unchanged (402.7 vs 403.9 tok/s). A case's graph holds max(copies, 10) launches and is
# timed on the host (graph launch + sync), so that cost / 10 lands on every launch.
# Prediction: at --min-graph 100 the 9B in_proj 1-row drops 16.8 -> 12.5-13.5 µs and its 792-block floor 12.4 ->
# 8-9 µs; --min-graph 400 within 2 % of 100; --min-graph 10 repeats call 2 (16.8).
. benchmarks/_dec.sh
begin s53c
for m in 100 10 400; do
    timeout 200 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --floor --models 9B,27B \
        --min-graph $m --out "$R/floor_m$m" > "$R/floor_m$m.txt" 2>&1
    echo "== min-graph $m rc $? at $((SECONDS - t0)) s"
    grep -h "in_proj \[\|gate|up (SwiGLU) \[q\|head \[q" "$R"/floor_m$m/*.md | cut -c1-120
    pack
done
echo "== done at $((SECONDS - t0)) s"; pack
