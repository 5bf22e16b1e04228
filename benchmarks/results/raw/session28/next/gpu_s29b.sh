#!/usr/bin/env bash
# Prepared in session 28 (one GPU, under 10 minutes): the decodes session 28 could not run. 27B at 1 / 8 streams
# with the new qgemv prologue against the old, alternated in one process (bench_decode --ab-env: one load, graphs
# recaptured per set); last measured at 127-130 tok/s one stream (session 25). Prediction: +3-5 % (257 qgemv
# launches a step at about 1 us each of a 7.9 ms step). Then 2B the same way (its head is its only qgemv: under 1 %).
. benchmarks/_dec.sh
out_dir s29b
t0=$SECONDS
AB="TENSORFOLD_GEMV3_PRE=2 TENSORFOLD_GEMV3_XQ=1;TENSORFOLD_GEMV3_PRE=1 TENSORFOLD_GEMV3_XQ=0"
timeout 470 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 30 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_27b_ab.md" >"$R/decode_27b_ab.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/decode_27b_ab.txt" | head -10; pack
if [ $((SECONDS - t0)) -lt 420 ]; then
timeout 150 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 40 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_2b_ab.md" >"$R/decode_2b_ab.txt" 2>&1
echo "== 2b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/decode_2b_ab.txt" | head -10; pack
fi
echo "== done at $((SECONDS - t0)) s"
