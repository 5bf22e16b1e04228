#!/usr/bin/env bash
# The measurements stop 10 left pending, as one call on a two-GPU machine (device kind nvidia-h200-x2), run from a
# `git archive` of the commit (see benchmarks/results/gemv3_2026-11-30_12da6be.md for why):
#
#   git archive HEAD | tar -x -C .snap && rm -rf .snap/tensorfold/assets     # here, before the call
#   (device, carry [".whl", ".snap"]):
#   cp -r tensorfold/assets .snap/tensorfold/ && cd .snap && <numpy wheel preamble> && OUT=$OUT bash benchmarks/gpu_pending.sh
#
# GPU 0: qgemv geometries not yet timed (the cp.async ring `stages`, smaller x-preparation batches `pb`) against the
#        default, then 9B decode with qgemv's shape rule (TENSORFOLD_GEMV_V3=auto, the default) and without it (=0):
#        the end-to-end effect of the new GEMV. (27B, for the 8-stream risk, needs a call of its own:
#        `--geometry 27b`, about 40 s to load, plus writing its synth checkpoint once.)
# GPU 1: the fused GDN layer in `auto` mode (fused for launches of <= 2 rows) against off, 2B, with its GPU tests,
#        then the v3 prompt GEMM's coalesced pre-pass (TENSORFOLD_XPREP=2) against the default.
# Results go to $OUT/a, $OUT/b and are packed into $OUT/pending.tar.gz (the device returns few files).
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/pending}
CAP=${CAP:-540}
ROOT=${ROOT:-/tmp/tfmodels}
mkdir -p "$OUT/a" "$OUT/b"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1

track_a() {
    timeout 170 python3 benchmarks/bench_gemv3.py --shapes 2,5,6 --rows 1,8 --out "$OUT/a" \
        --configs "4,1,4,1,396;4,1,2,1,396,0,2;4,1,2,1,396,4,2;4,1,4,1,396,3,2;4,1,2,1,528,4,2" \
        >"$OUT/a/gemv3.txt" 2>&1
    for v3 in auto 0; do
        TENSORFOLD_GEMV_V3=$v3 timeout 170 python3 benchmarks/bench_decode.py --geometry 9b \
            --root "$ROOT" --streams 1,8 --prompts 512 --steps 20 --profile 1 --out "$OUT/a/decode_v3_$v3.md" \
            >"$OUT/a/decode_v3_$v3.txt" 2>&1
    done
}

track_b() {
    timeout 260 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE tests/kernels/test_gpu_qgemv.py \
        tests/kernels/test_gpu_gemv.py tests/runtime >"$OUT/b/gpu_tests.txt" 2>&1
    TENSORFOLD_GDN_FUSED=auto timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
        tests/kernels/test_gpu_fused.py >"$OUT/b/fused_tests.txt" 2>&1
    for f in 0 auto; do
        TENSORFOLD_GDN_FUSED=$f timeout 120 python3 benchmarks/bench_decode.py --geometry 2b --root "$ROOT" \
            --streams 1,2,8 --prompts 512 --steps 30 --profile 1 --out "$OUT/b/decode_fused_$f.md" >"$OUT/b/decode_fused_$f.txt" 2>&1
    done
}

TRACK_VARS="ROOT=${ROOT}" run_tracks pending gpu.txt
grep -hE "R=1|R=8" "$OUT/a/gemv3.txt" | head -40
grep -hE "decode |prompt " "$OUT"/a/decode_v3_*.txt "$OUT"/b/decode_fused_*.txt | head -40
tail -2 "$OUT/b/fused_tests.txt"; tail -3 "$OUT/b/gpu_tests.txt"
