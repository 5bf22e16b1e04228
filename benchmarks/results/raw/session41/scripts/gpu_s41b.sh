#!/usr/bin/env bash
# Session 41, call 2. Call 1's timeline (H100, 9B 4096 x 4096, graph + PDL, us a launch): plan 10.14, whole 9.77,
# mt2 nw16 plain 10.1 / whole 9.17, mt1 nw8 plain 9.83 / whole 9.52. So 16 warps a block helps the whole form.
# (1) timeline again, with mt1 nw16 (256 blocks of 16 warps, 4 groups a warp) added: predicted whole 8.9-9.3 us.
# (2) 9B decode, one process a plan, alternated twice: plan vs TC_GEO 2,16 vs 1,16. Prediction at one stream:
#     +0.4 to +0.8 % (32 launches x 0.6 us of 2.82 ms); eight rows unknown (the plain 16-warp kernel, 128 registers).
. benchmarks/_dec.sh
out_dir s41b
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
timeout 100 python3 benchmarks/tc_timeline.py --shapes 4096x4096 --whole --forms "2,16,1;1,16,0;1,16,1" \
    --out "$R" > "$R/tc_timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch\|same bits\|Error" "$R/tc_timeline.txt" | head -30
pack
for r in 1 2; do
    for geo in "" "4096x4096=2,16" "4096x4096=1,16"; do
        n=$(echo "${geo:-plan}" | tr '=,' '__')
        TENSORFOLD_TC_GEO="$geo" timeout 100 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm \
            --streams 1,8 --prompts "" --steps 100 --out "$R/geo_${r}_$n.md" > "$R/geo_${r}_$n.txt" 2>&1
        echo "== 9b geo '${geo:-plan}' round $r rc $? at $((SECONDS - t0)) s"
        grep -h "decode \|Error" "$R/geo_${r}_$n.txt" | head -4
        pack
        [ $((SECONDS - t0)) -gt 480 ] && break 2
    done
done
echo "== done at $((SECONDS - t0)) s"
