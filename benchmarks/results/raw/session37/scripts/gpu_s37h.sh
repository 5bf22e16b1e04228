#!/usr/bin/env bash
# Session 37 (or 38): run-ahead decode (TENSORFOLD_RUN_AHEAD=1: decode_sample enqueues the next step of the same
# streams, ids chained on the device, before waiting for this one; the engine's host work between calls overlaps
# the GPU). (1) decode A/B in one process per geometry, on vs off, two rounds (bench_decode's loop calls
# decode_sample with the previous ids, as the engine does; the log line counts ids served ahead). Prediction: one
# stream 2B +4 to +8 % (pre-11: decode_sample 1.830 vs pipelined 1.746 ms; the greedy graphs' host saving gave
# +4-7 %), 9B +2 to +4 %, eight streams +1 to +3 %. (2) the GPU test: run-ahead ids == synchronous ids at 2B with
# graphs (tests/runtime/test_gpu_ahead.py). Prediction: pass.
. benchmarks/_dec.sh
out_dir s37h
t0=$SECONDS
AB="TENSORFOLD_RUN_AHEAD=1;TENSORFOLD_RUN_AHEAD=0"
for g in ${GEOMS:-2b 9b}; do
    timeout ${TLIM:-150} python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 60 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_$g.md" > "$R/decode_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \[" "$R/decode_$g.txt" | head -8; pack
done
if [ -z "${NOTEST:-}" ]; then  # with the bench's warm kernel cache (ptest would start a cold one)
    timeout ${TTEST:-300} python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
        tests/runtime/test_gpu_ahead.py -s > "$R/ahead.txt" 2>&1
    echo "== ahead test rc $?"; grep -h "passed\|failed\|rror" "$R/ahead.txt" | tail -4
fi
pack
echo "== done at $((SECONDS - t0)) s"
