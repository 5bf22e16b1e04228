#!/usr/bin/env bash
# Session 30, last device call (about 440 s of device time left, start-up included): the 27B synth's cold load with
# compile ahead on by default, against issue 4's target (<= 60 s). Session 29's cold 27B load compiled one kernel at
# a time: 186.4 s. Prediction: 45-60 s (the longest single compile, about 37 s at 9B, plus 15 GB of weights), and a
# warm load near the 9B's 5-6 s plus the larger weights.
. benchmarks/_dec.sh
out_dir s30d
t0=$SECONDS
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('27b', '/tmp/tfm', print)" \
    > "$R/synth.txt" 2>&1
echo "== synth at $((SECONDS - t0)) s"; tail -2 "$R/synth.txt"
L="python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --load-only"
TENSORFOLD_COMPILE_LOG=1 TENSORFOLD_CACHE_DIR=/tmp/ck_27 timeout 100 $L > "$R/load27_cold.txt" 2>&1
echo "== cold rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|kernels:\|rror" "$R/load27_cold.txt" | head -8
pack
TENSORFOLD_CACHE_DIR=/tmp/ck_27 timeout 40 $L > "$R/load27_warm.txt" 2>&1
echo "== warm rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|kernels:\|rror" "$R/load27_warm.txt"
pack
echo "== done at $((SECONDS - t0)) s"
