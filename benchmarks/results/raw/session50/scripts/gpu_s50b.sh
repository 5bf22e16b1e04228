#!/usr/bin/env bash
# Session 50, call 2 (LIMIT ~520): (1) the GPU tier on today's code (split-K counter reset late, autog18 SwiGLU
# sets): the 2B runtime tier and its graph tests (window / tree / commit bf16 + fp8, alone vs batched, prompt vs
# step, reference, graphs == eager), the qgemv real-shape tests, three pytest processes side by side; (2) issue 3's
# decode table with PDL and, new, the read floor of each shape's weight bytes (--floor: a PDL-aware plain read of
# the same bytes, 396 / 792 blocks), to say how far each one-row GEMV sits from what any kernel of its size reaches.
# Predicted: the floor of the 9B q/k/v (~23.6 MB) near 65-75 % of copy, of the 9B / 27B out_proj (~9-12 MB) near
# 45-60 %, so that the 70 % target is within reach of a pure read only at the large shapes.
. benchmarks/_dec.sh
out_dir s50b
t0=$SECONDS
LIMIT=${LIMIT:-520}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest rt 300 tests/runtime/test_gpu_runtime.py tests/runtime/test_gpu_graphs.py -s &
ptest qg 280 tests/kernels/test_gpu_qgemv.py -s &
ptest misc 280 tests/runtime/test_gpu_ahead.py tests/runtime/test_gpu_pdl.py tests/runtime/test_gpu_prefill.py -s &
wait
echo "== tests at $((SECONDS - t0)) s"; pack
left=$((LIMIT - (SECONDS - t0)))
mkdir -p "$R/kern"
timeout "$left" python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --floor --out "$R/kern" > "$R/kern.txt" 2>&1
echo "== kern rc $? at $((SECONDS - t0)) s"; grep -h "R=1" "$R/kern.txt" | cut -c1-120; pack
echo "== done at $((SECONDS - t0)) s"
