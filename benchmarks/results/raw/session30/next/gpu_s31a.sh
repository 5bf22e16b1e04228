#!/usr/bin/env bash
# Prepared in session 30 for the next session's first device call (one GPU, under 10 minutes).
# The batched completion's unroll (TENSORFOLD_GEMV3_CMPU, new in session 30, simulator- and compile-tier-checked:
# same bits, no spills). Session 30's timeline put the down projections' completion at 1.28 us median and 5-6 us
# max: at one row a completed tile has 16 outputs, so half the lanes idle, and ks chunk partials take ceil(ks / 8)
# L2 round trips in a row (9B down ks 12: 2; 27B down ks 17: 3). 2x16 / 1x16 load up to 16 partials a round.
# Prediction: 9B down -0.5 to -1 us, 27B down -1 to -1.5 us at one row; gate+up (ks 4, one round either way) and
# eight rows (more outputs: 2x16 takes two passes where 4x8 took one) unchanged or slower. Then, if a form wins at
# the downs: decode A/B at 27B and 9B with it (a plan-time switch: one process a side via --ab-env).
# Phase 1 compiles each variant into its own cache in parallel (nothing timed); phase 2 times one at a time.
. benchmarks/_dec.sh
out_dir s31a
t0=$SECONDS
G3="--shapes 2,3,4,5 --rows 1,8 --swept --glu --only-sw --no-old --pdl"
for v in 4x8 2x16 1x16; do
  (TENSORFOLD_CACHE_DIR=/tmp/tfkc_$v TENSORFOLD_GEMV3_CMPU=$v timeout 220 \
     python3 benchmarks/bench_gemv3.py $G3 --out /tmp/warm_$v >/tmp/warm_$v.txt 2>&1) &
done
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('27b', '/tmp/tfm', print)" \
    > "$R/synth.txt" 2>&1 &
wait
echo "== phase 1 at $((SECONDS - t0)) s"; pack
for v in 4x8 2x16 1x16 4x8; do
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_$v TENSORFOLD_GEMV3_CMPU=$v timeout 100 \
     python3 benchmarks/bench_gemv3.py $G3 --out "$R/g3_$v" >>"$R/gemv3_$v.txt" 2>&1
  echo "== gemv3 $v rc $? at $((SECONDS - t0)) s"; grep -h " us " "$R/gemv3_$v.txt" | tail -16
done; pack
left=$((560 - (SECONDS - t0)))
# the decode A/B (edit the winning form in if it is not 2x16); compile ahead makes each side's cold load ~45 s
[ $left -gt 200 ] && TENSORFOLD_CACHE_DIR=/tmp/tfkc_ab timeout $left python3 benchmarks/bench_decode.py \
    --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" --steps 40 \
    --ab-env "TENSORFOLD_GEMV3_CMPU=4x8;TENSORFOLD_GEMV3_CMPU=2x16" --ab-rounds 2 --out "$R/decode_27b_ab.md" \
    > "$R/decode_27b_ab.txt" 2>&1
grep -h "decode " "$R/decode_27b_ab.txt" | head -8; pack
echo "== done at $((SECONDS - t0)) s"
