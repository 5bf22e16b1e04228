#!/usr/bin/env bash
# Session 25, call 3 (one GPU): the tensor-core prompt attention (attention_prompt, new; default on a GPU).
# 1. GPU tier: its real-shape test (2B / 9B / 27B heads vs float64, alone == beside), the prefill test, prompt vs
#    step KL and the reference comparison (these run the runtime's prompts through it).
# 2. bench_kernels_b attn_prompt: 4,096 causal rows, tensor-core kernel vs the split-K loop of 64 rows vs torch
#    sdpa. Prediction: the split-K loop about 20 ms at 2B (131 ms / 6 layers in call 2's profile), the new kernel
#    0.3-1 ms.
# 3. 2B prompt 4,096 with the profile (new default), 2B with TENSORFOLD_ATTN_PROMPT=0 (A/B), 9B prompt 4,096.
#    Prediction: 2B 175 ms -> 110-130 ms.
. benchmarks/_dec.sh
out_dir s25c
t0=$SECONDS
ptest attp 240 tests/kernels/test_gpu_attention_prompt.py &
ptest prefill 240 tests/runtime/test_gpu_prefill.py &
ptest runtime 240 tests/runtime/test_gpu_runtime.py -k "prompt_vs_step or vs_reference" &
wait
echo "== tests done at $((SECONDS - t0)) s"; pack
timeout 150 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only attn_prompt \
    --out "$R/kernels_b.md" >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "prompt attention\|peer\|rror" "$R/kernels_b.txt"; pack
run_prompt() {
    local n=$1 g=$2; shift 2
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1 --steps 5 \
        --prompts 4096 --out "$R/prompt_$n.md" "$@" >"$R/prompt_$n.txt" 2>&1
    echo "== prompt $n rc $? at $((SECONDS - t0)) s"; grep -h "prompt \|profile,\|rror" "$R/prompt_$n.txt" | head -4
    grep -h " us " "$R/prompt_$n.txt" | head -8; pack
}
run_prompt 2b 2b --profile-prompt 4096
TENSORFOLD_ATTN_PROMPT=0 run_prompt 2b_off 2b
run_prompt 9b 9b
echo "== done at $((SECONDS - t0)) s"
