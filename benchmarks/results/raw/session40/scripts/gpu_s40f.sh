#!/usr/bin/env bash
# Session 40: the GPU tier of the final code alone (device time nearly spent after refused starts): run-ahead with
# the in-graph chain now the default + backend parity, graphs, attention + GEMV (the whole form now the default for
# square weights). Predictions: all pass (call 1 ran them with the switches set by hand).
. benchmarks/_dec.sh
out_dir s40f
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest ahead 220 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest graphs 220 tests/runtime/test_gpu_graphs.py -s &
ptest gemv 220 tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py -k "not variants" -s &
wait
pack
echo "== done at $((SECONDS - t0)) s"
