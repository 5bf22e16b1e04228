#!/usr/bin/env bash
# Prepared in session 29 for the next session's first device call (one GPU, under 10 minutes).
# Session 30 revision: 9B decode (logprobs off; should equal session 28's 367-370 at 1 stream) on the warm w15
# cache instead of the cold no-worker control (session 29 measured that: 175.2 s), which moves to a later call.
# 1. Compile ahead (kernels/_precompile.py, off by default): its first GPU run failed in every worker ("CUDA
#    initialized before forking"); the fix (workers answer numba's context lookups with the parent's context) has
#    run only on the compile tier. First its GPU test, then the 9B cold load with 15 workers (log on) against the
#    same load without them -- one after the other, nothing beside them. Prediction: 29 kernels (the 9B step
#    graphs) over 15 workers: the graphs phase 173 s -> 25-40 s (the longest kernel plus the cubin links).
# 2. Then the runtime GPU tier with workers on (8) on a fresh cache: HEAD's defaults (PRE=2, XQ=1) have never run it
#    to the end (300 s and 230 s limits in session 29, both spent compiling).
. benchmarks/_dec.sh
out_dir s30a
t0=$SECONDS
rm -rf /tmp/ck_w15 /tmp/ck_w0 /tmp/tfkc_runtime /tmp/tfkc_kc
ptest kc 150 tests/kernels/test_gpu_kcache.py &
ptest eng 240 tests/engine/test_backend_parity_gpu.py &  # logprobs and prompt logprobs, cuda against cpu
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('9b', '/tmp/tfm', print)" \
    > "$R/synth.txt" 2>&1
wait
echo "== synth at $((SECONDS - t0)) s"
L="python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --load-only"
TENSORFOLD_COMPILE_LOG=1 TENSORFOLD_COMPILE_WORKERS=15 TENSORFOLD_CACHE_DIR=/tmp/ck_w15 timeout 150 $L \
    > "$R/load_w15.txt" 2>&1
echo "== cold w15 rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|precompile\|rror" "$R/load_w15.txt" | head -12
TENSORFOLD_COMPILE_WORKERS=15 TENSORFOLD_CACHE_DIR=/tmp/ck_w15 timeout 60 $L > "$R/load_w15_warm.txt" 2>&1
echo "== warm w15 rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|rror" "$R/load_w15_warm.txt"
pack
TENSORFOLD_CACHE_DIR=/tmp/ck_w15 dec 9b_base 9b --prompts ""
pack
left=$((570 - (SECONDS - t0)))
[ $left -gt 60 ] && TENSORFOLD_COMPILE_WORKERS=8 ptest runtime $left tests/runtime/test_gpu_runtime.py
pack
echo "== done at $((SECONDS - t0)) s"
