#!/usr/bin/env bash
# Session 19, call 2: qgemv's depth (iterations of loads in flight) 1 / 2 / 3 now that launch bounds hold the
# register budget at 3 blocks an SM (ptxas: 160 / 167 / 168 registers, no spills; session 18's sweep ran without
# bounds); the runtime GPU tier (call 1's ran out of time); 9B decode with the launch bounds on and off.
. benchmarks/_dec.sh
out_dir s19b
timeout 150 python3 benchmarks/bench_gemv3.py --no-old --rows 1,8 --shapes 2,4,5 --glu \
    --configs "4,1,4,1,396;4,1,4,2,396;4,1,4,3,396" --out "$R/depth" >"$R/gemv3_depth.txt" 2>&1
echo "== depth rc $?"; grep "us " "$R/gemv3_depth.txt" | grep -v Warn; pack
timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime/test_gpu_runtime.py \
    tests/runtime/test_gpu_graphs.py >"$R/rt_tests.txt" 2>&1
echo "== runtime gpu tests rc $?"; tail -4 "$R/rt_tests.txt"; pack
dec 9b_lb1 9b; pack
TENSORFOLD_GEMV3_LB=0 dec 9b_lb0 9b; pack
