#!/usr/bin/env bash
# Ready for the next device session, call 2 (two GPUs), from a `git archive` of the commit.
# A: the on-disk kernel cache (TENSORFOLD_KERNEL_CACHE=1, kernels/_kcache.py), never run on a GPU yet: 27B and 2B
#    loads twice each in fresh processes (the first compiles and fills the cache, the second should load from it),
#    then a 2B decode with the cache on (same tok/s expected: the same kernels).
# B: the GPU tiers on this commit (the generated kernels now pass through kernels/_codegen.single_assignment;
#    SASS identical offline, never run on a GPU): decode GEMV, qgemv, prompt GEMM, runtime.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/nextb}
CAP=${CAP:-560}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    export TENSORFOLD_KERNEL_CACHE=1 TENSORFOLD_CACHE_DIR=/tmp/tfkc
    for g in 27b 2b; do
        for k in 1 2; do
            timeout 140 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm_$g --streams 1,8 --load-only \
                --out "$OUT/a/load_${g}_$k.md" >"$OUT/a/load_${g}_$k.txt" 2>&1
        done
    done
    du -sh /tmp/tfkc >"$OUT/a/cache_size.txt" 2>&1; ls /tmp/tfkc/* | head -50 >>"$OUT/a/cache_size.txt"
    timeout 100 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b --streams 1,8 --prompts 512 \
        --steps 30 --out "$OUT/a/decode_2b_cache.md" >"$OUT/a/decode_2b_cache.txt" 2>&1
}
track_b() {
    timeout 530 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
        tests/runtime tests/kernels/test_gpu_gemm.py tests/kernels/test_gpu_gemv.py >"$OUT/b/gpu_tests.txt" 2>&1
}
run_tracks nextb
grep -hE "load:|loaded|decode " "$OUT"/a/*.txt; head -3 "$OUT/a/cache_size.txt"; tail -3 "$OUT/b/gpu_tests.txt"
