#!/usr/bin/env bash
# Session 15, call 3 (one GPU): qgemv3 for mid-size weights (TENSORFOLD_GEMV_V3_LOG2=25: the 9B in_proj, q_proj and
# down move from the first tensor-core kernel, which ncu measured at about 1 TB/s at 9B shapes) against the default
# line (2^26), 9B decode at 1 / 8 streams with a one-stream profile; then the coalesced prompt pre-pass
# (TENSORFOLD_XPREP=2) against xprep (ncu: 108 us at 4,096 x 2,048, lg_throttle) at 2B prompts.
set -u
OUT=${OUT:-/tmp/s15c}
R=$OUT/r
mkdir -p "$R"
. benchmarks/_dec.sh
dec 9b_base 9b --profile 1
TENSORFOLD_GEMV_V3_LOG2=25 dec 9b_v25 9b --profile 1
dec 9b_base2 9b
pr() {  # name, env...
    local n=$1; shift
    env "$@" timeout 200 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1 \
        --prompts 4096,16384 --steps 10 --out "$R/prompt_$n.md" >"$R/prompt_$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "decode \|prompt \|Error" "$R/prompt_$n.txt" | head -6
}
pr xp1 TENSORFOLD_XPREP=1
pr xp2 TENSORFOLD_XPREP=2
for f in "$R"/decode_9b_*.txt; do echo "--- $f"; sed -n 1,40p "$f" | grep -v "^\[9b\] wrote"; done | head -90
tar -czf "$OUT/s15c.tar.gz" -C "$OUT" r
