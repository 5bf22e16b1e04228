#!/usr/bin/env bash
# Session 20, call 5 (one GPU): the swept layout in runs of one K chunk (per = cg / u; constant per-iteration
# offsets in qgemv). Kernels at 1 / 8 rows against the MLX layout (plain and SwiGLU epilogue), the swept GPU tests
# of qgemv and the prompt GEMM, 9B and 27B decode with the default (all swept), then the runtime's swept test.
. benchmarks/_dec.sh
out_dir s20e
timeout 200 python3 benchmarks/bench_gemv3.py --no-old --rows 1,8 --shapes 2,3,4,5 --swept --glu --configs "4,1,4,1,396" \
    --out "$R/sw" >"$R/swept.txt" 2>&1
echo "== swept rc $?"; grep "us \|FAIL\|Error" "$R/swept.txt" | grep -v Warn | cut -c1-110; pack
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    tests/kernels/test_gpu_gemm.py -k swept >"$R/gpu_tests.txt" 2>&1
echo "== gpu tests rc $?"; tail -2 "$R/gpu_tests.txt"; pack
dec 9b 9b; pack
dec 27b 27b; pack
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short -s tests/runtime/test_gpu_runtime.py \
    -k swept >"$R/rt_swept.txt" 2>&1
echo "== runtime swept rc $?"; grep "swept layout\|passed\|failed\|Error" "$R/rt_swept.txt" | tail -4; pack
