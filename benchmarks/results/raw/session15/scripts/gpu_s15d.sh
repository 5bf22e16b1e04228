#!/usr/bin/env bash
# Session 15, call 4 (one GPU): qgemv's global-x form (TENSORFOLD_GEMV_XG: x fragments from a pre-pass kernel, no
# x preparation in the GEMV's blocks, 94 registers at one n-tile so five blocks an SM). GPU test (bit-equal to the
# shared form), kernel timing at the 9B / 27B shapes (shared form and first kernel beside it), then 9B decode and
# 27B one-stream decode with it off / on.
set -u
OUT=${OUT:-/tmp/s15d}
R=$OUT/r
mkdir -p "$R"
. benchmarks/_dec.sh
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    -k "global_x" >"$R/gpu_tests.txt" 2>&1
echo "== tests rc $?"; tail -n 3 "$R/gpu_tests.txt"
g3() {  # name, env...
    local n=$1; shift
    env "$@" timeout 150 python3 benchmarks/bench_gemv3.py --configs "4,1,4,1,396" --rows 1,8 --shapes 2,3,5 \
        --custom "12352,4096" --out "$R/g3_$n" >"$R/g3_$n.txt" 2>&1
    echo "== g3 $n rc $?"; grep -E "v3p|old" "$R/g3_$n.txt" | head -20
}
g3 xg0 TENSORFOLD_GEMV_XG=0
g3 xg5 TENSORFOLD_GEMV_XG=1,5
g3 xg3 TENSORFOLD_GEMV_XG=1,3
dec 9b_xg0 9b
TENSORFOLD_GEMV_XG=1 dec 9b_xg1 9b --profile 1
grep -A8 "profile" "$R/decode_9b_xg1.txt" | head -10
one27() {
    local n=$1; shift
    env "$@" timeout 200 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1 --prompts 512 \
        --steps 10 --out "$R/d27_$n.md" >"$R/d27_$n.txt" 2>&1
    echo "== 27b $n rc $?"; grep -h "decode \|prompt \|Error" "$R/d27_$n.txt" | head -4
}
one27 xg1 TENSORFOLD_GEMV_XG=1
one27 xg0 TENSORFOLD_GEMV_XG=0
tar -czf "$OUT/s15d.tar.gz" -C "$OUT" r
