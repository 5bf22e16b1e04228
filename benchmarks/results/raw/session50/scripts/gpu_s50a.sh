#!/usr/bin/env bash
# Session 50, call 1 (a fresh machine, LIMIT ~540): issue 4's whole matrix on today's code (the split-K counter
# reset after the completing warp's stores, autog18's SwiGLU sets at <= 4 chunks): decode at 1 / 8 / 32 streams,
# prompts of 512 / 4,096 / 16,384 tokens; 9B with the transformers bf16 + fla peer in the same process and, after
# it, the 9B decode graphs == eager GPU test (never run on the late reset); then 27B (no peer: its 54 GB of bf16
# weights beside ours) and 2B with the peer. Session 48's plan (gpu_s48e.sh) minus its early / late A/B, which
# waits for a second machine. (`full` now lives in benchmarks/_dec.sh, the same lines this call ran.) Predicted (H200): one stream 2B ~850, 9B ~405, 27B ~150 tok/s; 32 streams 2B
# ~9,000-11,000; the 27B 16,384-token prompt ~2,000 tok/s.
. benchmarks/_dec.sh
out_dir s50a
t0=$SECONDS
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b 27b 2b > /dev/null 2>&1
echo "== synth at $((SECONDS - t0)) s"
PEER="--peer --peer-streams 1,8,32 --peer-prompts 512,4096,16384"
full 9b 230 $PEER --tests "-m gpu -q -p no:cacheprovider -rfE tests/runtime/test_gpu_graphs_large.py -k 9b -s"
full 27b 170
full 2b 150 $PEER
echo "== done at $((SECONDS - t0)) s"
