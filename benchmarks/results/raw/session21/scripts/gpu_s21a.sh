#!/usr/bin/env bash
# Session 21, call 1 (one GPU, about 8-9 minutes): the shipped swept layout at HEAD.
# - the prompt GEMM's run length compiled in (758b73e): 9B / 27B prompt 512 expected back near 7.2-7.4k / 2.2-2.3k
#   tok/s (call 5 of session 20, runtime run length: 5,983 / 1,776);
# - the swept prompt GEMM's GPU test (its oracle check now the exact product with a 2^-6 bound);
# - per-kernel step profiles at 9B and 27B (one stream), to see where the step goes with the swept layout;
# - the runtime GPU file at HEAD (last run before 758b73e).
. benchmarks/_dec.sh
out_dir s21a
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >"$R/gpu.txt" 2>&1
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_gemm.py \
    -k swept >"$R/gemm_swept.txt" 2>&1
echo "== gemm swept rc $?"; tail -2 "$R/gemm_swept.txt"; pack
dec 9b 9b --profile 1; grep -A8 "profile, 1" "$R/decode_9b.txt"; pack
TENSORFOLD_SWEPT=0 dec 9b_mlx 9b; pack
dec 27b 27b --profile 1; grep -A8 "profile, 1" "$R/decode_27b.txt"; pack
dec 2b 2b; pack
timeout 230 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime/test_gpu_runtime.py \
    >"$R/runtime.txt" 2>&1
echo "== runtime rc $?"; tail -3 "$R/runtime.txt"; pack
