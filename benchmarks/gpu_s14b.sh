#!/usr/bin/env bash
# Session 14, call 2 (one GPU), from a `git archive`: the prefetch form with a tile split into parts inside a block
# dynamic shared memory before the PDL wait). 2B decode with it and without (TENSORFOLD_GEMV_PF=0), a per-kernel
# profile at one stream; 9B likewise; then the qgemv GPU tier (the new form at its real shapes) and the PDL test.
set -u
OUT=${OUT:-/tmp/s14b}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=/tmp/tfkc
dec() {  # name geometry extra-args...
    local n=$1 g=$2; shift 2
    timeout 240 python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8 --prompts 512 \
        --steps 30 --out "$R/decode_$n.md" "$@" >"$R/decode_$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "decode \|prompt \|Error\|error" "$R/decode_$n.txt" | head -8
}
dec 2b_pf 2b --profile 1
TENSORFOLD_GEMV_PF=0 dec 2b_nopf 2b --profile 1
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    tests/runtime/test_gpu_pdl.py >"$R/gpu_tests.txt" 2>&1
tail -n 5 "$R/gpu_tests.txt"
dec 9b_pf 9b
TENSORFOLD_GEMV_PF=0 dec 9b_nopf 9b
tar -czf "$OUT/s14b.tar.gz" -C "$OUT" r
