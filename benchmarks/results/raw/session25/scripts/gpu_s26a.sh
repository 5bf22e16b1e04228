#!/usr/bin/env bash
# Prepared in session 25 for the next session's first device call (one GPU, about 6 minutes): where prompts stand
# now, before the prompt GEMM work.
# 1. bench_gemm.py: the prompt GEMM (v3 dq) vs torch bf16 matmul at 2B / 9B / 27B gate/up and down, 512 / 4,096 rows.
# 2. 9B prompt of 4,096 tokens with --profile-prompt (shares of the kernel sum after session 25's changes).
# 3. 27B prompt of 512 / 4,096 tokens (not measured since session 14: 1,863 / 1,622 tok/s then).
. benchmarks/_dec.sh
out_dir s26a
t0=$SECONDS
timeout 200 python3 benchmarks/bench_gemm.py --out "$R" --models 2B,9B,27B --rows 512,4096 >"$R/gemm.txt" 2>&1
echo "== gemm rc $? at $((SECONDS - t0)) s"; grep -h "TFLOP\|torch\|rror" "$R/gemm.txt" | head -20; pack
timeout 150 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1 --steps 5 --prompts 4096 \
    --profile-prompt 4096 --out "$R/prompt_9b.md" >"$R/prompt_9b.txt" 2>&1
echo "== 9b rc $? at $((SECONDS - t0)) s"; grep -h "prompt \|profile,\| us " "$R/prompt_9b.txt" | head -14; pack
timeout 200 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1 --steps 5 \
    --prompts 512,4096 --out "$R/prompt_27b.md" >"$R/prompt_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "prompt \|decode \|rror" "$R/prompt_27b.txt" | head -4; pack
echo "== done at $((SECONDS - t0)) s"
