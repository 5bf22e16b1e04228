#!/usr/bin/env bash
# Session 47, the budget's last call (about 190 s of wall, an H100): the GPU bits of the opt-in SwiGLU completion set
# TENSORFOLD_GEMV3_CMPU=autog18 at the 9B gate | up, then its 9B decode A/B at one stream as far as time goes.
. benchmarks/_dec.sh
out_dir s47e
t0=$SECONDS
LIMIT=${LIMIT:-180}
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b > /dev/null 2>&1 &
ptest swg 120 tests/kernels/test_gpu_qgemv.py -k "swiglu_completion_sets and 9B" -s
wait
pack
left=$((LIMIT - (SECONDS - t0)))
timeout "$left" python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1 --prompts "" \
    --steps 200 --ab-env "TENSORFOLD_GEMV3_CMPU=auto;TENSORFOLD_GEMV3_CMPU=autog18" --ab-rounds 2 \
    --out "$R/ab_9b.md" > "$R/ab_9b.txt" 2>&1
echo "== ab 9b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_9b.txt" | head -6; pack
echo "== done at $((SECONDS - t0)) s"
