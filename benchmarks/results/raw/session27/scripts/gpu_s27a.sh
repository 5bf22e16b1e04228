#!/usr/bin/env bash
# Session 27, call 1 (one GPU): where a qgemv launch's ~8 us beyond a plain read go. qgemv_timeline.py stamps each
# warp's phases (%globaltimer) in back-to-back graph launches, with and without PDL, at the decode shapes; then the
# one-stream step profiles of 9B and 2B at HEAD (the last 9B profile is session 21's; 2B's was never taken).
. benchmarks/_dec.sh
out_dir s27a
t0=$SECONDS
timeout 200 python3 benchmarks/qgemv_timeline.py --out "$R" >"$R/timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; tail -5 "$R/timeline.txt"; pack
for g in 9b 2b; do
timeout 200 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1 --steps 30 --prompts "" \
    --profile 1 --out "$R/prof_$g.md" >"$R/prof_$g.txt" 2>&1
echo "== prof $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/prof_$g.txt" | head -4; pack
done
echo "== done at $((SECONDS - t0)) s"
