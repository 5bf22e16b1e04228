#!/usr/bin/env bash
# Session 13, call 2 (two GPUs), from a `git archive` of the commit: where PDL kernels signal their dependents.
# Variants (TENSORFOLD_PDL_TRIGGER, one kernel-cache directory each, since it changes compiled code): start (every
# kernel at its start), gemv_end (GEMVs after their main loop), none (no trigger: dependents launch as a kernel
# exits); and PDL off (TENSORFOLD_PDL=0, same code as start).
# A: 2B decode per variant, then the PDL GPU test (kernels from the warm cache). B: 9B decode per variant, 27B.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s13b}
CAP=${CAP:-560}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    for v in start off gemv_end none; do
        m=$v; p=1; [ "$v" = off ] && { m=start; p=0; }
        TENSORFOLD_CACHE_DIR=/tmp/tfkc_$m TENSORFOLD_PDL_TRIGGER=$m TENSORFOLD_PDL=$p timeout 120 python3 \
            benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b --streams 1,8 --prompts 512 --steps 40 \
            --out "$OUT/a/decode_2b_$v.md" >"$OUT/a/decode_2b_$v.txt" 2>&1
    done
    TENSORFOLD_CACHE_DIR=/tmp/tfkc_start timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
        --tb=short -s tests/runtime/test_gpu_pdl.py >"$OUT/a/gpu_tests.txt" 2>&1
}
track_b() {
    for v in start off gemv_end none; do
        m=$v; p=1; [ "$v" = off ] && { m=start; p=0; }
        TENSORFOLD_CACHE_DIR=/tmp/tfkc_$m TENSORFOLD_PDL_TRIGGER=$m TENSORFOLD_PDL=$p timeout 130 python3 \
            benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm_9b --streams 1,8 --prompts 512 --steps 30 \
            --out "$OUT/b/decode_9b_$v.md" >"$OUT/b/decode_9b_$v.txt" 2>&1
    done
}
run_tracks s13b
grep -E "loaded|decode " "$OUT"/a/*.txt "$OUT"/b/*.txt; tail -n 4 "$OUT/a/gpu_tests.txt"
