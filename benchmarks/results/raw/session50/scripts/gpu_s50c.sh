#!/usr/bin/env bash
# Session 50, call 3 (LIMIT ~400): (1) issue 3's decode table with the read floor again, the floor now reading
# every 512-byte unit of each shape's weights (call 2's rounded a warp's share down to 2 KB steps: 0 bytes at the
# 2B's small shapes, 18.6 of 21.7 MiB at the 9B q/k/v); (2) the GPU tests call 2 cut at its limit:
# test_gpu_graphs.py (2B graphs == eager, greedy and sampled) and test_gpu_qgemv.py, side by side.
. benchmarks/_dec.sh
out_dir s50c
t0=$SECONDS
LIMIT=${LIMIT:-400}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
mkdir -p "$R/kern"
timeout 150 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --floor --out "$R/kern" > "$R/kern.txt" 2>&1
echo "== kern rc $? at $((SECONDS - t0)) s"; grep -h "R=1" "$R/kern.txt" | grep -v "B | R=1 2\|2B |" | cut -c1-120; pack
left=$((LIMIT - (SECONDS - t0) - 10))
ptest graphs "$left" tests/runtime/test_gpu_graphs.py -s &
ptest qg "$left" tests/kernels/test_gpu_qgemv.py -s &
wait
echo "== done at $((SECONDS - t0)) s"; pack
