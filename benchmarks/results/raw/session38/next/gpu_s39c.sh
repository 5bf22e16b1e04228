#!/usr/bin/env bash
# Prepared in session 38 (not run). 27B, one process: the timeline at one stream (what the 27B step's 257 qgemv
# launches and the rest cost in the chain), then run-ahead (s37, on by default) and the fused attention merge (s38,
# opt-in) against their off settings, two rounds, 1 and 8 streams. Predictions: run-ahead +0 to +1 % at one
# stream (the 27B step is long: little host time was exposed); the fused merge +0.2 to +0.6 % (16 attention
# layers). The s35 figures to compare: 145.9-148.7 tok/s at one stream (target 150).
. benchmarks/_dec.sh
out_dir s39c
t0=$SECONDS
AB="TENSORFOLD_RUN_AHEAD=1 TENSORFOLD_ATTN_FUSED=0;TENSORFOLD_RUN_AHEAD=0 TENSORFOLD_ATTN_FUSED=0;TENSORFOLD_RUN_AHEAD=1 TENSORFOLD_ATTN_FUSED=1"
timeout ${TLIM:-420} python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 40 --timeline 1 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_27b.md" > "$R/decode_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "timeline\|sums a step\|decode \[" "$R/decode_27b.txt" | head -16
gzip -f "$R"/timeline_*.json 2>/dev/null; pack
echo "== done at $((SECONDS - t0)) s"
