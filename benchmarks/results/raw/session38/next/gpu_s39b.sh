#!/usr/bin/env bash
# Prepared in session 38 (not run). Per geometry (GEOMS, default "2b 9b"), one process:
# (1) --timeline 1,8: 30 decode steps recorded kernel by kernel through torch's profiler (CUPTI start / end stamps
#     inside the replayed graphs, run-ahead on), broken into busy / exposed / gap time per kernel
#     (benchmarks/timeline.py). It answers what the profile of launches replayed alone cannot: what each kernel
#     and each copy between graphs costs in the PDL chain, and how long the step boundary is. Expected: the sum of
#     exposed time well under the kernel sum (s37 profile: 2B 1,251 us, 9B 2,471 us); the step boundary plus the
#     metadata / id copies 5-20 us a step.
# (2) the fused attention merge (s38, TENSORFOLD_ATTN_FUSED=1) against the two launches, decode A/B, two rounds,
#     1 and 8 streams. Prediction: +0.3 to +1 % at one stream (2B: 6 launches a step fewer, each worth about
#     1-2 us in the chain; 9B: 8), a tie at eight.
# (3) the ids chain inside the step graphs (s38, TENSORFOLD_CHAIN_GRAPH=1: no device-to-device copy between two
#     run-ahead steps, one small kernel more in the graph). Prediction: 2B +0.5 to +1.5 % at one stream (pre-11's
#     host split: pipelined steps 59 us over the graph replayed alone, with six copies between graphs then), 9B
#     +0.3 to +0.8 %. The timeline's copy rows say what each copy costs.
. benchmarks/_dec.sh
out_dir s39b
t0=$SECONDS
AB="TENSORFOLD_ATTN_FUSED=0 TENSORFOLD_CHAIN_GRAPH=0;TENSORFOLD_ATTN_FUSED=1 TENSORFOLD_CHAIN_GRAPH=0;TENSORFOLD_ATTN_FUSED=0 TENSORFOLD_CHAIN_GRAPH=1"
for g in ${GEOMS:-2b 9b}; do
    timeout ${TLIM:-240} python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 60 --timeline 1,8 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_$g.md" > "$R/decode_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "timeline\|sums a step\|decode \[" "$R/decode_$g.txt" | head -14
    gzip -f "$R"/timeline_*.json 2>/dev/null; pack
done
echo "== done at $((SECONDS - t0)) s"
