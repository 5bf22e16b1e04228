#!/usr/bin/env bash
# Session 29: cold start with the kernels compiled ahead in forked workers (kernels/_precompile.py).
# Prediction: the 9B synth's cold load (144 s in session 28, almost all compiling one kernel at a time) falls to
# 25-40 s with 15 workers (the parent still links each cubin and captures); the warm start after it stays near
# the usual few seconds (the entries are saved again with their cubin).
# 1. synthesise 9B (not timed); 2. cold load, 15 workers, fresh kernel cache; 3. warm load from that cache;
# 4. side by side: cold load with workers off (the control, fresh cache) and the runtime GPU tier on a fresh cache
#    with 8 workers (it did not finish in 300 s compiling serially at the start of this session).
. benchmarks/_dec.sh
out_dir s29d
t0=$SECONDS
rm -rf /tmp/ck_w15 /tmp/ck_w0 /tmp/tfkc_runtime /tmp/tfkc_kc
ptest kc 150 tests/kernels/test_gpu_kcache.py &
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('9b', '/tmp/tfm', print)" \
    > "$R/synth.txt" 2>&1
echo "== synth rc $? at $((SECONDS - t0)) s"; tail -2 "$R/synth.txt"
wait
L="python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --load-only"
TENSORFOLD_COMPILE_WORKERS=15 TENSORFOLD_CACHE_DIR=/tmp/ck_w15 timeout 200 $L > "$R/load_w15.txt" 2>&1
echo "== cold w15 rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|rror" "$R/load_w15.txt"
TENSORFOLD_COMPILE_WORKERS=15 TENSORFOLD_CACHE_DIR=/tmp/ck_w15 timeout 100 $L > "$R/load_w15_warm.txt" 2>&1
echo "== warm w15 rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|rror" "$R/load_w15_warm.txt"
pack
(TENSORFOLD_COMPILE_WORKERS=0 TENSORFOLD_CACHE_DIR=/tmp/ck_w0 timeout 240 $L > "$R/load_w0.txt" 2>&1; \
 echo "== cold w0 rc $? at $((SECONDS - t0)) s") &
TENSORFOLD_COMPILE_WORKERS=8 ptest runtime 230 tests/runtime/test_gpu_runtime.py &
wait
grep -h "load:\|ahead\|rror" "$R/load_w0.txt"
pack
echo "== done at $((SECONDS - t0)) s"
