#!/usr/bin/env bash
# Prepared in session 19: the second device call of the next session (one GPU, about 8 minutes), after gpu_s20a.sh.
# End to end: the runtime's opt-in swept copies (TENSORFOLD_GEMV3_SWEPT=1: every qgemv-planned weight again in
# qgemv.sweep_pack's layout, gate / up rows paired for the SwiGLU epilogue) against the default, 9B and 27B decode
# at 1 and 8 streams; first its GPU test (2B: the tied head's logits bit-equal with and without).
. benchmarks/_dec.sh
out_dir s20b
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short -s tests/runtime/test_gpu_runtime.py \
    -k swept >"$R/rt_swept.txt" 2>&1
echo "== runtime swept test rc $?"; tail -3 "$R/rt_swept.txt"; pack
dec 9b 9b; pack
TENSORFOLD_GEMV3_SWEPT=1 dec 9b_sw 9b; pack
dec 27b 27b; pack
TENSORFOLD_GEMV3_SWEPT=1 dec 27b_sw 27b; pack
