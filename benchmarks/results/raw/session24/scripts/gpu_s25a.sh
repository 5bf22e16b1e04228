#!/usr/bin/env bash
# Prepared in session 24 for the next session's first device call (one GPU, about 7 minutes). Both forms below were
# written after session 24's device time ran out: neither has run on a GPU.
# 1. GPU tier: test_gpu_prompt -k tc: the inter pass with the L2 prefetch form (bit for bit), and the intra pass on
#    tensor cores (delta_intra_tc, TENSORFOLD_CHUNK_INTRA_TC=1) against the float64 recurrence at 2B / 9B / 27B
#    head counts, a segment alone == beside another.
# 2. bench_kernels_b chunked at 8,192 tokens: tc 16, + L2 prefetch, + tc intra, both; prep + intra alone.
#    Predictions: prefetch: 2B inter pass 1,500 -> 600-900 us if its ~12 us a chunk are DRAM round trips (no change
#    if they are barriers and mma chains). tc intra: prep + intra 2,356 -> about 600-900 us at 2B (Gram products
#    and the blocked solve on mma; 203 registers, so 2 blocks an SM).
# 3. 2B prompt 4,096 tokens: default vs both on.
. benchmarks/_dec.sh
out_dir s25a
t0=$SECONDS
ptest tc 240 tests/kernels/test_gpu_prompt.py -k tc
timeout 200 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only chunked --tc 16,16pf,16i,16pfi,pi \
    --out "$R/kernels_b.md" >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "chunk" "$R/kernels_b.txt"; pack
for v in 0 1; do
    TENSORFOLD_CHUNK_TC_PF=$v TENSORFOLD_CHUNK_INTRA_TC=$v timeout 80 python3 benchmarks/bench_decode.py \
        --geometry 2b --root /tmp/tfm --streams 1 --steps 5 --prompts 4096 --out "$R/prompt_$v.md" \
        >"$R/prompt_$v.txt" 2>&1
    echo "== prompt pf+intra=$v rc $?"; grep -h "prompt \|rror" "$R/prompt_$v.txt" | head -3; pack
done
echo "== done at $((SECONDS - t0)) s"
