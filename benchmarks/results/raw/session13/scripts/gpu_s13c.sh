#!/usr/bin/env bash
# Session 13, call 3 (two GPUs), from a `git archive` of the commit. PDL trigger default is now gemv_end.
# Variants: off (TENSORFOLD_PDL=0), pdl (gemv_end), pf1 / pf2 (pdl + qgemv3 L2 prefetch 1 / 2 tiles ahead).
# A: 27B decode per variant, then the qgemv GPU tier (prefetch forms bit-identical) and the PDL test.
# B: 9B decode per variant, then 2B pdl / off again (noise check).
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s13c}
CAP=${CAP:-560}
mkdir -p "$OUT/a" "$OUT/b"
bench() {  # geometry variant steps
    local p=1 pf=0
    case $2 in off) p=0 ;; pf1) pf=1 ;; pf2) pf=2 ;; esac
    TENSORFOLD_PDL=$p TENSORFOLD_GEMV3_PF=$pf timeout 150 python3 benchmarks/bench_decode.py --geometry $1 \
        --root /tmp/tfm_$1 --streams 1,8 --prompts 512 --steps $3 --out "$OUT/$T/decode_$1_$2.md" \
        >"$OUT/$T/decode_$1_$2.txt" 2>&1
}
track_a() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_a T=a
    for v in pdl off pf1 pf2; do bench 27b $v 20; done
    timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short -s tests/runtime/test_gpu_pdl.py \
        tests/kernels/test_gpu_qgemv.py >"$OUT/a/gpu_tests.txt" 2>&1
}
track_b() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_b T=b
    for v in pdl off pf1 pf2; do bench 9b $v 30; done
    for v in pdl off; do bench 2b $v 40; done
}
export -f bench  # the tracks run in child shells
run_tracks s13c
grep -E "loaded|decode " "$OUT"/a/*.txt "$OUT"/b/*.txt; tail -n 4 "$OUT/a/gpu_tests.txt"
