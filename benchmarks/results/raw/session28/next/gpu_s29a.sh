#!/usr/bin/env bash
# Prepared in session 28 for the next session's first device call (one GPU, under 10 minutes). Session 28 lost most
# of a call to cold compiles (a bench_gemv3 process per variant got through 3 of 16 cases in 100 s). So: phase 1
# compiles in parallel, each variant into its own kernel cache (TENSORFOLD_CACHE_DIR, no shared writers), with the
# GPU tests that session 28 could not run (compile-bound, nothing timed); phase 2 times, one process at a time,
# each variant reloading its own cache.
# Timed: bench_gemv3 --pdl at 9B gate+up / down, 27B gate+up / down, 1 and 8 rows, the new defaults (PRE=2 XQ=1)
# against the old (PRE=1 XQ=0) -- session 28 timed only 9B gate+up. Prediction: -0.8 to -1.3 us a launch at one
# row everywhere, more at eight rows (decode gained 6-8 % at 8 streams).
. benchmarks/_dec.sh
out_dir s29a
t0=$SECONDS
G3="--shapes 2,3,4,5 --rows 1,8 --swept --glu --only-sw --no-old --pdl"
for v in "2 1" "1 0"; do set -- $v
  (TENSORFOLD_CACHE_DIR=/tmp/tfkc_e$1q$2 TENSORFOLD_GEMV3_PRE=$1 TENSORFOLD_GEMV3_XQ=$2 timeout 200 \
     python3 benchmarks/bench_gemv3.py $G3 --out /tmp/warm_e$1q$2 >/tmp/warm_e$1q$2.txt 2>&1) &
done
ptest qa 280 tests/kernels/test_gpu_qgemv.py -k "rows_1_to_16 or formats" &
ptest runtime 300 tests/runtime/test_gpu_runtime.py &
wait
echo "== phase 1 at $((SECONDS - t0)) s"; pack
for v in "2 1" "1 0"; do set -- $v
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_e$1q$2 TENSORFOLD_GEMV3_PRE=$1 TENSORFOLD_GEMV3_XQ=$2 timeout 120 \
     python3 benchmarks/bench_gemv3.py $G3 --out "$R/g3_e$1q$2" >"$R/gemv3_e$1q$2.txt" 2>&1
  echo "== gemv3 e$1 q$2 rc $? at $((SECONDS - t0)) s"; grep -h " us " "$R/gemv3_e$1q$2.txt" | head -16
done; pack
echo "== done at $((SECONDS - t0)) s"
