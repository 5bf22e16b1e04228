#!/usr/bin/env bash
# Prepared at session 25's end, NOT run (the device refused a start: too little time left). For session 26: the review mend's attention_prompt (_acc_mma2; PTX
# instructions identical offline) on the GPU: its real-shape test and the 4,096-row bench row at 2B / 27B.
. benchmarks/_dec.sh
out_dir s25f
t0=$SECONDS
ptest attp 90 tests/kernels/test_gpu_attention_prompt.py
pack
timeout 60 python3 benchmarks/bench_kernels_b.py --models 2B,27B --only attn_prompt --out "$R/kernels_b.md" \
    >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "prompt attention\|peer\|rror" "$R/kernels_b.txt"; pack
