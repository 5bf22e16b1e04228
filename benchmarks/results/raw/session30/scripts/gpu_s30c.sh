#!/usr/bin/env bash
# Session 30, second device call (one GPU; the session has about 700 s of device time left, start-up included).
# 1. Compile ahead, now on by default, with the warm-path change: entries found on disk without a cubin are linked
#    in threads and saved again; every module is loaded before the eager runs, timed. Call 1's warm 9B load spent
#    10.3 s in the first eager runs (bucket 1: 4.65 s) with all 30 kernels found on disk, against 0.18 s a bucket
#    right after compile ahead. Prediction: the summary names the cause -- either "N without a cubin" (link) or a
#    large "modules loaded in" figure; warm graphs phase 12.3 s -> 3-5 s if it is the link.
# 2. Beside it: the runtime GPU tier to the end (6 of 8 passed in call 1's 260 s), and the kcache GPU test at the
#    changed _precompile.
# 3. The down projections' timeline (session 29's gpu_s30b.sh, first half).
. benchmarks/_dec.sh
out_dir s30c
t0=$SECONDS
ptest runtime 540 tests/runtime/test_gpu_runtime.py &
ptest kc 150 tests/kernels/test_gpu_kcache.py &
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('9b', '/tmp/tfm', print)" \
    > "$R/synth.txt" 2>&1
echo "== synth at $((SECONDS - t0)) s"
L="python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --load-only"
TENSORFOLD_COMPILE_LOG=1 TENSORFOLD_CACHE_DIR=/tmp/ck_a timeout 120 $L > "$R/load_cold.txt" 2>&1
echo "== cold rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|kernels:\|rror" "$R/load_cold.txt" | head -8
for i in 1 2; do
    TENSORFOLD_CACHE_DIR=/tmp/ck_a timeout 60 $L > "$R/load_warm$i.txt" 2>&1
    echo "== warm$i rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|kernels:\|rror" "$R/load_warm$i.txt"
done
pack
timeout 200 python3 benchmarks/qgemv_timeline.py --shapes 4096x12288,5120x17408,24576x4096g --out "$R/tl" \
    > "$R/timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us\|rror" "$R/timeline.txt" | head -30
pack
wait
pack
echo "== done at $((SECONDS - t0)) s"
