#!/usr/bin/env bash
# session 54 call 3 (the last 256 s of budget): the chunks-in-a-block GPU bit test, then one A / B of its one-row
# qgemv time against the split-K form (PDL, 400 launches a graph), the kernels warm from the test's cache.
. benchmarks/_dec.sh
begin s54c
bench() {
  TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin TENSORFOLD_GEMV3_KIN=$1 timeout 60 python3 benchmarks/bench_gemv3.py \
      --configs "4,1,4,1,396" --rows 1 --swept --only-sw --pdl --no-old --shapes 3 \
      --custom "12352,4096;10240,4096;5120,6144;16480,5120;14336,5120" --out "$R/$2" > "$R/$2.txt" 2>&1
}
TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/kernels/test_gpu_qgemv.py -k chunks_in_a_block > "$R/kin_test.txt" 2>&1
echo "== kin test rc $? at $((SECONDS - t0)) s"; grep -h "passed\|failed\|rror" "$R/kin_test.txt" | tail -4; pack
for k in 0 1 0 1; do
  left=$((LIMIT - (SECONDS - t0)))
  [ "$left" -lt 20 ] && break
  bench $k "kin${k}_$SECONDS"
  echo "== bench KIN=$k at $((SECONDS - t0)) s"; grep " us " "$R"/kin${k}_*.txt | tail -6; pack
done
