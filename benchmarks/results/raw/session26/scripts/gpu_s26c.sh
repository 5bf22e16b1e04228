#!/usr/bin/env bash
# Session 26, call 2 (one GPU): decode with the qgemv bulk-copy ring (TENSORFOLD_GEMV3_BULK=$BK) against the
# register ring, same call, 9B and 27B at 1 / 8 streams (prompt 512, 30 steps), plus the runtime's GPU tests with
# the ring on (window == steps, graphs == eager, reference). Prediction (from call 1's kernel figures): one
# stream 9B ~350 -> 380-400, 27B ~128 -> 140-150 tok/s.
. benchmarks/_dec.sh
out_dir s26c
BK=${BK:-4}
t0=$SECONDS
TENSORFOLD_GEMV3_BULK=$BK ptest rt 200 tests/runtime/test_gpu_runtime.py -k "window or graph or vs_reference or swept or deferred" &
sleep 1
for g in 9b 27b; do
    for b in 0 $BK; do
        left=$((560 - (SECONDS - t0)))
        [ "$left" -lt 60 ] && { echo "== $g bulk=$b skipped ($left s left)"; continue; }
        TENSORFOLD_GEMV3_BULK=$b timeout "$left" python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm \
            --streams 1,8 --prompts "" --steps 30 --decode-prompt 512 --out "$R/decode_${g}_bk$b.md" \
            >"$R/decode_${g}_bk$b.txt" 2>&1
        echo "== $g bulk=$b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror\|loaded" "$R/decode_${g}_bk$b.txt" | head -4; pack
    done
done
wait; pack
echo "== done at $((SECONDS - t0)) s"
