#!/usr/bin/env bash
# Session 34, call 3: cold starts with tensorfold's faster numba front-end passes (_fastlive: worklist liveness
# over bit sets, SSA rewrite of the blocks that mention each variable; the same PTX). Call 2 at a4790fd: cold 27B
# load 75.2 s (29 kernels compiled by 16 workers in 61.5 s). Locally the slowest kernel (27B gate+up SwiGLU GEMV)
# compiles in 15.6 s instead of 53.1 s. Prediction: compile ahead <= 30 s, cold 27B load <= 45 s (target 60);
# cold 9B load <= 40 s (session 30: 48.4 s); decode unchanged (27B ~148 / ~748 tok/s at 1 / 8 streams);
# the qgemv + SwiGLU GPU tier passes (kernels compiled through these passes).
. benchmarks/_dec.sh
out_dir s34c
t0=$SECONDS
(for g in 27b 9b; do python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('$g', '/tmp/tfm', print)"; done > "$R/synth.txt" 2>&1)
echo "== synth at $((SECONDS - t0)) s"
for g in 27b 9b; do
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_cold_$g timeout 120 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm \
      --load-only > "$R/load_${g}_cold.txt" 2>&1
  echo "== cold $g load rc $? at $((SECONDS - t0)) s"; grep -h "load\|compil" "$R/load_${g}_cold.txt" | head -3 | cut -c1-400; pack
done
TENSORFOLD_CACHE_DIR=/tmp/tfkc_cold_27b timeout 120 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm \
    --streams 1,8 --prompts "" --steps 40 --out "$R/decode_27b.md" > "$R/decode_27b.txt" 2>&1
echo "== 27b decode rc $? at $((SECONDS - t0)) s"; grep -h "decode \|loaded" "$R/decode_27b.txt" | head -4; pack
left=$((560 - (SECONDS - t0)))
[ $left -gt 60 ] && ptest gpu_qgemv $left tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_glu.py
pack
echo "== done at $((SECONDS - t0)) s"
