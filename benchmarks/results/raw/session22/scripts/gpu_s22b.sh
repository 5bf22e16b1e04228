#!/usr/bin/env bash
# Session 22, call 2 (one GPU): bf16-only x in qgemv made the default (branch xh-default merged). The GPU tier of
# every file the flip touches, four pytest processes side by side (compiles are CPU-bound; each its own kernel
# cache; nothing here is timed), then the 9B out_proj / o_proj shape (4096 x 4096, 10.5 % of the 9B step) on
# qgemv (MLX and swept layouts, hi + lo and bf16 x) against the first kernel's default plan, alone on the GPU.
. benchmarks/_dec.sh
out_dir s22b
t() {  # t NAME TIMEOUT pytest-args...: one pytest process with its own kernel cache
    local n=$1 s=$2; shift 2
    TENSORFOLD_CACHE_DIR=/tmp/tfkc_$n timeout "$s" python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
        --tb=short "$@" >"$R/$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "passed\|failed\|rror" "$R/$n.txt" | tail -4
}
t qgemv 330 tests/kernels/test_gpu_qgemv.py &
t gemv 330 tests/kernels/test_gpu_gemv.py tests/kernels/test_gpu_glu.py &
t a 330 tests/kernels/test_gpu_a.py -k qgemv &
t runtime 330 tests/runtime/test_gpu_runtime.py &
t parity 330 tests/engine/test_backend_parity_gpu.py &
t rt2 330 tests/runtime/test_gpu_graphs.py tests/runtime/test_gpu_pdl.py tests/runtime/test_gpu_host.py &
wait; pack
timeout 150 python3 benchmarks/bench_gemv3.py --shapes - --custom "4096,4096" --rows 1,8 --swept --xh \
    --out "$R/oproj" >"$R/gemv3_oproj.txt" 2>&1
echo "== oproj rc $?"; grep "R=" "$R/gemv3_oproj.txt"; pack
