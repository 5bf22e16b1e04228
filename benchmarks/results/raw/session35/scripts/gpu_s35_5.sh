#!/usr/bin/env bash
# Session 35 call 5 (the device time left, about 4 minutes): fresh one-stream step profiles of the 2B and 9B
# (per-kernel time, each launch replayed alone in a graph; the last ones are session 27's, before PRE=2 / XQ, the
# completion unroll and the .nc fix), to rank the next session's targets. Nothing is compared; no prediction.
. benchmarks/_dec.sh
out_dir s35_5
t0=$SECONDS
for g in 2b 9b; do
    timeout 100 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --prompts "" --streams 1 --steps 20 \
        --profile 1 --out "$R/profile_$g.md" > "$R/profile_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|sum" "$R/profile_$g.txt" | head -4; pack
done
echo "== done at $((SECONDS - t0)) s"
