#!/usr/bin/env bash
# Prepared in session 54 for session 55 (session 54's device budget went to refused starts): qgemv's chunks-in-a-block
# form (TENSORFOLD_GEMV3_KIN=1, one-row launches; built and simulator-checked in session 54, never run on a GPU).
# 1. its GPU bit test beside the GPU tier of qgemv / gemv owed since session 53 (three processes; compiles are
#    CPU-bound), the test warming the benchmark's kernel cache;
# 2. its one-row qgemv time against the split-K form, A, B, A, B in separate processes (PDL, 400 launches a graph),
#    and at 2 blocks an SM;
# 3. 9B and 27B decode at one stream, in-process A/B.
# Prediction (session 54's H100 timeline: the last kernel end trails the last main loop by 3.6-4.4 µs, the split-K
# completion's four L2 round trips): one row -2 to -3 µs at the 9B in_proj / q/k/v / down and the 27B out_proj
# (H200 9B in_proj 12.1 -> 9-10 µs, 56 -> 68-75 % of copy); decode at one stream +3 to +6 % (9B), +2 to +4 % (27B).
. benchmarks/_dec.sh
begin s55a 9b 27b
bench() {  # bench KIN OUT [BPS]: one-row qgemv times at the small decode shapes (swept plans, PDL)
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin TENSORFOLD_GEMV3_KIN=$1 TENSORFOLD_GEMV3_KIN_BPS=${3:-3} timeout 100 python3 \
      benchmarks/bench_gemv3.py --configs "4,1,4,1,396" --rows 1 --swept --only-sw --pdl --no-old --shapes 3 \
      --custom "12352,4096;10240,4096;5120,6144;16480,5120;14336,5120" --out "$R/$2" > "$R/$2.txt" 2>&1
}
ptest q2 280 tests/kernels/test_gpu_qgemv.py -k "not chunks_in_a_block" &
ptest gemv 280 tests/kernels/test_gpu_gemv.py &
TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/kernels/test_gpu_qgemv.py -k chunks_in_a_block > "$R/kin_test.txt" 2>&1
echo "== kin test rc $? at $((SECONDS - t0)) s"; grep -h "passed\|failed\|rror" "$R/kin_test.txt" | tail -4; pack
bench 0 warm0
bench 1 warm2 2
wait
echo "== tier done at $((SECONDS - t0)) s"; pack
for k in 0 1 0 1; do
  bench $k "kin${k}_$SECONDS"
  echo "== bench KIN=$k at $((SECONDS - t0)) s"
done
bench 1 "kin1_bps2" 2
grep -H " us " "$R"/kin*.txt | cut -c1-160
pack
echo "== benches done at $((SECONDS - t0)) s"
# second call (LIMIT restarts): the decode A/Bs
