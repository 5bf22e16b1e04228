#!/usr/bin/env bash
# Session 11, call 2 (two GPUs): qgemv's tile layout (coalesced 16-byte loads) against the MLX-row layout, a size
# sweep at K = 4096 (fixed cost vs streaming rate), the 9B-down 16-row GPU-test failure of call 1 in full, and the
# runtime GPU tier with the fused GDN step now on by default ("auto").
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s11a}
CAP=${CAP:-540}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    timeout 330 python3 benchmarks/bench_gemv3.py --shapes 0,1,2,3,5,6 --rows 1,8 --out "$OUT/a" \
        --configs "4,1,4,1,396;4,1,4,1,396,0,0,1;4,1,4,2,396,0,0,1;4,1,2,2,396,0,0,1" >"$OUT/a/gemv3.txt" 2>&1
    timeout 150 python3 benchmarks/bench_gemv3.py --shapes - --no-old --rows 1 --out "$OUT/a/sweep" \
        --custom "4096,4096;8192,4096;16384,4096;49152,4096;98304,4096" \
        --configs "4,1,4,1,396;4,1,4,1,396,0,0,1" >"$OUT/a/sweep.txt" 2>&1
}
track_b() {
    timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=long -x \
        "tests/kernels/test_gpu_gemv.py::test_qgemv_4bit_g64_real_shapes_rows_1_2_8_16" >"$OUT/b/gemv_fail.txt" 2>&1
    timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime \
        tests/kernels/test_gpu_qgemv.py >"$OUT/b/runtime_tests.txt" 2>&1
}
run_tracks s11a
grep -hE "R=1|R=8" "$OUT/a/gemv3.txt" "$OUT/a/sweep.txt" | head -80
tail -30 "$OUT/b/gemv_fail.txt"; tail -5 "$OUT/b/runtime_tests.txt"
