#!/usr/bin/env bash
# session 54 call 2: the GPU tier of qgemv / gemv (owed from session 53, with the new chunks-in-a-block test) in three
# processes while the kernel benchmark's cache is warmed; then qgemv's chunks-in-a-block form
# (TENSORFOLD_GEMV3_KIN=1, one-row launches) against the split-K form at one row (A, B, A, B in separate processes,
# PDL, 400 launches a graph); then 9B decode at one stream, in-process A/B.
. benchmarks/_dec.sh
begin s54b 9b
bench() {  # bench KIN OUT [BPS]: one-row qgemv times at the small decode shapes (swept plans, PDL)
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin TENSORFOLD_GEMV3_KIN=$1 TENSORFOLD_GEMV3_KIN_BPS=${3:-3} timeout 250 python3 benchmarks/bench_gemv3.py \
      --configs "4,1,4,1,396" --rows 1 --swept --only-sw --pdl --no-old --shapes 3 \
      --custom "12352,4096;10240,4096;5120,6144;16480,5120;14336,5120" --out "$R/$2" > "$R/$2.txt" 2>&1
}
ptest q1 280 tests/kernels/test_gpu_qgemv.py -k "chunks_in_a_block or real_shapes_rows or formats or through" &
ptest q2 280 tests/kernels/test_gpu_qgemv.py -k "not (chunks_in_a_block or real_shapes_rows or formats or through)" &
ptest gemv 280 tests/kernels/test_gpu_gemv.py &
bench 0 warm0 &
(bench 1 warm1; bench 1 warm2 2) &
wait
echo "== tests and warm-up done at $((SECONDS - t0)) s"; pack
for k in 0 1 0 1; do
  bench $k "kin${k}_$SECONDS"
  echo "== bench KIN=$k at $((SECONDS - t0)) s"
done
bench 1 "kin1_bps2" 2
echo "== bench KIN=1 BPS=2 at $((SECONDS - t0)) s"
grep -H " us " "$R"/kin*.txt
pack
ab 9b 1 200 "TENSORFOLD_GEMV3_KIN=0;TENSORFOLD_GEMV3_KIN=1"
