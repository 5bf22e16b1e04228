#!/usr/bin/env bash
# Session 12, call 2 (two GPUs), from a `git archive` of the commit.
# A: GPU tiers of this session's changes: the folded MLP activation (test_gpu_glu, the runtime tier, which now
#    decodes through it), the kernel cache across processes (test_gpu_kcache), test_gpu_gemm's fixed geometry test.
# B: decode with the activation folded (default) and not (TENSORFOLD_GLU_FOLD=0), 2B (with a profile) and 9B; the
#    first 2B run starts with an empty kernel cache (hand-written kernels now cached too), the next ones reuse it;
#    then the 27B start twice (cold: new kernels; warm).
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s12b}
CAP=${CAP:-560}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_a
    timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_glu.py \
        tests/kernels/test_gpu_kcache.py "tests/kernels/test_gpu_gemm.py::test_v3_geometries_bit_identical" \
        tests/runtime >"$OUT/a/gpu_tests.txt" 2>&1
}
track_b() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_b
    for f in 1 0; do
        TENSORFOLD_GLU_FOLD=$f timeout 100 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b \
            --streams 1,8 --prompts 512 --steps 30 --profile 1 --out "$OUT/b/decode_2b_glu$f.md" \
            >"$OUT/b/decode_2b_glu$f.txt" 2>&1
    done
    for f in 1 0; do
        TENSORFOLD_GLU_FOLD=$f timeout 120 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm_9b \
            --streams 1,8 --prompts 512 --steps 20 --out "$OUT/b/decode_9b_glu$f.md" >"$OUT/b/decode_9b_glu$f.txt" 2>&1
    done
    for k in 1 2; do
        timeout 100 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm_27b --streams 1,8 --load-only \
            --out "$OUT/b/load_27b_$k.md" >"$OUT/b/load_27b_$k.txt" 2>&1
    done
}
run_tracks s12b
grep -hE "load:|loaded|decode |prompt " "$OUT"/b/*.txt; tail -5 "$OUT/a/gpu_tests.txt"
