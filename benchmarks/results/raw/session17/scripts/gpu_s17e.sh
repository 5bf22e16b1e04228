#!/usr/bin/env bash
# Session 17, fourth device call (one GPU): the final code (the SwiGLU epilogue where it is faster, affine.glu_faster;
# pipe2 up to 4,096 inputs): decode at 1 / 8 streams for 2B, 9B and 27B on one machine, then the 9B / 2B prompts of
# 512 / 4,096 / 16,384 tokens with the bf16-dequantized prompt GEMM (the second half of session 16's gpu_s17b.sh, never run as such and removed).
. benchmarks/_dec.sh
out_dir s17e
dec 2b 2b; pack
dec 9b 9b; pack
dec 27b 27b; pack
for g in 9b 2b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1 --prompts 512,4096,16384 \
        --steps 10 --out "$R/prompt_$g.md" >"$R/prompt_$g.txt" 2>&1
    echo "== prompt $g rc $?"; grep -h "prompt " "$R/prompt_$g.txt"; pack
done
