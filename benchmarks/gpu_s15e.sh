#!/usr/bin/env bash
# Session 15, call 5 (one GPU): the global-x form with its chunk copy unrolled (call 4's copy loop ran one L2 round
# trip at a time) against the shared form at the 9B / 27B shapes; 9B decode with it off / on; then the GPU tiers
# that the new defaults touch (qgemv3 for >= 2^25 codes, xprep2): tests/runtime, qgemv, gemm.
set -u
OUT=${OUT:-/tmp/s15e}
R=$OUT/r
mkdir -p "$R"
. benchmarks/_dec.sh
g3() {  # name, env...
    local n=$1; shift
    env "$@" timeout 150 python3 benchmarks/bench_gemv3.py --configs "4,1,4,1,396" --rows 1,8 --shapes 2,3,5 \
        --custom "12352,4096" $G3X --out "$R/g3_$n" >"$R/g3_$n.txt" 2>&1
    echo "== g3 $n rc $?"; grep -E "v3p|old" "$R/g3_$n.txt" | head -20
}
G3X="" g3 xg5 TENSORFOLD_GEMV_XG=1,5
G3X="--no-old" g3 xg3 TENSORFOLD_GEMV_XG=1,3
G3X="--no-old" g3 xg0 TENSORFOLD_GEMV_XG=0
dec 9b_xg0 9b
TENSORFOLD_GEMV_XG=1 dec 9b_xg1 9b --profile 1
grep -A6 "profile" "$R/decode_9b_xg1.txt" | head -8
timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime \
    tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_gemm.py >"$R/gpu_tests.txt" 2>&1
echo "== tests rc $?"; tail -n 6 "$R/gpu_tests.txt"
tar -czf "$OUT/s15e.tar.gz" -C "$OUT" r
