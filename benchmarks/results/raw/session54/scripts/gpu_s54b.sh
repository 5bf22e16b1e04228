#!/usr/bin/env bash
# session 54 call 2: qgemv's chunks-in-a-block form (TENSORFOLD_GEMV3_KIN=1, one-row launches): its GPU bit test,
# its one-row kernel time against the split-K form (A, B, A in separate processes, PDL, 400 launches a graph), and
# 9B decode at one stream, in-process A/B.
. benchmarks/_dec.sh
begin s54b 9b
export TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin
TENSORFOLD_CACHE_DIR=/tmp/tfkc_kin timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/kernels/test_gpu_qgemv.py -k chunks_in_a_block > "$R/kin_test.txt" 2>&1
echo "== kin test rc $? at $((SECONDS - t0)) s"; grep -h "passed\|failed\|rror" "$R/kin_test.txt" | tail -4; pack
for k in 0 1 0 1; do
  TENSORFOLD_GEMV3_KIN=$k timeout 120 python3 benchmarks/bench_gemv3.py --configs "4,1,4,1,396" --rows 1 --swept \
      --only-sw --pdl --no-old --shapes 3 --custom "12352,4096;10240,4096;5120,6144;16480,5120;14336,5120" \
      --out "$R/kin$k" > "$R/kin_bench_$k.txt" 2>&1
  echo "== bench KIN=$k rc $? at $((SECONDS - t0)) s"; grep " us " "$R/kin_bench_$k.txt"
done
pack
wait
ab 9b 1 200 "TENSORFOLD_GEMV3_KIN=0;TENSORFOLD_GEMV3_KIN=1"
