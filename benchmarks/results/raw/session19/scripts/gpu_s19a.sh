#!/usr/bin/env bash
# Session 19, call 1: (a) the GPU tier of qgemv / the SwiGLU epilogue / the runtime with session 18's launch bounds
# (never run on the GPU), and qgemv's GPU tests again with the L2 prefetch on; (b) qgemv's L2 prefetch (l2d tiles
# ahead, TENSORFOLD_GEMV3_L2) at 0 / 1 / 2, plain and epilogue forms, 1 and 8 rows, 9B / 27B gate + up, 27B down.
. benchmarks/_dec.sh
out_dir s19a
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for l2 in 0 1 2; do
    TENSORFOLD_GEMV3_L2=$l2 timeout 120 python3 benchmarks/bench_gemv3.py --no-old --rows 1,8 --shapes 2,4,5 --glu \
        --configs "4,1,4,1,396" --out "$R/l2_$l2" >"$R/gemv3_l2_$l2.txt" 2>&1
    echo "== l2 $l2 rc $?"; grep "us " "$R/gemv3_l2_$l2.txt" | grep -v Warn; pack
done
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    tests/kernels/test_gpu_glu.py tests/runtime >"$R/gpu_tests.txt" 2>&1
echo "== gpu tests rc $?"; tail -5 "$R/gpu_tests.txt"; pack
TENSORFOLD_GEMV3_L2=1 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_glu.py >"$R/gpu_tests_l2.txt" 2>&1
echo "== gpu tests l2=1 rc $?"; tail -5 "$R/gpu_tests_l2.txt"; pack
