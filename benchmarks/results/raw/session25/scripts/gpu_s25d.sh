#!/usr/bin/env bash
# Session 25, call 4 (one GPU):
# - attention_prompt v2: q's hi / lo fragments in dynamic shared memory (written once, no global reload and
#   split a key block), K and V loads issued together (2 round trips a key block instead of 12).
#   Prediction: 2B 4,096 rows 2,425 -> 1,000-1,500 us.
# - conv_rows: a thread walks 16 rows of one channel, sliding the window in registers (same bits); gdn_prep: one
#   warp a row instead of a block-wide tree with 7 barriers (other bits). Prediction: conv 6.3 % and prep 5.2 % of
#   the 2B prompt's kernel time -> 2-3 % each.
# GPU tier: attention_prompt, conv / delta (test_gpu_b), fused vs three-launch (test_gpu_fused), chunked
# (test_gpu_prompt), prefill, prompt vs step, reference.
. benchmarks/_dec.sh
out_dir s25d
t0=$SECONDS
ptest attp 240 tests/kernels/test_gpu_attention_prompt.py tests/kernels/test_gpu_prompt.py &
ptest kb 240 tests/kernels/test_gpu_b.py tests/kernels/test_gpu_fused.py &
ptest prefill 240 tests/runtime/test_gpu_prefill.py &
ptest runtime 240 tests/runtime/test_gpu_runtime.py -k "prompt_vs_step or vs_reference" &
wait
echo "== tests done at $((SECONDS - t0)) s"; pack
timeout 150 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only attn_prompt,chunked --tc 16i,pii \
    --out "$R/kernels_b.md" >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "prompt attention\|peer\|chunked\|rror" "$R/kernels_b.txt"; pack
run_prompt() {
    local n=$1 g=$2 L=$3; shift 3
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1 --steps 5 \
        --prompts $L --out "$R/prompt_$n.md" "$@" >"$R/prompt_$n.txt" 2>&1
    echo "== prompt $n rc $? at $((SECONDS - t0)) s"; grep -h "prompt \|profile,\|rror" "$R/prompt_$n.txt" | head -4
    grep -h " us " "$R/prompt_$n.txt" | head -10; pack
}
run_prompt 2b 2b 4096,16384 --profile-prompt 4096 --prompt-rows 4096
run_prompt 9b 9b 4096
echo "== done at $((SECONDS - t0)) s"
