#!/usr/bin/env bash
# Session 31, call 2: the completion unroll picked per warp (TENSORFOLD_GEMV3_CMPU=auto, the new default) against
# the fixed 4x8 form (the default before), and the qgemv / SwiGLU GPU tier at the new default.
# Prediction (call 1's figures): one row, 9B down 13.9 -> ~12.8 us, 27B down 21.1 -> ~20.1, 9B gate+up SwiGLU
# 22.7 -> ~20.1, 27B gate+up SwiGLU ~32.4 (+-0.7); eight rows unchanged (every warp takes 4x8 there);
# 27B decode one stream 146 -> ~148-149 tok/s, eight streams unchanged (~766); 9B one stream 368 -> ~380.
. benchmarks/_dec.sh
out_dir s31b
t0=$SECONDS
G3="--shapes 0,1,2,3,4,5 --rows 1,2,4,8 --swept --glu --only-sw --no-old --pdl"
for v in 4x8 auto; do
  (TENSORFOLD_CACHE_DIR=/tmp/tfkc_$v TENSORFOLD_GEMV3_CMPU=$v timeout 200 \
     python3 benchmarks/bench_gemv3.py $G3 --out /tmp/warm_$v >/tmp/warm_$v.txt 2>&1) &
done
(for g in 27b 9b; do python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('$g', '/tmp/tfm', print)"; done > "$R/synth.txt" 2>&1) &
ptest gpu_qgemv 210 tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_glu.py &
wait
echo "== phase 1 at $((SECONDS - t0)) s"; tail -3 /tmp/warm_auto.txt; pack
for v in auto 4x8 auto; do
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_$v TENSORFOLD_GEMV3_CMPU=$v timeout 90 \
     python3 benchmarks/bench_gemv3.py $G3 --out "$R/g3_$v" >>"$R/gemv3_$v.txt" 2>&1
  echo "== gemv3 $v rc $? at $((SECONDS - t0)) s"
done; pack
for v in 4x8 auto; do echo "-- $v"; grep -h " us " "$R/gemv3_$v.txt" | grep "R=1 \|R=8 " | grep -v "sw  *[0-9].*glu" | tail -24; done
left=$((565 - (SECONDS - t0)))
[ $left -gt 150 ] && TENSORFOLD_CACHE_DIR=/tmp/tfkc_ab timeout $((left > 170 ? 170 : left)) python3 benchmarks/bench_decode.py \
    --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" --steps 40 \
    --ab-env "TENSORFOLD_GEMV3_CMPU=4x8;TENSORFOLD_GEMV3_CMPU=auto" --ab-rounds 2 --out "$R/decode_27b_ab.md" \
    > "$R/decode_27b_ab.txt" 2>&1
grep -h "decode " "$R/decode_27b_ab.txt" | head -8; pack
left=$((570 - (SECONDS - t0)))
[ $left -gt 100 ] && TENSORFOLD_CACHE_DIR=/tmp/tfkc_ab9 timeout $left python3 benchmarks/bench_decode.py \
    --geometry 9b --root /tmp/tfm --streams 1,8 --prompts "" --steps 40 \
    --ab-env "TENSORFOLD_GEMV3_CMPU=4x8;TENSORFOLD_GEMV3_CMPU=auto" --ab-rounds 2 --out "$R/decode_9b_ab.md" \
    > "$R/decode_9b_ab.txt" 2>&1
grep -h "decode \|loaded" "$R/decode_9b_ab.txt" | head -9; pack
echo "== done at $((SECONDS - t0)) s"
