#!/usr/bin/env bash
# Session 32, call 1: the GPU tier of qgemv / SwiGLU / runtime at HEAD (CMPU=auto default; never run on a GPU),
# and bench_gemv3 auto vs 4x8 at the 9B / 27B shapes (session 31 call 2's auto runs hit their timeouts there).
# Prediction (session 31 call 1, fixed forms): one row, 9B down 13.9 -> ~12.8 us, 27B down 21.1 -> ~20.1,
# 9B gate+up SwiGLU 22.7 -> ~19.8, 27B gate+up SwiGLU ~32.4 (+-0.7); eight rows unchanged.
# Timings overlap the GPU-tier processes (mostly compiling on the CPU); each variant is timed twice.
. benchmarks/_dec.sh
out_dir s32a
t0=$SECONDS
ptest gpu_qgemv 500 tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_glu.py &
P1=$!
ptest gpu_runtime 500 tests/runtime/test_gpu_runtime.py tests/runtime/test_gpu_graphs.py &
P2=$!
G3="--shapes 2,3,4,5 --rows 1,8 --swept --glu --only-sw --no-old --pdl"
for v in 4x8 auto; do
  (TENSORFOLD_CACHE_DIR=/tmp/tfkc_$v TENSORFOLD_GEMV3_CMPU=$v timeout 240 \
     python3 benchmarks/bench_gemv3.py $G3 --out /tmp/warm_$v >/tmp/warm_$v.txt 2>&1; echo "== warm $v rc $?") &
  W="${W:-} $!"
done
wait $W
echo "== warm done at $((SECONDS - t0)) s"; tail -3 /tmp/warm_auto.txt; pack
for v in auto 4x8 auto 4x8; do
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_$v TENSORFOLD_GEMV3_CMPU=$v timeout 120 \
     python3 benchmarks/bench_gemv3.py $G3 --out "$R/g3_$v" >>"$R/gemv3_$v.txt" 2>&1
  echo "== gemv3 $v rc $? at $((SECONDS - t0)) s"
done; pack
for v in 4x8 auto; do echo "-- $v"; grep -h " us " "$R/gemv3_$v.txt" | grep "R=1 \|R=8 " | tail -32; done
wait $P1 $P2
pack
echo "== done at $((SECONDS - t0)) s"
