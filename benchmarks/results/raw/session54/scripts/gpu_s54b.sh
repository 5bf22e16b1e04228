#!/usr/bin/env bash
# session 54 call 2 (trimmed to what a small budget allows): the GPU tier of qgemv / gemv (owed from session 53) in
# two processes (150 s each: what they reach) beside the new chunks-in-a-block bit test (which warms the benchmark's kernel cache); then the
# one-row qgemv time of that form (TENSORFOLD_GEMV3_KIN=1) against the split-K form (A, B, A, B in separate
# processes, PDL, 400 launches a graph); then, as time allows, 2 blocks an SM and 9B decode at one stream (A/B).
. benchmarks/_dec.sh
begin s54b
bench() {  # bench KIN OUT [BPS]: one-row qgemv times at the small decode shapes (swept plans, PDL)
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin TENSORFOLD_GEMV3_KIN=$1 TENSORFOLD_GEMV3_KIN_BPS=${3:-3} timeout 100 python3 benchmarks/bench_gemv3.py \
      --configs "4,1,4,1,396" --rows 1 --swept --only-sw --pdl --no-old --shapes 3 \
      --custom "12352,4096;10240,4096;5120,6144;16480,5120;14336,5120" --out "$R/$2" > "$R/$2.txt" 2>&1
}
ptest q2 150 tests/kernels/test_gpu_qgemv.py -k "not chunks_in_a_block" &
ptest gemv 150 tests/kernels/test_gpu_gemv.py &
TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/kernels/test_gpu_qgemv.py -k chunks_in_a_block > "$R/kin_test.txt" 2>&1
echo "== kin test rc $? at $((SECONDS - t0)) s"; grep -h "passed\|failed\|rror" "$R/kin_test.txt" | tail -4; pack
wait
echo "== tier done at $((SECONDS - t0)) s"; pack
for k in 0 1 0 1; do
  bench $k "kin${k}_$SECONDS"
  echo "== bench KIN=$k at $((SECONDS - t0)) s"
done
grep -H " us " "$R"/kin*.txt
pack
left=$((LIMIT - (SECONDS - t0)))
[ "$left" -gt 60 ] && { bench 1 "kin1_bps2" 2; echo "== bench KIN=1 BPS=2 at $((SECONDS - t0)) s"; grep " us " "$R/kin1_bps2.txt"; pack; }
ab 9b 1 200 "TENSORFOLD_GEMV3_KIN=0;TENSORFOLD_GEMV3_KIN=1"
