#!/usr/bin/env bash
# Session 13, call 6 (one GPU), from a `git archive`: the embedding and kv8 kernels are now cacheable.
# 2B start with an empty kernel cache, then warm; the GPU tests of those kernels (embedding, the bf16 / e4m3 /
# f32 K/V stores against the reference), the cache across processes, and the PDL decode test (both kernels inside
# captured graphs, loaded from the cache).
set -u
OUT=${OUT:-/tmp/s13f}
mkdir -p "$OUT"
export TENSORFOLD_CACHE_DIR=/tmp/tfkc
for k in 1 2; do
    timeout 100 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b --streams 1 --load-only \
        --out "$OUT/load_2b_$k.md" >"$OUT/load_2b_$k.txt" 2>&1
done
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    "tests/kernels/test_gpu_a.py::test_norms_activations_embedding" "tests/kernels/test_gpu_b.py::test_store_and_attention" \
    tests/kernels/test_gpu_kcache.py tests/runtime/test_gpu_pdl.py >"$OUT/gpu_tests.txt" 2>&1
grep -h "loaded" "$OUT"/load_2b_*.txt; tail -n 3 "$OUT/gpu_tests.txt"
