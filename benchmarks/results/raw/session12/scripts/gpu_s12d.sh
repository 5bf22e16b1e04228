#!/usr/bin/env bash
# Session 12, call 4 (two GPUs), from a `git archive` of the final commit: the GPU tiers of the shipped code (kernel
# cache on by default; the glu and fin experiments removed).
# A: the runtime tier and the kernel cache across processes. B: decode GEMV and qgemv tiers, gemm's geometry test,
# then a 2B decode (default paths) for the final figure.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s12d}
CAP=${CAP:-400}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_a
    timeout 390 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime \
        tests/kernels/test_gpu_kcache.py >"$OUT/a/gpu_tests.txt" 2>&1
}
track_b() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_b
    timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_gemv.py \
        tests/kernels/test_gpu_qgemv.py "tests/kernels/test_gpu_gemm.py::test_v3_geometries_bit_identical" \
        >"$OUT/b/gpu_tests.txt" 2>&1
    timeout 90 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm_2b --streams 1,8 --prompts 512 \
        --steps 30 --out "$OUT/b/decode_2b.md" >"$OUT/b/decode_2b.txt" 2>&1
}
run_tracks s12d
grep -hE "loaded|decode |prompt " "$OUT"/b/decode_2b.txt; tail -n 3 "$OUT/a/gpu_tests.txt" "$OUT/b/gpu_tests.txt"
