#!/usr/bin/env bash
# Session 34's second call (session 33b's script plus transformers as the peer at 9B).
# Prepared in session 32 for the next session's second call: decode tok/s of the per-warp completion unroll
# (TENSORFOLD_GEMV3_CMPU=auto, the default since ce4c741) against the fixed 4x8 form, and a cold 27B load with it.
# Prediction (session 32 call 1: one-row GEMVs 0.6-2.9 us faster, eight rows unchanged): 27B one stream
# ~146 -> ~148-149 tok/s, 9B ~370 -> ~378-385, eight streams unchanged (within +-1 %); 27B cold load <= 50 s
# (session 30: 42.9 s; auto's SwiGLU kernels compile about 20 s longer, in parallel workers).
. benchmarks/_dec.sh
out_dir s34b
t0=$SECONDS
(for g in 27b 9b; do python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('$g', '/tmp/tfm', print)"; done > "$R/synth.txt" 2>&1)
echo "== synth at $((SECONDS - t0)) s"
TENSORFOLD_CACHE_DIR=/tmp/tfkc_cold timeout 120 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm \
    --load-only > "$R/load_27b_cold.txt" 2>&1
echo "== cold 27B load rc $? at $((SECONDS - t0)) s"; grep -h "load\|compil" "$R/load_27b_cold.txt" | head -6; pack
for g in 27b 9b; do
  left=$((570 - (SECONDS - t0)))
  [ $left -gt 100 ] || break
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_cold timeout $((left > 240 ? 240 : left)) python3 benchmarks/bench_decode.py \
      --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" --steps 40 \
      --ab-env "TENSORFOLD_GEMV3_CMPU=4x8;TENSORFOLD_GEMV3_CMPU=auto" --ab-rounds 2 $([ $g = 9b ] && echo --peer --peer-streams 1,8) --out "$R/decode_${g}_ab.md" \
      > "$R/decode_${g}_ab.txt" 2>&1
  echo "== $g A/B rc $? at $((SECONDS - t0)) s"; grep -h "decode \|loaded\|peer" "$R/decode_${g}_ab.txt" | head -9; pack
done
echo "== done at $((SECONDS - t0)) s"
