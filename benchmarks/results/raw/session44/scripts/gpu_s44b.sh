#!/usr/bin/env bash
# Session 44, the warm follow-up to gpu_s44a.sh (its synth checkpoints in /tmp/tfm): with x's fragments made once a
# block (TENSORFOLD_TC_XFRAG=1) the 9B square launch's arithmetic is lighter, so the 8-warp geometries that session 41
# lost to 2 x 16 (a 512-thread block at 128 registers fills an SM's register file and cannot start beside the
# previous kernel's blocks under PDL) are timed again; then the decode GEMVs alone for issue 3 (share of copy).
# Predicted: 2 x 8 whole within +-0.5 % of 2 x 16 (the arithmetic phase was 3.3 us at 8 x 8 vs 3.6 at 16 warps, now
# about 2.3 either way; x's wait 3.1 vs 2.3 us favours 16 warps), so likely a tie or a small loss.
. benchmarks/_dec.sh
out_dir s44b
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
X="TENSORFOLD_TC_XFRAG=${XF:-1}"
timeout 200 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 100 --ab-env "$X;$X TENSORFOLD_TC_GEO=4096x4096=2,8;$X TENSORFOLD_TC_GEO=4096x4096=1,8" --ab-rounds 2 \
    --out "$R/geo_9b.md" > "$R/geo_9b.txt" 2>&1
echo "== 9b geo rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/geo_9b.txt" | head -14; pack
left=$(( ${BUDGET_S:-540} - (SECONDS - t0) ))
if [ $left -gt 60 ]; then
    env $X timeout $left python3 benchmarks/bench_kernels.py --only decode --no-b --out "$R" > "$R/kern.txt" 2>&1
    echo "== kernels rc $? at $((SECONDS - t0)) s"; tail -8 "$R/kern.txt"; pack
fi
echo "== done at $((SECONDS - t0)) s"
