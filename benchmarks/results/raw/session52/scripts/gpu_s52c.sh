#!/usr/bin/env bash
# Session 52, call 3 (a fresh machine, LIMIT ~430): is the 32-row launch worth its default now that 16-row launches
# run at load depth 2? Calls 1-2 (H100): at 9B 32 streams, R32 at depth 1 (3,018.5) and two 16-row launches at
# depth 2 (3,020.5) tie; at 27B a 16-row step at depth 2 takes 17.4 ms, so two of them (~34.7 ms, ~920 tok/s at
# 32 streams) should beat the 32-row step's 36.8 ms (870 tok/s). Prediction: 27B 32 streams R32=0 ~900-930 vs R32=1
# ~870; 9B a tie at 32 streams, and at 24 streams R32=0 (16 + 8 rows) a little faster than R32=1 (10.14 ms).
# 2B (never timed with 16- or 32-row launches): R16 off against the two forms.
. benchmarks/_dec.sh
begin s52c 9b 27b 2b
wait
echo "== synth at $((SECONDS - t0)) s"
for g in 27b 9b 2b; do
    ab="TENSORFOLD_GEMV3_R32=0;TENSORFOLD_GEMV3_R32=1"; st=24,32
    [ $g = 2b ] && { ab="TENSORFOLD_GEMV3_R16=0;$ab"; st=16,32; }
    left=$((LIMIT - (SECONDS - t0) - 5)); [ "$left" -lt 50 ] && break
    timeout $((left < 150 ? left : 150)) python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm \
        --streams $st --prompts "" --steps 40 --ab-env "$ab" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/ab_$g.txt" | cut -c1-120 | head -20; pack
done
echo "== done at $((SECONDS - t0)) s"; pack
