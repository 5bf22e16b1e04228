#!/usr/bin/env bash
# Session 11, call 4 (two GPUs): after qgemv's single-assignment source (compile time), A: 27B synth load time and
# one-stream decode; B: qgemv's GPU tests, then 2B decode / prompt with the shipped defaults.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s11c}
CAP=${CAP:-360}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    timeout 340 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm27 --streams 1,8 --prompts 512 \
        --steps 20 --out "$OUT/a/decode_27b.md" >"$OUT/a/decode_27b.txt" 2>&1
}
track_b() {
    timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
        >"$OUT/b/qgemv_tests.txt" 2>&1
    timeout 230 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm2 --streams 1,8,32 --prompts 512,4096 \
        --steps 30 --out "$OUT/b/decode_2b.md" >"$OUT/b/decode_2b.txt" 2>&1
}
run_tracks s11c
grep -hE "decode |prompt |loaded|wrote" "$OUT/a/decode_27b.txt" "$OUT/b/decode_2b.txt"
tail -2 "$OUT/b/qgemv_tests.txt"
