#!/usr/bin/env bash
# Session 48, call 3 (a fresh machine, LIMIT=540): issue 4's whole benchmark matrix on the final code (8b09238+:
# SwiGLU launches of <= 4 K chunks take autog18's completion set): decode at 1 / 8 / 32 streams, prompts of 512 /
# 4,096 / 16,384 tokens, 9B then 27B then 2B, transformers bf16 + fla as the peer in the same process at 9B and 2B
# (not at 27B: 54 GB of bf16 weights beside ours and the 32 x 16,448-token caches). The 9B 32-stream decode and the
# 27B 16,384-token prompt were never measured on the H200 since session 14 / ever.
# Predicted: one stream 9B ~406 (autog18 A/B), 27B ~150, 2B ~853 tok/s; eight streams as in call 1.
. benchmarks/_dec.sh
out_dir s48c
t0=$SECONDS
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b 27b 2b > /dev/null 2>&1
echo "== synth at $((SECONDS - t0)) s"
PEER="--peer --peer-streams 1,8,32 --peer-prompts 512,4096,16384"
full() {  # geometry, cap in s, extra args
    local g=$1 cap=$2 left tmo; shift 2
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 90 ] && { echo "== full $g skipped ($left s left)"; return; }
    tmo=$((left < cap ? left : cap))
    timeout "$tmo" python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8,32 \
        --prompts 512,4096,16384 --steps 100 "$@" --out "$R/full_$g.md" > "$R/full_$g.txt" 2>&1
    echo "== full $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|prompt \|rror" "$R/full_$g.txt" | cut -c1-150 | head -16; pack
}
full 9b 230 $PEER
full 27b 200
full 2b 200 $PEER
echo "== done at $((SECONDS - t0)) s"
