#!/usr/bin/env bash
# Session 37, call 5 (the device time left): one-stream step profiles (each launch replayed alone in a graph) of the
# 2B and 9B with both fusions on and off, to see where the fused prologues' time goes: the decode A/B (call 1) found
# NORM flat and GNORM -12 % at 9B. No prediction beyond: the fused GEMVs grow by at least the norms they absorb.
. benchmarks/_dec.sh
out_dir s37e
t0=$SECONDS
for g in 2b 9b; do
  for f in 1 0; do
    TENSORFOLD_NORM_FUSE=$f TENSORFOLD_GNORM_FUSE=$f timeout 80 python3 benchmarks/bench_decode.py --geometry $g \
        --root /tmp/tfm --prompts "" --streams 1 --steps 20 --profile 1 --out "$R/profile_${g}_$f.md" \
        > "$R/profile_${g}_$f.txt" 2>&1
    echo "== $g fuse=$f rc $? at $((SECONDS - t0)) s"; grep -h "decode \|sum" "$R/profile_${g}_$f.txt" | head -3; pack
  done
done
echo "== done at $((SECONDS - t0)) s"
