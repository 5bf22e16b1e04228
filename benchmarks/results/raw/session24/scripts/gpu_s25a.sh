#!/usr/bin/env bash
# Prepared in session 24 for the next session's first device call (one GPU, about 6 minutes).
# 1. GPU tier: the tensor-core inter pass with the L2 prefetch form (test_gpu_prompt -k tc checks it bit for bit).
# 2. bench_kernels_b chunked at 8,192 tokens: tc 16 with and without TENSORFOLD_CHUNK_TC_PF=1.
#    Prediction: the 2B inter pass (chunked minus prep + intra) 1,500 -> 600-900 us if its ~12 us a chunk are DRAM
#    round trips; no change if they are barriers and mma chains.
# 3. 2B prompt 4,096 tokens with PF 0 / 1.
. benchmarks/_dec.sh
out_dir s25a
t0=$SECONDS
ptest tc 200 tests/kernels/test_gpu_prompt.py -k tc
timeout 220 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only chunked --out "$R/kernels_b.md" \
    >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "chunk" "$R/kernels_b.txt"; pack
for v in 0 1; do
    TENSORFOLD_CHUNK_TC_PF=$v timeout 80 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm \
        --streams 1 --steps 5 --prompts 4096 --out "$R/prompt_pf$v.md" >"$R/prompt_pf$v.txt" 2>&1
    echo "== prompt pf=$v rc $?"; grep -h "prompt \|rror" "$R/prompt_pf$v.txt" | head -3; pack
done
echo "== done at $((SECONDS - t0)) s"
