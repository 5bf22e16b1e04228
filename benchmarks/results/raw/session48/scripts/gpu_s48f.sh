#!/usr/bin/env bash
# Session 48, a last short call (269 s of budget left after call 5 was taken back mid-run with no output): only the
# 9B decode A/B of the arrival-counter reset, TENSORFOLD_GEMV3_RST early vs late (the new default), one process,
# two rounds, 1 / 8 streams. Prediction as in gpu_s48e.sh: one stream +1 to +4 %, eight streams +0.5 to +2 %.
. benchmarks/_dec.sh
out_dir s48f
t0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b > /dev/null 2>&1
echo "== synth at $((SECONDS - t0)) s"
timeout $((${LIMIT:-200} - (SECONDS - t0))) python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm \
    --streams 1,8 --prompts "" --steps 200 --ab-env "TENSORFOLD_GEMV3_RST=early;TENSORFOLD_GEMV3_RST=late" \
    --ab-rounds 2 --out "$R/ab_9b.md" > "$R/ab_9b.txt" 2>&1
echo "== ab 9b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/ab_9b.txt" | cut -c1-150 | head -10; pack
