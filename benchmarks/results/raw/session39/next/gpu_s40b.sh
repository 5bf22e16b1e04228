#!/usr/bin/env bash
# Prepared in session 39. On an H200 (the issue targets are H200 figures): the decode table at 1 / 8 / 32 streams
# for 2B and 9B with the defaults, then the in-graph chain A/B at one and eight streams (two rounds), then 27B
# (TLIM) with its timeline at one stream. Predictions: 2B 780-790, 9B 385-390, 27B 146-149 tok/s at one stream
# (s35 / s37 figures, nothing in the defaults changed since); CHAIN_GRAPH=1 +0.2 to +0.8 % at 2B.
. benchmarks/_dec.sh
out_dir s40b
t0=$SECONDS
AB="TENSORFOLD_CHAIN_GRAPH=0;TENSORFOLD_CHAIN_GRAPH=1"
for g in 2b 9b; do
    timeout 170 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8,32 --prompts "" \
        --steps 100 --ab-env "$AB" --ab-rounds 2 --out "$R/table_$g.md" > "$R/table_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode " "$R/table_$g.txt" | head -12; pack
done
timeout ${TLIM:-200} python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 40 --timeline 1 --out "$R/table_27b.md" > "$R/table_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "sums a step\|decode " "$R/table_27b.txt" | head -6
gzip -f "$R"/timeline_*.json 2>/dev/null; pack
echo "== done at $((SECONDS - t0)) s"
