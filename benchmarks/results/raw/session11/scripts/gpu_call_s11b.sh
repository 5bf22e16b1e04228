#!/usr/bin/env bash
# Session 11, call 3 (two GPUs). A: what a plain 16-byte-load read of N MB takes inside a graph (the floor any
# GEMV of that size can reach), qgemv's (u, depth) at one and eight rows in the MLX layout, a size sweep at K = 4096,
# then the decode-GEMV GPU tests (the 27B-gate assertion fixed). B: 27B decode at 1 / 8 streams with the shipped
# defaults (qgemv for large weights, fused GDN auto), with a per-kernel profile.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s11b}
CAP=${CAP:-540}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    timeout 260 python3 benchmarks/bench_gemv3.py --floor "2,4,8,16,32,64,256" --shapes 0,1,2,3,5,6 --rows 1,8 \
        --no-old --out "$OUT/a" --configs "4,1,4,1,396;4,1,2,2,396;4,1,4,2,396;4,1,2,1,396" >"$OUT/a/gemv3.txt" 2>&1
    timeout 100 python3 benchmarks/bench_gemv3.py --shapes - --no-old --rows 1 --out "$OUT/a/sweep" \
        --custom "4096,4096;8192,4096;16384,4096;49152,4096;98304,4096" --configs "4,1,4,1,396" >"$OUT/a/sweep.txt" 2>&1
    timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_gemv.py \
        tests/kernels/test_gpu_qgemv.py >"$OUT/a/gemv_tests.txt" 2>&1
}
track_b() {
    timeout 520 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm27 --streams 1,8 --prompts 512 \
        --steps 20 --profile 1 --out "$OUT/b/decode_27b.md" >"$OUT/b/decode_27b.txt" 2>&1
}
run_tracks s11b
grep -hE "floor|R=1|R=8" "$OUT/a/gemv3.txt" "$OUT/a/sweep.txt" | head -80
tail -3 "$OUT/a/gemv_tests.txt"; grep -E "decode |prompt |loaded|profile," "$OUT/b/decode_27b.txt"
