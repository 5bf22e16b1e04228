#!/usr/bin/env bash
# Prepared in session 15 for the next session's first device call (one GPU): what session 15 could not measure.
# - 2B decode with qgemv3 for every shape (TENSORFOLD_GEMV_V3=1): it lost at 2B before (561 vs 590 tok/s) when its x
#   preparation cost 2,228 instructions a warp; session 15's rewrite cut that to 915.
# - 9B decode at 1 / 8 streams and 27B at 1 stream with the rewritten preparation (the shipped default).
# - The runtime GPU tier with the shipped defaults (qgemv3 for >= 2^25 codes, xprep2, the new preparation).
# - The opt-in bf16-dequantized prompt GEMM (TENSORFOLD_GEMM_DQ=1: ptxas loop 290 vs 415 instructions, 124 vs 166
#   registers) at 2B prompts, and the prompt-vs-step KL test with it.
set -u
OUT=${OUT:-/tmp/s16a}
R=$OUT/r
mkdir -p "$R"
. benchmarks/_dec.sh
pack() { tar -czf "$OUT/s16a.tar.gz" -C "$OUT" r; }
dec 2b_base 2b --profile 1; pack
TENSORFOLD_GEMV_V3=1 dec 2b_v3all 2b --profile 1; pack
dec 9b 9b; pack
timeout 150 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1 --prompts 512 --steps 10 \
    --out "$R/d27.md" >"$R/d27.txt" 2>&1
echo "== 27b rc $?"; grep -h "decode \|prompt " "$R/d27.txt"; pack
pr() {  # name, env...
    local n=$1; shift
    env "$@" timeout 150 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1 \
        --prompts 512,4096,16384 --steps 10 --out "$R/prompt_$n.md" >"$R/prompt_$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "prompt " "$R/prompt_$n.txt"
}
pr dq0 TENSORFOLD_GEMM_DQ=0; pack
pr dq1 TENSORFOLD_GEMM_DQ=1; pack
TENSORFOLD_GEMM_DQ=1 timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/runtime/test_gpu_runtime.py -k "prompt_vs_step" >"$R/kl_dq1.txt" 2>&1
echo "== kl dq1 rc $?"; tail -n 2 "$R/kl_dq1.txt"; pack
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime >"$R/gpu_tests.txt" 2>&1
echo "== tests rc $?"; tail -n 3 "$R/gpu_tests.txt"; pack
