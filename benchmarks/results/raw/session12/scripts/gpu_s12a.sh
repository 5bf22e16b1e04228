#!/usr/bin/env bash
# Session 12, call 1 (two GPUs), from a `git archive` of the commit: session 11's gpu_next_b.sh and the decode half
# of its gpu_next.sh (both removed since) in one call.
# A: the on-disk kernel cache (TENSORFOLD_KERNEL_CACHE=1): the 27B load twice (the first compiles and fills the
#    cache, the second should load from it); 27B decode with the cache (default kernels), then with qgemv occ1=4;
#    the 2B load twice and a 2B decode with the cache.
# B: the GPU tiers on this commit: decode GEMV, qgemv, prompt GEMM, runtime.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s12a}
CAP=${CAP:-560}
OCC="4,1,4,1,396,0,0,4"
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    export TENSORFOLD_KERNEL_CACHE=1 TENSORFOLD_CACHE_DIR=/tmp/tfkc
    for k in 1 2; do
        timeout 130 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm_27b --streams 1,8 --load-only \
            --out "$OUT/a/load_27b_$k.md" >"$OUT/a/load_27b_$k.txt" 2>&1
    done
    for g in default occ; do
        v=""; [ $g = occ ] && v=$OCC
        TENSORFOLD_GEMV3=$v timeout 130 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm_27b \
            --streams 1,8 --prompts 512 --steps 20 --out "$OUT/a/decode_27b_$g.md" >"$OUT/a/decode_27b_$g.txt" 2>&1
    done
    for k in 1 2; do
        timeout 60 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b --streams 1,8 --load-only \
            --out "$OUT/a/load_2b_$k.md" >"$OUT/a/load_2b_$k.txt" 2>&1
    done
    du -sh /tmp/tfkc >"$OUT/a/cache_size.txt" 2>&1; ls /tmp/tfkc/* | head -50 >>"$OUT/a/cache_size.txt"
    timeout 80 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b --streams 1,8 --prompts 512 \
        --steps 30 --profile 1 --out "$OUT/a/decode_2b_cache.md" >"$OUT/a/decode_2b_cache.txt" 2>&1
}
track_b() {
    timeout 530 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
        tests/runtime tests/kernels/test_gpu_gemm.py tests/kernels/test_gpu_gemv.py >"$OUT/b/gpu_tests.txt" 2>&1
}
TRACK_VARS="OCC=$OCC" run_tracks s12a
grep -hE "load:|loaded|decode |prompt " "$OUT"/a/*.txt; head -3 "$OUT/a/cache_size.txt"; tail -5 "$OUT/b/gpu_tests.txt"
