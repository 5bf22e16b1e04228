#!/usr/bin/env bash
# session 53 review: the GPU tier of the two modules whose compile-spec lists changed (kernels unchanged)
. benchmarks/_dec.sh
begin s53e
ptest qgemv 150 tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_gemv.py &
wait
echo "== done at $((SECONDS - t0)) s"; pack
