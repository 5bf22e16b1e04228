#!/usr/bin/env bash
# Session 17, second device call (one GPU): the SwiGLU epilogue of the gate | up GEMVs (no silu_mul launch in
# decode) and "pipe2" at 9B's 4096 x 4096: the epilogue's GPU tests at the 2B / 9B / 27B shapes, the runtime GPU
# tier (2B geometry, the epilogue on), then decode at 1 / 8 streams: 2B with a profile and again with
# TENSORFOLD_GLU=0 (A/B on one machine), 9B, 27B.
. benchmarks/_dec.sh
out_dir s17c
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_glu.py \
    >"$R/glu_tests.txt" 2>&1
echo "== glu tests rc $?"; tail -n 3 "$R/glu_tests.txt"; pack
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime >"$R/rt_tests.txt" 2>&1
echo "== runtime tests rc $?"; tail -n 2 "$R/rt_tests.txt"; pack
dec 2b 2b --profile 1; grep -A12 "profile, 1 stream" "$R/decode_2b.txt"; pack
TENSORFOLD_GLU=0 dec 2b_noglu 2b; pack
dec 9b 9b; pack
dec 27b 27b; pack
