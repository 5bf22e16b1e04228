#!/usr/bin/env bash
# Session 13, call 4 (two GPUs), from a `git archive` of the final kernel code (PDL on, trigger gemv_end).
# A: the kernel GPU tier (every kernel now carries the PDL instructions) and the PDL runtime test.
# B: decode figures at 2B / 9B / 27B (1 and 8 streams, prompt 512), then the runtime GPU tier.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s13d}
CAP=${CAP:-560}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_a
    timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime/test_gpu_pdl.py \
        tests/kernels/test_gpu_a.py tests/kernels/test_gpu_b.py tests/kernels/test_gpu_attention.py \
        tests/kernels/test_gpu_delta_sample.py tests/kernels/test_gpu_fused.py tests/kernels/test_gpu_qgemv.py \
        tests/kernels/test_gpu_kcache.py tests/kernels/test_gpu_gemv.py tests/kernels/test_gpu_prompt.py \
        >"$OUT/a/gpu_tests.txt" 2>&1
}
track_b() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_b
    for g in 2b 9b 27b; do
        timeout 120 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm_$g --streams 1,8 --prompts 512 \
            --steps 30 --out "$OUT/b/decode_$g.md" >"$OUT/b/decode_$g.txt" 2>&1
    done
    timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime \
        >"$OUT/b/gpu_tests.txt" 2>&1
}
run_tracks s13d
grep -hE "loaded|decode |prompt " "$OUT"/b/*.txt; tail -n 4 "$OUT/a/gpu_tests.txt" "$OUT/b/gpu_tests.txt"
