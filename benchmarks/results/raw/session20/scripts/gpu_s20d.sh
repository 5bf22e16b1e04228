#!/usr/bin/env bash
# Session 20, call 4 (one GPU): the runtime's swept test with every linear on qgemv (prompt GEMM, paired gate | up,
# embedding on swept words), the engine's GPU parity test (now on a swept arena), and decode at 2B (all, 0: only
# the tied head is swept there by default) and 27B (gate_up).
. benchmarks/_dec.sh
out_dir s20d
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short -s tests/runtime/test_gpu_runtime.py \
    -k swept >"$R/rt_swept.txt" 2>&1
echo "== runtime swept rc $?"; grep "swept layout\|passed\|failed\|Error" "$R/rt_swept.txt" | tail -4; pack
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engine/test_backend_parity_gpu.py \
    >"$R/parity.txt" 2>&1
echo "== parity rc $?"; tail -2 "$R/parity.txt"; pack
dec 2b 2b; pack
TENSORFOLD_SWEPT=0 dec 2b_mlx 2b; pack
TENSORFOLD_SWEPT=gate_up dec 27b_gu 27b; pack
