#!/usr/bin/env bash
# Session 14, call 3 (one GPU), from a `git archive`: does the SM's L1 / shared split stop a dependent launch from
# starting early? 2B decode with every graph kernel preferring the largest shared split (TENSORFOLD_SMEM_CARVEOUT=100)
# and without, with the qgemv prefetch form (TENSORFOLD_GEMV_PF=1) and without; 9B with and without the split.
set -u
OUT=${OUT:-/tmp/s14c}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=/tmp/tfkc
dec() {  # name geometry extra-args...
    local n=$1 g=$2; shift 2
    timeout 240 python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8 --prompts 512 \
        --steps 30 --out "$R/decode_$n.md" "$@" >"$R/decode_$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "decode \|Error\|error" "$R/decode_$n.txt" | head -6
}
TENSORFOLD_SMEM_CARVEOUT=100 dec 2b_c100 2b
dec 2b_base 2b
TENSORFOLD_SMEM_CARVEOUT=100 TENSORFOLD_GEMV_PF=1 dec 2b_pf_c100 2b --profile 1
TENSORFOLD_SMEM_CARVEOUT=100 dec 9b_c100 9b
dec 9b_base 9b
tar -czf "$OUT/s14c.tar.gz" -C "$OUT" r
