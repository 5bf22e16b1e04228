#!/usr/bin/env bash
# Session 13, call 5 (two GPUs), from a `git archive` of the final code: decode beside the peer in the same run
# (transformers' Qwen3_5ForCausalLM in bf16 with fla's kernels; fla 0.6.0 from the carried .whl_fla).
# A: 2B, B: 9B; 1 and 8 streams, prompt 512.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s13e}
CAP=${CAP:-380}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    timeout 360 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b --streams 1,8 --prompts 512 \
        --steps 30 --peer --peer-streams 1,8 --peer-tokens 20 --out "$OUT/a/decode_2b_peer.md" \
        >"$OUT/a/decode_2b_peer.txt" 2>&1
}
track_b() {
    timeout 360 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm_9b --streams 1,8 --prompts 512 \
        --steps 30 --peer --peer-streams 1,8 --peer-tokens 20 --out "$OUT/b/decode_9b_peer.md" \
        >"$OUT/b/decode_9b_peer.txt" 2>&1
}
run_tracks s13e
grep -hE "loaded|decode |prompt |peer" "$OUT"/a/*.txt "$OUT"/b/*.txt
