#!/usr/bin/env bash
# Session 12, call 3 (two GPUs), from a `git archive` of the commit.
# A: GPU tiers: split-K GEMVs completed in the kernel (test_gpu_fin, test_gpu_gemv: every tensor-core plan against
#    the oracle, now through it), the kernel cache across processes, the runtime tier (decodes through both).
# B: the 27B start with an empty kernel cache, then again (warm); 2B and 9B decode with the in-kernel split-K
#    completion (default) and without (TENSORFOLD_GEMV_FIN=0), 2B with a per-kernel profile.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s12c}
CAP=${CAP:-560}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_a
    timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_fin.py \
        tests/kernels/test_gpu_kcache.py tests/runtime tests/kernels/test_gpu_gemv.py >"$OUT/a/gpu_tests.txt" 2>&1
}
track_b() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_b
    for k in 1 2; do
        timeout 120 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm_27b --streams 1,8 --load-only \
            --out "$OUT/b/load_27b_$k.md" >"$OUT/b/load_27b_$k.txt" 2>&1
    done
    for f in 1 0; do
        TENSORFOLD_GEMV_FIN=$f timeout 90 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b \
            --streams 1,8 --prompts 512 --steps 30 --profile 1 --out "$OUT/b/decode_2b_fin$f.md" \
            >"$OUT/b/decode_2b_fin$f.txt" 2>&1
    done
    for f in 1 0; do
        TENSORFOLD_GEMV_FIN=$f timeout 100 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm_9b \
            --streams 1,8 --prompts 512 --steps 20 --out "$OUT/b/decode_9b_fin$f.md" >"$OUT/b/decode_9b_fin$f.txt" 2>&1
    done
}
run_tracks s12c
grep -hE "load:|loaded|decode |prompt " "$OUT"/b/*.txt; tail -5 "$OUT/a/gpu_tests.txt"
