#!/usr/bin/env bash
# Session 14, call 1 (one GPU), from a `git archive`: the qgemv prefetch form (every tile's words copied into
# dynamic shared memory before the PDL wait). 2B decode with it and without (TENSORFOLD_GEMV_PF=0), a per-kernel
# profile at one stream; 9B likewise; then the qgemv GPU tier (the new form at its real shapes) and the PDL test.
set -u
TAG=${TAG:-s14a}
OUT=${OUT:-/tmp/$TAG}
R=$OUT/r
mkdir -p "$R"
. "$(dirname "$0")/_dec.sh"
TENSORFOLD_GEMV_PF=1 dec 2b_pf 2b --profile 1  # on by default at 66564bd and b09547c; opt-in since
TENSORFOLD_GEMV_PF=0 dec 2b_nopf 2b --profile 1
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    tests/runtime/test_gpu_pdl.py >"$R/gpu_tests.txt" 2>&1
tail -n 5 "$R/gpu_tests.txt"
TENSORFOLD_GEMV_PF=1 dec 9b_pf 9b
TENSORFOLD_GEMV_PF=0 dec 9b_nopf 9b
tar -czf "$OUT/$TAG.tar.gz" -C "$OUT" r
