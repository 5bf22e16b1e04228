#!/usr/bin/env bash
# Session 25, call 5 (one GPU), the session's last:
# - silu_mul_fused_k on a 2-d grid (no 64-bit division an element; same bits). Prediction: 4.4 % -> about 2 % of
#   the 2B prompt's kernel time.
# - attention_prompt with S's lo products in their own accumulators (TENSORFOLD_ATTN_PROMPT_SPLIT=1: two mma
#   chains of 16 instead of one of 32 an n-tile; other bits). Prediction: 5-15 % faster if the S chain is exposed.
# GPU tier: attention_prompt (default and split), the GLU / SwiGLU bit-equality tests, prefill, prompt vs step,
# reference. Then bench attn_prompt; 2B prompts 4,096 / 16,384 and 9B 4,096 (default), 2B 4,096 with split.
. benchmarks/_dec.sh
out_dir s25e
t0=$SECONDS
ptest attp 240 tests/kernels/test_gpu_attention_prompt.py &
TENSORFOLD_ATTN_PROMPT_SPLIT=1 ptest attp_split 240 tests/kernels/test_gpu_attention_prompt.py &
ptest glu 240 tests/kernels/test_gpu_glu.py tests/kernels/test_gpu_a.py -k "silu or glu" &
ptest prefill 240 tests/runtime/test_gpu_prefill.py &
ptest runtime 240 tests/runtime/test_gpu_runtime.py -k "prompt_vs_step or vs_reference" &
wait
echo "== tests done at $((SECONDS - t0)) s"; pack
timeout 120 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only attn_prompt \
    --out "$R/kernels_b.md" >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "prompt attention\|peer\|rror" "$R/kernels_b.txt"; pack
run_prompt() {
    local n=$1 g=$2 L=$3; shift 3
    timeout 120 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1 --steps 5 \
        --prompts $L --out "$R/prompt_$n.md" "$@" >"$R/prompt_$n.txt" 2>&1
    echo "== prompt $n rc $? at $((SECONDS - t0)) s"; grep -h "prompt \|decode \|rror" "$R/prompt_$n.txt" | head -4
    pack
}
run_prompt 2b 2b 4096,16384
TENSORFOLD_ATTN_PROMPT_SPLIT=1 run_prompt 2b_split 2b 4096,16384
run_prompt 9b 9b 4096
echo "== done at $((SECONDS - t0)) s"
