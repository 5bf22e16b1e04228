#!/usr/bin/env bash
# Session 24, call 4 (one GPU, the session's last ~570 s): the tensor-core inter pass with batched loads (a
# batch of 4 k-tiles of W / Q̂, all of P's and K̂'s tiles issued before use: about 6 memory round trips a chunk
# instead of about 22), now the default on a GPU (TENSORFOLD_CHUNK_TC=16).
# Prediction: call 3 measured the tc pass latency-bound (2B tc16: 14 us a chunk for ~170 mma a warp); with ~4x
# fewer round trips the inter pass at 2B falls 1,833 -> about 500-700 us (chunked total 4,212 -> about 3,000 us).
# 1. GPU tier: test_gpu_prompt -k tc (recurrence, widths, neighbours), the prefill test (default path).
# 2. bench_kernels_b chunked + fla at 8,192 tokens. 3. 2B prompt 4,096 (default). 4. 27B decode at 1 / 2 / 4
#    streams, defer auto (on from 2 rows): is 2 rows already a gain?
. benchmarks/_dec.sh
out_dir s24d
t0=$SECONDS
ptest tc 200 tests/kernels/test_gpu_prompt.py -k tc &
ptest prefill 200 tests/runtime/test_gpu_prefill.py &
wait; pack
echo "== tests done at $((SECONDS - t0)) s"
timeout 170 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only chunked,fla --out "$R/kernels_b.md" \
    >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "chunk" "$R/kernels_b.txt"; pack
timeout 80 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1 --steps 5 --prompts 4096 \
    --out "$R/prompt_2b.md" >"$R/prompt_2b.txt" 2>&1
echo "== prompt rc $?"; grep -h "prompt \|rror" "$R/prompt_2b.txt" | head -3; pack
left=$((450 - (SECONDS - t0)))
[ "$left" -gt 50 ] && { timeout "$left" python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm \
    --streams 1,2,4 --prompts 512 --steps 30 --out "$R/decode_27b_124.md" >"$R/decode_27b_124.txt" 2>&1;
    echo "== 27b rc $?"; grep -h "decode \|rror" "$R/decode_27b_124.txt" | head -5; pack; }
echo "== done at $((SECONDS - t0)) s"
