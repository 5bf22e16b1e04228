#!/usr/bin/env bash
# Session 20, call 3 (one GPU): the swept layout as the single copy (TENSORFOLD_SWEPT=all, the new default): the
# swept prompt GEMM's GPU test, the whole runtime GPU file (every runner there now sweeps its arena in place), and
# decode at 9B (all, gate_up) and 27B (all). The MLX-layout figures of the same code paths are call 2's.
. benchmarks/_dec.sh
out_dir s20c
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short -s tests/kernels/test_gpu_gemm.py \
    -k swept >"$R/gemm_swept.txt" 2>&1
echo "== gemm swept rc $?"; tail -3 "$R/gemm_swept.txt"; pack
timeout 260 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short -s tests/runtime/test_gpu_runtime.py \
    >"$R/rt.txt" 2>&1
echo "== runtime rc $?"; grep "swept layout\|passed\|failed\|Error" "$R/rt.txt" | tail -8; pack
dec 9b 9b; pack
TENSORFOLD_SWEPT=gate_up dec 9b_gu 9b; pack
dec 27b 27b; pack
