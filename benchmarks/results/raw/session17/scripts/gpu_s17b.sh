#!/usr/bin/env bash
# Prepared in session 16 for the next session's second device call (one GPU): 9B decode at 1 / 8 streams and 9B / 2B
# prompts of 512 / 4,096 / 16,384 tokens with the bf16-dequantized prompt GEMM (the default since session 16; the
# README's 9B prompt figures predate it).
. benchmarks/_dec.sh
out_dir s17b
dec 9b 9b; pack
for g in 9b 2b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1 --prompts 512,4096,16384 \
        --steps 10 --out "$R/prompt_$g.md" >"$R/prompt_$g.txt" 2>&1
    echo "== prompt $g rc $?"; grep -h "prompt " "$R/prompt_$g.txt"; pack
done
