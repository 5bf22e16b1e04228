#!/usr/bin/env bash
# Session 15, call 5 (one GPU): the GPU tiers that the new defaults touch (qgemv3 for >= 2^25 codes, xprep2):
# tests/runtime, qgemv (with the global-x form's test), gemm; then the global-x form with its chunk copy unrolled
# (call 4's copy loop ran one L2 round trip at a time) against the shared form at the 9B / 27B shapes; 9B decode with
# it off / on. The results are packed after each step (the call may run into its time limit).
set -u
OUT=${OUT:-/tmp/s15e}
R=$OUT/r
mkdir -p "$R"
. benchmarks/_dec.sh
pack() { tar -czf "$OUT/s15e.tar.gz" -C "$OUT" r; }
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime \
    tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_gemm.py -x >"$R/gpu_tests.txt" 2>&1
echo "== tests rc $?"; tail -n 6 "$R/gpu_tests.txt"; pack
g3() {  # name, env...
    local n=$1; shift
    env "$@" timeout 100 python3 benchmarks/bench_gemv3.py --configs "4,1,4,1,396" --rows 1,8 --shapes 2,3,5 \
        --custom "12352,4096" --no-old --out "$R/g3_$n" >"$R/g3_$n.txt" 2>&1
    echo "== g3 $n rc $?"; grep -E "v3p|old" "$R/g3_$n.txt" | head -20
}
g3 xg5 TENSORFOLD_GEMV_XG=1,5; pack
g3 xg0 TENSORFOLD_GEMV_XG=0; pack
dec 9b_xg0 9b; pack
TENSORFOLD_GEMV_XG=1 dec 9b_xg1 9b; pack
