#!/usr/bin/env bash
# Prepared in session 38 (not run). The issue-4 decode table with the defaults of the code under test: 1 / 8 / 32
# streams at 2B, 9B and 27B, 100 steps after 32-token prompts, one process per geometry (2B and 9B first; 27B if
# time remains: TLIM). Set TENSORFOLD_ATTN_FUSED=1 in the environment if s39b made it the default candidate.
. benchmarks/_dec.sh
out_dir s39d
t0=$SECONDS
for g in ${GEOMS:-2b 9b 27b}; do
    timeout ${TLIM:-200} python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8,32 --prompts "" \
        --steps 100 --out "$R/table_$g.md" > "$R/table_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode " "$R/table_$g.txt" | head -4; pack
done
echo "== done at $((SECONDS - t0)) s"
