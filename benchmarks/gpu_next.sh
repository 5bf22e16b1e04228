#!/usr/bin/env bash
# Ready for the next device session (two GPUs), from a `git archive` of the commit (see gpu_pending.sh's header).
# Session 11 found qgemv at 1.5-2.1x a plain read of the same bytes, with 12 warps an SM (168 registers, peak in
# the x preparation). This call measures the occupancy knob `occ1` (one-n-tile launches with occ1 blocks an SM and
# registers capped to fit; ptxas: 128 registers spill only outside the loop for u4 d1, 96 spill 2 loads in the loop
# for u2 pb2) at one and eight rows, then decode end to end with the best candidate against the default.
# A: GEMV table, then 9B decode (default vs occ1=4); B: 27B decode (default vs occ1=4), then 2B with qgemv + occ1=4 on
# every shape (compare with the 2B default in session11_2026-11-30.md: 584 / 3,823 tok/s).
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/next}
CAP=${CAP:-560}
mkdir -p "$OUT/a" "$OUT/b"
OCC="4,1,4,1,396,0,0,4"
track_a() {
    timeout 200 python3 benchmarks/bench_gemv3.py --shapes 0,1,2,3,5,6 --rows 1,8 --out "$OUT/a" \
        --configs "4,1,4,1,396;4,1,4,1,396,0,0,4;4,1,2,1,396,0,2,5;4,1,2,2,396,0,2,4" >"$OUT/a/gemv3.txt" 2>&1
    for g in default occ; do
        v=""; [ $g = occ ] && v=$OCC
        TENSORFOLD_GEMV3=$v timeout 170 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm9 --streams 1,8 \
            --prompts 512 --steps 20 --out "$OUT/a/decode_9b_$g.md" >"$OUT/a/decode_9b_$g.txt" 2>&1
    done
}
track_b() {
    for g in default occ; do
        v=""; [ $g = occ ] && v=$OCC
        TENSORFOLD_GEMV3=$v timeout 200 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm27 --streams 1,8 \
            --prompts 512 --steps 20 --out "$OUT/b/decode_27b_$g.md" >"$OUT/b/decode_27b_$g.txt" 2>&1
    done
    # 2B: qgemv (with occ1) for every shape, against the shipped rule (qgemv for the head only)
    TENSORFOLD_GEMV_V3=1 TENSORFOLD_GEMV3=$OCC timeout 140 python3 benchmarks/bench_decode.py --geometry 2b \
        --root /tmp/tfm2 --streams 1,8 --prompts 512 --steps 30 --out "$OUT/b/decode_2b_occ_all.md" \
        >"$OUT/b/decode_2b_occ_all.txt" 2>&1
}
TRACK_VARS="OCC=$OCC" run_tracks next
grep -hE "R=1|R=8" "$OUT/a/gemv3.txt" | head -60
grep -E "decode |loaded" "$OUT"/a/decode_*.txt "$OUT"/b/decode_*.txt
