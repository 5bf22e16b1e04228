#!/usr/bin/env bash
# Prepared in session 48 for session 49 (its gpu_s48e.sh, which a taken-back machine never ran; a fresh machine,
# LIMIT ~560, an H200 if one comes): on session 48's final code (the arrival-counter reset moved after
# the completing warp's stores, TENSORFOLD_GEMV3_RST=late, the new default; SwiGLU launches of <= 4 chunks take
# autog18's set):
# (1) decode A/B RST early vs late at 9B and 27B (one process a geometry, two rounds; late last, so the 9B graphs
#     == eager GPU test that follows in the same process runs the default). Predicted: the completing warp's serial
#     tail loses one L2 round trip (the fence no longer waits for the reset store): 0.3-1 us a split-K launch,
#     one stream +1 to +4 % (9B ~128, 27B ~256 such launches a step), eight streams +0.5 to +2 %.
# (2) issue 4's whole matrix: decode at 1 / 8 / 32 streams, prompts of 512 / 4,096 / 16,384 tokens, 9B with the
#     transformers bf16 + fla peer in the same process, then 27B (no peer: 54 GB of bf16 weights beside ours), then
#     2B with the peer if time is left.
. benchmarks/_dec.sh
out_dir s49a
t0=$SECONDS
LIMIT=${LIMIT:-560}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b 27b 2b > /dev/null 2>&1
echo "== synth at $((SECONDS - t0)) s"
AB="TENSORFOLD_GEMV3_RST=early;TENSORFOLD_GEMV3_RST=late"
timeout 180 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --prompts "" --steps 200 \
    --ab-env "$AB" --ab-rounds 2 --tests "-m gpu -q -p no:cacheprovider -rfE tests/runtime/test_gpu_graphs_large.py -k 9b -s" \
    --out "$R/ab_9b.md" > "$R/ab_9b.txt" 2>&1
echo "== ab 9b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|passed\|failed\|exit code\|rror" "$R/ab_9b.txt" | cut -c1-150 | head -12; pack
timeout 110 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" --steps 100 \
    --ab-env "$AB" --ab-rounds 2 --out "$R/ab_27b.md" > "$R/ab_27b.txt" 2>&1
echo "== ab 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/ab_27b.txt" | cut -c1-150 | head -10; pack
PEER="--peer --peer-streams 1,8,32 --peer-prompts 512,4096,16384"
full() {  # geometry, cap in s, extra args
    local g=$1 cap=$2 left tmo; shift 2
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 80 ] && { echo "== full $g skipped ($left s left)"; return; }
    tmo=$((left < cap ? left : cap))
    timeout "$tmo" python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8,32 \
        --prompts 512,4096,16384 --steps 100 "$@" --out "$R/full_$g.md" > "$R/full_$g.txt" 2>&1
    echo "== full $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|prompt \|rror" "$R/full_$g.txt" | cut -c1-150 | head -16; pack
}
full 9b 200 $PEER
full 27b 170
full 2b 150 $PEER
echo "== done at $((SECONDS - t0)) s"
