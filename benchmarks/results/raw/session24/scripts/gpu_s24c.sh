#!/usr/bin/env bash
# Session 24, call 3 (one GPU): the chunked delta rule's inter pass on tensor cores (delta_chunk_tc, mma m16n8k16
# with bf16 hi + lo splits; TENSORFOLD_CHUNK_TC=8 / 16, off by default until measured).
# 1. GPU tier side by side (own kernel caches): the tc pass against the float64 recurrence at 2B / 9B / 27B head
#    counts, widths bit for bit, a segment alone == beside another (test_gpu_prompt -k tc); the runtime's prompt
#    paths with it on (prefill of many prompts, prompt vs step KL, reference).
# 2. bench_kernels_b chunked at 8,192 tokens: CUDA-core inter vs tc 8 / 16, prep + intra alone, fla as the peer.
#    Prediction: the inter pass (about 5.6 of 8.0 ms at 2B) falls 10-30x (about 170 mma a warp a chunk, ~1 us a
#    chunk, 128 chunks), so the whole chunked call 8.0 -> 2.5-3 ms at 2B, bounded by prep + intra.
# 3. 2B prompt of 4,096 tokens, TENSORFOLD_CHUNK_TC=0 vs 8: 18.7K tok/s -> about 23-25K (inter ~50 of 219 ms).
. benchmarks/_dec.sh
out_dir s24c
t0=$SECONDS
ptest tc 300 tests/kernels/test_gpu_prompt.py -k tc &
TENSORFOLD_CHUNK_TC=8 ptest prefill 300 tests/runtime/test_gpu_prefill.py &
TENSORFOLD_CHUNK_TC=8 ptest runtime 300 tests/runtime/test_gpu_runtime.py -k "prompt_vs_step or vs_reference" &
wait; pack
echo "== tests done at $((SECONDS - t0)) s"
timeout 150 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only chunked,fla --out "$R/kernels_b.md" \
    >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "chunk" "$R/kernels_b.md"; pack
for v in 0 8; do
    left=$((520 - (SECONDS - t0)))
    [ "$left" -lt 40 ] && { echo "== prompt tc=$v skipped ($left s left)"; continue; }
    TENSORFOLD_CHUNK_TC=$v timeout "$left" python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm \
        --streams 1 --steps 5 --prompts 4096 --out "$R/prompt_tc$v.md" >"$R/prompt_tc$v.txt" 2>&1
    echo "== prompt tc=$v rc $?"; grep -h "prompt \|rror" "$R/prompt_tc$v.txt" | head -3; pack
done
echo "== done at $((SECONDS - t0)) s"
