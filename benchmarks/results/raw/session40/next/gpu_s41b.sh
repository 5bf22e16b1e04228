#!/usr/bin/env bash
# Prepared in session 40. The 9B 4096 x 4096 first-kernel plan at 16 warps a block (mt 2, 4 groups a warp: the same
# instructions an SM as the plan's 8 warps, twice the warps to hide latency) in decode, for every row count
# (TENSORFOLD_TC_GEO, read when the runner plans its weights, so one process a form, alternated twice), with the
# whole form at one row (the default). Run it only if gpu_s41a.sh's timeline shows the 16-warp whole form faster than
# the 8-warp one. Prediction: 9B one stream +1 to +2 % (32 launches, 1-2 us each); eight rows unknown (the plain
# 16-warp kernel is capped at 128 registers).
. benchmarks/_dec.sh
out_dir s41b
t0=$SECONDS
for r in 1 2; do
    for geo in "" "4096x4096=2,16"; do
        TENSORFOLD_TC_GEO="$geo" timeout 120 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm \
            --streams 1,8 --prompts "" --steps 100 --out "$R/geo_${r}_${geo:-plan}.md" > "$R/geo_${r}_${geo:-plan}.txt" 2>&1
        echo "== 9b geo '${geo:-plan}' round $r rc $? at $((SECONDS - t0)) s"
        grep -h "decode \|Error" "$R/geo_${r}_${geo:-plan}.txt" | head -4
        pack
    done
done
