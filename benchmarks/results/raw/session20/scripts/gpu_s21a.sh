#!/usr/bin/env bash
# Prepared in session 20 for the next session's first device call (one GPU, about 6 minutes).
# The shipped swept layout (runs of one K chunk, the prompt GEMM's run length compiled in at 758b73e) was not
# measured end to end: call 5 of session 20 ran the prompt GEMM with a runtime run length (9B prompt 512: 5,983
# tok/s against 7,362 with runs of one iteration). Expected now: prompts within a few % of 7.2-7.4k (9B) and
# 2.2-2.3k (27B). Then the swept GPU tests of the prompt GEMM (its 9B case failed in call 5 on the test's own
# dq_ref check of the MLX kernel; now the exact product with a 2^-6 bound).
. benchmarks/_dec.sh
out_dir s21a
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_gemm.py \
    -k swept >"$R/gemm_swept.txt" 2>&1
echo "== gemm swept rc $?"; tail -2 "$R/gemm_swept.txt"; pack
dec 9b 9b; pack
TENSORFOLD_SWEPT=0 dec 9b_mlx 9b; pack
dec 27b 27b; pack
dec 2b 2b; pack
