#!/usr/bin/env bash
# Session 25, call 2 (one GPU): the tensor-core intra pass is now the GPU default (L2 prefetch removed).
# 1. GPU tier with the new default: the whole test_gpu_prompt.py, the prefill test, prompt vs step KL and the
#    reference comparison (three pytest processes side by side: compile-bound).
# 2. bench_kernels_b chunked: tc 16 with CUDA-core / tc intra; prep + intra alone, both intra forms.
# 3. 2B and 9B prompt of 4,096 tokens with a per-kernel profile of the prompt (--profile-prompt, new): where
#    the prompt's time goes now. Prediction: the prompt GEMM about 50-60 % of kernel time, the chunked delta
#    rule 10-15 %, attention 10-15 %.
. benchmarks/_dec.sh
out_dir s25b
t0=$SECONDS
ptest prompt 240 tests/kernels/test_gpu_prompt.py &
ptest prefill 240 tests/runtime/test_gpu_prefill.py &
ptest runtime 240 tests/runtime/test_gpu_runtime.py -k "prompt_vs_step or vs_reference" &
wait
echo "== tests done at $((SECONDS - t0)) s"; pack
timeout 150 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only chunked --tc 16,16i,pi,pii \
    --out "$R/kernels_b.md" >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "chunk" "$R/kernels_b.txt"; pack
for g in 2b 9b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1 --steps 5 \
        --prompts 4096 --profile-prompt 4096 --out "$R/prompt_$g.md" >"$R/prompt_$g.txt" 2>&1
    echo "== prompt $g rc $? at $((SECONDS - t0)) s"; grep -h "prompt \|profile\|rror" "$R/prompt_$g.txt" | head -4
    grep -h " us " "$R/prompt_$g.txt" | head -14; pack
done
echo "== done at $((SECONDS - t0)) s"
