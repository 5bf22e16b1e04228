#!/usr/bin/env bash
# Prepared in session 46 for session 47: a warm follow-up of gpu_s47a.sh (its synth checkpoints in /tmp/tfm).
# Issue 3's kernel table (the default completion); the 27B decode A/B CPRED 0 / 1, plus the 27B down at 340
# blocks (grid_x 20: every warp 4 (tile, chunk) items, against 396 blocks where 44 of 92 warps a chunk take 4 and
# the rest 3); the 9B A/B CPRED 0 / 1.
. benchmarks/_dec.sh
out_dir s47b
t0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpu.txt"
timeout 200 python3 benchmarks/bench_kernels.py --only decode --no-b --out "$R" > "$R/kern.txt" 2>&1
echo "== kernels rc $? at $((SECONDS - t0)) s"; grep -h "head\|mlp down" "$R/kern.txt" | head -12; pack
timeout 150 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 100 --ab-env "TENSORFOLD_GEMV3_CPRED=0;TENSORFOLD_GEMV3_CPRED=1;TENSORFOLD_GEMV3_CG=5120x17408=16/340" \
    --ab-rounds 2 --out "$R/ab_27b.md" > "$R/ab_27b.txt" 2>&1
echo "== ab 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_27b.txt" | head -12; pack
timeout 120 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 200 --ab-env "TENSORFOLD_GEMV3_CPRED=0;TENSORFOLD_GEMV3_CPRED=1" --ab-rounds 2 \
    --out "$R/ab_9b.md" > "$R/ab_9b.txt" 2>&1
echo "== ab 9b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_9b.txt" | head -8; pack
echo "== done at $((SECONDS - t0)) s"
