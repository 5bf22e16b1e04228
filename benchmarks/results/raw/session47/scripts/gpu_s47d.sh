#!/usr/bin/env bash
# Session 47, the budget's last call (about 190 s of wall; only worth it on an H200): issue 3's kernel table on the
# final code (CPRED=auto), then issue 4's 9B one-stream decode (session 44's H200: 399.3-401.0 tok/s; predicted
# about +1 % from auto), as far as the time goes. Results packed after each step.
. benchmarks/_dec.sh
out_dir s47d
t0=$SECONDS
LIMIT=${LIMIT:-180}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b > /dev/null 2>&1 &
timeout 90 python3 benchmarks/bench_kernels.py --only decode --no-b --out "$R" > "$R/kern.txt" 2>&1
echo "== kernels rc $? at $((SECONDS - t0)) s"; grep -h "decode |" "$R/kern.txt" | grep "qgemv" | cut -c1-100; pack
wait
left=$((LIMIT - (SECONDS - t0)))
timeout "$left" python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1 --prompts "" \
    --steps 200 --out "$R/dec_9b.md" > "$R/dec_9b.txt" 2>&1
echo "== 9b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/dec_9b.txt" | head -4; pack
echo "== done at $((SECONDS - t0)) s"
