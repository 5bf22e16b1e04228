#!/usr/bin/env bash
# Session 16, second device call (one GPU): the runtime GPU tier on the shipped code (qgemv3's rewritten x
# preparation has not run through it), then the opt-in bf16-dequantized prompt GEMM (TENSORFOLD_GEMM_DQ=1) against
# the default at 2B prompts, and the prompt-vs-step KL test with it.
set -u
OUT=${OUT:-/tmp/s16e}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
pack() { tar -czf "$OUT/s16e.tar.gz" -C "$OUT" r; }
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime >"$R/gpu_tests.txt" 2>&1
echo "== tests rc $?"; tail -n 3 "$R/gpu_tests.txt"; pack
pr() {  # name, env...
    local n=$1; shift
    env "$@" timeout 110 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1 \
        --prompts 512,4096,16384 --steps 10 --out "$R/prompt_$n.md" >"$R/prompt_$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "prompt \|decode " "$R/prompt_$n.txt"
}
pr dq0 TENSORFOLD_GEMM_DQ=0; pack
pr dq1 TENSORFOLD_GEMM_DQ=1; pack
TENSORFOLD_GEMM_DQ=1 timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/runtime/test_gpu_runtime.py -k "prompt_vs_step" >"$R/kl_dq1.txt" 2>&1
echo "== kl dq1 rc $?"; tail -n 2 "$R/kl_dq1.txt"; pack
